"""File readers shared by the loaders: CSV/TSV (also gzipped), JSON, JSON Lines, parquet/feather, .xlsx, .docx.

Files as published are messy, and every reader takes them as they come:

* a UTF-8 byte-order mark, CRLF line endings (also inside quoted cells: a cell's ``\\r\\n`` becomes ``\\n``),
  quoted newlines, trailing spaces around header names;
* blank and whitespace-only rows (MEDEC's test file ends with 328 rows of empty fields) are skipped and
  *counted*: ``Table.blank`` holds the count and one line is logged (``medhelm.data``, file name and count
  only, never a cell);
* a row with fewer fields than the header gets empty strings; extra fields that are empty (trailing
  commas) are dropped; an extra field that holds a value is a malformed row;
* ``NA``/``n/a``/``NULL``/empty mixes: ``is_missing()`` knows pandas' default NA spellings, which is what
  upstream HELM's loaders (``pandas.read_csv``/``read_excel``) dropped.

Failure semantics: a missing file, an unreadable file or a present-but-malformed row raises ``ConfigError``
naming the file, the line (the physical line where the record starts; the sheet row for .xlsx) and the
field — never a cell's text, which may be patient data.

Spreadsheets and Word documents are read with openpyxl and python-docx (the ``data`` extra): they handle
date serials, shared/inline/rich-text strings, cached formula values, merged cells, line breaks and tabs
more correctly than a hand-written XML reader would, and upstream MedHELM reads the same files with them.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # clinical notes are long cells

Row = dict[str, Any]
log = logging.getLogger("medhelm.data")

# pandas' default NA spellings (pandas.io.parsers STR_NA_VALUES): what upstream's pandas-based loaders drop
NA_STRINGS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                        "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


def is_missing(value: Any) -> bool:
    """True for None, NaN, and the NA spellings pandas reads as missing (after stripping spaces)."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return isinstance(value, str) and value.strip() in NA_STRINGS


