"""Bounded-memory building blocks for runs of any size: a compact set of instance ids and an external sort.

* ``IdSet``: instance ids as 64-bit BLAKE2b digests in a sorted ``array`` (8 bytes per id, where a Python
  ``set`` of strings costs ~80): membership by binary search. Two different ids share a digest with a
  probability of about n²/2⁶⁵ (3·10⁻⁸ for a million ids); we accept that rather than keep the strings.
* ``external_sort``: (key, line) pairs in key order, sorted in memory in chunks of at most ``chunk_bytes``
  of text and merged from temporary files (``heapq.merge``), so sorting a million records costs a few MB of
  memory, not the records' size. Small inputs never touch the disk.

Failure semantics: pure functions; the temporary files live in ``tmp_dir`` (the run's own folder, so they
are on the same volume and disk-full errors name that folder) and are removed on success and on error.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import pickle
import tempfile
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from medhelm.spill import id_hash

CHUNK_BYTES = 16 * 1024 * 1024
_SMALL = 65536  # fewer digests are sorted as Python ints (no numpy import for a small run)


class IdSet:
    """A set of instance ids in 8 bytes each (see the module docstring); add everything, then ``freeze``."""

    __slots__ = ("_hashes", "_frozen")

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._hashes = array("Q")
        self._frozen = False
        for i in ids:
            self.add(i)

    def add(self, instance_id: str) -> None:
        self._hashes.append(id_hash(instance_id))
        self._frozen = False

    def freeze(self) -> IdSet:
        if not self._frozen:
            if len(self._hashes) < _SMALL:
                self._hashes = array("Q", sorted(set(self._hashes)))
            else:
                import numpy as np  # sorts the array's own 8-byte buffer in place (sorted() would box each)

                view = np.frombuffer(self._hashes, dtype=np.uint64)
                view.sort()
                repeated = view[1:] == view[:-1]
                unique = None
                if repeated.any():  # rare: ids added twice; the unique ones are copied out
                    unique = array("Q")
                    unique.frombytes(view[np.concatenate(([True], ~repeated))].tobytes())
                del view, repeated  # the array may grow again only once no view holds its buffer
                if unique is not None:
                    self._hashes = unique
            self._frozen = True
        return self

    def __contains__(self, instance_id: object) -> bool:
        self.freeze()
        h = id_hash(str(instance_id))
        i = bisect.bisect_left(self._hashes, h)
        return i < len(self._hashes) and self._hashes[i] == h

    def __len__(self) -> int:
        return len(self.freeze()._hashes)


def duplicate_hashes(hashes: array) -> set[int]:
    """The digests that occur more than once (sorts ``hashes`` in place; no copy of it)."""
    if len(hashes) < _SMALL:
        ordered_list = sorted(hashes)
        return {a for a, b in zip(ordered_list, ordered_list[1:]) if a == b}
    import numpy as np

    ordered = np.frombuffer(hashes, dtype=np.uint64)
    ordered.sort()
    return {int(h) for h in ordered[1:][ordered[1:] == ordered[:-1]]}


def external_sort(items: Iterable[tuple[Any, str]], tmp_dir: Path, *,
                  chunk_bytes: int | None = None) -> Iterator[tuple[Any, str]]:
    """``items`` (key, text) in ascending key order (keys unique, or ties in input order)."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    chunk: list[tuple[Any, int, str]] = []
    size = seq = 0
    files: list[Any] = []
    try:
        for key, text in items:
            chunk.append((key, seq, text))
            seq += 1
            size += len(text) + 64
            if size >= chunk_bytes:
                files.append(_spill(chunk, tmp_dir))
                chunk, size = [], 0
        chunk.sort(key=_sort_key)
        if not files:
            for key, _, text in chunk:
                yield key, text
            return
        if chunk:
            files.append(_spill(chunk, tmp_dir))
            chunk = []
        for key, _, text in heapq.merge(*(_read_back(f) for f in files), key=_sort_key):
            yield key, text
    finally:
        for f in files:
            with contextlib.suppress(OSError):
                f.close()


def _sort_key(item: tuple[Any, int, str]) -> tuple[Any, int]:
    return item[0], item[1]


def _spill(chunk: list[tuple[Any, int, str]], tmp_dir: Path):
    chunk.sort(key=_sort_key)
    f = tempfile.TemporaryFile(dir=tmp_dir, prefix=".sort-")  # unlinked at once: nothing is left behind
    try:
        pickler = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
        for item in chunk:
            pickler.dump(item)
            pickler.clear_memo()
        f.flush()
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return f


def _read_back(f) -> Iterator[tuple[Any, int, str]]:
    unpickler = pickle.Unpickler(f)
    while True:
        try:
            yield unpickler.load()
        except EOFError:
            return


__all__ = ["IdSet", "duplicate_hashes", "external_sort", "id_hash"]
