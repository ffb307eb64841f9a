"""The ONE reader of record lines (``instances.jsonl``, shard files): every part reads them through here.

The torn-tail rule: a last line without its newline is a write a kill interrupted, never a record; it is
skipped (and a writer cuts it before appending). Four ways to read, one rule:

* ``record_lines``  (line, parsed object) — finishing's and superseding's view
* ``record_heads``  id, position, success and where each line is, without parsing lines we wrote (``_HEAD``)
* ``read_records``  InstanceResult objects
* ``raw_lines``     (line number, line) unparsed, up to a count of lines — the store's fast mode
  (``summarize`` parses each line once itself, with orjson)

Failure semantics: a line that is not a record (or not UTF-8) is a one-line ConfigError naming the file and
line, never its text (it may be patient text); a file that is not a regular file is a ConfigError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from medhelm.errors import ConfigError
from medhelm.files import check_regular
from medhelm.records import InstanceResult


def _bad_record(e: Exception, path: Path, lineno: int) -> ConfigError:
    what = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"corrupt record line ({type(e).__name__})"
    return ConfigError(what, path=path, line=lineno or None)


def record_lines(path: Path) -> Iterator[tuple[str, dict]]:
    """(line, parsed object) of each whole record line of ``path`` (a torn last line is skipped); a line that
    is not a record is a ConfigError naming the file and line."""
    for lineno, line in raw_lines(path):
        try:
            d = json.loads(line)
            if not isinstance(d, dict) or not isinstance(d["instance"]["id"], str) \
                    or not isinstance(d.get("position", 0), int):
                raise TypeError("not a record")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise _bad_record(e, path, lineno) from None
        yield line, d


@dataclass(frozen=True, slots=True)
class RecordHead:
    line: str  # with its newline
    id: str
    position: int
    ok: bool  # no error
    file: int  # which record file (index in RunDir.record_files())
    lineno: int
    offset: int  # of the line in its file, in bytes
    size: int  # of the line with its newline, in bytes


# The start of a record line as RecordWriter writes it (json.dumps of InstanceResult.to_json(): run, position,
# instance.id first; error last): read without parsing the line. Any other spelling is parsed whole.
_HEAD = re.compile(r'\{"run": "(?:[^"\\]|\\.)*", "position": (\d+), "instance": \{"id": ("(?:[^"\\]|\\.)*")')
_NO_ERROR = ', "error": null}\n'
_MAX_POSITION = 2**63 - 1  # positions are sorted as 64-bit integers on disk (spill.Sorter)


def record_heads(path: Path, file: int = 0, size: int | None = None) -> Iterator[RecordHead]:
    """The head of every whole line of ``path`` (of its first ``size`` bytes when given)."""
    check_regular(path, what="records file (JSON lines)")
    match = _HEAD.match
    with open(path, "rb") as f:
        lineno = offset = 0
        try:
            for lineno, raw in enumerate(f, 1):  # noqa: B007 - lineno is used in the error
                if not raw.endswith(b"\n") or (size is not None and offset + len(raw) > size):
                    return  # torn final line from an interrupted write: not a finished record
                line = raw.decode("utf-8")
                m = match(line)
                if m is not None and (line.endswith(_NO_ERROR) or line.endswith('"}\n')):
                    literal = m.group(2)
                    iid = literal[1:-1] if "\\" not in literal else json.loads(literal)
                    position = int(m.group(1))
                    if position > _MAX_POSITION:
                        raise TypeError("not a record")
                    yield RecordHead(line, iid, position, line.endswith(_NO_ERROR), file, lineno, offset, len(raw))
                elif line.strip():
                    d = json.loads(line)
                    iid, position = d["instance"]["id"], d.get("position", 0)
                    if not isinstance(iid, str) or not isinstance(position, int) or abs(position) > _MAX_POSITION:
                        raise TypeError("not a record")
                    yield RecordHead(line, iid, position, d.get("error") is None, file, lineno, offset, len(raw))
                offset += len(raw)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # incl. UnicodeDecodeError
            raise _bad_record(e, path, lineno) from None


def read_records(path: Path) -> Iterator[InstanceResult]:
    """Each whole record line of ``path`` as an InstanceResult (a torn last line is skipped)."""
    for lineno, line in raw_lines(path):
        try:
            yield InstanceResult.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise _bad_record(e, path, lineno) from None


def raw_lines(path: Path, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, line with its newline) of each whole, non-blank line of ``path``, unparsed: at most
    ``limit`` lines (run.json's ``instances_done``: a run resumed while this reads appends after them). The
    torn-tail rule lives here; every text-mode reader above is built on it (``record_heads`` applies the same
    rule to bytes, as it needs their offsets)."""
    check_regular(path, what="records file (JSON lines)")
    left = -1 if limit is None else limit
    with open(path, encoding="utf-8") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):  # noqa: B007 - lineno is used in the error
                if line.isspace():
                    continue
                if not left or not line.endswith("\n"):
                    return  # past the finished run, or a torn line being written right now
                left -= 1
                yield lineno, line
        except UnicodeDecodeError:
            raise ConfigError("not UTF-8 text", path=path, line=lineno + 1) from None