def clean_text(value: Any) -> str:
    """A cell as text with ``\\r\\n``/``\\r`` turned into ``\\n`` (files exported on Windows)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


class Table(list):
    """Rows (dicts keyed by header name) plus where each came from: ``lines[i]`` is the physical line (or
    sheet row) where row ``i`` starts; ``blank`` counts the blank/whitespace-only rows that were skipped."""

    def __init__(self, path: Path, rows: list[Row], lines: list[int], blank: int = 0) -> None:
        super().__init__(rows)
        self.path, self.lines, self.blank = path, lines, blank

    def numbered(self) -> Iterator[tuple[int, Row]]:
        """``(line, row)`` pairs, for error messages that name the line."""
        return zip(self.lines, self)


def _note_blank(path: Path, blank: int, what: str = "blank row") -> None:
    note_skipped(path, blank, what)


def note_skipped(path: Path, count: int, what: str, why: str = "") -> None:
    """One line for rows/files a loader skipped on purpose: the file and the count, never their content."""
    if count:
        log.warning("%s: skipped %d %s%s%s", path, count, what, "" if count == 1 else "s", f" ({why})" if why else "")


def _open_text(path: Path) -> io.TextIOBase:
    files.check_regular(path, what="data file")  # the one reader's guard: no FIFO, device, folder, loop
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_csv(path: Path, required: Sequence[str] = (), *, delimiter: str | None = None) -> Table:
    """Rows of a ``.csv``, ``.tsv`` or ``.csv.gz`` file; missing columns -> ConfigError naming them."""
    rows: list[Row] = []
    lines: list[int] = []
    counts = BlankCount()
    for line, row in iter_csv(path, required, delimiter=delimiter, blank=counts):
        rows.append(row)
        lines.append(line)
    return Table(path, rows, lines, counts.n)


@dataclass
class BlankCount:
    n: int = 0


def iter_csv(path: Path, required: Sequence[str] = (), *, delimiter: str | None = None,
             blank: BlankCount | None = None, where: str = "") -> Iterator[tuple[int, Row]]:
    """``(line, row)`` pairs, streamed (for files too large to hold: MIMIC's radiology reports). Blank rows
    are skipped, counted into ``blank`` and noted once the file is read to its end."""
    sep = delimiter or ("\t" if ".tsv" in path.suffixes else ",")
    kind = "TSV" if sep == "\t" else "CSV"
    counts = blank if blank is not None else BlankCount()
    try:
        with _open_text(path) as fh:
            reader = csv.reader(fh, delimiter=sep)
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"empty {kind} file (no header line)", path=path)
            names = [h.strip() for h in header]
            _check_header(path, names, required, where)
            start = reader.line_num + 1
            for record in reader:
                line, start = start, reader.line_num + 1
                if not any(cell.strip() for cell in record):
                    counts.n += 1
                    continue
                if len(record) > len(names):
                    extra = [i for i in range(len(names), len(record)) if record[i].strip()]
                    if extra:
                        raise ConfigError(f"{len(record)} fields but the header has {len(names)} (a value in "
                                          f"field {extra[0] + 1} has no column)", path=path, line=line)
                unnamed = [i for i, n in enumerate(names) if not n and i < len(record) and record[i].strip()]
                if unnamed:
                    raise ConfigError(f"a value in field {unnamed[0] + 1}, whose header is empty", path=path,
                                      line=line)
                yield line, {n: clean_text(record[i]) if i < len(record) else "" for i, n in enumerate(names) if n}
    except FileNotFoundError:
        raise ConfigError("file not found", path=path) from None
    except UnicodeDecodeError:
        raise ConfigError(f"not UTF-8 text (save the {kind} as UTF-8)", path=path) from None
    except (csv.Error, gzip.BadGzipFile, EOFError, OSError) as err:
        raise ConfigError(f"not a readable {kind} file ({type(err).__name__})", path=path) from None
    _note_blank(path, counts.n)


def check_columns(path: Path, required: Sequence[str], *, where: str = "") -> None:
    """Read only the header of the CSV / TSV file ``path`` (a spreadsheet is read whole: openpyxl has no header
    alone): a missing column is a ConfigError naming the file and the column (prefixed by ``where``: what asked
    for it)."""
    if path.suffix.lower() == ".xlsx":
        read_xlsx(path, required)  # the error names the file, the sheet and the missing column
        return
    rows = iter_csv(path, required, where=where)
    try:
        next(rows, None)  # the header is checked before the first row
    finally:
        rows.close()


def _check_header(path: Path, names: Sequence[str], required: Sequence[str], where: str = "") -> None:
    seen: set[str] = set()
    for name in names:
        if name and name in seen:
            raise ConfigError(f"{where + ': ' if where else ''}column {name!r} appears twice in the header",
                              path=path)
        seen.add(name)
    _check_columns(path, names, required, where)


def _read_text(path: Path) -> str:
    return files.read_text(path, limit=files.DATA_LIMIT, what="data file")


def read_json(path: Path) -> Any:
    return files.load_json(path, missing="file not found", limit=files.DATA_LIMIT)


def read_jsonl(path: Path, required: Sequence[str] = ()) -> Table:
    """JSON Lines (one object per line; blank lines skipped and counted). A file holding one JSON list of
    objects is accepted too (its records are numbered from 1)."""
    text = _read_text(path)
    rows: list[Row] = []
    lines: list[int] = []
    blank = 0
    if text.lstrip().startswith("["):
        data = files.parse_json(text, path)
        if not isinstance(data, list):
            raise ConfigError("a JSON file here must hold a list of objects", path=path)
        for n, r in enumerate(data, 1):
            if not isinstance(r, dict):
                raise ConfigError(f"record {n} is not a JSON object", path=path)
            rows.append(r)
            lines.append(n)
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                blank += 1
                continue
            obj = files.parse_json(line, path, line=n)
            if not isinstance(obj, dict):
                raise ConfigError("each line must be a JSON object", path=path, line=n)
            rows.append(obj)
            lines.append(n)
    _note_blank(path, blank)
    listed = text.lstrip().startswith("[")
    for n, row in zip(lines, rows):
        missing = [c for c in required if c not in row]
        if missing:
            what = f"missing field(s) {', '.join(map(repr, missing))} (expected: {', '.join(required)})"
            if listed:  # one JSON list: say which record, there are no meaningful lines
                raise ConfigError(f"record {n}: {what}", path=path)
            raise ConfigError(what, path=path, line=n)
    return Table(path, rows, lines, blank)


def read_arrow_table(path: Path, required: Sequence[str] = ()) -> Table:
    """Parquet or Feather rows (needs pyarrow: the ``data`` extra). ``lines`` are 1-based row numbers."""
    try:
        import pyarrow.feather as feather
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("reading parquet/feather files needs pyarrow: pip install 'medhelm-k8s[data]' "
                          "(or pip install pyarrow)", path=path) from None
    if not path.is_file():
        raise ConfigError("file not found", path=path)
    try:
        table = feather.read_table(path) if path.suffix == ".feather" else pq.read_table(path)
    except Exception as err:  # pyarrow raises many types for a corrupt file
        raise ConfigError(f"not a readable {path.suffix.lstrip('.')} file ({type(err).__name__})", path=path) from None
    _check_columns(path, table.column_names, required)
    rows = table.to_pylist()
    return Table(path, rows, list(range(1, len(rows) + 1)))


def read_table(path: Path, required: Sequence[str] = ()) -> Table:
    """Any supported tabular file by extension."""
    suffixes = "".join(path.suffixes).lower()
    if suffixes.endswith((".parquet", ".feather")):
        return read_arrow_table(path, required)
    if suffixes.endswith(".xlsx"):
        return read_xlsx(path, required)
    if suffixes.endswith((".jsonl", ".json")):
        return read_jsonl(path, required)
    return read_csv(path, required)


def _check_columns(path: Path, present: Sequence[str], required: Sequence[str], where: str = "") -> None:
    missing = [c for c in required if c not in present]
    if missing:
        raise ConfigError(f"{where + ': ' if where else ''}missing column(s) {', '.join(map(repr, missing))} "
                          f"(expected: {', '.join(required)})", path=path)


# ------------------------------------------------------------------------------------------------
# spreadsheets and Word documents (openpyxl / python-docx)


def _office(module: str, path: Path) -> Any:
    try:
        return __import__(module)
    except ImportError:
        pip = {"openpyxl": "openpyxl", "docx": "python-docx"}[module]
        raise ConfigError(f"reading {path.suffix} files needs {pip}: pip install 'medhelm-k8s[data]' "
                          f"(or pip install {pip})", path=path) from None


def cell_text(value: Any, keep_cr: bool = False) -> str:
    """A spreadsheet value as text: dates as ISO (``2024-03-01``, with the time when it has one), whole
    numbers without ``.0``, booleans as TRUE/FALSE (as Excel shows them), None as empty; ``keep_cr``: a text
    cell's ``\r`` kept, as pandas reads it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if keep_cr else clean_text(value)


def read_xlsx(path: Path, required: Sequence[str] = (), *, sheet: str | None = None, keep_cr: bool = False) -> Table:
    """Rows of one sheet (the first, or ``sheet``) under its first non-empty row as header. Formulas give their
    cached values (Excel stores them; a formula never calculated reads as empty); a header merged over several
    columns names them ``X``, ``X (2)``, ...; ``lines`` are the sheet's row numbers. ``keep_cr``: text cells keep
    their ``\r\n`` (an upstream benchmark HELM reads with pandas, byte for byte)."""
    openpyxl = _office("openpyxl", path)
    if not path.is_file():
        raise ConfigError("file not found", path=path)
    try:
        wb = openpyxl.load_workbook(path, data_only=True)
    except Exception as err:  # zipfile.BadZipFile, KeyError, InvalidFileException, ...
        raise ConfigError(f"not a readable .xlsx file ({type(err).__name__})", path=path) from None
    try:
        if sheet is not None and sheet not in wb.sheetnames:
            raise ConfigError(f"no sheet named {sheet!r} (sheets: {', '.join(wb.sheetnames)})", path=path)
        ws = wb[sheet] if sheet is not None else wb.worksheets[0]
        grid = [(cells[0].row, [cell_text(c.value, keep_cr) for c in cells]) for cells in ws.iter_rows() if cells]
        merged = [(r.min_row, r.min_col, r.max_col) for r in ws.merged_cells.ranges if r.max_col > r.min_col]
    finally:
        wb.close()
    header_at = next((i for i, (_, values) in enumerate(grid) if any(v.strip() for v in values)), None)
    if header_at is None:
        raise ConfigError(f"sheet {ws.title!r} is empty", path=path)
    header_row, names = grid[header_at][0], [h.strip() for h in grid[header_at][1]]
    for row, first, last in merged:  # a header merged over several columns names each of them: "X", "X (2)", ...
        if row == header_row and names[first - 1]:
            for k, col in enumerate(range(first + 1, last + 1), 2):
                if col - 1 < len(names) and not names[col - 1]:
                    names[col - 1] = f"{names[first - 1]} ({k})"
    _check_header(path, names, required, where=f"sheet {ws.title!r}")
    rows: list[Row] = []
    lines: list[int] = []
    blank = 0
    for number, values in grid[header_at + 1:]:
        if not any(v.strip() for v in values):
            blank += 1
            continue
        extra = [i for i in range(len(values)) if (i >= len(names) or not names[i]) and values[i].strip()]
        if extra:
            raise ConfigError(f"sheet {ws.title!r}: a value in column {extra[0] + 1} has no header", path=path,
                              line=number)
        rows.append({n: values[i] if i < len(values) else "" for i, n in enumerate(names) if n})
        lines.append(number)
    _note_blank(path, blank)
    return Table(path, rows, lines, blank)


@dataclass(frozen=True)
class Paragraph:
    text: str  # python-docx's Paragraph.text: <w:br/> and <w:cr/> are "\n", <w:tab/> is "\t"
    has_red: bool  # any run coloured pure red (RGB FF0000)


RED = (255, 0, 0)


def read_docx_paragraphs(path: Path) -> list[Paragraph]:
    """The body's paragraphs in order (python-docx ``Document.paragraphs``: tables' cells not included)."""
    docx = _office("docx", path)
    if not path.is_file():
        raise ConfigError("file not found", path=path)
    try:
        document = docx.Document(str(path))
    except Exception as err:  # PackageNotFoundError, BadZipFile, KeyError, ...
        raise ConfigError(f"not a readable .docx file ({type(err).__name__})", path=path) from None
    out = []
    for p in document.paragraphs:
        red = any(run.font.color is not None and run.font.color.rgb is not None and tuple(run.font.color.rgb) == RED
                  for run in p.runs)
        out.append(Paragraph(clean_text(p.text), red))
    return out
