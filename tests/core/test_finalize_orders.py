"""The scheduled cycle's "last shard summarizes" (``medhelm job --summarize-when-complete``,
``cli/job.finalize_when_complete``) in every order the shards can finish in, forced without timing.

Two shards of one suite (a baseline model: no server, the real pipeline, record files, ``collect`` and
``summarize`` into a SQLite store). Shard A finalizes; at each point where another process could act — before
it starts, when it has taken the lock, each time it lists the record files (its check's, collect's), after
collect merged and deleted the shard files, after the store was written, after it released the lock, after it
returned — shard B does its part there, to the end, the way a second pod on the shared volume would: either
its whole job (its records were not written yet when A began) or only its finalize (its records were there
already). A real process cannot be paused at a line, but whatever B does while A is stopped at a point is
exactly what B would do if it ran there: the finalize lock and the files are on disk, as between pods.

Whatever the order, every pod exits 0, exactly one summarizes, and the store has the whole suite once. A
check that read the record files while another shard's collect deleted them failed with ``shard-...jsonl:
file not found`` (exit 2); a check that saw a shard still owing while that shard finished left the suite
unsummarized."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import medhelm.cli.summarize as summarize_cli
import medhelm.pipeline as pipeline
from medhelm.cli import job as job_cli
from medhelm.devtools.fixtures import write_configurable_benchmark
from medhelm.rundir import RunDir
from tests.leaderboard.helpers import run_cli

ROWS, SUITE = 6, "nightly-2026-11-24"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.delenv("MEDHELM_STORE_URL", raising=False)  # the store is <output>/results.sqlite
    cfg = write_configurable_benchmark(tmp_path / "bench", ROWS, name="YESNO")
    (tmp_path / "prod_env").mkdir()
    return {"entry": f"medhelm_configurable_benchmark:model=baseline/majority,config_path={cfg}",
            "local": tmp_path / "prod_env", "root": tmp_path}


def _job(env: dict, out: Path, index: int, count: int, *, finalize: bool = True) -> tuple[int, str, str]:
    """One shard's pod: ``medhelm job`` as the CronJob's pod runs it (in-process)."""
    return run_cli("job", "-r", env["entry"], "--suite", SUITE, "--shard-index", str(index), "--shard-count",
                   str(count), *(["--summarize-when-complete"] if finalize else []), "-o", str(out),
                   "--local-path", str(env["local"]), "-q")


def _finalize(env: dict, out: Path) -> tuple[int, str, str]:
    """Only a shard's finalize (its records are written): what main_job calls after its run."""
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = job_cli.finalize_when_complete(SUITE, out, env["local"])
    return code, stdout.getvalue(), stderr.getvalue()


class Points:
    """Runs ``action`` once, at the ``occurrence``-th time shard A reaches ``point``; the points are calls of
    the real code (wrapped, not replaced)."""

    NAMES = ("start", "lock taken", "record files listed", "collected", "store written", "lock released", "end")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, point: str, occurrence: int,
                 action: Callable[[], tuple[int, str, str]]) -> None:
        self.point, self.left, self.action = point, occurrence, action
        self.result: tuple[int, str, str] | None = None
        self.armed = False

        def after(name: str, real: Callable) -> Callable:
            def wrapped(*args, **kwargs):
                value = real(*args, **kwargs)
                self.reached(name)
                return value
            return wrapped

        real_open, real_unlink = job_cli.os.open, Path.unlink

        def os_open(path, flags, *args, **kwargs):
            fd = real_open(path, flags, *args, **kwargs)
            if str(path).endswith(job_cli.LOCK) and flags & job_cli.os.O_EXCL:
                self.reached("lock taken")
            return fd

        def unlink(path: Path, *args, **kwargs):
            real_unlink(path, *args, **kwargs)
            if path.name == job_cli.LOCK:
                self.reached("lock released")

        monkeypatch.setattr(job_cli.os, "open", os_open)
        monkeypatch.setattr(Path, "unlink", unlink)
        monkeypatch.setattr(RunDir, "record_files", after("record files listed", RunDir.record_files))
        monkeypatch.setattr(pipeline, "collect_shards", after("collected", pipeline.collect_shards))
        monkeypatch.setattr(summarize_cli, "main", after("store written", summarize_cli.main))

    def reached(self, name: str) -> None:
        if not self.armed or name != self.point:
            return
        self.left -= 1
        if self.left == 0:
            self.armed = False  # B's own calls (and A's later ones) pass through
            self.result = self.action()

    def run_a(self, a: Callable[[], tuple[int, str, str]]) -> tuple[int, str, str]:
        self.armed = True
        self.reached("start")
        result = a()
        self.reached("end")
        self.armed = False
        return result


