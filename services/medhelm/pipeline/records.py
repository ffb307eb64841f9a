"""The run directory: durable per-instance records and everything derived from them.

Layout of ``<output>/runs/<suite>/<run name>/`` (see docs/output-format.md):

* ``run_spec.json``  the RunSpec (written once, atomically, before the first record)
* ``selection.json`` the sampled instance ids in order (positions) — fixed for the run, shared by shards
* ``instances.jsonl`` one InstanceResult per line. While a run is going, lines are appended as instances
  finish (handed to the OS once per event-loop turn, fsync'd at least every second); once finished it is
  rewritten in position order.
* ``shards/shard-<i>-of-<n>.jsonl`` the same, one file per shard of a sharded run (merged by ``collect``)
* ``retries*.jsonl`` one line per invocation (``retries.jsonl``; a shard writes ``retries-shard-<i>-of-<n>.jsonl``):
  the retried attempts of every request the run made, finished instance or not (summed into run.json)
* ``stats.json``     aggregates per stat and split (derived; rebuildable)
* ``run.json``       status and accounting (derived; rebuildable)

Records are the source of truth; a torn last line (a kill during a write) is ignored on reading.

Memory: nothing here holds a run's records, instances or ids at once, so a run of a million instances
starts, resumes and finishes in the memory of a run of a thousand. The selection is written and read as a
stream. What is kept per instance or record is a bit (``bounded.PositionSet``): resuming joins the
finished records' id digests with the selection's on disk (``medhelm.spill.Sorter``) into the set of
finished positions; finishing joins the records' digests with the selection's to find the lines outside
it and the repeated ids, sorts the kept lines' (position, ..., offset, size) on disk, and copies each
line from its file in that order while it aggregates the stats and counts. A record file written whole
by this process is finished from its writer's ``Ledger`` instead (entries kept 8,192 at a time in memory,
the rest spilled beside the records): its lines are copied in position order unparsed, and the stats were
aggregated as they were written.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import itertools
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from medhelm.errors import ConfigError
from medhelm.files import check_regular, load_json
from medhelm.pipeline.bounded import PositionSet, id_hash, positions_in
from medhelm.spill import Sorter
from medhelm.specs import InstanceResult, RunSpec, Stat, digest, loads_json, plain_json

RECORDS = "instances.jsonl"
SUPERSEDED = "superseded.jsonl"



def compat_digest(spec: RunSpec) -> str:
    """Identity of a run's records: everything but the instance count (a larger sample reuses them)."""
    d = spec.to_json()
    d.pop("max_eval_instances")
    d.pop("entry")
    return digest(d)


def write_atomic(path: Path, text: str) -> None:
    """Write-then-rename: readers see the old or the new file, never half of one. The temp name is
    unique per writer (shard pods share a volume and are all pid 1)."""
    write_atomic_lines(path, (text,))


