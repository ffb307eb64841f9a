"""Bounded-memory bookkeeping for runs of any size: positions as bits, ids joined on disk.

* ``PositionSet``: a set of non-negative integers (selection positions, record sequence numbers) as a
  bitmap, one bit each up to the largest member: 125 KB for a million, a small fraction of a Python ``set``'s size.
* ``positions_in``: the positions of a selection whose id is among some ids, both given as 64-bit digests
  (``spill.id_hash``) in ``spill.Sorter`` s (sorted on disk a chunk at a time, merged back): a merge
  join, so neither side is held in memory. Two different ids share a digest with a probability of about
  n²/2⁶⁵ (3·10⁻⁸ for a million ids); we accept that rather than keep the strings.

Failure semantics: pure data structures; the sorters' spill files are the callers' (unlinked when made,
numbers only), and an error writing them (disk full) is the caller's ``OSError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from medhelm.spill import id_hash


class PositionSet:
    """Non-negative integers as bits of a ``bytearray`` that grows to the largest member."""

    __slots__ = ("_bits", "_count")

    def __init__(self, members: Iterable[int] = ()) -> None:
        self._bits = bytearray()
        self._count = 0
        for m in members:
            self.add(m)

    def add(self, position: int) -> None:
        byte, mask = position >> 3, 1 << (position & 7)
        bits = self._bits
        if byte >= len(bits):
            bits.extend(bytes(byte + 1 - len(bits) + len(bits) // 4))  # amortized growth
        if not bits[byte] & mask:
            bits[byte] |= mask
            self._count += 1

    def __contains__(self, position: object) -> bool:
        byte = position >> 3  # type: ignore[operator]
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (position & 7)))  # type: ignore[operator]

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for byte, value in enumerate(self._bits):
            if value:
                base = byte << 3
                for bit in range(8):
                    if value >> bit & 1:
                        yield base + bit


def positions_in(selection: Iterable[tuple[int, int]], ids: Iterable[int]) -> PositionSet:
    """The positions of ``selection`` ((digest, position) rows in ascending order) whose digest occurs in
    ``ids`` (digests in ascending order, repeats allowed)."""
    found = PositionSet()
    wanted = iter(ids)
    want = next(wanted, None)
    for digest, position in selection:
        while want is not None and want < digest:
            want = next(wanted, None)
        if want is None:
            break
        if want == digest:
            found.add(position)
    return found


__all__ = ["PositionSet", "id_hash", "positions_in"]
