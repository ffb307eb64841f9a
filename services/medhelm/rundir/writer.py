"""Writing a run's records: ``RecordWriter`` appends one line per finished instance, and its ``Ledger``
remembers where each line went so finishing need not read them back.

Failure semantics: see ``RecordWriter`` — a failed write keeps every whole line already written, cuts a
partly written last one and is raised by the next ``write`` or by ``close``; a ledger that cannot spill is
dropped (finishing then reads the lines), never a lost record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from medhelm.json_text import plain_json
from medhelm.records import InstanceResult
from medhelm.spill import Sorter


class Tally(Protocol):
    """What a ledger folds each written record's JSON object into (``pipeline.aggregate.RecordTally``)."""

    def add(self, d: Mapping) -> None: ...


class Ledger:
    """What a writer that started its record file knows of every line it wrote, so finishing need not read
    them back: each line's position, offset and size, and the stats and counts aggregated as the lines were
    written, folded by its ``tally`` (the pipeline's: stats and counts, by the same functions finishing applies
    to the lines it reads) on the same JSON objects.

    Bounded: entries are kept ``CHUNK`` at a time; a full chunk is sorted by position and spilled to one
    unlinked temporary file beside the records (20 bytes an entry on disk, ``medhelm.spill``), and
    ``entries`` merges the chunks. A spill that fails (disk full) raises OSError: the writer then drops its ledger."""

    CHUNK = 8192  # entries sorted in memory at a time (spill.CHUNK: a larger chunk grows the heap for good)
    __slots__ = ("_entries", "bytes", "count", "tally")

    def __init__(self, spill_dir: Path, tally: Tally) -> None:
        self._entries = Sorter("qQI", spill_dir, chunk=self.CHUNK)  # position, offset, size
        self.bytes = self.count = 0
        self.tally = tally

    def add(self, position: int, size: int, d: Mapping) -> None:
        self._entries.add(position, self.bytes, size)  # OverflowError beyond 4 GiB a line: the writer drops the ledger
        self.bytes += size
        self.count += 1
        self.tally.add(d)

    def entries(self) -> Iterator[tuple[int, int, int]]:
        """(position, offset, size) of every line, in position order."""
        return iter(self._entries)

    def close(self) -> None:
        self._entries.close()


@dataclass
class RecordWriter:
    """Appends one line per finished instance; handed to the OS once per event-loop turn, fsync'd at least
    every ``sync_every_s``.

    Durability: ``write`` queues the line, and the lines queued during one turn of the running event loop
    are written by one ``write(2)`` at the start of the next turn (``call_soon``), whole lines only, before
    any further reply is read. So a ``kill -9`` loses only instances whose answer arrived in the turn it
    struck, i.e. instances still in flight; every line handed over survives it (and a node crash once
    fsync'd). Without a running loop (tools, tests) each line is written at once. A write that fails (disk
    full, read-only folder) drops the unwritten lines, cuts any partly written last line (every whole one is
    kept) and is raised by the next ``write`` or by ``close``. One write a turn instead of one a record:
    each syscall releases the GIL, and the request cache's commit thread then held it.

    A writer given a ``tally`` (a factory) that finds its file empty keeps a ``Ledger`` of what it writes
    (finishing, ``pipeline/finish.py``, then orders the lines without parsing them); one that appends to
    earlier records (a resumed run) does not."""

    path: Path
    sync_every_s: float = 1.0
    keep_ledger: bool = True
    tally: Callable[[], Tally] | None = None
    _file: BinaryIO = field(init=False, repr=False)
    _last_sync: float = field(init=False, default=0.0)
    ledger: Ledger | None = field(init=False, default=None)
    _queued: list[bytes] = field(init=False, default_factory=list)  # lines of this loop turn
    _failed: OSError | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._repair_torn_tail()
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()/_abandon()
        self._last_sync = time.monotonic()
        if self.keep_ledger and self.tally is not None and self._file.tell() == 0:
            self.ledger = Ledger(self.path.parent, self.tally())

    def _repair_torn_tail(self) -> None:
        # A kill mid-write can leave a partial last line; cut it so the next append starts clean.
        if not self.path.is_file():
            return
        with open(self.path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)

    def write(self, record: InstanceResult) -> None:
        if self._failed is not None:
            raise self._failed
        d = record.to_json()
        data = (plain_json(d) + "\n").encode("utf-8")
        queued = self._queued
        queued.append(data)
        if len(queued) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._flush_queued)
            except RuntimeError:  # no running loop: at once
                self._flush_queued()
                if self._failed is not None:
                    raise self._failed
        if self.ledger is not None:
            try:
                self.ledger.add(record.position, len(data), d)
            except (OverflowError, OSError):  # a line over 4 GiB, a spill on a full disk
                self._drop_ledger()  # finishing takes the general path

    def _flush_queued(self) -> None:
        """Write the queued lines (one call), fsync if ``sync_every_s`` is over; a failure is kept for the
        next ``write``/``close`` to raise (this runs as a loop callback, where raising would be lost)."""
        queued = self._queued
        if not queued or self._failed is not None or self._file.closed:
            return
        data = queued[0] if len(queued) == 1 else b"".join(queued)
        queued.clear()
        f = self._file
        try:
            f.write(data)
            f.flush()  # in the OS from here on: survives kill -9
            now = time.monotonic()
            if now - self._last_sync >= self.sync_every_s:
                os.fsync(f.fileno())  # on disk: survives a node crash
                self._last_sync = now
        except OSError as err:
            self._failed = err
            self._abandon()  # disk full / read-only: drop the unwritten lines, keep every whole one

    def _drop_ledger(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None

    def _abandon(self) -> None:
        self._queued.clear()
        self._drop_ledger()  # the file may now hold less than the ledger says
        with contextlib.suppress(OSError):
            self._file.close()  # closes the descriptor even when flushing the rest fails
        with contextlib.suppress(OSError):
            self._repair_torn_tail()  # cut a partly written last line (truncating frees space)

    def close(self) -> None:
        self._flush_queued()
        if self._failed is not None:
            raise self._failed
        f = self._file
        if not f.closed:
            try:
                f.flush()
                os.fsync(f.fileno())
                f.close()
            except OSError:
                self._abandon()
                raise