def write_atomic_lines(path: Path, chunks: Iterable[str | bytes], *, unchanged_ok: bool = False) -> bool:
    """``write_atomic`` of text (str, written as UTF-8, or bytes) given in pieces, never all in memory. With
    ``unchanged_ok`` an identical existing file is left alone (no rename). True when the file was
    (re)written. The chunks may raise: the temporary file is removed and the old file stays."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
            f.flush()
            os.fsync(f.fileno())
        if unchanged_ok and path.is_file() and filecmp.cmp(tmp, path, shallow=False):
            Path(tmp).unlink()
            return False
        os.replace(tmp, path)
        return True
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_PLAIN_ID = re.compile(r'[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]*')  # json.dumps would not escape it


def _selection_text(instance_ids: Iterable[str]) -> Iterator[str]:
    """``_dump({"instance_ids": ids})``, piece by piece (byte for byte the same text)."""
    first = True
    plain = _PLAIN_ID.fullmatch
    for iid in instance_ids:
        yield ('{\n "instance_ids": [\n  ' if first else ',\n  ') + (
            f'"{iid}"' if plain(iid) else json.dumps(iid, ensure_ascii=False))
        first = False
    yield '{\n "instance_ids": []\n}\n' if first else "\n ]\n}\n"


_SELECTION_HEAD, _SELECTION_TAIL = b'{\n "instance_ids": [\n', b"\n ]\n}\n"


def _streamable_selection(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SELECTION_HEAD))
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - len(_SELECTION_TAIL), 0))
            return head == _SELECTION_HEAD and size > len(_SELECTION_HEAD) and f.read() == _SELECTION_TAIL
    except OSError:
        return False


def _dump(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    # --- reading -------------------------------------------------------------------------------
    def exists(self) -> bool:
        return (self.path / "run_spec.json").is_file()

    def spec(self) -> RunSpec:
        doc = self._load("run_spec.json")
        try:
            return RunSpec.from_json(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"not a MedHELM run spec ({type(e).__name__})", path=self.path / "run_spec.json") \
                from None

    def selection(self) -> list[str]:
        return list(self.iter_selection())

    def iter_selection(self) -> Iterator[str]:
        """The sampled ids in position order, read as a stream when the file has the layout we write (one
        id per line); any other JSON spelling of the same document is read whole."""
        path = self.path / "selection.json"
        if not _streamable_selection(path):
            yield from self._load("selection.json")["instance_ids"]  # type: ignore[index]
            return
        plain = _PLAIN_ID.fullmatch
        with open(path, encoding="utf-8") as f:
            f.readline()
            f.readline()
            for lineno, line in enumerate(f, 3):
                if line == " ]\n":
                    return
                text = line[:-2] if line.endswith(",\n") else line.removesuffix("\n")
                if len(text) > 3 and text[:3] == '  "' and text[-1] == '"' and plain(text, 3, len(text) - 1):
                    yield text[3:-1]  # what _selection_text writes unescaped: no parse needed
                    continue
                try:
                    iid = json.loads(text)
                except ValueError:
                    raise ConfigError("corrupt JSON (an instance id)", path=path, line=lineno) from None
                if not isinstance(iid, str):
                    raise ConfigError("an instance id is not text", path=path, line=lineno)
                yield iid

    def status(self) -> dict:
        p = self.path / "run.json"
        if not p.exists():
            return {"status": "partial"}
        doc = load_json(p)
        if not isinstance(doc, dict):
            raise ConfigError("expected a JSON object (the run's status)", path=p)
        return doc

    def stats(self) -> list[Stat]:
        doc = self._load("stats.json")
        try:
            return [Stat.from_json(s) for s in doc]  # type: ignore[union-attr]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"not a list of stats ({type(e).__name__})", path=self.path / "stats.json") from None

    def record_files(self) -> list[Path]:
        files = [self.path / RECORDS] if (self.path / RECORDS).is_file() else []
        shards = self.path / "shards"
        if shards.is_dir():
            files += sorted(shards.glob("shard-*.jsonl"))
        return files

    def iter_records(self) -> Iterator[InstanceResult]:
        """Every record line of the run (all files; a torn last line is skipped). Streams."""
        for f in self.record_files():
            yield from read_records(f)

    def latest_records(self) -> dict[str, InstanceResult]:
        """One record per instance id: the last written, preferring a success over an error."""
        out: dict[str, InstanceResult] = {}
        for rec in self.iter_records():
            prev = out.get(rec.instance.id)
            if prev is None or rec.error is None or prev.error is not None:
                out[rec.instance.id] = rec
        return out

    def _load(self, name: str) -> object:
        return load_json(self.path / name, missing="missing (not a finished run directory?)")

    # --- starting / resuming -----------------------------------------------------------------
    def prepare(self, spec: RunSpec, instance_ids: Iterable[str]) -> None:
        """Create or re-open the run directory for ``spec``; ``instance_ids`` (the sample, in position order)
        is streamed into selection.json.

        Records from a run with different settings are moved to ``superseded.jsonl`` (never deleted)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if self.exists():
            old = self.spec()
            if compat_digest(old) != compat_digest(spec):
                self._supersede_all()
                for f in self.path.glob("retries*.jsonl"):  # they counted the superseded records' requests
                    f.unlink()
            (self.path / "run.json").unlink(missing_ok=True)  # no longer complete until finalized
        write_atomic(self.path / "run_spec.json", _dump(spec.to_json()))
        write_atomic_lines(self.path / "selection.json", _selection_text(instance_ids), unchanged_ok=True)

    def _supersede_all(self) -> None:
        """Move every record line to superseded.jsonl (appended, fsync'd), then empty the record files."""
        files = self.record_files()
        if not any(True for _ in self._record_lines()):
            return
        with open(self.path / SUPERSEDED, "a", encoding="utf-8") as f:
            for line, _ in self._record_lines():
                f.write(line)
            f.flush()
            os.fsync(f.fileno())
        write_atomic(self.path / RECORDS, "")
        for shard in files:
            if shard.parent.name == "shards":
                shard.unlink()

    def finished_positions(self) -> PositionSet:
        """The positions of the selection whose instance has a successful record (what a resumed run skips),
        a bit each: the records' and the selection's id digests are sorted on disk beside the records and
        joined (``bounded.positions_in``), never held."""
        with Sorter("q", self.path) as done:
            done.extend(id_hash(head.id) for head in self._record_heads() if head.ok)
            if not done.count:
                return PositionSet()
            with Sorter("qq", self.path) as selection:
                selection.extend((id_hash(iid), position) for position, iid in enumerate(self.iter_selection()))
                return positions_in(selection, done)

    def first_error(self) -> str:
        """The error of the first record (in file order) that has one; "" when none has."""
        for _, d in self._record_lines():
            if d.get("error"):
                return str(d["error"])
        return ""

    def _record_lines(self) -> Iterator[tuple[str, dict]]:
        """(line with its newline, parsed JSON object) of every record line of every record file."""
        for path in self.record_files():
            yield from record_lines(path)

    def _record_heads(self, files: list[tuple[Path, int]] | None = None) -> Iterator[RecordHead]:
        """What finishing and resuming need of every record line (id, position, success, where it is),
        without parsing whole lines that have the layout we write. ``files``: (path, bytes to read)."""
        for number, (path, size) in enumerate(files or [(f, None) for f in self.record_files()]):
            yield from record_heads(path, number, size)

    def add_retries(self, retries: int, judge_retries: int, *, shard: tuple[int, int] | None = None) -> None:
        """Append one invocation's retry counts (one file per shard: shards share the volume, not the file)."""
        name = "retries.jsonl" if shard is None else f"retries-shard-{shard[0]:05d}-of-{shard[1]:05d}.jsonl"
        with open(self.path / name, "a", encoding="utf-8") as f:
            f.write(json.dumps({"retries": retries, "judge_retries": judge_retries}) + "\n")

    def retry_counts(self) -> tuple[int, int] | None:
        """(retries, judge_retries) of every invocation so far; None for a run directory from before they were kept."""
        files = sorted(self.path.glob("retries*.jsonl"))
        if not files:
            return None
        own = judges = 0
        for f in files:
            for line in f.read_text(encoding="utf-8").splitlines():
                try:
                    d = json.loads(line)
                    own, judges = own + int(d.get("retries", 0)), judges + int(d.get("judge_retries", 0))
                except (ValueError, TypeError, AttributeError):
                    continue  # a torn line from a killed process: those retries are not known
        return own, judges

    def writer(self, shard: tuple[int, int] | None = None) -> RecordWriter:
        if shard is None:
            return RecordWriter(self.path / RECORDS)
        index, count = shard
        (self.path / "shards").mkdir(exist_ok=True)
        # a shard's lines are merged by `collect` (the general path): its writer keeps no ledger
        return RecordWriter(self.path / "shards" / f"shard-{index:05d}-of-{count:05d}.jsonl", keep_ledger=False)

    # --- finishing ----------------------------------------------------------------------------
    def finalize(self, *, extra_status: dict | None = None, ledger: Ledger | None = None,
                 total: int | None = None) -> dict:
        """Merge all record files in position order, derive stats.json and run.json. Idempotent.

        One record per instance id (the last written, preferring a success over an error); records of ids
        outside the selection (a smaller sample than before) are moved to superseded.jsonl, never deleted.
        Streams, in the memory of a small run whatever the number of records (``_choose``): two passes
        over the record files' heads, a sort of the kept lines' positions and offsets on disk, and one read
        of each kept line, in position order.

        ``ledger`` (of the writer that wrote the whole record file in this process) and ``total`` (the
        selection's size): when the file is exactly what the ledger says, one record per position, its
        lines are copied in position order without being parsed and the ledger's stats and counts are
        used: the same files as the general path (tests/core/test_finish_fast.py), for a fraction of the
        CPU. Anything else (a resumed run, shards, another writer's lines) takes the general path."""
        spec = self.spec()
        if ledger is not None and total is not None and self._finish_from_ledger(ledger, total):
            return self._write_derived(spec, ledger.agg, ledger.counts, total, extra_status)
        files = self.record_files()
        with contextlib.ExitStack() as stack:
            # the files' lines as they are now (a line appended from here on is not finishing's to judge)
            files = [(f, f.stat().st_size) for f in files]
            total, unwanted, dropped, firsts = self._choose(stack, files)
            superseded = None

            def kept() -> Iterator[tuple[int, int, int, int, int, int]]:
                nonlocal superseded
                chosen_first = iter(firsts)
                pick = next(chosen_first, None)
                for seq, head in enumerate(self._record_heads(files)):
                    if seq in unwanted:
                        if superseded is None:
                            superseded = stack.enter_context(open(self.path / SUPERSEDED, "a", encoding="utf-8"))
                        superseded.write(head.line)
                        continue
                    if seq in dropped:
                        continue
                    first = seq
                    if pick is not None and pick[0] == seq:
                        first = pick[1]
                        pick = next(chosen_first, None)
                    yield head.position, first, head.file, head.lineno, head.offset, head.size

            order = stack.enter_context(Sorter("qqqqQQ", self.path))  # position, first, file, line, offset, size
            order.extend(kept())
            if superseded is not None:  # durable before the new record file replaces the old one
                superseded.flush()
                os.fsync(superseded.fileno())
            agg = Aggregator()
            counts = StatusCounts()
            reader = stack.enter_context(_LineReader([f for f, _ in files]))

            def ordered() -> Iterator[bytes]:
                for _, _, file, lineno, offset, size in order:
                    line = reader.read(file, offset, size)
                    try:
                        d = loads_json(line)
                        agg.add(scored_row_json(d))
                        counts.add(d)
                    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
                        raise ConfigError(f"corrupt record line ({type(e).__name__})", path=files[file][0],
                                          line=lineno) from None
                    yield line

            write_atomic_lines(self.path / RECORDS, ordered())
        shards = self.path / "shards"
        if shards.is_dir():
            for f in shards.glob("shard-*.jsonl"):
                f.unlink()
            shards.rmdir()
        return self._write_derived(spec, agg, counts, total, extra_status)

    def _choose(self, stack: contextlib.ExitStack,
                files: list[tuple[Path, int]]) -> tuple[int, PositionSet, PositionSet, Sorter]:
        """Which record lines finishing keeps, by sequence number (the lines of ``files``, each read up to
        its given size, in order): (the selection's size, the lines whose id is outside the selection, the
        lines of a repeated id that lose to another line of it, (kept seq, seq of its id's first line) of
        each repeated id).

        The rule: one line per id, the last written preferring a success over an error. The selection's
        id digests and the records' (digest, seq, ok) are sorted on disk and merged, so only a bit per
        line is held."""
        wanted = stack.enter_context(Sorter("q", self.path))
        wanted.extend(id_hash(iid) for iid in self.iter_selection())
        total = wanted.count
        heads = stack.enter_context(Sorter("qqb", self.path))
        heads.extend((id_hash(head.id), seq, head.ok) for seq, head in enumerate(self._record_heads(files)))
        unwanted, dropped = PositionSet(), PositionSet()
        firsts = stack.enter_context(Sorter("qq", self.path))
        selected = iter(wanted)
        want = next(selected, None)
        for key, group in itertools.groupby(heads, key=_first):
            while want is not None and want < key:
                want = next(selected, None)
            if want != key:
                for _, seq, _ in group:
                    unwanted.add(seq)
                continue
            lines = list(group)  # in seq order: every line of one id
            if len(lines) == 1:
                continue
            kept = next((seq for _, seq, ok in reversed(lines) if ok), lines[-1][1])
            for _, seq, _ in lines:
                if seq != kept:
                    dropped.add(seq)
            if kept != lines[0][1]:
                firsts.add(kept, lines[0][1])
        return total, unwanted, dropped, firsts

    def _write_derived(self, spec: RunSpec, agg: Aggregator, counts: StatusCounts, total: int,
                       extra_status: dict | None) -> dict:
        write_atomic(self.path / "stats.json", _dump([s.to_json() for s in agg.stats()]))
        status = counts.status(spec, total)
        counted = self.retry_counts()
        if counted is not None:  # every retry of every invocation, not only the finished records' attempts
            status["retries"], status["judge_retries"] = counted
        status.update(extra_status or {})
        write_atomic(self.path / "run.json", _dump(status))
        return status

    def _finish_from_ledger(self, ledger: Ledger, total: int) -> bool:
        """Rewrite instances.jsonl in position order from the ledger; False (nothing done) when the record
        files are not exactly what the ledger describes (one line per position, every position known)."""
        path = self.path / RECORDS
        if self.record_files() != [path] or path.stat().st_size != ledger.bytes or ledger.count > total:
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            def ordered() -> Iterator[bytes]:
                previous, seen = -1, 0
                group: list[tuple[int, int]] = []
                group_bytes = 0
                for position, offset, size in ledger.entries():
                    if position <= previous or position >= total:  # a repeat, or outside the selection
                        raise _NotTheLedgersFile
                    previous, seen = position, seen + 1
                    group.append((offset, size))
                    group_bytes += size
                    if len(group) >= _GROUP_LINES or group_bytes >= _GROUP_BYTES:
                        yield _read_group(fd, group, group_bytes)
                        group, group_bytes = [], 0
                if seen != ledger.count:
                    raise _NotTheLedgersFile
                if group:
                    yield _read_group(fd, group, group_bytes)
            write_atomic_lines(path, ordered())  # removes its temporary file when ordered() gives up
        except _NotTheLedgersFile:
            return False
        finally:
            os.close(fd)
            ledger.close()
        return True


