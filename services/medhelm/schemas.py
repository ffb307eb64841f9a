"""Typed schemas for the user's configs, checked before anything is written (pydantic v2).

Why pydantic rather than more hand-written checks or jsonschema: the configs become typed Python values
in the same step as they are checked (no second, drifting parser), strict mode refuses what YAML's
loose typing lets through (a numeric deployment name, ``timeout_s: "30"``, ``.inf``/``.nan`` where a
finite number is meant), ``extra="forbid"`` names a misspelt key, and every error comes with its exact
location (``model_deployments[2].base_url``), which ``check`` turns into one line naming the file, the
line (from the YAML node tree) and the field. It is well kept, fast (Rust core) and already used by the
dashboard's stack; jsonschema would need the schema written a second time as data and gives no types.

Failure semantics: ``check`` raises ``ConfigError`` for the first problem; never echoes the offending
value (configs may carry names we would rather not repeat, and a value can be arbitrarily long).
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
import types
import typing
from typing import Annotated, Any, TypeVar, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from medhelm.errors import ConfigError, escape
from medhelm.files import YamlDoc

M = TypeVar("M", bound=BaseModel)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _plain_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters (newline, tab, NUL)")
    return value.strip()


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number (not .inf or .nan)")
    return value


def _url(value: str) -> str:
    value = _plain_text(value)
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or rest.startswith("/"):
        raise ValueError("must be an http:// or https:// URL with a host")
    try:  # what the clients will parse: an unclosed IPv6 bracket or a bad port fails here, before any write
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as err:
        reason = "an unclosed [IPv6] bracket" if "IPv6" in str(err) else "the port is not a number from 0 to 65535"
        raise ValueError(f"is not a valid URL ({reason})") from None
    if not parts.hostname or port == 0:
        raise ValueError("must be an http:// or https:// URL with a host (and a port from 1 to 65535)")
    return value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
        raise ValueError("must be the NAME of an environment variable (letters, digits, _), never the key itself")
    return value


def _numbers_as_text(value: Any) -> Any:
    """YAML reads ``name: 2024`` as a number; where a name is meant, a number is its text (never a bool)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    return value


Text = Annotated[str, Field(max_length=500), AfterValidator(_plain_text)]
PathText = Annotated[str, Field(max_length=4096), AfterValidator(_plain_text)]  # a file path in a config
LongText = Annotated[str, Field(max_length=100_000)]  # descriptions: any text, bounded
NameText = Annotated[Text, BeforeValidator(_numbers_as_text)]
Url = Annotated[str, Field(max_length=2000), AfterValidator(_url)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Finite = Annotated[float, AfterValidator(_finite)]


class Strict(BaseModel):
    """Strict types, no unknown keys, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def check(model: type[M], data: Any, *, path: str | Path | None, doc: YamlDoc | None = None,
          prefix: tuple[str | int, ...] = ()) -> M:
    """``data`` as a ``model``, or a ConfigError naming the file, line and field of the first problem."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        errors = err.errors(include_url=False, include_input=False)
        # a misspelt key is reported as "unknown" and its right spelling as "missing": the first says more
        first = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
        placed = _placed(data, first["loc"])
        loc = tuple(p for p in (*prefix, *first["loc"][:placed]) if p != "[key]")
        line = doc.line(*loc) if doc is not None and loc else None
        message = _message(first)
        if placed < len(first["loc"]):
            # A value that fits no member of a union (``max_concurrency: sometimes`` against an integer or
            # "auto"): pydantic reports each member under a tag of its own (``constrained-int``,
            # ``literal['auto']``) that names no field; the field is where the value is, and the message lists
            # what every member wanted.
            wanted = dict.fromkeys(_predicate(_message(e)) for e in errors
                                   if tuple(e["loc"][:placed]) == tuple(first["loc"][:placed]))
            message = "must be " + " or ".join(wanted)
        if first.get("type") == "extra_forbidden":
            allowed = _allowed_keys(model, tuple(p for p in first["loc"] if p != "[key]")[:-1])
            if allowed:
                message += f" (allowed: {', '.join(allowed)})"
        raise ConfigError(message, path=path, line=line, field=_field(loc) or None) from None


def _allowed_keys(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at ``loc`` (inside ``model``) accepts: for "unknown key" errors (a misspelt key)."""
    kind: Any = model
    for part in (*loc, None):
        kind = _unwrap(kind)
        if part is None:
            break
        if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(part, str):
            field = kind.model_fields.get(part)
            if field is None:
                return []
            kind = field.annotation
        elif typing.get_origin(kind) in (list, tuple) and isinstance(part, int):
            kind = (typing.get_args(kind) or (Any,))[0]
        elif typing.get_origin(kind) is dict:
            kind = (typing.get_args(kind) or (Any, Any))[-1]
        else:
            return []
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return [f.alias or name for name, f in kind.model_fields.items()]
    return []


def _unwrap(kind: Any) -> Any:
    """``Annotated[X, ...]`` -> X; ``X | None`` -> X."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            if len(args) != 1:
                return kind
            kind = args[0]
        else:
            return kind


def _placed(data: Any, loc: tuple[Any, ...]) -> int:
    """How many leading parts of an error's ``loc`` are places in ``data``: past a scalar, the rest are the tags
    pydantic gives a union's members. (A key missing from a mapping is still a place: the field to add.)"""
    node = data
    for i, part in enumerate(loc):
        if part == "[key]":  # the error is in the key itself (the place named before it)
            continue
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, (list, tuple)) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif node is not None and not isinstance(node, (list, tuple)):
            return i
        else:
            return len(loc)
    return len(loc)


def _predicate(message: str) -> str:
    """"must be an integer" -> "an integer"; "input should be 'auto'" -> "'auto'" (to join a union's members)."""
    for lead in ("must be ", "input should be "):
        if message.startswith(lead):
            return message[len(lead):]
    return message


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + escape(part, 80)
    return out


_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "unknown key",
    "string_type": "must be text (put it in quotes: YAML reads yes/no/on/off, numbers and dates as other types)",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "dict_type": "must be a mapping (key: value)",
    "list_type": "must be a list",
    "model_type": "must be a mapping (key: value)",
    "too_short": "must not be empty",
    "string_too_long": None,
    "literal_error": None,  # pydantic's own message lists the allowed values (ours, not the user's)
}


def _message(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    msg = _MESSAGES.get(kind)
    if msg is None:
        msg = str(error.get("msg", "is not valid"))
        msg = msg.removeprefix("Value error, ")
        msg = msg[:1].lower() + msg[1:]
    return escape(msg, 200)
