"""Sorted runs of integer columns spilled to one unlinked temporary file and merged back in order: how
the things a benchmark has one of per row are sorted without holding them all (a 1M-row dataset runs in
the memory of a 1k one).

Users: the dataset's id digests (the duplicate-id check at planning, ``benchmarks/user_dataset.py``) and
the record writer's ledger (finishing in position order, ``pipeline/records.py``). Each keeps one chunk
in memory, sorts it and hands it here as a *run*; ``runs()`` reads every run back a block at a time, so
merging costs one block per run (about ``MERGE_BYTES`` for all of them), not the data.

Failure semantics:

* the temporary file cannot be made or written (no space, read-only, no temp folder) -> ``OSError``
  from ``append``; nothing is half-recorded (a run that failed to write is not listed), and the caller
  chooses (the id check keeps its digests in memory instead; the writer drops its ledger);
* the file is unlinked when made (``tempfile.TemporaryFile``): nothing is left behind by a kill, and it
  holds numbers only (digests, positions, offsets), never instance text.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

def id_hash(instance_id: str) -> int:
    """An instance id as the 64-bit BLAKE2b digest that bounded bookkeeping keeps instead of the string."""
    return int.from_bytes(hashlib.blake2b(instance_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


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