# Finishing from the ledger reads and writes the lines a group at a time: up to _GROUP_LINES consecutive
# positions (at most _GROUP_BYTES). The lines were appended in completion order, which is position order give
# or take the requests in flight, so a group's lines usually lie together in the file: they are read by one
# pread of the span they cover when that span is at most twice their size, else one by one (a shuffled
# file: a slow server's replies come back in any order). No read is ever more than twice the lines it gets.
_GROUP_LINES, _GROUP_BYTES = 256, 1 << 20


def _read_group(fd: int, group: list[tuple[int, int]], size: int) -> bytes:
    """The lines at ``group``'s (offset, size), in that order, joined; _NotTheLedgersFile if the file is shorter."""
    low = min(offset for offset, _ in group)
    high = max(offset + n for offset, n in group)
    if high - low <= 2 * size:
        span = os.pread(fd, high - low, low)
        lines = [span[offset - low:offset - low + n] for offset, n in group]
    else:
        lines = [os.pread(fd, n, offset) for offset, n in group]
    if any(len(line) != n for line, (_, n) in zip(lines, group)):  # the file ends early: not the ledger's
        raise _NotTheLedgersFile
    return b"".join(lines)


class _NotTheLedgersFile(Exception):
    pass


class _LineReader:
    """Reads lines of record files by (file index, offset, size): a descriptor per file, at most ``OPEN`` open
    at a time (a run of many shards reads them round-robin; the least recently opened is closed first)."""

    OPEN = 64

    def __init__(self, files: list[Path]) -> None:
        self._files = files
        self._fds: dict[int, int] = {}

    def read(self, file: int, offset: int, size: int) -> bytes:
        fd = self._fds.get(file)
        if fd is None:
            if len(self._fds) >= self.OPEN:
                os.close(self._fds.pop(next(iter(self._fds))))
            fd = self._fds[file] = os.open(self._files[file], os.O_RDONLY)
        data = os.pread(fd, size, offset)
        if len(data) != size:  # the file shrank under us: not the lines we sorted
            raise ConfigError("records file changed while the run was being finished", path=self._files[file])
        return data

    def __enter__(self) -> _LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _first(row: tuple) -> object:
    return row[0]


