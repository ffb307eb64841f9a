"""Store schema versions (issue #29): a store written by the previous release's code (its commit, run from
``git archive`` in a subprocess) is migrated forward by `medhelm store migrate` with its data intact and
readable, a second migration is a no-op, two at once migrate once; this code refuses an older PostgreSQL
store until it is migrated (one line, nothing written) and migrates an older SQLite store inside its next
summarize; the previous release's code refuses the migrated store in one line, and so does this code made
older (its schema version lowered, as the next release's store will look to it). Real PostgreSQL and SQLite.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.store import open_store, read
from medhelm.store.schema import SCHEMA_VERSION
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli
from tests.previous_release import REPO, previous_tree

NEW_RELATIONS = {"review_ratings", "audit", "subgroup_labels", "subgroup_scores", "subgroup_gaps"}


@pytest.fixture(scope="module")
def previous_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``services`` folder (what its image runs)."""
    return previous_tree(tmp_path_factory.mktemp("previous"), "services") / "services"


def medhelm(code: Path | None, *args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """`medhelm ARGS` in a fresh interpreter running ``code`` (a services folder; None: this checkout's),
    after ``prelude`` (Python run before the CLI is imported)."""
    services = code or REPO / "services"
    env = {**os.environ, "PYTHONPATH": str(services)}
    env.pop("MEDHELM_STORE_URL", None)
    script = f"{prelude}\nimport sys\nfrom medhelm.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=services.parent)


def one_line(done: subprocess.CompletedProcess, *says: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    err = done.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for text in says:
        assert text in err, err


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("migrate_out")
    write_suite(out, "local", default_models(3), catalogue(3), 12)
    return out


def _database(postgres_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + "/" + name


def _pg_snapshot(url: str) -> dict[str, list]:
    """Every table's columns and rows (sorted), straight from the server."""
    import psycopg

    out = {}
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables WHERE "
                                            "table_schema = 'public' ORDER BY table_name")]
        for t in tables:
            cur = conn.execute(f'SELECT * FROM "{t}"')
            names = [d.name for d in cur.description]
            rows = sorted((tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in cur.fetchall()),
                          key=repr)
            out[t] = [names, rows]
    return out


def _board(store, release: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "release"} for r in read.stored_leaderboard(store, release)]