def _assert_summarized_once(out: Path, results: list[tuple[int, str, str]]) -> None:
    for code, stdout, stderr in results:
        assert code == 0 and "Traceback" not in stderr, stdout[-1500:] + stderr[-1500:]
    summaries = sum(f"summarized into release {SUITE}" in stdout for _, stdout, _ in results)
    assert summaries == 1, [r[1][-600:] for r in results]
    suite_dir = out / "runs" / SUITE
    assert (suite_dir / job_cli.SUMMARIZED).is_file()
    assert not list(suite_dir.glob(".finalize.*")), list(suite_dir.iterdir())  # no lock, no check left asked for
    (run,) = [RunDir(p) for p in suite_dir.iterdir() if RunDir(p).exists()]
    assert run.status()["status"] == "complete" and not (run.path / "shards").exists()
    assert len(list(run.iter_records())) == ROWS
    with sqlite3.connect(out / "results.sqlite") as db:
        rows = db.execute("SELECT r.release, COUNT(i.instance_id) FROM runs r JOIN instances i "
                          "ON i.run_id = r.run_id WHERE i.error IS NULL GROUP BY r.release").fetchall()
    assert rows == [(SUITE, ROWS)]


@pytest.mark.parametrize("b_records_first", [True, False], ids=["B-records-written", "B-still-running"])
@pytest.mark.parametrize("a", [0, 1])
def test_two_shards_every_interleaving(env: dict, monkeypatch: pytest.MonkeyPatch, a: int,
                                       b_records_first: bool) -> None:
    """Shard A finalizes; shard B does its part at each point of A's finalize (each occurrence of it)."""
    b = 1 - a
    tried, folders = [], itertools.count()
    for point in Points.NAMES:
        for occurrence in itertools.count(1):
            out = env["root"] / f"out-{next(folders)}"
            code, stdout, stderr = _job(env, out, a, 2, finalize=False)  # A's records, closed
            assert code == 0, stderr
            if b_records_first:
                code, stdout, stderr = _job(env, out, b, 2, finalize=False)
                assert code == 0, stderr

            def b_action(out: Path = out) -> tuple[int, str, str]:
                return _finalize(env, out) if b_records_first else _job(env, out, b, 2)

            with monkeypatch.context() as m:
                points = Points(m, point, occurrence, b_action)
                first = points.run_a(lambda out=out: _finalize(env, out))
            if points.result is None:  # A reaches this point fewer times: every occurrence was tried
                assert occurrence > 1 or point not in ("start", "end"), point
                break
            tried.append((point, occurrence))
            results = [first, points.result]
            _assert_summarized_once(out, results)
    # every point of A's finalize was reached at least once in one of the orders
    assert {p for p, _ in tried} >= {"start", "lock taken", "record files listed", "lock released", "end"}, tried


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=lambda o: "-".join(map(str, o)))
def test_three_shards_finishing_one_after_another(env: dict, order: tuple[int, ...]) -> None:
    """Shards that finish one after another, in each order: the ones before the last leave the suite (naming
    the shards still owing), the last one summarizes it; a shard retried afterwards changes nothing."""
    out = env["root"] / "out"
    results = [_job(env, out, index, 3) for index in order]
    for done, (code, stdout, stderr) in zip(range(1, 4), results):
        assert code == 0, stderr
        owing = sorted(set(range(3)) - set(order[:done]))
        if owing:
            assert f"shard(s) {', '.join(map(str, owing))} still owe instances" in stdout, stdout
    _assert_summarized_once(out, results)
    code, stdout, _ = _job(env, out, order[0], 3)
    assert code == 0 and f"suite {SUITE}: already summarized" in stdout
