"""Read a configurable benchmark's CSV into instances (stdlib ``csv``; UTF-8, a BOM is fine).

Columns: every ``{placeholder}`` of the prompt; ``correct_answer`` (the gold reference); optional
``incorrect_answers`` (a JSON list, kept as non-correct references, never shown to the model); optional
``id``. Every problem is a ConfigError naming the file, the line and the column — never the cell's
content, which may be patient text.

Streamed: ``scan_dataset`` checks every row once (at planning) keeping an 8-byte digest per row to refuse
a repeated id (a chunk in memory, the rest sorted in a temporary file: ``spill.Sorter``) and returns a
``DatasetFile``, which reads the file again for each pass of a run and never holds the rows. A file changed after it was
checked is refused, not read (its size, mtime and inode are compared at every pass).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

from medhelm import files
from medhelm.benchmarks.base import StreamedInstances
from medhelm.benchmarks.template import PromptTemplate
from medhelm.errors import ConfigError, escape
from medhelm.spill import Sorter, id_hash
from medhelm.specs import BLANK_SUBGROUP, EMPTY_MAP, FrozenMap, Instance, Reference

ANSWER, WRONG, ID = "correct_answer", "incorrect_answers", "id"

# A clinical note can exceed csv's default 128 KiB field limit; the limit is process-wide, so only raise it.
_FIELD_LIMIT = 64 * 1024 * 1024
if csv.field_size_limit() < _FIELD_LIMIT:
    csv.field_size_limit(_FIELD_LIMIT)


def read_dataset(path: Path, template: PromptTemplate, *, answer_required: bool,
                 data: bytes | None = None) -> tuple[Instance, ...]:
    """All rows of ``path`` (or of ``data``, its content already read) as instances: the filled template."""
    if data is None:
        return tuple(scan_dataset(path, template, answer_required=answer_required)[0])
    instances = tuple(inst for _, inst in _instances(path, template, answer_required, _text_rows(path, data)))
    _check_unique(path, template, answer_required, [inst.id for inst in instances], lambda: _text_rows(path, data))
    return instances


def scan_dataset(path: Path, template: PromptTemplate, *, answer_required: bool,
                 digest_prefix: bytes = b"", subgroups: tuple[str, ...] = ()) -> tuple[DatasetFile, str]:
    """Check every row of ``path`` (streamed) -> (the rows, re-readable; sha256 of ``digest_prefix`` and
    the file's bytes). ``subgroups``: columns whose values become each instance's ``subgroups``."""
    ids = _IdDigests()
    try:
        rows = _file_rows(path)
        # checks only: nothing built
        ids.extend(id_hash(instance_id) for _, instance_id in _checked_rows(path, template, answer_required, rows,
                                                                               subgroups))
        signature = rows.signature
        _check_unique(path, template, answer_required, ids, lambda: _file_rows(path))
    finally:
        ids.close()
    sha = hashlib.sha256(digest_prefix)
    with files.open_regular(path, what="dataset (CSV)")[0] as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    return DatasetFile(path, template, answer_required, signature, ids.count, subgroups), sha.hexdigest()


class DatasetFile(StreamedInstances):
    """A checked dataset's rows as instances, read from the file at every pass (see the module docstring)."""

    def __init__(self, path: Path, template: PromptTemplate, answer_required: bool, signature: tuple,
                 count: int, subgroups: tuple[str, ...] = ()) -> None:
        self.path, self.template, self.answer_required = path, template, answer_required
        self.signature, self.count, self.subgroups = signature, count, subgroups

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Instance]:
        for _, inst in _instances(self.path, self.template, self.answer_required, self._rows(), self.subgroups):
            yield inst

    def ids(self) -> Iterator[str]:
        rows = self._rows()
        header = next(rows, None)
        if header is None:
            return
        columns = [c.strip() for c in header[1]]
        at = columns.index(ID) if ID in columns else None
        for number, (_, row) in enumerate(rows, start=1):
            yield row[at].strip() if at is not None else str(number)

    def _rows(self):
        rows = _file_rows(self.path)
        if rows.signature != self.signature:
            rows.close()
            raise ConfigError("the dataset changed after the run was planned (start the run again)", path=self.path)
        return rows


class _IdDigests(Sorter):
    """Every row's id digest for the duplicate check, in memory that does not grow with the file: a chunk
    at a time, each full chunk sorted and spilled to a temporary file (``medhelm.spill``), merged back for
    the check. Where no temporary file can be written, the sorted chunks stay in memory (8 bytes a row)."""

    def __init__(self) -> None:
        super().__init__("q", in_memory_on_error=True)

    def repeats(self) -> bool:
        """Whether any digest occurs twice."""
        previous = None
        for value in self:
            if value == previous:
                return True
            previous = value
        return False


