"""A results store is checked before it is read (issue #18): a corrupt, truncated, foreign, wrong-schema or
newer-schema store is one line naming it and exit 2 in every reader (export, audit, summarize into it), and a
clear message on the dashboard's page; never a traceback. SQLite and a real PostgreSQL."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medhelm.store import backends, opening
from medhelm.store.schema import SCHEMA_VERSION
from tests.leaderboard.helpers import run_cli

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")
MARKER = "MRN-4711-PATIENT-MARKER"  # planted in a damaged cell: never in an error line


def _damage(store: Path, how: str) -> None:
    """``how`` the results store at ``store`` goes bad (a copy of a real one)."""
    if how == "truncated":
        data = store.read_bytes()
        store.write_bytes(data[: len(data) // 3])
    elif how == "garbage-pages":
        data = bytearray(store.read_bytes())
        page = 4096
        for start in range(2 * page, len(data) - page, 3 * page):  # every third page after the schema's
            data[start + 8: start + page] = os.urandom(page - 8)
        store.write_bytes(bytes(data))
    elif how == "not-sqlite":
        store.write_text("release,model\nlocal,x\n")
    elif how == "empty":
        store.write_bytes(b"")
    elif how == "foreign":
        store.unlink()
        con = sqlite3.connect(store)
        con.execute("CREATE TABLE patients (id INTEGER, name TEXT)")
        con.commit()
        con.close()
    else:
        con = sqlite3.connect(store)
        if how == "table-missing":
            con.execute("DROP TABLE cells")
        elif how == "column-missing":
            con.execute("ALTER TABLE runs DROP COLUMN value_blob")
        elif how == "text-not-utf8":  # what overwritten pages that still parse as records look like
            con.execute(f"UPDATE meta SET value = CAST(x'c328ff' || CAST('{MARKER}' AS BLOB) AS TEXT) "
                        "WHERE release = '' AND key = 'schema_version'")
        elif how == "newer-schema":
            con.execute("UPDATE meta SET value = ? WHERE release = '' AND key = 'schema_version'",
                        (str(SCHEMA_VERSION + 1),))
        con.commit()
        con.close()


DAMAGE = ["truncated", "garbage-pages", "not-sqlite", "empty", "foreign", "table-missing", "column-missing",
          "newer-schema", "text-not-utf8"]
SAYS = {"truncated": "damaged", "garbage-pages": "damaged", "not-sqlite": "not a SQLite file",
        "empty": "not a MedHELM results store",
        "foreign": "not a MedHELM results store", "table-missing": "table 'cells' is missing",
        "column-missing": "lacks column(s) value_blob", "newer-schema": "newer medhelm", "text-not-utf8": "not UTF-8"}


@pytest.fixture
def damaged(small_output: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    store = tmp_path / "results.sqlite"
    shutil.copyfile(small_output / "results.sqlite", store)
    opening._INTACT.clear()  # the in-process runs below must check this file afresh
    _damage(store, request.param)
    return store


def _one_line(code: int, err: str, names: str, says: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert names in err and says in err, err


@pytest.mark.parametrize("damaged", DAMAGE, indirect=True)
def test_every_reader_of_a_bad_sqlite_store_is_one_line(damaged: Path, small_output: Path, tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    how = request.node.callspec.params["damaged"]
    before = damaged.read_bytes()
    for argv in (["export", str(tmp_path / "bundle"), "--store", str(damaged)],
                 ["audit", "--store", str(damaged)]):
        code, _, err = run_cli(*argv)
        _one_line(code, err, str(damaged), SAYS[how])
        assert "\ufffd" not in err and "with text" not in err and MARKER not in err  # sqlite3's message quotes it
        assert not (tmp_path / "bundle").exists()
    if how != "empty":  # summarize into an empty file creates a store there: that is not an error
        code, _, err = run_cli("summarize", "--suites", "local", "-o", str(small_output), "--store", str(damaged),
                               "--bootstrap", "10")
        _one_line(code, err, str(damaged), "")
    else:  # ... but a summarize that fails leaves it empty
        (small_output / "runs" / "none").mkdir(exist_ok=True)
        code, _, err = run_cli("summarize", "--suites", "none", "-o", str(small_output), "--store", str(damaged))
        _one_line(code, err, "", "no complete run")
    assert damaged.read_bytes() == before  # no reader and no refused writer touched it


@pytest.mark.parametrize("damaged", ["truncated", "garbage-pages", "not-sqlite", "foreign", "column-missing",
                                     "newer-schema", "text-not-utf8"], indirect=True)
def test_the_dashboard_says_what_is_wrong_with_the_store(damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDHELM_STORE", str(damaged))
    for key in ("MEDHELM_RELEASE", "MEDHELM_REDACTED"):
        monkeypatch.delenv(key, raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and str(damaged) in errors[0].replace("\\", "") and "\n" not in errors[0], errors
    assert not at.dataframe  # nothing half-shown


def test_a_store_checked_once_is_not_checked_again_until_it_changes(small_output: Path, tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    shutil.copyfile(small_output / "results.sqlite", store)
    opening._INTACT.clear()
    with opening.open_store(store):
        pass
    assert len(opening._INTACT) == 1
    with opening.open_store(store):
        pass
    assert len(opening._INTACT) == 1  # the same version of the file: no second quick_check
    _damage(store, "garbage-pages")  # a new version: checked again, and refused
    with pytest.raises(backends.ConfigError, match="damaged|cannot be used"):
        opening.open_store(store)


# --------------------------------------------------------------------------------------------- PostgreSQL


def _pg(url: str, *sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        for stmt in sql:
            con.execute(stmt)


def _fresh_database(url: str, name: str) -> str:
    _pg(url, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.mark.parametrize("how,says", [
    ("foreign", "not a MedHELM results store"), ("table-missing", "table 'cells' is missing"),
    ("column-missing", "lacks column(s) value_blob"), ("newer-schema", "newer medhelm"),
    ("wrong-type", "column 'cells.value' is TEXT, not DOUBLE PRECISION"),
])
def test_every_reader_of_a_bad_postgres_store_is_one_line(small_output: Path, postgres_url: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, how: str,
                                                          says: str) -> None:
    url = _fresh_database(postgres_url, f"bad_{how.replace('-', '_')}")
    if how == "foreign":
        _pg(url, "CREATE TABLE patients (id INTEGER, name TEXT)")
    else:
        code, _, err = run_cli("summarize", "--suites", "local", "-o", str(small_output), "--store", url,
                               "--bootstrap", "10")
        assert code == 0, err
        _pg(url, {"table-missing": "DROP TABLE cells", "column-missing": "ALTER TABLE runs DROP COLUMN value_blob",
                  "newer-schema": f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' WHERE release = '' "
                                  "AND key = 'schema_version'",
                  "wrong-type": "ALTER TABLE cells ALTER COLUMN value TYPE TEXT USING 'x' || value::text"}[how])
    shown = url.split("@")[-1]
    for argv in (["export", str(tmp_path / "bundle"), "--store", url], ["audit", "--store", url]):
        code, _, err = run_cli(*argv)
        _one_line(code, err, shown, says)
    monkeypatch.setenv("MEDHELM_STORE", url)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0], errors


def test_the_dashboard_launcher_hands_over_the_version_it_checked(small_output: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "results.sqlite"
    shutil.copyfile(small_output / "results.sqlite", store)
    opening._INTACT.clear()
    assert opening.intact_token(store) == ""
    opening.open_store(store).close()  # what `medhelm serve dashboard` does before starting Streamlit
    token = opening.intact_token(store)
    assert token
    opening._INTACT.clear()  # the Streamlit process: a fresh cache, the token in its environment
    monkeypatch.setenv(opening.INTACT_ENV, token)
    checked = []
    real_query = backends.Store.query

    def spy(self, sql, params=()):  # noqa: ANN001, ANN202
        checked.append(sql)
        return real_query(self, sql, params)

    monkeypatch.setattr(backends.Store, "query", spy)
    opening.open_store(store).close()
    assert not any("quick_check" in q for q in checked)  # the same version: not read again
    with open(store, "r+b") as f:  # another version of the file: checked again
        f.seek(0, 2)
        f.write(b"\0" * 4096)
    opening.open_store(store).close()
    assert any("quick_check" in q for q in checked)


def test_a_failed_summarize_leaves_an_older_store_as_it_was(small_output: Path, tmp_path: Path) -> None:
    """Found by the fuzz: the columns added since an older store was made were added at open, so a summarize
    that then failed (here: an empty suite) had changed the file. Now they come with the release, or not at all."""
    store = tmp_path / "results.sqlite"
    shutil.copyfile(small_output / "results.sqlite", store)
    con = sqlite3.connect(store)
    con.execute("ALTER TABLE models DROP COLUMN jury_cost_usd")  # a store made before the column existed
    con.execute("UPDATE meta SET value = '1' WHERE release = '' AND key = 'schema_version'")  # (schema v1)
    con.commit()
    con.close()
    before = store.read_bytes()
    (small_output / "runs" / "none").mkdir(exist_ok=True)
    code, _, err = run_cli("summarize", "--suites", "none", "-o", str(small_output), "--store", str(store))
    _one_line(code, err, "", "no complete run")
    assert store.read_bytes() == before
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(small_output), "--store", str(store),
                           "--release", "again", "--bootstrap", "10")
    assert code == 0, err
    with opening.open_store(store) as s:
        assert "jury_cost_usd" in s.columns("models")