def _bad_record(e: Exception, path: Path, lineno: int) -> ConfigError:
    what = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"corrupt record line ({type(e).__name__})"
    return ConfigError(what, path=path, line=lineno or None)


def record_lines(path: Path) -> Iterator[tuple[str, dict]]:
    """(line, parsed object) of each whole record line of ``path`` (a torn last line is skipped); a line that
    is not a record is a ConfigError naming the file and line."""
    check_regular(path, what="records file (JSON lines)")
    with open(path, encoding="utf-8") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):  # noqa: B007 - lineno is used in the error
                if not line.endswith("\n"):
                    return  # torn final line from an interrupted write: not a finished record
                if line.strip():
                    d = json.loads(line)
                    if not isinstance(d, dict) or not isinstance(d["instance"]["id"], str) \
                            or not isinstance(d.get("position", 0), int):
                        raise TypeError("not a record")
                    yield line, d
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # incl. UnicodeDecodeError
            raise _bad_record(e, path, lineno) from None


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
    check_regular(path, what="records file (JSON lines)")
    with open(path, encoding="utf-8") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):  # noqa: B007 - lineno is used in the error
                if not line.endswith("\n"):
                    return  # torn final line from an interrupted write: not a finished record
                line = line.strip()
                if line:
                    yield InstanceResult.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # incl. UnicodeDecodeError
            raise _bad_record(e, path, lineno) from None