def _check_unique(path, template, answer_required, ids, reread) -> None:
    """Refuse a repeated id, naming its line and the line of its first use. ``ids``: every row's id or its
    digest; only when two digests agree are the rows read again to find the lines."""
    if isinstance(ids, _IdDigests):
        if not ids.repeats():
            return
    elif len(set(ids)) == len(ids):
        return
    first_line_of_id: dict[str, int] = {}
    for line, inst in _instances(path, template, answer_required, reread()):
        if inst.id in first_line_of_id:
            raise ConfigError(f"duplicate id (first used on line {first_line_of_id[inst.id]})",
                              path=path, line=line, field=ID)
        first_line_of_id[inst.id] = line


def _instances(path: Path, template: PromptTemplate, answer_required: bool, rows,
               subgroups: tuple[str, ...] = ()) -> Iterator[tuple[int, Instance]]:
    """(first line, instance) of every data row; every problem of a row is a ConfigError naming its line."""
    return _rows(path, template, answer_required, rows, subgroups, build=True)


def _checked_rows(path: Path, template: PromptTemplate, answer_required: bool, rows,
                  subgroups: tuple[str, ...] = ()) -> Iterator[tuple[int, str]]:
    """(first line, id) of every data row, with every check ``_instances`` makes, building nothing."""
    return _rows(path, template, answer_required, rows, subgroups, build=False)


BLANK_GROUP = BLANK_SUBGROUP  # an empty cell: its own group, "not recorded" (store/subgroups.py)


def _rows(path: Path, template: PromptTemplate, answer_required: bool, rows, subgroups: tuple[str, ...] = (), *,
          build: bool):
    header = next(rows, None)
    if header is None:
        raise ConfigError("the dataset is empty (expected a header row and at least one data row)", path=path)
    columns = _columns(header[1], path)
    _check_columns(columns, path, template, answer_required)
    for name in subgroups:  # ours (the YAML's), never a data cell
        if name not in columns:
            raise ConfigError(f"subgroup column '{escape(name, 80)}' is not in the header ({len(columns)} "
                              "column(s))", path=path, line=1, field=name)
    fields = template.fields
    width = len(columns)
    empty = True
    wrong_memo: dict[str, tuple[str, ...]] = {}
    for number, (line, row) in enumerate(rows, start=1):
        if len(row) != width:
            raise ConfigError(f"expected {width} fields (as in the header), found {len(row)}",
                              path=path, line=line)
        values = dict(zip(columns, row))
        instance_id = values[ID].strip() if ID in values else str(number)
        if not instance_id:
            raise ConfigError("empty id", path=path, line=line, field=ID)
        empty = False
        groups = {name: subgroup_label(values[name], path, line, name) for name in subgroups} \
            if subgroups else None  # checked at planning too
        if not build:
            _references(values, path, line, answer_required, wrong_memo, build=False)  # its checks only
            yield line, instance_id
            continue
        references = _references(values, path, line, answer_required, wrong_memo)
        used = {field: values[field] for field in fields}
        yield line, Instance(id=instance_id, input=template.render(used), references=references,
                             extra=FrozenMap(used), subgroups=FrozenMap(groups) if groups else EMPTY_MAP)
    if empty:
        raise ConfigError("the dataset has a header but no data rows", path=path)


MAX_LABEL = 64


def subgroup_label(cell: str, path: Path, line: int, column: str) -> str:
    """A subgroup label: a category (an age band, a sex), never free text; the cell is never echoed."""
    label = cell.strip()
    if len(label) > MAX_LABEL:
        raise ConfigError(f"subgroup column '{escape(column, 80)}' holds a value of {len(label)} characters (at most "
                          f"{MAX_LABEL}: a subgroup column holds categories such as an age band, not free text)",
                          path=path, line=line, field=column)
    return label or BLANK_GROUP


class _Rows:
    """(first line of the record, cells) of every non-blank CSV record, read from an open text stream."""

    def __init__(self, path: Path, text, signature: tuple | None = None, raw=None) -> None:
        self.path, self.signature, self._raw = path, signature, raw
        self._text = text
        self._reader = csv.reader(text)
        self._start = 1
        self._closed = False

    def __iter__(self):
        return self

    def __next__(self) -> tuple[int, list[str]]:
        reader = self._reader
        try:
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    self.close()
                    raise
                line, self._start = self._start, reader.line_num + 1
                joined = "".join(row)  # one C-level pass instead of a generator per row
                if joined and not joined.isspace():  # blank lines and all-empty spreadsheet rows are not data
                    return line, row
        except csv.Error as err:
            self.close()
            raise ConfigError(f"malformed CSV ({err})", path=self.path, line=reader.line_num) from None
        except UnicodeDecodeError:
            self.close()
            raise ConfigError("not UTF-8 text (save it as 'CSV UTF-8')", path=self.path,
                              line=_bad_line(self.path)) from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._text.close()

    def __del__(self) -> None:
        self.close()


