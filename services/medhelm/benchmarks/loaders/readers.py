"""File readers shared by the loaders. Every failure names the file (and line/column), never a cell's text."""

from __future__ import annotations

import csv
import gzip
import io
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # clinical notes are long cells

Row = dict[str, Any]


def _open_text(path: Path) -> io.TextIOBase:
    files.check_regular(path, what="data file")  # the one reader's guard: no FIFO, device, folder, loop
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_csv(path: Path, required: Sequence[str] = (), *, delimiter: str | None = None) -> list[Row]:
    """Rows as dicts (``.csv``, ``.tsv``, ``.csv.gz``); missing columns -> ConfigError naming them."""
    sep = delimiter or ("\t" if ".tsv" in path.suffixes else ",")
    try:
        with _open_text(path) as fh:
            reader = csv.DictReader(fh, delimiter=sep)
            _check_columns(path, reader.fieldnames or [], required)
            return [dict(r) for r in reader]
    except FileNotFoundError:
        raise ConfigError("file not found", path=path) from None
    except (UnicodeDecodeError, csv.Error, gzip.BadGzipFile, EOFError) as err:
        raise ConfigError(f"not a readable {'TSV' if sep == chr(9) else 'CSV'} file ({type(err).__name__})",
                          path=path) from None


def read_json(path: Path) -> Any:
    return files.load_json(path, missing="file not found", limit=files.DATA_LIMIT)


def read_jsonl(path: Path, required: Sequence[str] = ()) -> list[Row]:
    """JSON Lines (one object per line; a file holding one JSON list is accepted too)."""
    rows: list[Row] = []
    text = files.read_text(path, limit=files.DATA_LIMIT, what="JSON Lines file")
    if text.lstrip().startswith("["):
        data = files.parse_json(text, path)
        rows = [r for r in data if isinstance(r, dict)]
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            obj = files.parse_json(line, path, line=n)
            if not isinstance(obj, dict):
                raise ConfigError("each line must be a JSON object", path=path, line=n)
            rows.append(obj)
    for n, row in enumerate(rows, 1):
        _check_columns(path, list(row), required, where=f"record {n}")
    return rows


def read_arrow_table(path: Path, required: Sequence[str] = ()) -> list[Row]:
    """Parquet or Feather rows (needs pyarrow: the ``data`` extra)."""
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
    return table.to_pylist()


def read_table(path: Path, required: Sequence[str] = ()) -> list[Row]:
    """Any supported tabular file by extension."""
    suffixes = "".join(path.suffixes).lower()
    if suffixes.endswith((".parquet", ".feather")):
        return read_arrow_table(path, required)
    if suffixes.endswith(".xlsx"):
        from medhelm.benchmarks.loaders.xlsx import read_xlsx

        return read_xlsx(path, required)
    if suffixes.endswith((".jsonl", ".json")):
        return read_jsonl(path, required)
    return read_csv(path, required)


def iter_nonempty(rows: Sequence[Row], column: str) -> Iterator[tuple[int, Row]]:
    for n, row in enumerate(rows, 2):  # line 1 is the header
        if str(row.get(column) or "").strip():
            yield n, row


def _check_columns(path: Path, present: Sequence[str], required: Sequence[str], where: str = "") -> None:
    missing = [c for c in required if c not in present]
    if missing:
        raise ConfigError(f"{where + ': ' if where else ''}missing column(s) {', '.join(map(repr, missing))} "
                          f"(expected: {', '.join(required)})", path=path)
