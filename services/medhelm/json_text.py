"""The project's JSON spellings, one owner for each: ``canonical_json`` (sorted keys, no whitespace: what is
hashed, ``digest``), ``plain_json`` (the run records' spelling), ``strings_canonical_json`` (the canonical
spelling of string-leaved values by orjson), ``compact_json`` (the request cache's stored values), and
``loads_json`` (a server's reply). Pure functions of their argument; they import nothing of ours.

A value our own types carry (a frozen map, an enum, a dataclass with ``to_json``) is spelled through its
``to_json()``/``.value``; anything else the json module cannot spell is a ``TypeError`` naming its type.
The orjson paths fall back to the json module for what orjson refuses (a lone surrogate, an int beyond
64 bits, NaN literals), so the text or value is always the json module's, except where a docstring says.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import json.encoder as _json_encoder
from collections.abc import Mapping
from typing import Any

import orjson

JSON = Any  # a value json.dumps accepts


def canonical_json(value: JSON) -> str:
    """The one JSON spelling used for hashing: sorted keys, no whitespace, UTF-8 kept."""
    return _CANONICAL(value)


def plain_json(value: JSON) -> str:
    """``json.dumps(value, ensure_ascii=False)`` (the records' spelling) for values built by our own code
    (no cycles to look for). The encoders are built once: ``json.dumps`` with any option builds one per
    call, and ``JSONEncoder.encode`` builds its C encoder per call, so the C encoder is built once here,
    with the arguments ``encode`` gives it."""
    return "".join(_PLAIN_C(value, 0)) if _PLAIN_C is not None else _PLAIN(value)


def strings_canonical_json(value: JSON) -> str:
    """``canonical_json`` of a value whose leaves are strings (and ints, bools, None), e.g. chat messages, by
    orjson: the same bytes (every code point's escape agrees with the json module's, tests/core/test_streaming.py),
    faster. Floats are spelled differently by orjson: never give it one. A lone surrogate, which orjson
    refuses, takes the json module's path."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")
    except orjson.JSONEncodeError:
        return canonical_json(value)


def compact_json(value: JSON) -> str:
    """JSON of a plain value (no NaN or infinities) whose spelling only our own reader sees (the request cache's
    stored values): orjson's compact text. Anything orjson refuses (a lone surrogate, an int beyond 64 bits)
    takes the json module's path."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except orjson.JSONEncodeError:
        return _PLAIN(value)


def loads_json(data: bytes | str) -> JSON:
    """``json.loads`` of a server's reply, by orjson when it can (faster): what orjson refuses (NaN or
    Infinity literals, a BOM, lone surrogate escapes, numbers beyond a double) is parsed by the json
    module, so the result is the json module's except that integers beyond 64 bits come back as floats."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def scalar_json(value: JSON) -> str:
    """``canonical_json`` of a scalar without building an encoder (the same text)."""
    if value is None:
        return "null"
    t = type(value)
    if t is int:
        return int.__repr__(value)
    if t is float and value == value and value not in (float("inf"), float("-inf")):
        return float.__repr__(value)
    return canonical_json(value)


def digest(value: JSON, length: int = 16) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:length]


def _default(obj: Any) -> JSON:
    # specs.FrozenMap (a Mapping that is not a dict) and the frozen dataclasses spell themselves; a dict
    # never reaches here (the encoder spells it)
    if isinstance(obj, Mapping) and hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and hasattr(obj, "to_json"):
        return obj.to_json()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default).encode
_PLAIN = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
_PLAIN_C = (None if _json_encoder.c_make_encoder is None else _json_encoder.c_make_encoder(
    None, json.JSONEncoder().default, _json_encoder.encode_basestring, None, ": ", ", ", False, False, True))
