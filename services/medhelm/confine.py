"""Path confinement: a path named by someone else (a caller of a service, a benchmark YAML) must stay under
the roots its owner allowed.

``confined(value, roots, field=...)`` resolves the path the way the OS will open it (``~`` is refused,
``..`` collapsed, every symlink followed) and returns it only when it lies inside one of ``roots``
(themselves resolved). Anything else is a ``ConfigError`` naming the field and the allowed roots; the
message never holds the file's content, and it holds the given value only truncated, because a caller
may send anything as a "path".

Failure semantics: pure checks, no I/O beyond ``realpath``; a root that does not exist confines nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from medhelm.errors import ConfigError

_SHOWN = 120  # characters of a refused value shown in an error


def shown(value: object, limit: int = _SHOWN) -> str:
    """A caller-supplied value for an error message: one line, at most ``limit`` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def real(path: Path | str) -> Path:
    """The path the OS opens: absolute, ``..`` collapsed, every symlink followed (even dangling ones)."""
    return Path(os.path.realpath(os.fspath(path)))


def inside(path: Path, root: Path) -> bool:
    """True when ``path`` (already real) is ``root`` (already real) or below it."""
    return path == root or root in path.parents


def roots_of(paths: Iterable[Path | str]) -> tuple[Path, ...]:
    """Configured roots, resolved once (duplicates dropped, order kept)."""
    return tuple(dict.fromkeys(real(Path(p).expanduser()) for p in paths))


def confined(value: str | Path, roots: Sequence[Path], *, field: str, base: Path | None = None,
             what: str = "path") -> Path:
    """``value`` resolved inside one of ``roots`` (relative values against ``base``, else each root in turn).

    Refused: empty values, ``~`` forms, NUL bytes, and anything whose real path (symlinks followed) is
    outside every root. Returns the real path; whether the file exists is the caller's check."""
    text = os.fspath(value).strip()
    if not text or "\x00" in text:
        raise ConfigError(f"must be a {what}", field=field)
    if len(text) > 4096 or any(len(part) > 255 for part in text.split("/")):
        raise ConfigError(f"'{shown(text)}': too long for a path", field=field)
    if text.startswith("~"):
        raise ConfigError(f"'{shown(text)}': '~' is not allowed here; give a path under the allowed roots",
                          field=field)
    if not roots:
        raise ConfigError(f"'{shown(text)}': no {what} is accepted here (the operator allowed no roots)",
                          field=field)
    given = Path(text)
    if given.is_absolute():
        candidates = [given]
    elif base is not None:
        candidates = [Path(base) / given]
    else:
        candidates = [Path(r) / given for r in roots]
    resolved_roots = [real(r) for r in roots]
    first_inside: Path | None = None
    for candidate in candidates:
        try:
            resolved = real(candidate)
            if any(inside(resolved, r) for r in resolved_roots):
                if resolved.exists():
                    return resolved
                first_inside = first_inside or resolved
        except OSError:  # unreadable or too deep: not a path we can vouch for
            continue
    if first_inside is not None:
        return first_inside
    allowed = ", ".join(str(r) for r in resolved_roots)
    raise ConfigError(f"'{shown(text)}' is outside the allowed folders ({allowed})", field=field)
