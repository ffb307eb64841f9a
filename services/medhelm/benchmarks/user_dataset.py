"""Read a configurable benchmark's CSV into instances (stdlib ``csv``; UTF-8, a BOM is fine).

Columns: every ``{placeholder}`` of the prompt; ``correct_answer`` (the gold reference); optional
``incorrect_answers`` (a JSON list, kept as non-correct references, never shown to the model); optional
``id``. Every problem is a ConfigError naming the file, the line and the column — never the cell's
content, which may be patient text.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from medhelm.benchmarks.template import PromptTemplate
from medhelm.errors import ConfigError
from medhelm.specs import FrozenMap, Instance, Reference

ANSWER, WRONG, ID = "correct_answer", "incorrect_answers", "id"

# A clinical note can exceed csv's default 128 KiB field limit; the limit is process-wide, so only raise it.
_FIELD_LIMIT = 64 * 1024 * 1024
if csv.field_size_limit() < _FIELD_LIMIT:
    csv.field_size_limit(_FIELD_LIMIT)


def read_dataset(path: Path, template: PromptTemplate, *, answer_required: bool) -> tuple[Instance, ...]:
    """All rows of ``path`` as instances whose input is the filled template."""
    rows = _rows(path)
    header = next(rows, None)
    if header is None:
        raise ConfigError("the dataset is empty (expected a header row and at least one data row)", path=path)
    columns = _columns(header[1], path)
    _check_columns(columns, path, template, answer_required)
    instances: list[Instance] = []
    first_line_of_id: dict[str, int] = {}
    for number, (line, row) in enumerate(rows, start=1):
        if len(row) != len(columns):
            raise ConfigError(f"expected {len(columns)} fields (as in the header), found {len(row)}",
                              path=path, line=line)
        values = dict(zip(columns, row, strict=True))
        instance_id = values[ID].strip() if ID in values else str(number)
        if not instance_id:
            raise ConfigError("empty id", path=path, line=line, field=ID)
        if instance_id in first_line_of_id:
            raise ConfigError(f"duplicate id (first used on line {first_line_of_id[instance_id]})",
                              path=path, line=line, field=ID)
        first_line_of_id[instance_id] = line
        used = {field: values[field] for field in template.fields}
        instances.append(Instance(id=instance_id, input=template.render(used),
                                  references=_references(values, path, line, answer_required),
                                  extra=FrozenMap(used)))
    if not instances:
        raise ConfigError("the dataset has a header but no data rows", path=path)
    return tuple(instances)


def _rows(path: Path):  # -> Iterator[tuple[int, list[str]]]: (first line of the record, cells)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError("not UTF-8 text (save it as 'CSV UTF-8')", path=path,
                          line=data[: err.start].count(b"\n") + 1) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if any(cell.strip() for cell in row):  # blank lines and all-empty spreadsheet rows are not data
                yield line, row
    except csv.Error as err:
        raise ConfigError(f"malformed CSV ({err})", path=path, line=reader.line_num) from None


def _columns(header: list[str], path: Path) -> list[str]:
    columns = [c.strip() for c in header]
    for i, name in enumerate(columns):
        if not name:
            raise ConfigError(f"column {i + 1} of the header has no name", path=path, line=1)
        if name in columns[:i]:
            raise ConfigError("duplicate column name in the header", path=path, line=1, field=name)
    return columns


def _column_list(columns: list[str]) -> str:
    """The header's names for an error, only when they look like column names: a file that is not the
    dataset (a mistyped dataset_file) must not have its first line printed."""
    if len(columns) <= 40 and all(len(c) <= 40 and c.isprintable() and ":" not in c for c in columns):
        return "columns: " + ", ".join(columns)
    return f"{len(columns)} column(s) whose names do not look like a dataset header"


def _check_columns(columns: list[str], path: Path, template: PromptTemplate, answer_required: bool) -> None:
    for field in template.fields:
        if field not in columns:
            raise ConfigError(f"placeholder {{{field}}} has no column in {path} ({_column_list(columns)})",
                              path=template.path, line=template.line_of(field), field=field)
    if answer_required and ANSWER not in columns:
        raise ConfigError(f"no '{ANSWER}' column; it holds the gold answer and is required unless jury_score "
                          "is the only metric", path=path, line=1, field=ANSWER)


def _references(values: dict[str, str], path: Path, line: int, answer_required: bool) -> tuple[Reference, ...]:
    answer = values.get(ANSWER, "")
    if answer_required and not answer.strip():
        raise ConfigError("empty gold answer", path=path, line=line, field=ANSWER)
    refs = [Reference(answer, correct=True)] if answer.strip() else []
    raw = values.get(WRONG, "").strip()
    if raw:
        try:
            wrong = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ConfigError(f"not valid JSON ({err.msg} at character {err.pos + 1}); expected a list such as "
                              '["No"] (in CSV: "[""No""]")', path=path, line=line, field=WRONG) from None
        if wrong is None:
            wrong = []
        if not isinstance(wrong, list) or not all(isinstance(w, (str, int, float)) for w in wrong):
            raise ConfigError('expected a JSON list of strings such as ["No"]', path=path, line=line, field=WRONG)
        refs.extend(Reference(str(w), correct=False) for w in wrong)
    return tuple(refs)