def _old_store(previous_code: Path, suite: Path, store: str) -> None:
    """A store as the previous release leaves it: a summarized release and an audited export."""
    done = medhelm(previous_code, "summarize", "--suites", "local", "-o", str(suite), "--bootstrap", "50",
                   "--store", store)
    assert done.returncode == 0, done.stderr[-2000:]
    done = medhelm(previous_code, "export", "--release", "local", "-o", str(suite), "--store", store, "--redact",
                   str(suite / f"old-{os.getpid()}-{abs(hash(store)) % 10**6}.tgz"))
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_postgres_store_of_the_previous_release_migrates_forward(previous_code, suite, postgres_url, tmp_path):
    url = _database(postgres_url, "migrate_v1")
    _old_store(previous_code, suite, url)
    v1 = _pg_snapshot(url)
    assert [r for r in v1["meta"][1] if r[0] == ""] == [("", "schema_version", "1")]
    assert v1["audit"][1] and not {"subgroup_labels", "subgroup_scores", "subgroup_gaps"} & set(v1)

    # this code refuses the older store until it is migrated: readers and writers alike, one line, nothing written
    one_line(medhelm(None, "export", "--release", "local", "-o", str(suite), "--store", url, str(tmp_path / "b.tgz")),
             "store schema v1", f"needs v{SCHEMA_VERSION}", "medhelm store migrate", "nothing was written")
    one_line(medhelm(None, "summarize", "--suites", "local", "-o", str(suite), "--store", url), "medhelm store migrate")
    one_line(medhelm(None, "audit", "-o", str(suite), "--store", url), "medhelm store migrate")
    status = medhelm(None, "store", "status", "--store", url)
    assert status.returncode == 3 and f"schema v1; this medhelm: v{SCHEMA_VERSION}" in status.stdout, status
    assert _pg_snapshot(url) == v1

    done = medhelm(None, "store", "migrate", "--store", url)
    assert done.returncode == 0 and f"migrated from schema v1 to v{SCHEMA_VERSION}" in done.stdout, done.stderr
    v2 = _pg_snapshot(url)
    assert NEW_RELATIONS <= set(v2)
    for table, (names, rows) in v1.items():  # every row the previous release wrote, as it wrote it
        if table != "meta":
            added = [i for i, n in enumerate(v2[table][0]) if n not in names]  # columns added since: NULL
            assert [n for n in v2[table][0] if n in names] == names, table
            assert sorted((tuple(v for i, v in enumerate(r) if i not in added) for r in v2[table][1]),
                          key=repr) == rows, table
            assert all(r[i] is None for r in v2[table][1] for i in added), table
    meta = {(r[0], r[1]): r[2] for r in v2["meta"][1]}
    assert meta[("", "schema_version")] == str(SCHEMA_VERSION)
    assert " from v1 by medhelm " in meta[("", f"migrated_to_v{SCHEMA_VERSION}")]
    assert {k: v for k, v in meta.items() if k[0]} == {(r[0], r[1]): r[2] for r in v1["meta"][1] if r[0]}

    again = medhelm(None, "store", "migrate", "--store", url)
    assert again.returncode == 0 and f"already at schema v{SCHEMA_VERSION}; nothing to do" in again.stdout
    assert _pg_snapshot(url) == v2  # a no-op: not a row touched
    assert medhelm(None, "store", "status", "--store", url).returncode == 0

    # readable by this code: the previous release's leaderboard as it computed it, and a new release beside it
    with open_store(url) as store:
        board = read.stored_leaderboard(store, "local")
        names, rows = v1["leaderboard"]
        old = sorted((dict(zip(names, r)) for r in rows), key=lambda r: r["rank"])
        assert [(r["model"], r["win_rate"]) for r in board] == [(r["model"], r["win_rate"]) for r in old]
        assert len(read.cells(store, "local")) == 9
    done = medhelm(None, "summarize", "--suites", "local", "--release", "again", "-o", str(suite), "--bootstrap",
                   "50", "--store", url)
    assert done.returncode == 0, done.stderr[-2000:]
    with open_store(url) as store:
        assert _board(store, "again") == _board(store, "local")

    # the previous release's code (its image) refuses the migrated store in one line, and writes nothing
    before = _pg_snapshot(url)
    for args in (("export", "--release", "local", "-o", str(suite), "--store", url, str(tmp_path / "c.tgz")),
                 ("summarize", "--suites", "local", "-o", str(suite), "--store", url)):
        one_line(medhelm(previous_code, *args), "newer medhelm", f"store schema v{SCHEMA_VERSION}", "reads v1")
    assert _pg_snapshot(url) == before


