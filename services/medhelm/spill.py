"""Sorted runs of integer columns spilled to one unlinked temporary file and merged back in order: how
the things a benchmark has one of per row are sorted without holding them all (a 1M-row dataset runs in
the memory of a 1k one).

Users: the dataset's id digests (the duplicate-id check at planning, ``benchmarks/user_dataset.py``), the
record writer's ledger (``rundir/writer.py``: finishing in position order), and a resumed or sharded run's
bookkeeping (which positions are finished, which records are kept, their order: ``pipeline/finish.py``). Each
keeps one chunk in memory, sorts it and hands it here as a *run* (``Sorter`` does both for rows added in any
order); ``runs()`` reads every run back a block at a time, so merging costs one block per run (about
``MERGE_BYTES`` for all of them), not the data.

Failure semantics:

* the temporary file cannot be made or written (no space, read-only, no temp folder) -> ``OSError``
  from ``append``; nothing is half-recorded (a run that failed to write is not listed), and the caller
  chooses (the id check keeps its digests in memory instead; the writer drops its ledger);
* the file is unlinked when made (``tempfile.TemporaryFile``): nothing is left behind by a kill, and it
  holds numbers only (digests, positions, offsets), never instance text.
"""

from __future__ import annotations

import heapq
import itertools
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

def id_hash(instance_id: str) -> int:
    """An instance id as the signed 64-bit digest that bounded bookkeeping keeps instead of the string:
    Python's own string hash (SipHash, keyed per process, computed in C and cached on the string). The
    digests never leave the process (spill files are unlinked, nothing is persisted), so the per-process
    key is no concern, and two ids share a digest with a probability of about n²/2⁶⁵ (3·10⁻⁸ for a
    million ids): the duplicate-id check confirms a repeat on the strings, resuming and finishing accept it."""
    return hash(instance_id)


CHUNK = 8192  # rows a Sorter sorts in memory (sorting boxes each value: a larger chunk grows the heap for good)
BLOCK = 4096  # rows read from a run at a time while merging, at most ...
MERGE_BYTES = 1 << 20  # ... and fewer when there are many runs: all runs' blocks together stay near this


class RunFile:
    """Append sorted runs (columns of equal length, one ``array`` typecode each); read them back as
    iterators of row tuples (of plain values when there is one column). One file descriptor whatever the
    number of runs."""

    def __init__(self, typecodes: str, folder: str | Path | None = None) -> None:
        self.typecodes = typecodes
        self._folder = folder
        self._file = None
        self._end = 0
        self._runs: list[tuple[int, int]] = []  # (byte offset, rows)

    def __len__(self) -> int:
        return len(self._runs)

    def append(self, columns: Sequence[array]) -> None:
        """Write one run (already sorted by the caller); OSError when it cannot be written."""
        n = len(columns[0])
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=self._folder, prefix=".medhelm-spill-")  # noqa: SIM115
        data = b"".join(column.tobytes() for column in columns)
        fd = self._file.fileno()
        written = 0
        while written < len(data):  # os.pwrite may write less than asked
            written += os.pwrite(fd, data[written:], self._end + written)
        self._runs.append((self._end, n))
        self._end += len(data)

    def runs(self) -> list[Iterator]:
        row_bytes = sum(array(t).itemsize for t in self.typecodes)
        block = max(64, min(BLOCK, MERGE_BYTES // (row_bytes * max(1, len(self._runs)))))
        return [self._read(offset, n, block) for offset, n in self._runs]

    def _read(self, offset: int, n: int, block: int) -> Iterator:
        fd = self._file.fileno()  # type: ignore[union-attr]
        bases, at = [], offset
        for typecode in self.typecodes:
            bases.append((typecode, at))
            at += n * array(typecode).itemsize
        for start in range(0, n, block):
            k = min(block, n - start)
            columns = []
            for typecode, base in bases:
                column = array(typecode)
                column.frombytes(os.pread(fd, k * column.itemsize, base + start * column.itemsize))
                columns.append(column)
            if len(columns) == 1:
                yield from columns[0]
            else:
                yield from zip(*columns)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._runs = []


class Sorter:
    """Rows of integers (one ``array`` typecode a column) added in any order, read back in ascending row
    order: ``CHUNK`` rows in memory, each full chunk sorted and appended to a ``RunFile``; iterating merges
    the runs with the rows still in memory (rows are tuples, or plain values when there is one column).

    A spill that fails raises ``OSError``, unless ``in_memory_on_error``: the sorted chunks are then kept
    in memory (8 bytes a value) and the result is the same."""

    def __init__(self, typecodes: str, folder: str | Path | None = None, *, in_memory_on_error: bool = False,
                 chunk: int | None = None) -> None:
        self.typecodes = typecodes
        self.count = 0
        self._chunk_rows = chunk or CHUNK
        self._runs = RunFile(typecodes, folder)
        self._kept: list[list[array]] = []
        self._in_memory_on_error = in_memory_on_error
        self._new_chunk()

    def _new_chunk(self) -> None:
        self._columns = [array(t) for t in self.typecodes]
        self._appends = [c.append for c in self._columns]

    def add(self, *row: int) -> None:
        for append, value in zip(self._appends, row, strict=True):
            append(value)
        self.count += 1
        if len(self._columns[0]) >= self._chunk_rows:
            self._spill()

    def extend(self, rows: Iterable) -> None:
        """Add every row of ``rows`` (tuples, or plain values when there is one column), a chunk at a time."""
        rows = iter(rows)
        one = len(self._columns) == 1
        while True:
            room = self._chunk_rows - len(self._columns[0])
            if one:
                before = len(self._columns[0])
                self._columns[0].extend(itertools.islice(rows, room))
                added = len(self._columns[0]) - before
            else:
                batch = list(itertools.islice(rows, room))
                added = len(batch)
                for column, values in zip(self._columns, zip(*batch, strict=True) if batch else ()):
                    column.extend(values)
            self.count += added
            if added < room:
                return
            self._spill()

    def _spill(self) -> None:
        run = self._sorted_chunk()
        self._new_chunk()
        try:
            self._runs.append(run)
        except OSError:
            if not self._in_memory_on_error:
                raise
            self._kept.append(run)

    def _sorted_chunk(self) -> list[array]:
        columns = self._columns
        if len(columns) == 1:
            return [array(columns[0].typecode, sorted(columns[0]))]
        rows = sorted(zip(*columns))
        return [array(c.typecode, [row[k] for row in rows]) for k, c in enumerate(columns)]

    def __iter__(self) -> Iterator:
        def rows(columns: list[array]) -> Iterator:
            return iter(columns[0]) if len(columns) == 1 else zip(*columns)

        return heapq.merge(*self._runs.runs(), *(rows(run) for run in self._kept), rows(self._sorted_chunk()))

    def close(self) -> None:
        self._runs.close()
        self._kept = []
        self._new_chunk()

    def __enter__(self) -> Sorter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
