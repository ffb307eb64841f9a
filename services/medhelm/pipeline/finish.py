"""Finishing a run folder: merge its record files in position order and derive ``stats.json`` and
``run.json`` (``finalize``, ``collect_shards``), and what resuming needs (``finished_positions``).

Memory: nothing here holds a run's records or ids at once. Resuming joins the finished records' id digests
with the selection's on disk (``medhelm.spill.Sorter``) into the set of finished positions; finishing joins
the records' digests with the selection's to find the lines outside it and the repeated ids, sorts the kept
lines' (position, ..., offset, size) on disk, and copies each line from its file in that order while it
aggregates the stats and counts (``aggregate.py``). A record file written whole by this process is finished
from its writer's ``Ledger`` instead (``medhelm.rundir.writer``): its lines are copied in position order
unparsed, and the stats were aggregated as they were written.

Failure semantics: a corrupt record line is a one-line ConfigError naming the file and line; files are
replaced atomically (``rundir.write_atomic*``), so a failure leaves the old files; lines set aside are
appended to ``superseded.jsonl`` and fsync'd before the record file is replaced. Idempotent.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

from medhelm.errors import ConfigError
from medhelm.pipeline.aggregate import Aggregator, StatusCounts, scored_row_json
from medhelm.pipeline.bounded import PositionSet, id_hash, positions_in
from medhelm.rundir import RECORDS, SHARDS, SUPERSEDED, Ledger, RunDir, dump_json, write_atomic, write_atomic_lines
from medhelm.spill import Sorter
from medhelm.json_text import loads_json
from medhelm.specs import RunSpec


def finished_positions(run: RunDir) -> PositionSet:
    """The positions of the selection whose instance has a successful record (what a resumed run skips),
    a bit each: the records' and the selection's id digests are sorted on disk beside the records and
    joined (``bounded.positions_in``), never held."""
    with Sorter("q", run.path) as done:
        done.extend(id_hash(head.id) for head in run.record_heads() if head.ok)
        if not done.count:
            return PositionSet()
        with Sorter("qq", run.path) as selection:
            selection.extend((id_hash(iid), position) for position, iid in enumerate(run.iter_selection()))
            return positions_in(selection, done)


def finalize(run: RunDir, *, extra_status: dict | None = None, ledger: Ledger | None = None,
             total: int | None = None) -> dict:
    """Merge all record files in position order, derive stats.json and run.json. Idempotent.

    One record per instance id (the last written, preferring a success over an error); records of ids
    outside the selection (a smaller sample than before) are moved to superseded.jsonl, never deleted.
    Streams, in the memory of a small run whatever the number of records (``_choose``): two passes
    over the record files' heads, a sort of the kept lines' positions and offsets on disk, and one read
    of each kept line, in position order.

    ``ledger`` (of the writer that wrote the whole record file in this process) and ``total`` (the
    selection's size): when the file is exactly what the ledger says, one record per position, its
    lines are copied in position order without being parsed and the ledger's stats and counts are
    used: the same files as the general path (tests/core/test_finish_fast.py), for a fraction of the
    CPU. Anything else (a resumed run, shards, another writer's lines) takes the general path."""
    spec = run.spec()
    if ledger is not None and total is not None and _finish_from_ledger(run, ledger, total):
        return _write_derived(run, spec, ledger.tally.agg, ledger.tally.counts, total, extra_status)
    files = run.record_files()
    with contextlib.ExitStack() as stack:
        # the files' lines as they are now (a line appended from here on is not finishing's to judge)
        files = [(f, f.stat().st_size) for f in files]
        total, unwanted, dropped, firsts = _choose(run, stack, files)
        superseded = None

        def kept() -> Iterator[tuple[int, int, int, int, int, int]]:
            nonlocal superseded
            chosen_first = iter(firsts)
            pick = next(chosen_first, None)
            for seq, head in enumerate(run.record_heads(files)):
                if seq in unwanted:
                    if superseded is None:
                        superseded = stack.enter_context(open(run.path / SUPERSEDED, "a", encoding="utf-8"))
                    superseded.write(head.line)
                    continue
                if seq in dropped:
                    continue
                first = seq
                if pick is not None and pick[0] == seq:
                    first = pick[1]
                    pick = next(chosen_first, None)
                yield head.position, first, head.file, head.lineno, head.offset, head.size

        order = stack.enter_context(Sorter("qqqqQQ", run.path))  # position, first, file, line, offset, size
        order.extend(kept())
        if superseded is not None:  # durable before the new record file replaces the old one
            superseded.flush()
            os.fsync(superseded.fileno())
        agg = Aggregator()
        counts = StatusCounts()
        reader = stack.enter_context(_LineReader([f for f, _ in files]))

        def ordered() -> Iterator[bytes]:
            for _, _, file, lineno, offset, size in order:
                line = reader.read(file, offset, size)
                try:
                    d = loads_json(line)
                    agg.add(scored_row_json(d))
                    counts.add(d)
                except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
                    raise ConfigError(f"corrupt record line ({type(e).__name__})", path=files[file][0],
                                      line=lineno) from None
                yield line

        write_atomic_lines(run.path / RECORDS, ordered())
    shards = run.path / SHARDS
    if shards.is_dir():
        for f in shards.glob("shard-*.jsonl"):
            f.unlink()
        shards.rmdir()
    return _write_derived(run, spec, agg, counts, total, extra_status)

def _choose(run: RunDir, stack: contextlib.ExitStack,
            files: list[tuple[Path, int]]) -> tuple[int, PositionSet, PositionSet, Sorter]:
    """Which record lines finishing keeps, by sequence number (the lines of ``files``, each read up to
    its given size, in order): (the selection's size, the lines whose id is outside the selection, the
    lines of a repeated id that lose to another line of it, (kept seq, seq of its id's first line) of
    each repeated id).

    The rule: one line per id, the last written preferring a success over an error. The selection's
    id digests and the records' (digest, seq, ok) are sorted on disk and merged, so only a bit per
    line is held."""
    wanted = stack.enter_context(Sorter("q", run.path))
    wanted.extend(id_hash(iid) for iid in run.iter_selection())
    total = wanted.count
    heads = stack.enter_context(Sorter("qqb", run.path))
    heads.extend((id_hash(head.id), seq, head.ok) for seq, head in enumerate(run.record_heads(files)))
    unwanted, dropped = PositionSet(), PositionSet()
    firsts = stack.enter_context(Sorter("qq", run.path))
    selected = iter(wanted)
    want = next(selected, None)
    for key, group in itertools.groupby(heads, key=_first):
        while want is not None and want < key:
            want = next(selected, None)
        if want != key:
            for _, seq, _ in group:
                unwanted.add(seq)
            continue
        lines = list(group)  # in seq order: every line of one id
        if len(lines) == 1:
            continue
        kept = next((seq for _, seq, ok in reversed(lines) if ok), lines[-1][1])
        for _, seq, _ in lines:
            if seq != kept:
                dropped.add(seq)
        if kept != lines[0][1]:
            firsts.add(kept, lines[0][1])
    return total, unwanted, dropped, firsts

def _write_derived(run: RunDir, spec: RunSpec, agg: Aggregator, counts: StatusCounts, total: int,
                   extra_status: dict | None) -> dict:
    write_atomic(run.path / "stats.json", dump_json([s.to_json() for s in agg.stats()]))
    status = counts.status(spec, total)
    counted = run.retry_counts()
    if counted is not None:  # every retry of every invocation, not only the finished records' attempts
        status["retries"], status["judge_retries"] = counted
    access = run.access()
    if access is not None:  # where and when the evaluated deployment was asked, over every invocation and shard
        status["access"] = access
    status.update(extra_status or {})
    write_atomic(run.path / "run.json", dump_json(status))
    return status

def _finish_from_ledger(run: RunDir, ledger: Ledger, total: int) -> bool:
    """Rewrite instances.jsonl in position order from the ledger; False (nothing done) when the record
    files are not exactly what the ledger describes (one line per position, every position known)."""
    path = run.path / RECORDS
    if run.record_files() != [path] or path.stat().st_size != ledger.bytes or ledger.count > total:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        def ordered() -> Iterator[bytes]:
            previous, seen = -1, 0
            group: list[tuple[int, int]] = []
            group_bytes = 0
            for position, offset, size in ledger.entries():
                if position <= previous or position >= total:  # a repeat, or outside the selection
                    raise _NotTheLedgersFile
                previous, seen = position, seen + 1
                group.append((offset, size))
                group_bytes += size
                if len(group) >= _GROUP_LINES or group_bytes >= _GROUP_BYTES:
                    yield _read_group(fd, group, group_bytes)
                    group, group_bytes = [], 0
            if seen != ledger.count:
                raise _NotTheLedgersFile
            if group:
                yield _read_group(fd, group, group_bytes)
        write_atomic_lines(path, ordered())  # removes its temporary file when ordered() gives up
    except _NotTheLedgersFile:
        return False
    finally:
        os.close(fd)
        ledger.close()
    return True


# Finishing from the ledger reads and writes the lines a group at a time: up to _GROUP_LINES consecutive
# positions (at most _GROUP_BYTES). The lines were appended in completion order, which is position order give
# or take the requests in flight, so a group's lines usually lie together in the file: they are read by one
# pread of the span they cover when that span is at most twice their size, else one by one (a shuffled
# file: a slow server's replies come back in any order). No read is ever more than twice the lines it gets.
_GROUP_LINES, _GROUP_BYTES = 256, 1 << 20


def _read_group(fd: int, group: list[tuple[int, int]], size: int) -> bytes:
    """The lines at ``group``'s (offset, size), in that order, joined; _NotTheLedgersFile if the file is shorter."""
    low = min(offset for offset, _ in group)
    high = max(offset + n for offset, n in group)
    if high - low <= 2 * size:
        span = os.pread(fd, high - low, low)
        lines = [span[offset - low:offset - low + n] for offset, n in group]
    else:
        lines = [os.pread(fd, n, offset) for offset, n in group]
    if any(len(line) != n for line, (_, n) in zip(lines, group)):  # the file ends early: not the ledger's
        raise _NotTheLedgersFile
    return b"".join(lines)


class _NotTheLedgersFile(Exception):
    pass


class _LineReader:
    """Reads lines of record files by (file index, offset, size): a descriptor per file, at most ``OPEN`` open
    at a time (a run of many shards reads them round-robin; the least recently opened is closed first)."""

    OPEN = 64

    def __init__(self, files: list[Path]) -> None:
        self._files = files
        self._fds: dict[int, int] = {}

    def read(self, file: int, offset: int, size: int) -> bytes:
        fd = self._fds.get(file)
        if fd is None:
            if len(self._fds) >= self.OPEN:
                os.close(self._fds.pop(next(iter(self._fds))))
            fd = self._fds[file] = os.open(self._files[file], os.O_RDONLY)
        data = os.pread(fd, size, offset)
        if len(data) != size:  # the file shrank under us: not the lines we sorted
            raise ConfigError("records file changed while the run was being finished", path=self._files[file])
        return data

    def __enter__(self) -> _LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _first(row: tuple) -> object:
    return row[0]


def collect_shards(run_dir: Path) -> dict:
    """Merge a sharded run's shard files into the finished run (``medhelm collect``)."""
    return finalize(RunDir(run_dir))