def test_two_migrations_at_once_migrate_once(previous_code, suite, postgres_url):
    """Two pods (a hook retried while the first still runs, two releases' hooks): the writer lock and the version
    read under it make one migrate and the others find the store current."""
    url = _database(postgres_url, "migrate_race")
    _old_store(previous_code, suite, url)
    env = {**os.environ, "PYTHONPATH": str(REPO / "services")}
    procs = [subprocess.Popen([sys.executable, "-m", "medhelm", "store", "migrate", "--store", url], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e[-500:] for _, e in outs]
    said = sorted("migrated" if "migrated from" in o else "current" if "already at" in o else o for o, _ in outs)
    assert said == ["current", "current", "current", "migrated"], outs
    meta = [r for r in _pg_snapshot(url)["meta"][1] if r[0] == ""]
    assert [r[1] for r in meta] == [f"migrated_to_v{SCHEMA_VERSION}", "schema_version"]


def test_the_pods_role_needs_no_ddl_right_on_a_migrated_store(previous_code, suite, postgres_url, tmp_path):
    """After the migration (by the schema's owner), a role that may only read and write rows summarizes, exports
    and is audited: no table is made on first use any more."""
    import psycopg

    url = _database(postgres_url, "migrate_roles")
    _old_store(previous_code, suite, url)
    assert medhelm(None, "store", "migrate", "--store", url).returncode == 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS medhelm_app")
        conn.execute("CREATE ROLE medhelm_app LOGIN")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO medhelm_app")
    app = url.replace("postgresql://postgres@", "postgresql://medhelm_app@")
    for args in (("summarize", "--suites", "local", "--release", "nightly", "-o", str(suite), "--bootstrap", "20",
                  "--store", app),
                 ("export", "--release", "nightly", "-o", str(suite), "--store", app, str(tmp_path / "n.tgz"))):
        done = medhelm(None, *args)
        assert done.returncode == 0, (args[0], done.stderr[-1500:])
    with open_store(url) as store:
        assert store.query("SELECT COUNT(*) FROM audit WHERE release = 'nightly'")[0][0] == 1
    # and the same role cannot migrate (the hook Job's Secret is the owner's: resultsStore.migrate.secretName)
    fresh = _database(postgres_url, "migrate_roles_v1")
    _old_store(previous_code, suite, fresh)
    with psycopg.connect(fresh, autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO medhelm_app")
    fresh_app = fresh.replace("postgresql://postgres@", "postgresql://medhelm_app@")
    before = _pg_snapshot(fresh)
    denied = medhelm(None, "store", "migrate", "--store", fresh_app)
    assert denied.returncode != 0 and "Traceback" not in denied.stderr
    assert _pg_snapshot(fresh) == before  # one transaction: nothing of the migration stayed


def test_a_sqlite_store_of_the_previous_release_is_read_as_it_is_and_migrated_by_summarize(previous_code, suite,
                                                                                           tmp_path):
    store = tmp_path / "results.sqlite"
    _old_store(previous_code, suite, str(store))
    shape = _sqlite_shape(store)
    assert shape[1] == "1"
    # read as it is (an export: read, and audited in the trail the previous release made): not migrated
    done = medhelm(None, "export", "--release", "local", "-o", str(suite), "--store", str(store), "--redact",
                   str(tmp_path / "r.tgz"))
    assert done.returncode == 0, done.stderr[-1500:]
    assert _sqlite_shape(store) == shape
    with open_store(store) as s:
        assert len(read.cells(s, "local")) == 9
    v1 = store.read_bytes()
    # a refused summarize leaves it byte for byte; a good one migrates it in its own transaction
    (suite / "runs" / "empty").mkdir(exist_ok=True)
    one_line(medhelm(None, "summarize", "--suites", "empty", "-o", str(suite), "--store", str(store)),
             "no complete run")
    assert store.read_bytes() == v1
    done = medhelm(None, "summarize", "--suites", "local", "--release", "again", "-o", str(suite), "--bootstrap",
                   "50", "--store", str(store))
    assert done.returncode == 0, done.stderr[-1500:]
    tables, version = _sqlite_shape(store)
    assert NEW_RELATIONS <= tables and version == str(SCHEMA_VERSION)
    with open_store(store) as s:
        assert _board(s, "again") == _board(s, "local")
    # now the previous release refuses it
    after = store.read_bytes()
    one_line(medhelm(previous_code, "export", "--release", "local", "-o", str(suite), "--store", str(store),
                     str(tmp_path / "x.tgz")), "newer medhelm", f"store schema v{SCHEMA_VERSION}")
    assert store.read_bytes() == after


def _sqlite_shape(store: Path) -> tuple[set[str], str]:
    """The tables of a SQLite store and the schema version it records."""
    con = sqlite3.connect(store)
    try:
        tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        (version,) = con.execute("SELECT value FROM meta WHERE release = '' AND key = 'schema_version'").fetchone()
    finally:
        con.close()
    return tables, version


# this code made older: its schema version lowered before the store code is imported (the next release's store
# looks like this to it)
OLDER = ("import medhelm.store.migrate as migrate, medhelm.store.opening as opening, medhelm.store.schema as schema\n"
         "schema.SCHEMA_VERSION -= 1\nmigrate.SCHEMA_VERSION = opening.SCHEMA_VERSION = schema.SCHEMA_VERSION")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_older_binary_refuses_a_newer_store_in_one_line(backend, suite, tmp_path, request):
    if backend == "postgres":
        store = _database(request.getfixturevalue("postgres_url"), "migrate_newer")
    else:
        store = str(tmp_path / "results.sqlite")
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(suite), "--bootstrap", "20", "--store", store)
    assert code == 0, err
    snapshot = (lambda: _pg_snapshot(store)) if backend == "postgres" else (lambda: Path(store).read_bytes())
    before = snapshot()
    older = f"this medhelm 0.2.0 reads schema v{SCHEMA_VERSION - 1} at most"
    for args in (("store", "migrate", "--store", store), ("store", "status", "--store", store),
                 ("export", "--release", "local", "-o", str(suite), "--store", store, str(tmp_path / "b.tgz")),
                 ("summarize", "--suites", "local", "-o", str(suite), "--store", store),
                 ("audit", "-o", str(suite), "--store", store)):
        one_line(medhelm(None, *args, prelude=OLDER), f"is at store schema v{SCHEMA_VERSION}", older,
                 "nothing was written")
    assert snapshot() == before
