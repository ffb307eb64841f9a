"""A prompt template with ``{column}`` placeholders, and filling it within a token budget.

Parsing uses ``string.Formatter`` (so ``{{`` and ``}}`` are literal braces) but a placeholder is taken
as a column name verbatim: ``{blood.pressure}`` names that column, not an attribute. The template is the
file's text whole, its final newline and any other trailing whitespace kept, as HELM's configurable
scenario fills it (the prompt's layout around it is ``configurable.py``'s). When the filled prompt is over
budget, the longest filled *value* is cut from its end — the template's own text (instructions, question)
is never cut.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from medhelm.errors import ConfigError, escape

MAX_WIDTH = 1000  # a width/precision in a placeholder's format spec ({note:>999999999} would take gigabytes)
_CONVERSIONS = frozenset({"r", "s", "a"})


@dataclass(frozen=True)
class _Piece:
    literal: str
    field: str | None  # None: literal text only
    spec: str = ""
    conversion: str | None = None


@dataclass(frozen=True)
class PromptTemplate:
    path: Path
    text: str
    pieces: tuple[_Piece, ...]

    @classmethod
    def parse(cls, text: str, path: Path) -> PromptTemplate:
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as err:
            raise ConfigError(f"bad placeholder syntax ({err}); write {{{{ and }}}} for literal braces",
                              path=path) from None
        pieces = []
        for literal, field, spec, conversion in parsed:
            if field is not None and not field.strip():
                line = text[: text.find("{}")].count("\n") + 1 if "{}" in text else None
                raise ConfigError("empty placeholder {}: write a column name, or {{}} for literal braces",
                                  path=path, line=line)
            line = cls._line(text, field)
            if conversion is not None and conversion not in _CONVERSIONS:
                raise ConfigError(f"placeholder {{{escape(field, 80)}!{escape(conversion, 5)}}}: unknown conversion "
                                  "(use !r, !s or !a, or none)", path=path, line=line, field=field)
            if spec:
                if "{" in spec:
                    raise ConfigError("nested placeholders inside a format spec are not supported", path=path,
                                      line=line, field=field)
                widths = [int(n) for n in re.findall(r"\d+", spec)]
                if any(n > MAX_WIDTH for n in widths):
                    raise ConfigError(f"placeholder {{{escape(field, 80)}:...}}: a width or precision over {MAX_WIDTH} "
                                      "in its format spec", path=path, line=line, field=field)
                try:
                    format("", spec)
                except ValueError:
                    raise ConfigError(f"placeholder {{{escape(field, 80)}:{escape(spec, 40)}}} has a format spec that "
                                      "text cannot use", path=path, line=line, field=field) from None
            pieces.append(_Piece(literal, field, spec or "", conversion))
        return cls(path=path, text=text, pieces=tuple(pieces))

    @staticmethod
    def _line(text: str, field: str | None) -> int | None:
        at = text.find("{" + (field or ""))
        return None if at < 0 else text[:at].count("\n") + 1

    @property
    def fields(self) -> tuple[str, ...]:
        """Placeholder names in order of first use."""
        return tuple(dict.fromkeys(p.field for p in self.pieces if p.field is not None))

    def line_of(self, field: str) -> int:
        """The template line where ``field`` is first used (for error messages)."""
        seen = ""
        for piece in self.pieces:
            seen += piece.literal
            if piece.field == field:
                return seen.count("\n") + 1
            if piece.field is not None:
                seen += "{}"
        return 1

    def render(self, values: Mapping[str, str]) -> str:
        out = []
        for piece in self.pieces:
            out.append(piece.literal)
            if piece.field is not None:
                value = values[piece.field]
                if piece.conversion:
                    value = {"r": repr, "s": str, "a": ascii}[piece.conversion](value)
                out.append(format(value, piece.spec) if piece.spec else value)
        return "".join(out)

    def fit(self, values: Mapping[str, str], max_tokens: int | None,
            count_tokens: Callable[[str], int]) -> tuple[str, bool]:
        """The filled prompt within ``max_tokens``, and whether a value had to be cut to get there."""
        text = self.render(values)
        if max_tokens is None or count_tokens(text) <= max_tokens:
            return text, False
        current = dict(values)
        while True:
            longest = max(current, key=lambda k: len(current[k]), default=None)
            if longest is None or not current[longest]:
                return text, True  # only template text left: nothing more we may cut
            full = current[longest]
            # the longest prefix of this value that fits (binary search: token counts are monotone)
            lo, hi = 0, len(full)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                current[longest] = full[:mid]
                if count_tokens(self.render(current)) <= max_tokens:
                    lo = mid
                else:
                    hi = mid - 1
            current[longest] = full[:lo]
            text = self.render(current)
            if lo > 0 or count_tokens(text) <= max_tokens:
                return text, True