class Ledger:
    """What a writer that started its record file knows of every line it wrote, so finishing need not read
    them back: each line's position, offset and size, and the stats and counts aggregated as the lines were
    written, by the same functions finishing applies to the lines it reads (``scored_row_json``,
    ``StatusCounts.add``) on the same JSON objects.

    Bounded: entries are kept ``CHUNK`` at a time; a full chunk is sorted by position and spilled to one
    unlinked temporary file beside the records (20 bytes an entry on disk, ``medhelm.spill``), and
    ``entries`` merges the chunks. A spill that fails (disk full) raises OSError: the writer then drops its ledger."""

    CHUNK = 8192  # entries sorted in memory at a time (spill.CHUNK: a larger chunk grows the heap for good)
    __slots__ = ("_entries", "bytes", "count", "agg", "counts")

    def __init__(self, spill_dir: Path) -> None:
        self._entries = Sorter("qQI", spill_dir, chunk=self.CHUNK)  # position, offset, size
        self.bytes = self.count = 0
        self.agg = Aggregator()
        self.counts = StatusCounts()

    def add(self, position: int, size: int, d: Mapping) -> None:
        self._entries.add(position, self.bytes, size)  # OverflowError beyond 4 GiB a line: the writer drops the ledger
        self.bytes += size
        self.count += 1
        self.agg.add(scored_row_json(d))
        self.counts.add(d)

    def entries(self) -> Iterator[tuple[int, int, int]]:
        """(position, offset, size) of every line, in position order."""
        return iter(self._entries)

    def close(self) -> None:
        self._entries.close()


