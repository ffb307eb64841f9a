"""A minimal .xlsx reader (first sheet, header row) and .docx paragraph reader on the standard library.

Upstream needs openpyxl and python-docx for two files (MedicationQA, RaceBias) and CLEAR's sheets; both
formats are zipped XML, so reading cell values and coloured text runs needs no extra dependency.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from medhelm.errors import ConfigError

_S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ConfigError("file not found", path=path) from None
    except zipfile.BadZipFile:
        raise ConfigError(f"not a valid {path.suffix} file", path=path) from None


def read_xlsx(path: Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    with _zip(path) as zf:
        shared = _shared_strings(zf)
        sheet = _first_sheet(zf, path)
        rows: list[list[str]] = []
        for row in ET.fromstring(zf.read(sheet)).iter(f"{_S}row"):
            cells: dict[int, str] = {}
            for c in row.iter(f"{_S}c"):
                cells[_column_index(c.get("r", ""), len(cells))] = _cell_value(c, shared)
            if cells:
                rows.append([cells.get(i, "") for i in range(max(cells) + 1)])
    if not rows:
        raise ConfigError("the first sheet is empty", path=path)
    header = [h.strip() for h in rows[0]]
    missing = [c for c in required if c not in header]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(map(repr, missing))} in the first sheet "
                          f"(expected: {', '.join(required)})", path=path)
    return [{h: (r[i] if i < len(r) else "") for i, h in enumerate(header) if h} for r in rows[1:]]


def _shared_strings(zf: zipfile.ZipFile) -> list[str]:
    if "xl/sharedStrings.xml" not in zf.namelist():
        return []
    root = ET.fromstring(zf.read("xl/sharedStrings.xml"))
    return ["".join(t.text or "" for t in si.iter(f"{_S}t")) for si in root.iter(f"{_S}si")]


def _first_sheet(zf: zipfile.ZipFile, path: Path) -> str:
    names = sorted(n for n in zf.namelist() if re.fullmatch(r"xl/worksheets/sheet\d+\.xml", n))
    if not names:
        raise ConfigError("no worksheet found", path=path)
    return min(names, key=lambda n: int(re.findall(r"\d+", n)[-1]))


def _column_index(ref: str, fallback: int) -> int:
    letters = re.match(r"[A-Z]+", ref)
    if not letters:
        return fallback
    n = 0
    for ch in letters.group():
        n = n * 26 + (ord(ch) - 64)
    return n - 1


def _cell_value(c: ET.Element, shared: list[str]) -> str:
    kind = c.get("t")
    if kind == "inlineStr":
        return "".join(t.text or "" for t in c.iter(f"{_S}t"))
    v = c.find(f"{_S}v")
    if v is None or v.text is None:
        return ""
    if kind == "s":
        return shared[int(v.text)]
    text = v.text
    if re.fullmatch(r"-?\d+\.0", text):  # numbers stored as floats: 1.0 -> "1"
        text = text[:-2]
    return text


@dataclass(frozen=True)
class Paragraph:
    text: str
    has_red: bool  # any run coloured pure red (FF0000)


def read_docx_paragraphs(path: Path) -> list[Paragraph]:
    with _zip(path) as zf:
        try:
            root = ET.fromstring(zf.read("word/document.xml"))
        except KeyError:
            raise ConfigError("not a Word document (no word/document.xml)", path=path) from None
    out = []
    for p in root.iter(f"{_W}p"):
        text, red = [], False
        for run in p.iter(f"{_W}r"):
            text.extend(t.text or "" for t in run.iter(f"{_W}t"))
            color = run.find(f"{_W}rPr/{_W}color")
            if color is not None and (color.get(f"{_W}val") or "").upper() == "FF0000":
                red = True
        out.append(Paragraph("".join(text), red))
    return out
