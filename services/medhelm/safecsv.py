"""Formula-safe CSV (OWASP "CSV Injection"): what a spreadsheet opens from us is data, never a formula.

Every field is quoted (``csv.QUOTE_ALL``: an embedded CR or LF cannot start a row of its own), and a text
field that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'`` so
Excel and LibreOffice read it as text. Numbers stay numbers: only ``str`` values are touched, so a
negative score written as a float is still a number, and so is one already formatted as text (``-0.007``,
``-0.007 [-0.574, 0.553]``), while the name ``-2+3`` is shown as text.

Used by export bundles (``store/bundle.py``) and the dashboard's downloads; pure functions, no I/O
beyond the file object handed in.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# A number already formatted as text, optionally with its interval ("-0.007 [-0.574, 0.553]"): digits, one
# sign, a point, an exponent, brackets — nothing a spreadsheet could call, so it is shown as written (an
# arithmetic expression like "-2+3" does not match and is still neutralised).
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_FORMATTED_NUMBER = re.compile(rf"{_NUMBER}(?: \[{_NUMBER}, {_NUMBER}\])?%?")


def neutralize(value: Any) -> Any:
    """``value`` unchanged unless it is text a spreadsheet would evaluate; then ``'`` + text."""
    if isinstance(value, str) and value.startswith(TRIGGERS) and not _FORMATTED_NUMBER.fullmatch(value):
        return "'" + value
    return value


def writer(fh: TextIO) -> Any:
    """A ``csv.writer`` that quotes every field and neutralises formula triggers (``writerow``/``writerows``)."""
    return _SafeWriter(csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\r\n"))


class _SafeWriter:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._inner.writerow([neutralize(v) for v in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def dict_rows(fh: TextIO, fields: Sequence[str], rows: Iterable[dict]) -> None:
    """Header + rows of dicts (missing keys empty), formula-safe."""
    w = writer(fh)
    w.writerow(fields)
    for row in rows:
        w.writerow([row.get(f, "") for f in fields])


def frame_to_csv(frame: Any) -> str:
    """A pandas DataFrame as formula-safe CSV text (the dashboard's downloads)."""
    import io

    out = io.StringIO()
    w = writer(out)
    w.writerow([str(c) for c in frame.columns])
    for row in frame.itertuples(index=False, name=None):
        w.writerow(["" if v is None or (isinstance(v, float) and v != v) else v for v in row])
    return out.getvalue()
