"""Two `medhelm summarize` into one store at the same time (real processes): both succeed, one release, whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.store import open_store, read
from medhelm.store.synthetic import catalogue, default_models, write_suite

MODELS, BENCHMARKS, INSTANCES = 3, 4, 1500


@pytest.fixture(scope="module")
def suite_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("concurrent")
    write_suite(out, "nightly", default_models(MODELS), catalogue(BENCHMARKS), INSTANCES)
    return out


def _summarize_twice_at_once(output: Path, store: str) -> list[subprocess.CompletedProcess]:
    cmd = [sys.executable, "-m", "medhelm", "summarize", "--suites", "nightly", "-o", str(output),
           "--bootstrap", "300", "--store", store]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for _ in range(2)]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(cmd, p.returncode, out, err))
    return done


def _check(store_location: str) -> None:
    with open_store(store_location) as store:
        assert store.releases() == ["nightly"]
        assert len(read.stored_leaderboard(store, "nightly")) == MODELS
        assert store.query("SELECT COUNT(*) FROM runs WHERE release = 'nightly'")[0][0] == MODELS * BENCHMARKS
        assert store.query("SELECT COUNT(*) FROM instances WHERE run_id IN "
                           "(SELECT run_id FROM runs WHERE release = 'nightly')")[0][0] == MODELS * BENCHMARKS * INSTANCES
        assert len(read.cells(store, "nightly")) == MODELS * BENCHMARKS


def test_two_summarize_into_one_sqlite_store_both_succeed(suite_output: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "results.sqlite")
    for attempt in (1, 2):  # a fresh file (rollback journal), then an existing one (WAL)
        results = _summarize_twice_at_once(suite_output, store)
        assert [r.returncode for r in results] == [0, 0], [r.stderr[-500:] for r in results]
        _check(store)
        with open_store(store) as s:
            assert s.query("PRAGMA integrity_check")[0][0] == "ok", attempt


def test_two_summarize_into_one_postgres_store_both_succeed(suite_output: Path, postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:  # a database of its own on the shared server
        conn.execute("DROP DATABASE IF EXISTS concurrent_summarize")
        conn.execute("CREATE DATABASE concurrent_summarize")
    url = postgres_url.rsplit("/", 1)[0] + "/concurrent_summarize"
    for _ in (1, 2):  # empty database (tables created concurrently), then replacing the release concurrently
        results = _summarize_twice_at_once(suite_output, url)
        assert [r.returncode for r in results] == [0, 0], [r.stderr[-500:] for r in results]
        _check(url)


def test_tables_made_by_several_processes_at_once_on_postgres(postgres_url: str) -> None:
    """Schema creation races (a CREATE TABLE IF NOT EXISTS is not safe against a concurrent one on PostgreSQL):
    processes that find the ratings and audit tables missing at the same instant, summarize's (create) and
    the dashboard's (open, then ensure the tables), all succeed, rounds after rounds."""
    import time

    import psycopg

    code = ("import sys, time; from medhelm.store import open_store\n"
            "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
            "from medhelm.access import audit\n"
            "with open_store(sys.argv[1], create=sys.argv[3] == 'create') as s:\n"
            "    s.ensure_review_table(); audit.ensure_table(s)\n")
    for round_ in range(6):
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS schema_race")
            conn.execute("CREATE DATABASE schema_race")
        url = postgres_url.rsplit("/", 1)[0] + "/schema_race"
        with open_store(url, create=True) as store:  # a store from before the ratings table
            store.execute("DROP TABLE review_ratings")
            store._conn.commit()
        at = str(time.time() + 1.5)  # every process starts its work at this instant
        procs = [subprocess.Popen([sys.executable, "-c", code, url, at, "create" if i % 2 else "open"],
                                  stderr=subprocess.PIPE, text=True) for i in range(4)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, (round_, [e[-300:] for e in errors])
        with open_store(url) as store:
            assert store.query("SELECT COUNT(*) FROM review_ratings")[0][0] == 0
            assert store.query("SELECT COUNT(*) FROM audit")[0][0] == 0


def test_a_run_resumed_while_summarize_reads_it_contributes_only_its_finished_instances(tmp_path: Path) -> None:
    """The race as it happens: summarize has read a finished run's run.json, then `medhelm run` resumes that
    run and appends new records (the last one half-written) before summarize reads the records."""
    from medhelm.store.ingest import SummarizeOptions, suite_sources, summarize

    write_suite(tmp_path, "nightly", default_models(2), catalogue(2), 50)
    sources = list(suite_sources(tmp_path, ["nightly"]))  # run.json of each run read here
    for run_dir in (tmp_path / "runs" / "nightly").iterdir():
        records = run_dir / "instances.jsonl"
        lines = records.read_text(encoding="utf-8").splitlines(keepends=True)
        with open(records, "a", encoding="utf-8") as f:
            f.write(lines[0])  # a new attempt's complete record
            f.write(lines[1][: len(lines[1]) // 2])  # and one being written this instant
    with open_store(tmp_path / "results.sqlite", create=True) as store:
        report = summarize(store, sources, SummarizeOptions(release="nightly", replicates=50))
        assert (report.runs, report.instances) == (4, 200)
        assert store.query("SELECT COUNT(*) FROM instances")[0][0] == 200


def test_summarize_beside_a_running_medhelm_run_skips_it_and_succeeds(tmp_path: Path) -> None:
    """A real `medhelm run` writes a run while `medhelm summarize` runs repeatedly beside it. The mock model
    answers three requests, then holds the fourth until two summaries are done: they run beside an unfinished
    run whatever the machine's speed (a slow mock raced the summaries' start-up on a loaded machine)."""
    import itertools
    import threading
    import time

    from medhelm.devtools.mock_openai import MockOpenAIServer

    release, seen = threading.Event(), itertools.count(1)

    def held(body: dict) -> str:
        if next(seen) == 4:
            release.wait(600)  # holds the mock (and so the run) until released
        return "Yes"

    examples = Path(__file__).parents[2] / "examples"
    out = tmp_path / "out"
    write_suite(out, "nightly", default_models(2), catalogue(2), 20)
    local = tmp_path / "prod_env"
    local.mkdir()
    with MockOpenAIServer(responder=held) as srv:
        (local / "model_deployments.yaml").write_text(
            f"model_deployments:\n  - name: mock/slow\n    model_name: test/slow\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: slow\n    max_sequence_length: 4096\n")
        entry = (f"medhelm_configurable_benchmark:model=test/slow,model_deployment=mock/slow,"
                 f"config_path={examples / 'exact_match_demo' / 'exact_match_demo.yaml'}")
        run = subprocess.Popen([sys.executable, "-m", "medhelm", "run", "--run-entries", entry, "--suite", "nightly",
                                "-o", str(out), "--local-path", str(local), "--max-concurrency", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        summaries = []
        try:
            while run.poll() is None and len(summaries) < 20:
                done = subprocess.run(
                    [sys.executable, "-m", "medhelm", "summarize", "--suites", "nightly", "-o", str(out),
                     "--bootstrap", "0"], capture_output=True, text=True, timeout=300)
                summaries.append((done, run.poll() is None))  # did the run still write when it ended?
                if len(summaries) == 2:
                    release.set()
                time.sleep(0.2)
            _, run_err = run.communicate(timeout=300)
        finally:
            release.set()
            if run.poll() is None:
                run.kill()
    assert run.returncode == 0, run_err[-500:]
    during = [s for s, running in summaries if running]
    assert during, "the run finished before any summarize did"
    for s, _ in summaries:
        assert s.returncode == 0, s.stderr[-500:]
    for s in during:  # the unfinished run is skipped whole, never half of it
        assert "release 'nightly': 4 runs, 80 instances" in s.stdout, s.stdout
