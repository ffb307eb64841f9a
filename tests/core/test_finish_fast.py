"""Finishing a run from its writer's ledger (``medhelm.rundir.Ledger``; ``pipeline/finish.py``) writes the same files as the general path,
and the general path is taken whenever the record files are not exactly what the ledger describes."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from medhelm.pipeline import finish
from medhelm.pipeline.aggregate import RecordTally
from medhelm.pipeline.finish import finalize
from medhelm.rundir import RECORDS, Ledger, RunDir
from medhelm.rundir import dump_json as _dump

from .test_streaming import _iid, _record, load, spec_for, write_benchmark


def _written(tmp_path, n=300, seed=3):
    """A run directory whose record file was written by one RecordWriter, out of order, errors included."""
    rng = random.Random(seed)
    spec = spec_for(load(write_benchmark(tmp_path / "b", 3)), n, 0)
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    (rd.path / "run_spec.json").write_text(_dump(spec.to_json()))
    (rd.path / "selection.json").write_text(_dump({"instance_ids": [_iid(i) for i in range(n)]}))
    records = [_record(i, rng, error=i % 9 == 0) for i in range(n) if i % 23]  # some still to do (partial)
    rng.shuffle(records)
    writer = rd.writer(tally=RecordTally)
    for r in records:
        writer.write(r)
    writer.close()
    return rd, writer.ledger, n


def _files(rd):
    return {name: (rd.path / name).read_bytes() for name in (RECORDS, "stats.json")} | {
        "run.json": json.loads((rd.path / "run.json").read_text())}


@pytest.mark.parametrize("chunk", [Ledger.CHUNK, 7])  # all in memory; spilled every 7 entries and merged
def test_the_ledger_finish_writes_what_the_general_path_writes(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(Ledger, "CHUNK", chunk)
    rd, ledger, n = _written(tmp_path)
    assert len(ledger._entries._runs) == (ledger.count // 7 if chunk == 7 else 0)  # runs in one spill file
    general = RunDir(tmp_path / "general")
    shutil.copytree(rd.path, general.path)
    assert ledger is not None and ledger.count == n - len(range(0, n, 23))

    fast = finalize(rd, ledger=ledger, total=n)
    slow = finalize(general)
    assert fast == slow and fast["status"] == "partial" and fast["errors"] > 0
    assert _files(rd) == _files(general)
    positions = [json.loads(line)["position"] for line in (rd.path / RECORDS).read_text().splitlines()]
    assert positions == sorted(positions)


@pytest.mark.parametrize("lines", [1, 7, 300])  # a line, a few, all: read by span or one by one (shuffled)
def test_the_ledger_finish_reads_the_file_a_group_at_a_time_in_any_order(tmp_path, monkeypatch, lines):
    monkeypatch.setattr(finish, "_GROUP_LINES", lines)
    rd, ledger, n = _written(tmp_path)  # lines in random order: the window moves back and forth
    general = RunDir(tmp_path / "general")
    shutil.copytree(rd.path, general.path)
    finished = []
    from_ledger = finish._finish_from_ledger
    monkeypatch.setattr(finish, "_finish_from_ledger", lambda *a: finished.append(from_ledger(*a)) or finished[-1])
    assert finalize(rd, ledger=ledger, total=n) == finalize(general)
    assert finished == [True]  # finished from the ledger, not by the general path
    assert _files(rd) == _files(general)


@pytest.mark.parametrize("chunk", [Ledger.CHUNK, 7])
def test_a_resumed_writer_keeps_no_ledger_and_a_changed_file_takes_the_general_path(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(Ledger, "CHUNK", chunk)
    rd, ledger, n = _written(tmp_path)
    assert rd.writer(tally=RecordTally).ledger is None  # appending to earlier records: finishing must read them all

    with open(rd.path / RECORDS, "a", encoding="utf-8") as f:  # a line the ledger does not know of
        f.write(json.dumps(_record(0, random.Random(1), position=0).to_json(), ensure_ascii=False) + "\n")
    general = RunDir(tmp_path / "general")
    shutil.copytree(rd.path, general.path)
    assert finalize(rd, ledger=ledger, total=n) == finalize(general)
    assert _files(rd) == _files(general)
    assert json.loads((rd.path / RECORDS).read_text().splitlines()[0])["error"] is None  # the success won


def test_a_repeated_position_takes_the_general_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(Ledger, "CHUNK", 5)
    rng = random.Random(9)
    rd, _, n = _written(tmp_path, n=40)
    (rd.path / RECORDS).write_text("")
    writer = rd.writer(tally=RecordTally)
    for i in (*range(20), 3):  # position 3 twice (a success, then an error): the success must win
        writer.write(_record(i, rng, error=i == 3 and writer.ledger.count == 20))
    writer.close()
    general = RunDir(tmp_path / "general")
    shutil.copytree(rd.path, general.path)
    assert finalize(rd, ledger=writer.ledger, total=n) == finalize(general)
    assert _files(rd) == _files(general)
    assert not list(rd.path.glob(".*"))


def test_a_shard_writer_keeps_no_ledger(tmp_path):
    rd, _, _ = _written(tmp_path, n=10)
    writer = rd.writer((0, 2))
    writer.write(_record(0, random.Random(2)))
    writer.close()
    assert writer.ledger is None  # its lines are merged by `collect`, never finished from a ledger


def test_a_ledger_spill_that_fails_leaves_every_record_and_finishing_takes_the_general_path(tmp_path, monkeypatch):
    """A full disk when the ledger spills (OSError from the spill file): the writer drops its ledger, every
    record is still written, and finishing reads them (the same files as a run whose ledger never failed)."""
    import errno

    from medhelm import spill

    monkeypatch.setattr(Ledger, "CHUNK", 7)
    ok = RunDir(tmp_path / "ok")
    shutil.copytree(_written(tmp_path / "first")[0].path, ok.path)

    def full(self, columns):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spill.RunFile, "append", full)
    rd, ledger, n = _written(tmp_path / "second")
    assert ledger is None  # dropped at the first spill
    assert len((rd.path / RECORDS).read_text().splitlines()) == n - len(range(0, n, 23))
    assert finalize(rd, ledger=ledger, total=n) == finalize(ok)
    assert _files(rd) == _files(ok)
