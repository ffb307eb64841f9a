"""The results store proves its own integrity (issue 52, item 4), tested as an attacker who can write to it.

* A trigger planted to erase audit rows (``AFTER INSERT ON audit BEGIN DELETE FROM audit; END``), a rule, a
  view, an extra index on the trail, a table that is not ours, or our guard replaced by a same-named no-op:
  ``store status``, ``store migrate``, ``summarize``, ``export`` and every reader refuse the store in one line
  naming the object, and write nothing.
* The trail is append-only by construction: the schema's own triggers refuse every UPDATE and DELETE (SQLite)
  and also TRUNCATE (PostgreSQL), so a planted trigger that slips past the check (made after the store was
  opened) makes the audit write fail — the text is withheld — instead of erasing the trail.
* On PostgreSQL a role granted every row right on every table still cannot change or remove an audit row,
  nor drop or disable the guard (only the schema's owner, the migration role, may).
* A store whose guard was dropped is reported by ``status`` (exit 3) and made whole by ``migrate`` (and, for
  SQLite, by the next summarize)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from medhelm.access import audit
from medhelm.access.roles import Principal
from medhelm.errors import ConfigError
from medhelm.store import open_store
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli


@pytest.fixture(scope="module")
def summarized(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("integrity")
    write_suite(out, "s", default_models(2), catalogue(2), 6)
    assert run_cli("summarize", "--suites", "s", "-o", str(out), "--bootstrap", "10")[0] == 0
    assert run_cli("export", "--release", "s", "-o", str(out), "--redact", str(out / "first.tgz"))[0] == 0
    return out


def _copy(summarized: Path, tmp_path: Path) -> Path:
    store = tmp_path / "results.sqlite"
    store.write_bytes((summarized / "results.sqlite").read_bytes())
    return store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _audit_rows(store: Path) -> int:
    con = sqlite3.connect(store)
    try:
        return con.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
    finally:
        con.close()


PLANTED = {
    "trigger erasing the trail": ("CREATE TRIGGER erase AFTER INSERT ON audit BEGIN DELETE FROM audit; END",
                                  "trigger 'erase' on 'audit'"),
    "trigger rewriting rows": ("CREATE TRIGGER hush AFTER INSERT ON runs BEGIN UPDATE runs SET errors = 0; END",
                               "trigger 'hush' on 'runs'"),
    "view over the trail": ("CREATE VIEW recent AS SELECT * FROM audit", "view 'recent'"),
    "extra index on the trail": ("CREATE INDEX audit_by_actor ON audit (actor)", "index 'audit_by_actor' on 'audit'"),
    "table that is not ours": ("CREATE TABLE notes (x TEXT)", "table 'notes'"),
    "our guard made a no-op": ("DROP TRIGGER audit_append_only_delete; CREATE TRIGGER audit_append_only_delete "
                               "BEFORE DELETE ON audit BEGIN SELECT 1; END", "trigger 'audit_append_only_delete'"),
}


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_a_store_holding_objects_the_schema_does_not_define_is_refused_everywhere(summarized, tmp_path, what):
    store = _copy(summarized, tmp_path)
    sql, named = PLANTED[what]
    con = sqlite3.connect(store)
    con.executescript(sql)
    con.close()
    rows, digest = _audit_rows(store), _digest(store)
    for argv in (("store", "status", "--store", str(store)), ("store", "migrate", "--store", str(store)),
                 ("summarize", "--suites", "s", "-o", str(summarized), "--store", str(store), "--bootstrap", "10"),
                 ("export", "--release", "s", "-o", str(summarized), "--store", str(store), str(tmp_path / "b.tgz")),
                 ("audit", "-o", str(summarized), "--store", str(store))):
        code, out, err = run_cli(*argv)
        assert code == 2, (argv, code, out, err)
        line = err.strip()
        assert len(line.splitlines()) == 1 and named in line and "does not define" in line, (argv, line)
    with pytest.raises(ConfigError, match="does not define"):  # the dashboard's reader too
        open_store(store)
    assert _audit_rows(store) == rows and _digest(store) == digest  # nothing written
    assert not (tmp_path / "b.tgz").exists()


def test_the_trail_is_append_only_by_construction(summarized, tmp_path):
    store = _copy(summarized, tmp_path)
    rows = _audit_rows(store)
    assert rows >= 1
    con = sqlite3.connect(store)
    for sql in ("DELETE FROM audit", "UPDATE audit SET actor = 'nobody'", "DELETE FROM audit WHERE rowid = 1"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            con.execute(sql)
    con.rollback()
    con.close()
    # a trigger planted once the store is open (past the check): the audit write fails, the trail stays whole
    with open_store(store) as s:
        planted = sqlite3.connect(store)
        planted.execute("CREATE TRIGGER erase AFTER INSERT ON audit BEGIN DELETE FROM audit; END")
        planted.commit()
        planted.close()
        with pytest.raises(audit.AuditError, match="withheld"):
            audit.record(s, Principal.local(source="test"), "export", release="s")
    assert _audit_rows(store) == rows


def test_a_dropped_guard_is_reported_and_made_again(summarized, tmp_path):
    store = _copy(summarized, tmp_path)
    con = sqlite3.connect(store)
    con.executescript("DROP TRIGGER audit_append_only_update; DROP TRIGGER audit_append_only_delete;")
    con.close()
    code, out, _ = run_cli("store", "status", "--store", str(store))
    assert code == 3 and "append-only guard" in out, out
    code, out, _ = run_cli("store", "migrate", "--store", str(store))
    assert code == 0 and "guard made again" in out, out
    assert run_cli("store", "status", "--store", str(store))[0] == 0
    con = sqlite3.connect(store)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("DELETE FROM audit")
    con.rollback()
    con.close()
    # the next summarize makes it too (inside its own transaction)
    con = sqlite3.connect(store)
    con.executescript("DROP TRIGGER audit_append_only_update; DROP TRIGGER audit_append_only_delete;")
    con.close()
    assert run_cli("summarize", "--suites", "s", "-o", str(summarized), "--store", str(store), "--bootstrap",
                   "10")[0] == 0
    assert run_cli("store", "status", "--store", str(store))[0] == 0


# ----------------------------------------------------------------------------------------------- PostgreSQL


def _database(postgres_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + "/" + name


PG_PLANTED = {
    "trigger": ("CREATE FUNCTION erase() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN DELETE FROM audit; "
                "RETURN NULL; END $$; CREATE TRIGGER erase AFTER INSERT ON audit EXECUTE FUNCTION erase()",
                "trigger 'erase' on 'audit'"),
    "rule": ("CREATE RULE keep_quiet AS ON INSERT TO audit DO INSTEAD NOTHING", "rule 'keep_quiet' on 'audit'"),
    "view": ("CREATE VIEW recent AS SELECT * FROM audit", "view 'recent'"),
    "index": ("CREATE INDEX audit_by_actor ON audit (actor)", "index 'audit_by_actor' on 'audit'"),
    "row security": ("ALTER TABLE audit ENABLE ROW LEVEL SECURITY", "row-level security on 'audit'"),
    "guard disabled": ("ALTER TABLE audit DISABLE TRIGGER audit_append_only", "trigger 'audit_append_only'"),
}


def test_postgres_the_pods_role_cannot_change_or_remove_audit_rows_and_planted_objects_are_refused(
        summarized, postgres_url, tmp_path):
    import psycopg

    url = _database(postgres_url, "integrity")
    assert run_cli("store", "migrate", "--store", url)[0] == 0  # the owner makes the schema (the hook Job)
    assert run_cli("summarize", "--suites", "s", "-o", str(summarized), "--store", url, "--bootstrap", "10")[0] == 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS medhelm_pods")
        conn.execute("CREATE ROLE medhelm_pods LOGIN")
        conn.execute("GRANT ALL PRIVILEGES ON ALL TABLES IN SCHEMA public TO medhelm_pods")  # every row right
    pods = url.replace("postgresql://postgres@", "postgresql://medhelm_pods@")
    # the pods' role writes its audit rows (an export) ...
    assert run_cli("export", "--release", "s", "-o", str(summarized), "--store", pods, "--redact",
                   str(tmp_path / "p.tgz"))[0] == 0
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
    assert rows >= 1
    # ... and can neither change nor remove one, nor take the guard away
    for sql in ("DELETE FROM audit", "UPDATE audit SET actor = 'nobody'", "TRUNCATE audit",
                "DROP TRIGGER audit_append_only ON audit", "ALTER TABLE audit DISABLE TRIGGER audit_append_only",
                "DROP TABLE audit"):
        with psycopg.connect(pods, autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as err:
                conn.execute(sql)
            assert "append-only" in str(err.value) or "must be owner" in str(err.value), (sql, err.value)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == rows
    # the owner's own DELETE meets the guard too (only dropping it, an act on the schema, gets past)
    with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.Error, match="append-only"):
        conn.execute("DELETE FROM audit")

    for what, (sql, named) in PG_PLANTED.items():
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)
        for argv in (("store", "status", "--store", url), ("store", "migrate", "--store", url),
                     ("export", "--release", "s", "-o", str(summarized), "--store", url, str(tmp_path / "x.tgz"))):
            code, _, err = run_cli(*argv)
            assert code == 2 and named in err and len(err.strip().splitlines()) == 1, (what, argv, err)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute({"trigger": "DROP TRIGGER erase ON audit; DROP FUNCTION erase()",
                          "rule": "DROP RULE keep_quiet ON audit", "view": "DROP VIEW recent",
                          "index": "DROP INDEX audit_by_actor",
                          "row security": "ALTER TABLE audit DISABLE ROW LEVEL SECURITY",
                          "guard disabled": "ALTER TABLE audit ENABLE TRIGGER audit_append_only"}[what])
        assert run_cli("store", "status", "--store", url)[0] == 0, what
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == rows  # refusals wrote nothing


def test_postgres_a_refused_summarize_leaves_an_empty_database_empty(summarized, postgres_url, tmp_path):
    """Check, then write: the schema of a new store is made in summarize's own transaction, so a refusal
    (a record of the wrong type, found while ingesting) leaves the database without a table."""
    import json
    import shutil

    import psycopg

    url = _database(postgres_url, "refused_empty")
    out = tmp_path / "out"
    shutil.copytree(summarized / "runs", out / "runs")
    run_dir = next(p for p in (out / "runs" / "s").iterdir() if (p / "instances.jsonl").exists())
    lines = (run_dir / "instances.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["error"] = ["a", "list"]
    (run_dir / "instances.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(out), "--store", url, "--bootstrap", "10")
    assert code == 2 and "'error'" in err, err
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'"
                            ).fetchone()[0] == 0
