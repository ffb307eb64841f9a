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
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

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
    return value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
        raise ValueError("must be the NAME of an environment variable (letters, digits, _), never the key itself")
    return value


Text = Annotated[str, Field(max_length=500), AfterValidator(_plain_text)]
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
        first = err.errors(include_url=False, include_input=False)[0]
        loc = (*prefix, *first["loc"])
        line = doc.line(*loc) if doc is not None and loc else None
        raise ConfigError(_message(first), path=path, line=line, field=_field(loc) or None) from None


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
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