def _file_rows(path: Path) -> _Rows:
    raw, st = files.open_regular(path, what="dataset (CSV)")
    text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline="")
    return _Rows(path, text, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def _text_rows(path: Path, data: bytes) -> _Rows:
    return _Rows(path, io.StringIO(files.decode(data, path, hint=" (save it as 'CSV UTF-8')"), newline=""))


def _bad_line(path: Path) -> int | None:
    raw, _ = files.open_regular(path, what="dataset (CSV)")
    with raw:
        return files.bad_utf8_line(iter(lambda: raw.read(1 << 20), b""))


def _columns(header: list[str], path: Path) -> list[str]:
    columns = [c.strip() for c in header]
    # Never echo a header cell: when the header row is missing, the first data row (patient text) is here.
    for i, name in enumerate(columns):
        if not name:
            raise ConfigError(f"column {i + 1} of the header has no name (is the header row missing?)", path=path,
                              line=1)
        if name in columns[:i]:
            raise ConfigError(f"columns {columns.index(name) + 1} and {i + 1} of the header have the same name "
                              "(is the header row missing?)", path=path, line=1)
    return columns


def _check_columns(columns: list[str], path: Path, template: PromptTemplate, answer_required: bool) -> None:
    # The header's cells are never echoed (a missing header row makes them patient text): the expected
    # columns (the template's placeholders: ours, not the data's) and how many the header has.
    expected = [*template.fields, *([ANSWER] if answer_required else [])]
    for field in template.fields:
        if field not in columns:
            raise ConfigError(f"placeholder {{{escape(field, 80)}}} has no column in {escape(path)} (the header has "
                              f"{len(columns)} column(s); expected: {', '.join(escape(c, 80) for c in expected[:20])}; "
                              "is the header row missing or misspelt?)",
                              path=template.path, line=template.line_of(field), field=field)
    if answer_required and ANSWER not in columns:
        raise ConfigError(f"no '{ANSWER}' column; it holds the gold answer and is required unless jury_score "
                          "is the only metric", path=path, line=1, field=ANSWER)


_WRONG_MEMO = 4096  # distinct incorrect_answers cells remembered per pass (most datasets repeat a few)


def _references(values: dict[str, str], path: Path, line: int, answer_required: bool,
                memo: dict[str, tuple[str, ...]] | None = None, *, build: bool = True) -> tuple[Reference, ...]:
    """The row's references (the gold answer, then the wrong ones); ``build=False``: the checks only (the
    plan-time pass over every row), returning ()."""
    answer = values.get(ANSWER, "")
    if answer_required and not answer.strip():
        raise ConfigError("empty gold answer", path=path, line=line, field=ANSWER)
    raw = values.get(WRONG, "").strip()
    wrong: tuple[str, ...] = ()
    if raw:
        wrong = memo.get(raw) if memo is not None else None
        if wrong is None:
            wrong = _wrong_answers(raw, path, line)
            if memo is not None and len(memo) < _WRONG_MEMO:
                memo[raw] = wrong
    if not build:
        return ()
    refs = [Reference(answer, correct=True)] if answer.strip() else []
    refs.extend(Reference(w, correct=False) for w in wrong)
    return tuple(refs)


def _wrong_answers(raw: str, path: Path, line: int) -> tuple[str, ...]:
    try:
        wrong = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"not valid JSON ({err.msg} at character {err.pos + 1}); expected a list such as "
                          '["No"] (in CSV: "[""No""]")', path=path, line=line, field=WRONG) from None
    except (RecursionError, ValueError):  # nested past the stack, or an integer of more than 4,300 digits
        raise ConfigError('not a JSON list of strings (nested too deeply or a number too long); expected a list '
                          'such as ["No"]', path=path, line=line, field=WRONG) from None
    if wrong is None:
        wrong = []
    if not isinstance(wrong, list) or not all(isinstance(w, (str, int, float)) for w in wrong):
        raise ConfigError('expected a JSON list of strings such as ["No"]', path=path, line=line, field=WRONG)
    return tuple(str(w) for w in wrong)
