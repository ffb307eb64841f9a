"""RecordWriter: the lines finished in one turn of the event loop reach the file together at the start of the
next turn, whole; a write that fails is raised by the next write or by close, and keeps every whole line."""

from __future__ import annotations

import asyncio
import errno
import json
import random

import pytest

from medhelm.pipeline.aggregate import RecordTally
from medhelm.rundir import RunDir

from .test_streaming import _record


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_turns_records_are_in_the_file_at_the_start_of_the_next_turn(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rng = random.Random(1)
    records = [_record(i, rng) for i in range(7)]

    async def go() -> list[int]:
        writer = rd.writer(tally=RecordTally)
        seen = []
        for turn in (records[:3], records[3:]):
            for r in turn:
                writer.write(r)
            seen.append(len(_lines(writer.path)))  # this turn's lines are still queued
            await asyncio.sleep(0)  # the next turn starts with their write
            seen.append(len(_lines(writer.path)))
        writer.close()
        return seen

    assert asyncio.run(go()) == [0, 3, 3, 7]
    assert [d["position"] for d in _lines(rd.path / "instances.jsonl")] == list(range(7))


def test_without_a_running_loop_each_record_is_written_at_once(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    writer = rd.writer(tally=RecordTally)
    writer.write(_record(0, random.Random(2)))
    assert len(_lines(writer.path)) == 1
    writer.close()


class _FullDisk:
    """A file whose writes stop fitting after ``room`` bytes, as on a full filesystem (a short write, then
    ENOSPC)."""

    def __init__(self, real, room: int) -> None:
        self._real, self._room = real, room
        self.closed = False

    def write(self, data: bytes) -> int:
        if self._room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        part = data[:self._room]
        self._room -= len(part)
        self._real.write(part)
        self._real.flush()
        if len(part) < len(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(part)

    def flush(self) -> None:
        self._real.flush()

    def fileno(self) -> int:
        return self._real.fileno()

    def close(self) -> None:
        self.closed = True
        self._real.close()


def test_a_failed_write_is_raised_by_the_next_write_and_keeps_whole_lines_only(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rng = random.Random(3)
    records = [_record(i, rng) for i in range(6)]

    async def go() -> None:
        writer = rd.writer(tally=RecordTally)
        for r in records[:2]:
            writer.write(r)
        await asyncio.sleep(0)  # two whole lines written
        room = (writer.path.stat().st_size // 2) + 10  # the next turn's one write: line 2 fits, line 3 does not
        writer._file = _FullDisk(writer._file, room)
        for r in records[2:4]:
            writer.write(r)
        await asyncio.sleep(0)  # the write fails in the loop's callback: kept for the next write
        with pytest.raises(OSError) as failed:
            writer.write(records[4])
        assert failed.value.errno == errno.ENOSPC
        with pytest.raises(OSError):
            writer.close()
        assert writer.ledger is None  # the file no longer holds what a ledger would say

    asyncio.run(go())
    kept = (rd.path / "instances.jsonl").read_text(encoding="utf-8")
    assert kept.endswith("\n") and [d["position"] for d in _lines(rd.path / "instances.jsonl")] == [0, 1, 2]
