"""``RunDir``: a run folder (layout: ``layout.py``) read, prepared and written through one object.

Memory: nothing here holds a run's records, instances or ids at once: the selection is written and read as a
stream, records are read a line at a time (``lines.py``).

Failure semantics: a file that is missing, not JSON or not of the expected shape is a one-line ConfigError
naming it (never a value from it: it may be instance text); ``prepare`` moves records of other settings to
``superseded.jsonl`` (appended and fsync'd before the record files are emptied), never deletes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from medhelm.errors import ConfigError
from medhelm.files import load_json
from medhelm.rundir.layout import (PLAIN_ID, RECORDS, SHARDS, STATS, SUPERSEDED, access_file, compat_digest, dump_json,
                                   retries_file,
                                   selection_text, shard_file, streamable_selection, write_atomic,
                                   write_atomic_lines)
from medhelm.rundir.lines import RecordHead, read_records, record_heads, record_lines
from medhelm.rundir.writer import RecordWriter, Tally
from medhelm.records import InstanceResult, Stat
from medhelm.specs import RunSpec


# what an invocation's access record holds (``RunDir.add_access``); nothing in it comes from an instance
ACCESS_FIELDS = ("invocation", "open", "kind", "endpoint", "served_model", "model_file", "engine", "answered_models",
                 "first_request", "last_request", "requests")


def _utc(value: object) -> datetime | None:
    """An access time (ISO 8601 with its zone) in UTC; None for anything else (a time without a zone is not one)."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(timezone.utc) if moment.tzinfo is not None else None


class RunDir:
    """One run folder: what is in it (read), starting or resuming it (``prepare``), its writers and retry
    counts. Finishing it (merge, order, derive stats.json and run.json) is the pipeline's (``pipeline/finish.py``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    # --- reading -------------------------------------------------------------------------------
    def exists(self) -> bool:
        return (self.path / "run_spec.json").is_file()

    def spec_doc(self) -> object:
        """run_spec.json as JSON (the store keeps it as written)."""
        return self._load("run_spec.json")

    def spec(self) -> RunSpec:
        doc = self.spec_doc()
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
        if not streamable_selection(path):
            yield from self._load("selection.json")["instance_ids"]  # type: ignore[index]
            return
        plain = PLAIN_ID.fullmatch
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

    def has_stats(self) -> bool:
        """stats.json is there (the run was finished at least once)."""
        return (self.path / STATS).is_file()

    def stats(self) -> list[Stat]:
        doc = self._load("stats.json")
        try:
            return [Stat.from_json(s) for s in doc]  # type: ignore[union-attr]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"expected a list of stats ({type(e).__name__})", path=self.path / "stats.json") from None

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
                # they counted (and timed) the superseded records' requests
                for f in [*self.path.glob("retries*.jsonl"), *self.path.glob("access*.jsonl")]:
                    f.unlink()
            (self.path / "run.json").unlink(missing_ok=True)  # no longer complete until finalized
        write_atomic(self.path / "run_spec.json", dump_json(spec.to_json()))
        write_atomic_lines(self.path / "selection.json", selection_text(instance_ids), unchanged_ok=True)

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

    def record_heads(self, files: list[tuple[Path, int]] | None = None) -> Iterator[RecordHead]:
        """What finishing and resuming need of every record line (id, position, success, where it is),
        without parsing whole lines that have the layout we write. ``files``: (path, bytes to read)."""
        for number, (path, size) in enumerate(files or [(f, None) for f in self.record_files()]):
            yield from record_heads(path, number, size)

    def add_retries(self, retries: int, judge_retries: int, *, shard: tuple[int, int] | None = None) -> None:
        """Append one invocation's retry counts (one file per shard: shards share the volume, not the file)."""
        with open(self.path / retries_file(shard), "a", encoding="utf-8") as f:
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

    def add_access(self, access: dict, *, shard: tuple[int, int] | None = None) -> None:
        """Append an access record of one invocation (``ACCESS_FIELDS``: where the evaluated deployment was
        asked, when its first and last request were, in UTC; one file per shard). An invocation writes one line
        with ``open`` when its first request is sent and one when it ends, both with its ``invocation`` id."""
        line = {k: access.get(k) for k in ACCESS_FIELDS if access.get(k) not in (None, "", [])}
        with open(self.path / access_file(shard), "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")

    def access(self) -> dict | None:
        """Every invocation's access records as one (run.json's ``access``): the window from the earliest first
        request to the latest last request (a resumed run widens it), requests summed, the models the server
        said answered united; a field whose invocations disagree lists each value once, in order.
        ``interrupted``: invocations that sent a request but never wrote their closing line (killed outright):
        their last request is not known, so the window may end later than it says. None when the run folder
        records none (made before they were kept)."""
        files = sorted(self.path.glob("access*.jsonl"))
        if not files:
            return None
        opened: set[str] = set()
        closed: set[str] = set()
        merged: dict = {"invocations": 0, "requests": 0}
        values: dict[str, list[str]] = {}
        first: list[datetime] = []
        last: list[datetime] = []
        for f in files:
            for line in f.read_text(encoding="utf-8").splitlines():
                try:
                    d = json.loads(line)
                    if not isinstance(d, dict):
                        continue
                    requests = int(d.get("requests") or 0)
                except (ValueError, TypeError):
                    continue  # a torn line from a killed process
                name = str(d.get("invocation") or f"line {len(opened) + len(closed)}")
                if d.get("open"):
                    opened.add(name)
                else:
                    closed.add(name)
                    merged["requests"] += requests
                for key in ("kind", "endpoint", "served_model", "model_file", "engine", "answered_models"):
                    got = d.get(key)
                    for value in (got if isinstance(got, list) else [got]):
                        if isinstance(value, str) and value not in values.setdefault(key, []):
                            values[key].append(value)
                for key, into in (("first_request", first), ("last_request", last)):
                    moment = _utc(d.get(key))
                    if moment is not None:
                        into.append(moment)
        merged["invocations"] = len(opened | closed)
        for key, seen in values.items():
            if seen:
                merged[key] = seen if key == "answered_models" else ", ".join(seen)
        merged["first_request"] = min(first).isoformat(timespec="milliseconds") if first else None
        merged["last_request"] = max(last).isoformat(timespec="milliseconds") if last else None
        if opened - closed:
            merged["interrupted"] = len(opened - closed)
        return merged

    def writer(self, shard: tuple[int, int] | None = None, *, tally: Callable[[], Tally] | None = None
               ) -> RecordWriter:
        """The writer of this run's records (of one shard's); with ``tally`` (a factory), an unsharded writer
        that starts the record file keeps a ledger of what it writes."""
        if shard is None:
            return RecordWriter(self.path / RECORDS, tally=tally)
        index, count = shard
        (self.path / SHARDS).mkdir(exist_ok=True)
        # a shard's lines are merged by `collect` (the general path): its writer keeps no ledger
        return RecordWriter(self.path / SHARDS / shard_file(index, count), keep_ledger=False)