@dataclass
class RecordWriter:
    """Appends one line per finished instance; handed to the OS once per event-loop turn, fsync'd at least
    every ``sync_every_s``.

    Durability: ``write`` queues the line, and the lines queued during one turn of the running event loop
    are written by one ``write(2)`` at the start of the next turn (``call_soon``), whole lines only, before
    any further reply is read. So a ``kill -9`` loses only instances whose answer arrived in the turn it
    struck, i.e. instances still in flight; every line handed over survives it (and a node crash once
    fsync'd). Without a running loop (tools, tests) each line is written at once. A write that fails (disk
    full, read-only folder) drops the unwritten lines, cuts any partly written last line (every whole one is
    kept) and is raised by the next ``write`` or by ``close``. One write a turn instead of one a record:
    each syscall releases the GIL, and the request cache's commit thread then held it (~10 us a record).

    A writer that finds its file empty keeps a ``Ledger`` of what it writes (``RunDir.finalize`` then
    orders the lines without parsing them); one that appends to earlier records (a resumed run) does not."""

    path: Path
    sync_every_s: float = 1.0
    keep_ledger: bool = True
    _file: BinaryIO = field(init=False, repr=False)
    _last_sync: float = field(init=False, default=0.0)
    ledger: Ledger | None = field(init=False, default=None)
    _queued: list[bytes] = field(init=False, default_factory=list)  # lines of this loop turn
    _failed: OSError | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._repair_torn_tail()
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()/_abandon()
        self._last_sync = time.monotonic()
        if self.keep_ledger and self._file.tell() == 0:
            self.ledger = Ledger(self.path.parent)

    def _repair_torn_tail(self) -> None:
        # A kill mid-write can leave a partial last line; cut it so the next append starts clean.
        if not self.path.is_file():
            return
        with open(self.path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)

    def write(self, record: InstanceResult) -> None:
        if self._failed is not None:
            raise self._failed
        d = record.to_json()
        data = (plain_json(d) + "\n").encode("utf-8")
        queued = self._queued
        queued.append(data)
        if len(queued) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._flush_queued)
            except RuntimeError:  # no running loop: at once
                self._flush_queued()
                if self._failed is not None:
                    raise self._failed
        if self.ledger is not None:
            try:
                self.ledger.add(record.position, len(data), d)
            except (OverflowError, OSError):  # a line over 4 GiB, a spill on a full disk
                self._drop_ledger()  # finishing takes the general path

    def _flush_queued(self) -> None:
        """Write the queued lines (one call), fsync if ``sync_every_s`` is over; a failure is kept for the
        next ``write``/``close`` to raise (this runs as a loop callback, where raising would be lost)."""
        queued = self._queued
        if not queued or self._failed is not None or self._file.closed:
            return
        data = queued[0] if len(queued) == 1 else b"".join(queued)
        queued.clear()
        f = self._file
        try:
            f.write(data)
            f.flush()  # in the OS from here on: survives kill -9
            now = time.monotonic()
            if now - self._last_sync >= self.sync_every_s:
                os.fsync(f.fileno())  # on disk: survives a node crash
                self._last_sync = now
        except OSError as err:
            self._failed = err
            self._abandon()  # disk full / read-only: drop the unwritten lines, keep every whole one

    def _drop_ledger(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None

    def _abandon(self) -> None:
        self._queued.clear()
        self._drop_ledger()  # the file may now hold less than the ledger says
        with contextlib.suppress(OSError):
            self._file.close()  # closes the descriptor even when flushing the rest fails
        with contextlib.suppress(OSError):
            self._repair_torn_tail()  # cut a partly written last line (truncating frees space)

    def close(self) -> None:
        self._flush_queued()
        if self._failed is not None:
            raise self._failed
        f = self._file
        if not f.closed:
            try:
                f.flush()
                os.fsync(f.fileno())
                f.close()
            except OSError:
                self._abandon()
                raise


def collect_shards(run_dir: Path) -> dict:
    """Merge a sharded run's shard files into the finished run (``medhelm collect``)."""
    return RunDir(run_dir).finalize()


# ------------------------------------------------------------------------------------------------
# aggregation


def instance_stats(record: InstanceResult) -> dict[str, float | None]:
    """Metric stats plus efficiency stats of one record."""
    out: dict[str, float | None] = dict(record.stats)
    if record.completion is not None:
        u = record.completion.usage
        out["num_prompt_tokens"] = u.prompt_tokens
        out["num_completion_tokens"] = u.completion_tokens
        if u.reasoning_tokens is not None:  # a reasoning model's thinking, of num_completion_tokens
            out["num_reasoning_tokens"] = u.reasoning_tokens
        out["inference_runtime"] = u.latency_s if not u.cached else None
    out["prompt_truncated"] = 1.0 if record.prompt.truncated else 0.0
    if record.judgements:
        out["judge_prompt_tokens"] = record.judge_usage.prompt_tokens
        out["judge_completion_tokens"] = record.judge_usage.completion_tokens
    return out


def aggregate(records: Iterable[InstanceResult]) -> list[Stat]:
    return aggregate_rows(scored_row(rec) for rec in records)


def scored_row(rec: InstanceResult) -> tuple[str, Mapping[str, float | None]] | None:
    """What aggregation needs of one record: its split and per-instance stats (None: has no scores)."""
    if rec.error is not None and rec.completion is None:
        return None  # counted in run.json errors; has no scores
    return rec.instance.split, instance_stats(rec)


def aggregate_rows(rows: Iterable[tuple[str, Mapping[str, float | None]] | None]) -> list[Stat]:
    """``aggregate`` over ``scored_row`` values (a service keeps only these, not whole records)."""
    agg = Aggregator()
    for row in rows:
        agg.add(row)
    return agg.stats()


class Aggregator:
    """Running count, sum, sum of squares, min, max and unscored per (stat, split): add rows as they come.

    Sums are exact, so they do not depend on the order the rows come in (a run finished from its writer's
    ledger adds them in completion order, the general path in position order, shards in any order):
    integral values are summed as integers, others as Shewchuk's non-overlapping partials (``_msum``), and
    the result is rounded once (``math.fsum``)."""

    __slots__ = ("_acc",)

    def __init__(self) -> None:
        # [count, int sum, int sum_sq, float partials, float partials of squares, min, max, unscored, nonfinite]
        self._acc: dict[tuple[str, str], list] = {}

    def add(self, row: tuple[str, Mapping[str, float | None]] | None) -> None:
        if row is None:
            return
        split, stats = row
        acc = self._acc
        for name, value in stats.items():
            a = acc.get((name, split))
            if a is None:
                a = acc[(name, split)] = [0, 0, 0, [], [], float("inf"), float("-inf"), 0, 0.0]
            if value is None:
                a[7] += 1
                continue
            v = float(value)
            a[0] += 1
            if v.is_integer():
                i = int(v)
                a[1] += i
                a[2] += i * i
            elif v == v and v not in (_INF, -_INF):
                _msum(a[3], v)
                _msum(a[4], v * v)
            else:  # inf / nan: plain float arithmetic, as before
                a[8] += v
            if v < a[5]:
                a[5] = v
            if v > a[6]:
                a[6] = v

    def stats(self) -> list[Stat]:
        return [Stat(name=n, split=s, count=int(a[0]), sum=_exact(a[1], a[3], a[8]),
                     sum_squared=_exact(a[2], a[4], a[8] * a[8] if a[8] else 0.0),
                     min=a[5] if a[0] else None, max=a[6] if a[0] else None, unscored=int(a[7]))
                for (n, s), a in sorted(self._acc.items())]


_INF = float("inf")


def _msum(partials: list[float], x: float) -> None:
    """Add ``x`` to ``partials`` exactly (Shewchuk; the recipe behind ``math.fsum``)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


def _exact(whole: int, partials: list[float], nonfinite: float) -> float:
    total = math.fsum([*partials, whole]) if partials else float(whole)
    return total + nonfinite if nonfinite else total


def scored_row_json(d: Mapping) -> tuple[str, dict[str, float | None]] | None:
    """``scored_row`` of a record's JSON object, without building the InstanceResult (the same values)."""
    completion = d.get("completion")
    if d.get("error") is not None and not completion:
        return None
    out: dict[str, float | None] = dict(d.get("stats") or {})
    if completion:
        u = completion.get("usage") or {}
        out["num_prompt_tokens"] = u.get("prompt_tokens")
        out["num_completion_tokens"] = u.get("completion_tokens")
        if u.get("reasoning_tokens") is not None:
            out["num_reasoning_tokens"] = u["reasoning_tokens"]
        out["inference_runtime"] = u.get("latency_s", 0.0) if not u.get("cached", False) else None
    out["prompt_truncated"] = 1.0 if d["prompt"].get("truncated", False) else 0.0
    if d.get("judgements"):
        ju = d.get("judge_usage") or {}
        out["judge_prompt_tokens"] = ju.get("prompt_tokens")
        out["judge_completion_tokens"] = ju.get("completion_tokens")
    return d["instance"].get("split", "test"), out


class StatusCounts:
    """run.json's counts, added record by record (a record's JSON object)."""

    __slots__ = ("done", "errors", "requests", "cache_hits", "retries")

    def __init__(self) -> None:
        self.done = self.errors = self.requests = self.cache_hits = self.retries = 0

    def add(self, d: Mapping) -> None:
        self.done += 1
        if d.get("error") is not None:
            self.errors += 1
        completion = d.get("completion")
        if completion:
            u = completion.get("usage") or {}
            if u.get("cached", False):
                self.cache_hits += 1
            else:
                self.requests += 1
            self.retries += max(u.get("attempts", 1) - 1, 0)

    def status(self, spec: RunSpec, total: int) -> dict:
        done, errors = self.done, self.errors
        # Every instance answered with an error (e.g. each prompt over the server's context limit): the run
        # did not evaluate the model, so it is "failed", never "complete" (its records say why, per instance).
        state = "partial" if done < total else ("failed" if total and errors == done else "complete")
        return {
            "status": state,
            "run": spec.name,
            "digest": spec.digest(),
            "compat_digest": compat_digest(spec),
            "benchmark": spec.benchmark.name,
            "model": spec.model,
            "deployment": spec.deployment,
            "instances_total": total,
            "instances_done": done,
            "errors": errors,
            "requests": self.requests,
            "cache_hits": self.cache_hits,
            "retries": self.retries,
        }


def run_status(spec: RunSpec, records: Iterable[InstanceResult], total: int) -> dict:
    counts = StatusCounts()
    for r in records:
        counts.add(r.to_json())
    return counts.status(spec, total)
