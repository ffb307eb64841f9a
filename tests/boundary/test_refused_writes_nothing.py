"""Check, then write: every refused command leaves every file as it was.

A corpus of bad inputs (records and run files of the wrong type or size, a run spec of another shape, a HELM
per-instance file nested 200,000 deep, suites with nothing to summarize) is given to the real CLI
(``summarize``, ``import-helm``) against every state the results store can be in: absent, a dangling
symlink, current, older (schema v1, before the review table), empty. Each command must be refused with one
line and exit 2 (``assert_bad_input``), and the whole folder — every file's bytes, every folder, every
symlink and its target, the store's ``-wal``/``-shm``/``-journal`` companions included — must be byte for
byte what it was: the store not created, not migrated, no table added, no link removed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.boundary.conftest import assert_bad_input, entry, run_cli
from tests.boundary.test_regressions import _mock_run
from medhelm.devtools.fixtures import write_configurable_benchmark


def tree(folder: Path) -> dict[str, tuple]:
    """Everything under ``folder``: kind, mode, symlink target and content hash of each entry."""
    out: dict[str, tuple] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            st = path.lstat()
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", st.st_mode)
            else:
                out[rel] = ("file", st.st_mode, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def finished_template(tmp_path_factory) -> Path:
    """A real finished run (the CLI against the mock server, 3 instances): copied for each case."""
    base = tmp_path_factory.mktemp("template")
    cfg = write_configurable_benchmark(base / "bench", 6, name="MARKED")
    out, _ = _mock_run(base, cfg, 3)
    return base


def _records(run_dir: Path, edit) -> None:
    lines = (run_dir / "instances.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    edit(record)
    lines[0] = json.dumps(record)
    (run_dir / "instances.jsonl").write_text("\n".join(lines) + "\n")


def _file(run_dir: Path, name: str, field: str, value) -> None:
    doc = json.loads((run_dir / name).read_text())
    doc[field] = value
    (run_dir / name).write_text(json.dumps(doc))


def _deep_first_record(run_dir: Path, depth: int) -> None:
    lines = (run_dir / "instances.jsonl").read_text().splitlines()
    lines[0] = lines[0][:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"
    (run_dir / "instances.jsonl").write_text("\n".join(lines) + "\n")


def _usage(**fields):
    return lambda d: d["completion"]["usage"].update(fields)


BAD_SUMMARIZE = {
    "tokens 2**63 (SQLite INTEGER overflow)": lambda rd: _records(rd, _usage(prompt_tokens=2 ** 63)),
    "tokens 10**30": lambda rd: _records(rd, _usage(completion_tokens=10 ** 30)),
    "tokens -10**30": lambda rd: _records(rd, _usage(prompt_tokens=-10 ** 30)),
    "latency as a string": lambda rd: _records(rd, _usage(latency_s="slow")),
    "judge usage as a string": lambda rd: _records(rd, lambda d: d.update(judge_usage="lots")),
    "judge tokens as a string": lambda rd: _records(rd, lambda d: d.update(judge_usage={"prompt_tokens": "x"})),
    "judge tokens 2**63": lambda rd: _records(rd, lambda d: d.update(judge_usage={"prompt_tokens": 2 ** 63})),
    "error as a list": lambda rd: _records(rd, lambda d: d.update(error=["a", "list"])),
    "stat value as a string": lambda rd: _records(rd, lambda d: d["stats"].update({next(iter(d["stats"])): "high"})),
    "position 1.5": lambda rd: _records(rd, lambda d: d.update(position=1.5)),
    "deployment as a dict": lambda rd: _file(rd, "run_spec.json", "deployment", {"a": 1}),
    "model as a number": lambda rd: _file(rd, "run_spec.json", "model", 5),
    "wall time as a string": lambda rd: _file(rd, "run.json", "wall_time_s", "long"),
    "instances_done negative": lambda rd: _file(rd, "run.json", "instances_done", -3),
    "record 200k deep": lambda rd: _deep_first_record(rd, 200_000),
    "no records": lambda rd: (rd / "instances.jsonl").write_text(""),
}


def _older(store: Path) -> None:
    """A schema v1 store: made before the review table existed (summarize migrates it in its transaction)."""
    con = sqlite3.connect(store)
    con.execute("DROP INDEX IF EXISTS review_by_benchmark")
    con.execute("DROP TABLE review_ratings")
    con.execute("UPDATE meta SET value = '1' WHERE release = '' AND key = 'schema_version'")
    con.commit()
    con.close()


STORES = ("absent", "dangling link", "link loop", "new folder", "current", "older", "wal", "empty file")


def _prepare(base: Path, template: Path, state: str) -> tuple[Path, list[str]]:
    """A copy of the template in ``base`` with the store in ``state``: (output folder, extra CLI args)."""
    shutil.copytree(template, base, symlinks=True, dirs_exist_ok=True)
    out = base / "out"
    store = out / "results.sqlite"
    if state == "dangling link":
        (base / "elsewhere").mkdir()
        os.symlink(base / "elsewhere" / "target.sqlite", base / "link.sqlite")
        return out, ["--store", str(base / "link.sqlite")]
    if state == "link loop":
        os.symlink(base / "loop.sqlite", base / "loop.sqlite")
        return out, ["--store", str(base / "loop.sqlite")]
    if state == "new folder":
        return out, ["--store", f"sqlite:///{base / 'new' / 'deeper' / 'results.sqlite'}"]
    if state == "empty file":
        store.write_bytes(b"")
        return out, []
    if state != "absent":
        r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10"], cwd=base)
        assert r.code == 0, r.stderr
        if state == "older":
            _older(store)
        if state == "wal":
            con = sqlite3.connect(store)
            con.execute("PRAGMA journal_mode=WAL")
            con.close()
    return out, []


# the whole corpus against a new and an older store; every other store state with the cases that reach the
# store last (a run file, a record field checked while ingesting, a record too deep to parse)
PAIRS = [(case, state) for case in sorted(BAD_SUMMARIZE) for state in ("absent", "older")] + [
    (case, state) for state in STORES if state not in ("absent", "older")
    for case in ("deployment as a dict", "tokens 2**63 (SQLite INTEGER overflow)", "record 200k deep")]


@pytest.mark.parametrize("case,state", PAIRS)
def test_a_refused_summarize_writes_nothing(tmp_path: Path, finished_template: Path, case: str, state: str) -> None:
    out, extra = _prepare(tmp_path, finished_template, state)
    BAD_SUMMARIZE[case](next((out / "runs" / "s1").iterdir()))
    before = tree(tmp_path)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10", *extra], cwd=tmp_path)
    assert_bad_input(r, names=None)
    after = tree(tmp_path)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"{case} / store {state}: changed {changed}"


@pytest.mark.parametrize("state", STORES)
def test_a_summarize_with_nothing_to_summarize_writes_nothing(tmp_path: Path, finished_template: Path,
                                                              state: str) -> None:
    out, extra = _prepare(tmp_path, finished_template, state)
    (out / "runs" / "empty").mkdir()
    before = tree(tmp_path)
    r = run_cli(["summarize", "--suites", "empty", "--output-path", out, *extra], cwd=tmp_path)
    # a link looping onto itself is refused as a store first
    assert_bad_input(r, names=None, contains="cannot be used" if state == "link loop" else "no complete run")
    after = tree(tmp_path)
    assert before == after, sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def _helm_suite(base: Path) -> Path:
    from tests.boundary.test_regressions import _helm_suite as make

    return make(base)


@pytest.mark.parametrize("state", ("absent", "current"))
@pytest.mark.parametrize("depth", (100_000, 200_000))
def test_a_refused_helm_import_writes_nothing(tmp_path: Path, state: str, depth: int) -> None:
    suite = _helm_suite(tmp_path)
    out = tmp_path / "out"
    if state == "current":
        r = run_cli(["import-helm", suite, "--output-path", out, "--bootstrap", "10"], cwd=tmp_path)
        assert r.code == 0, r.stderr
    target = next(d for d in suite.iterdir() if d.name.startswith("pubmed_qa")) / "per_instance_stats.json"
    target.write_text('[{"instance_id": "a", "stats": ' + "[" * depth + "]" * depth + "}]")
    before = tree(tmp_path)
    r = run_cli(["import-helm", suite, "--output-path", out], cwd=tmp_path)
    assert_bad_input(r, names=target, contains="nested too deeply")
    after = tree(tmp_path)
    assert before == after, sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
