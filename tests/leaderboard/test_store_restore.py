"""The rollback's restore as docs/kubernetes.md writes it: ``pg_restore --clean --if-exists --single-transaction`` of
the backup taken before an upgrade, into the store the old release's dashboard keeps opening while it restarts.

A restore outside one transaction drops the tables and creates them again one by one; a dashboard that opens the
store in between finds it empty and creates its own tables there, and the restore stops on a duplicate table (seen
once in CI, in tests/services/test_kube_play_upgrade.py). Here a thread plays that dashboard as fast as it can."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import psycopg
import pytest

from medhelm.store import open_store, read
from medhelm.store.schema import ddl
from tests.leaderboard.conftest import pg_binary
from tests.leaderboard.helpers import run_cli


def _pg_tool(name: str) -> str:
    """The server's own pg_dump / pg_restore."""
    found = pg_binary(name)
    if found is None:
        pytest.skip(f"{name} not installed (Debian package `postgresql`)")
    return found


def test_the_rollback_restore_survives_a_dashboard_creating_its_tables_meanwhile(small_output: Path,
                                                                                  postgres_url: str,
                                                                                  tmp_path: Path) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS restore_race")
        conn.execute("CREATE DATABASE restore_race")
    url = postgres_url.rsplit("/", 1)[0] + "/restore_race"
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(small_output), "--store", url,
                           "--bootstrap", "50")
    assert code == 0, err
    with open_store(url) as store:
        board = read.stored_leaderboard(store, "local")
    assert board
    backup = tmp_path / "store.dump"
    subprocess.run([_pg_tool("pg_dump"), "--format=custom", f"--file={backup}", url], check=True,
                   capture_output=True, timeout=300)

    stop, opened, created = threading.Event(), [0], [0]

    def dashboard() -> None:
        """The old release's dashboard, restarting over and over: it makes the store's tables where they are
        missing (the schema's own statements, each on its own), as fast as it can."""
        skipped: list[str] = []  # PostgreSQL's notice for each IF NOT EXISTS that found the table there
        with psycopg.connect(url, autocommit=True) as conn:
            conn.add_notice_handler(lambda diag: skipped.append(diag.message_primary or ""))
            while not stop.is_set():
                for statement in ddl("BYTEA"):
                    seen = len(skipped)
                    try:
                        conn.execute(statement)
                    except psycopg.Error:  # a store mid-restore may refuse it: a dashboard restarts
                        continue
                    created[0] += len(skipped) == seen  # no "already exists, skipping": it made the table
                opened[0] += 1

    thread = threading.Thread(target=dashboard, daemon=True)
    thread.start()
    try:
        for _ in range(3):
            done = subprocess.run([_pg_tool("pg_restore"), "--clean", "--if-exists", "--single-transaction",
                                   f"--dbname={url}", str(backup)], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
    finally:
        stop.set()
        thread.join(60)
    assert opened[0] > 0  # the dashboard kept opening the store while it was restored
    assert created[0] == 0  # and never found it empty
    with open_store(url) as store:
        assert read.stored_leaderboard(store, "local") == board
