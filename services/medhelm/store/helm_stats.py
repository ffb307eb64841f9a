"""HELM's stat entries read as HELM wrote them: a run file's presence (``present``), a stat's name and numbers
(``stat_name``, ``plain_stat``, ``strict_number``), the per-instance stats of ``per_instance_stats.json``
(``per_instance``), and any of HELM's JSON arrays one item at a time (``stream_items``, ijson).

``per_instance`` reads a well-formed file fast (``per_instance_fast``: pieces of whole entries decoded by
msgspec) and anything unusual again entry by entry (``per_instance_checked``, ijson), which names what is wrong:
the two give the same values or the same error (tests/leaderboard/test_helm_per_instance.py).

Failure semantics: every malformed input is a ``ConfigError`` naming the file (and entry or stat); a run file
that is there must be a regular file (a FIFO or ``/dev/zero`` is named, never read as "no instances"); a number
HELM should have written is never taken as 0.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from medhelm import files
from medhelm.errors import ConfigError


def present(path: Path) -> bool:
    """Whether a run file is there; one that is there must be a regular file (a FIFO, ``/dev/zero`` or a folder
    in its place is an error naming it, never "no instances")."""
    if not os.path.lexists(path):
        return False
    files.check_regular(path, what="HELM run file (JSON)")
    return True


def plain_stat(s: Mapping[str, Any]) -> bool:
    """Stats without perturbation or sub-split (HELM also writes robustness/fairness variants)."""
    name = s.get("name") or {}
    return not name.get("perturbation") and not name.get("sub_split")


def stat_name(s: Any, where: Path, position: int) -> Mapping[str, Any]:
    name = s.get("name") if isinstance(s, Mapping) else None
    if not isinstance(name, Mapping) or not isinstance(name.get("name"), str):
        raise ConfigError(f"stat #{position} has no name.name", path=where)
    return name


def strict_number(s: Mapping[str, Any], key: str, where: Path, field: str, *, required: bool = False,
            whole: bool = False) -> float | None:
    """A stat's number as HELM wrote it: a finite JSON number (whole for ``count``), or absent/null where HELM
    leaves it out. Text, a list or ``null`` where a number is needed is an error naming the stat, never a 0."""
    value = s.get(key)
    if value is None:
        if required:
            raise ConfigError(f"{field}: '{key}' is missing or null (count > 0 needs it)", path=where)
        return None
    try:  # an integer past a double's range (stats.json is read by the json module) is not a finite number
        number = float(value) if type(value) in (int, float) else math.nan
    except OverflowError:
        number = math.nan
    if not math.isfinite(number) or (whole and (number < 0 or number != int(number))):
        raise ConfigError(f"{field}: '{key}' must be a {'whole number >= 0' if whole else 'finite number'}",
                          path=where)
    return number


def per_instance(path: Path) -> dict[str, dict[str, float | None]]:
    """instance id -> every plain stat of its train-trial-0, unperturbed entries (one entry per metric group)."""
    if not present(path):
        return {}
    merged = per_instance_fast(path)
    return merged if merged is not None else per_instance_checked(path)


def per_instance_checked(path: Path) -> dict[str, dict[str, float | None]]:
    """The reading that names every problem (streamed by ijson, one entry a Python object at a time)."""
    merged: dict[str, dict[str, float | None]] = {}
    for position, entry in enumerate(stream_items(path, "item", "a list of per-instance stats")):
        if not isinstance(entry, Mapping) or "instance_id" not in entry:
            raise ConfigError(f"per-instance entry #{position} has no instance_id", path=path)
        if entry.get("perturbation") or entry.get("train_trial_index", 0):
            continue  # robustness variants and extra trials are not leaderboard values
        stats = merged.setdefault(str(entry["instance_id"]), {})
        entry_stats = entry.get("stats") or ()
        if not isinstance(entry_stats, list):
            raise ConfigError(f"per-instance entry #{position}: stats is not a list", path=path)
        for j, s in enumerate(entry_stats):
            name = stat_name(s, path, j)
            if plain_stat(s):
                stats.setdefault(name["name"], entry_mean(s, path, position))
    return merged


# The fast reading of a well-formed per_instance_stats.json (a fraction of ijson's time and the checks above;
# bench/bench_input_sizes.py, docs/design-notes.md): the file in pieces of whole entries
# (files.json_array_pieces, which bounds nesting in the same pass), each decoded by msgspec into the few fields
# used, typed so that a value the checks above would treat otherwise is refused by the decoder. Any refusal, or a
# value the checks would refuse, means "not the common case": the file is read again by per_instance_checked,
# which names the problem (or reads what these types were too narrow for). The two agree on every file
# (tests/leaderboard/test_helm_per_instance.py), down to what ijson's parser refuses: an integer past 64 bits.
class _FastName(msgspec.Struct, gc=False):
    name: str
    perturbation: Any = None
    sub_split: Any = None


class _FastStat(msgspec.Struct, gc=False):
    name: _FastName
    mean: int | float | None = None  # an int stays an int: "-0" is 0 to ijson, not -0.0
    count: int | float | None = None
    sum: int | float | None = None


class _FastEntry(msgspec.Struct, gc=False):
    instance_id: str
    perturbation: Any = None
    train_trial_index: Any = 0
    stats: list[_FastStat] | None = None


_FAST_ENTRIES = msgspec.json.Decoder(list[_FastEntry])
# digits -> "d", "." kept, anything else -> " ": an integer of 19 digits or more (ijson's parser refuses one past
# 64 bits) is then " ddd..." (a longer fraction is ".ddd...": not one)
_DIGITS = bytes(ord("d") if chr(c).isdigit() and c < 128 else c if c == ord(".") else ord(" ") for c in range(256))
_LONG_INTEGER = b" " + b"d" * 19


class _NotCommon(Exception):
    """The fast reading gives up: the checked one decides."""


def per_instance_fast(path: Path, chunk: int = 256 * 1024) -> dict[str, dict[str, float | None]] | None:
    merged: dict[str, dict[str, float | None]] = {}
    pieces = empty = 0
    try:
        for piece in files.json_array_pieces(path, chunk=chunk):
            framed = b"[" + piece + b"]"
            if _LONG_INTEGER in framed.translate(_DIGITS):
                raise _NotCommon
            entries = _FAST_ENTRIES.decode(framed)
            pieces += 1
            empty += not entries
            for entry in entries:
                if entry.perturbation or entry.train_trial_index:
                    continue
                if not entry.stats:  # no stats, or an empty list: the checked reading refuses it
                    raise _NotCommon
                stats = merged.setdefault(entry.instance_id, {})
                for s in entry.stats:
                    name = s.name
                    if name.perturbation or name.sub_split:
                        continue
                    stats.setdefault(name.name, _fast_mean(s))
    except (ValueError, RecursionError, msgspec.MsgspecError, _NotCommon):  # UnicodeDecodeError is a ValueError
        return None
    if empty and pieces > 1:  # a comma with no entry after it ("[{...},]"): not JSON
        return None
    return merged


def _fast_mean(s: _FastStat) -> float | None:
    """``entry_mean`` on decoded numbers (finite: msgspec refuses a number past a double's range), giving up where
    entry_mean would raise."""
    mean = s.mean
    if mean is not None:
        return float(mean)
    count = s.count
    if not count:
        return None
    if count < 0 or count != int(count) or s.sum is None:
        raise _NotCommon
    return float(s.sum) / float(count)


def stream_items(path: Path, prefix: str, what: str) -> Iterator[Any]:
    """JSON array items one at a time (ijson: HELM's files reach gigabytes; json.load would hold them whole)."""
    import ijson

    opener = b"{" if prefix.startswith("request_states") else b"["
    files.check_json_stream_depth(path)  # before ijson builds a value: its prefixes grow with the square of depth
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip()
            if head[:1] != opener:
                raise ConfigError(f"not {what} (expected a JSON {'object' if opener == b'{' else 'list'})", path=path)
            f.seek(0)
            yield from ijson.items(f, prefix, use_float=True)
    except ijson.JSONError as e:
        raise ConfigError(f"corrupt JSON, or not {what} ({str(e).splitlines()[0][:80]})", path=path) from None
    except OSError as e:
        raise ConfigError(f"cannot read ({e.strerror})", path=path) from None


def entry_mean(s: Mapping[str, Any], where: Path, position: int) -> float | None:
    field = f"per-instance entry #{position}"
    mean = strict_number(s, "mean", where, field)
    if mean is not None:
        return mean
    count = strict_number(s, "count", where, field, whole=True) or 0
    total = strict_number(s, "sum", where, field, required=count > 0)
    return total / count if count else None
