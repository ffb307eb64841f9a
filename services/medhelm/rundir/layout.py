"""The run folder's layout and how its files are written: names, atomic writes, the selection's text.

``<output>/runs/<suite>/<run name>/`` (docs/output-format.md):

* ``run_spec.json``  the RunSpec (written once, atomically, before the first record)
* ``selection.json`` the sampled instance ids in order (positions) — fixed for the run, shared by shards
* ``instances.jsonl`` one InstanceResult per line (``RECORDS``). While a run is going, lines are appended as
  instances finish; once finished it is rewritten in position order.
* ``shards/shard-<i>-of-<n>.jsonl`` the same, one file per shard of a sharded run (merged by ``collect``)
* ``retries*.jsonl`` one line per invocation (``retries.jsonl``; a shard writes
  ``retries-shard-<i>-of-<n>.jsonl``): the retried attempts of every request the run made (summed into run.json)
* ``access*.jsonl`` one line per invocation (``access.jsonl``; a shard writes ``access-shard-<i>-of-<n>.jsonl``):
  where the evaluated deployment was asked (endpoint without credentials, served model, the model the server
  said answered; an in-process engine's model file name and version) and when (its first and last request, UTC);
  merged into run.json's ``access``
* ``superseded.jsonl`` record lines set aside (another run's settings, ids outside a smaller sample); never deleted
* ``stats.json``     aggregates per stat and split (derived; rebuildable)
* ``run.json``       status and accounting (derived; rebuildable)

Failure semantics: ``write_atomic``/``write_atomic_lines`` replace a file whole or not at all (write to a
temporary file beside it, fsync, rename); an error (or a chunk that raises) removes the temporary file, leaves
the old file and propagates.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from medhelm.json_text import digest
from medhelm.specs import RunSpec

RECORDS = "instances.jsonl"
SUPERSEDED = "superseded.jsonl"
RUN_SPEC = "run_spec.json"
SELECTION = "selection.json"
STATS = "stats.json"
STATUS = "run.json"
SHARDS = "shards"


def shard_file(index: int, count: int) -> str:
    """A shard's record file, inside ``SHARDS``."""
    return f"shard-{index:05d}-of-{count:05d}.jsonl"


def retries_file(shard: tuple[int, int] | None) -> str:
    return "retries.jsonl" if shard is None else f"retries-shard-{shard[0]:05d}-of-{shard[1]:05d}.jsonl"


def access_file(shard: tuple[int, int] | None) -> str:
    return "access.jsonl" if shard is None else f"access-shard-{shard[0]:05d}-of-{shard[1]:05d}.jsonl"


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


PLAIN_ID = re.compile(r'[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]*')  # json.dumps would not escape it


def selection_text(instance_ids: Iterable[str]) -> Iterator[str]:
    """``_dump({"instance_ids": ids})``, piece by piece (byte for byte the same text)."""
    first = True
    plain = PLAIN_ID.fullmatch
    for iid in instance_ids:
        yield ('{\n "instance_ids": [\n  ' if first else ',\n  ') + (
            f'"{iid}"' if plain(iid) else json.dumps(iid, ensure_ascii=False))
        first = False
    yield '{\n "instance_ids": []\n}\n' if first else "\n ]\n}\n"


SELECTION_HEAD, SELECTION_TAIL = b'{\n "instance_ids": [\n', b"\n ]\n}\n"


def streamable_selection(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(len(SELECTION_HEAD))
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - len(SELECTION_TAIL), 0))
            return head == SELECTION_HEAD and size > len(SELECTION_HEAD) and f.read() == SELECTION_TAIL
    except OSError:
        return False


def dump_json(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"
