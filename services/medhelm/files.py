"""The one reader for every file a user gives: configs, run-entry files, prompts, datasets, run folders.

``read_bytes``/``read_text`` open a path once and accept only a regular file (never a FIFO, a device such
as ``/dev/zero``, a directory, a socket; a symlink loop or an unreadable file is named as such), read at
most a size cap (``CONFIG_LIMIT`` for configs, ``DATA_LIMIT`` for datasets and records; both can be
raised with ``MEDHELM_MAX_INPUT_MB``) and decode strict UTF-8 (a BOM is dropped). ``load_yaml`` refuses
duplicate keys, refuses recursive aliases and bounds what aliases expand to (the "billion laughs"), and
bounds nesting; ``load_json`` bounds size and nesting and turns a 5,000-digit integer into an error.

Failure semantics: every problem is a ``ConfigError`` naming the file (and line where known); nothing
here ever echoes the file's content, which may be patient text. Nothing is written.

Why our own code: the guard is a few system calls (open non-blocking, fstat, bounded read) that no library
offers as one call; YAML stays PyYAML's safe loader (the parser is not ours) with two small hooks, because
ruamel.yaml (which refuses duplicate keys itself) would be a second YAML library with other semantics.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from medhelm.errors import ConfigError, escape

MIB = 1024 * 1024
CONFIG_LIMIT = 16 * MIB  # YAML / JSON configs, .conf files, prompt templates, run specs
DATA_LIMIT = 2048 * MIB  # datasets (CSV) and instance records: hospital notes can be large
MAX_DEPTH = 100  # nesting of a config (YAML / JSON / .conf): real ones stay under 10
MAX_YAML_NODES = 200_000  # nodes of a YAML document after expanding aliases


def _limit(default: int) -> int:
    """``MEDHELM_MAX_INPUT_MB`` raises (or lowers) every cap at once."""
    raw = os.environ.get("MEDHELM_MAX_INPUT_MB", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw) * MIB
    return default


def _size(n: int) -> str:
    return f"{n / MIB:.1f} MiB" if n >= MIB else f"{n} bytes"


def _open(path: Path, missing: str, what: str) -> tuple[int, os.stat_result]:
    """An open descriptor on a regular file (never blocks: O_NONBLOCK until the type is known)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(missing, path=path) from None
    except IsADirectoryError:
        raise ConfigError(f"is a folder; expected a {what}", path=path) from None
    except PermissionError:
        raise ConfigError("cannot be read (permission denied)", path=path) from None
    except OSError as err:
        reason = {errno.ELOOP: "a symlink loop", errno.ENOTDIR: "a part of the path is not a folder",
                  errno.ENAMETOOLONG: "the path is too long"}.get(err.errno, err.strerror or type(err).__name__)
        raise ConfigError(f"cannot be opened ({reason})", path=path) from None
    except ValueError:  # an embedded NUL byte in the path
        raise ConfigError("the path contains a NUL byte", path=path) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"is a folder; expected a {what}", path=path)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"is not a regular file (a pipe, device or socket); expected a {what}", path=path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path: str | Path, *, limit: int = CONFIG_LIMIT, missing: str = "file not found",
               what: str = "file") -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes (one open, so no check/use race)."""
    path = Path(path)
    limit = _limit(limit)
    fd, st = _open(path, missing, what)
    try:
        if st.st_size > limit:
            raise _too_large(path, st.st_size, limit, what)
        # read until EOF but never past the cap (a file may grow while read; /proc files report size 0)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(8 * MIB, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_large(path, total, limit, what)
        return b"".join(chunks)
    except OSError as err:
        raise ConfigError(f"cannot be read ({err.strerror or type(err).__name__})", path=path) from None
    finally:
        os.close(fd)


def open_regular(path: str | Path, *, limit: int = DATA_LIMIT, missing: str = "file not found",
                 what: str = "file"):
    """A binary file object on a regular file of at most ``limit`` bytes (size checked at open; for
    streaming readers that never hold the whole file), and its ``os.stat_result``."""
    path = Path(path)
    limit = _limit(limit)
    fd, st = _open(path, missing, what)
    if st.st_size > limit:
        os.close(fd)
        raise _too_large(path, st.st_size, limit, what)
    return os.fdopen(fd, "rb", buffering=1 << 20), st


def bad_utf8_line(chunks) -> int | None:
    """The line of the first byte that is not UTF-8 in ``chunks`` (bytes pieces of one file); None if all is."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
    lines = 1
    for chunk in chunks:
        pending = decoder.getstate()[0]  # an unfinished character from the last chunk (never a newline)
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as err:
            return lines + (pending + chunk)[: err.start].count(b"\n")
        lines += chunk.count(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return lines
    return None


def exists(path: str | Path, *, field: str | None = None) -> bool:
    """``Path.exists`` for a path a user gave: a name too long, a NUL byte or a part that cannot be searched is
    one line naming the path (``Path.exists`` raises for those), never a traceback."""
    try:
        return Path(path).exists()
    except ValueError:
        raise ConfigError("the path contains a NUL byte", path=path, field=field) from None
    except OSError as err:
        reason = {errno.ENAMETOOLONG: "the path or a name in it is too long",
                  errno.EACCES: "permission denied"}.get(err.errno, err.strerror or type(err).__name__)
        raise ConfigError(f"cannot be opened ({reason})", path=path, field=field) from None


def check_output_folder(path: str | Path, *, flag: str) -> Path:
    """Fail before anything is written when ``path`` (made later if missing) cannot become a folder of files:
    its nearest existing ancestor must be a folder on a file system that holds files (not /proc, /sys)."""
    path = Path(path)
    probe = path
    try:
        while not os.path.lexists(probe) and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            raise ConfigError(f"{flag}: cannot be a folder ({escape(probe)} is a file, not a folder)", path=path)
        fs = os.statvfs(probe)
    except OSError as err:
        raise ConfigError(f"{flag}: cannot be used ({err.strerror or type(err).__name__})", path=path) from None
    except ValueError:
        raise ConfigError(f"{flag}: the path contains a NUL byte", path=path) from None
    if fs.f_blocks == 0:
        raise ConfigError(f"{flag}: {escape(probe)} is on a virtual file system (such as /proc) that cannot hold "
                          "results; give a folder on a real disk", path=path)
    return path


def check_regular(path: str | Path, *, missing: str = "file not found", what: str = "file") -> Path:
    """Fail early (before anything is written) when ``path`` is not an openable regular file."""
    path = Path(path)
    fd, _ = _open(path, missing, what)
    os.close(fd)
    return path


def _too_large(path: Path, size: int, limit: int, what: str) -> ConfigError:
    return ConfigError(f"too large for a {what} ({_size(size)}; the limit is {_size(limit)}, "
                       f"raise it with MEDHELM_MAX_INPUT_MB)", path=path)


def decode(data: bytes, path: str | Path, *, hint: str = "") -> str:
    """Strict UTF-8 (a leading BOM is dropped); an error names the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"not UTF-8 text{hint}", path=path, line=data[: err.start].count(b"\n") + 1) from None


def read_text(path: str | Path, *, limit: int = CONFIG_LIMIT, missing: str = "file not found",
              what: str = "file", hint: str = "") -> str:
    return decode(read_bytes(path, limit=limit, missing=missing, what=what), path, hint=hint)


# ------------------------------------------------------------------------------------------------
# JSON


def load_json(path: str | Path, *, missing: str = "missing", limit: int = CONFIG_LIMIT) -> Any:
    text = read_text(path, limit=limit, missing=missing, what="JSON file")
    return parse_json(text, path)


def parse_json(text: str, path: str | Path, *, line: int | None = None) -> Any:
    """``json.loads`` with every failure (syntax, nesting, huge integers) as one ConfigError."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"corrupt JSON ({e.msg})", path=path, line=line or e.lineno) from None
    except RecursionError:
        raise ConfigError(f"JSON nested too deeply (more than {MAX_DEPTH} levels)", path=path, line=line) from None
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise ConfigError(f"corrupt JSON ({_value_error(e)})", path=path, line=line) from None
    check_depth(value, path, line=line)
    return value


def _value_error(err: ValueError) -> str:
    text = str(err)
    return "a number with more than 4,300 digits" if "digits" in text else type(err).__name__


def check_depth(value: Any, path: str | Path, *, line: int | None = None, limit: int = MAX_DEPTH) -> None:
    """Refuse values nested deeper than ``limit`` (iterative: a deep value cannot exhaust the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise ConfigError(f"nested too deeply (more than {limit} levels)", path=path, line=line)
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def check_json_stream_depth(path: str | Path, *, limit: int = MAX_DEPTH, chunk: int = 4 * MIB) -> None:
    """Refuse a JSON file nested deeper than ``limit`` before a streaming parser builds it: ijson keeps one
    prefix string per level (memory quadratic in the depth; docs/design-notes.md)."""
    for _ in _json_blocks(path, limit, chunk):
        pass


def json_array_pieces(path: str | Path, *, limit: int = MAX_DEPTH, chunk: int = 256 * 1024) -> Iterator[bytes]:
    """The inside of a JSON file that is one array (``[`` ... ``]``, JSON whitespace around), in pieces of about
    ``chunk`` bytes cut at its top-level commas: each piece is one or more whole items and their commas, for a
    parser to read one piece at a time (``b"[" + piece + b"]"``). The whole file is scanned first, as
    ``check_json_stream_depth`` does (nesting past ``limit`` is refused before any piece is given), noting where
    to cut; then read again piece by piece. (In one pass, numpy's small cached allocations of the scan landed
    between the caller's objects and kept freed memory from going back to the system.) The pieces are
    not parsed here: a file that is not an array of values shows as a ``ValueError`` (no bracket around) or as a
    piece the caller's parser refuses, or that holds no item where a comma promised one."""
    cuts, offset = [], 0
    for block, at in _json_blocks(path, limit, chunk, commas=True):
        if at.size:
            cuts.append(offset + int(at[-1]))
        offset += len(block)
    with open_regular(path, what="JSON file")[0] as f:
        start = 0
        for cut in cuts:
            piece = f.read(cut - start)
            f.read(1)  # the comma
            yield _array_opened(piece) if start == 0 else piece
            start = cut + 1
        tail = f.read()
    if start == 0:
        tail = _array_opened(tail)
    tail = tail.rstrip(_JSON_SPACE)
    if tail[-1:] != b"]":
        raise ValueError("not one JSON array (no closing bracket at the end)")
    yield tail[:-1]


_JSON_SPACE = b" \t\n\r"


def _array_opened(piece: bytes) -> bytes:
    piece = piece.lstrip(_JSON_SPACE)
    if piece[:1] != b"[":
        raise ValueError("not one JSON array (no opening bracket)")
    return piece[1:]


def _json_blocks(path: str | Path, limit: int, chunk: int, *, commas: bool = False) -> Iterator[tuple[bytes, Any]]:
    """(block, offsets in it of the commas at nesting level 1) for each ``chunk`` bytes of ``path``, after
    refusing nesting past ``limit``. One vectorised pass (numpy) that looks only at quotes, brackets (and
    commas), strings and escaped quotes skipped; the state crosses from one block to the next."""
    import numpy as np

    structural = np.zeros(256, dtype=bool)
    structural[[0x22, 0x5B, 0x5D, 0x7B, 0x7D]] = True
    if commas:
        structural[0x2C] = True
    step = np.zeros(256, dtype=np.int64)
    step[[0x5B, 0x7B]], step[[0x5D, 0x7D]] = 1, -1
    no_cuts = np.zeros(0, dtype=np.int64)
    depth, in_string, backslashes = 0, 0, 0  # carried from one chunk to the next
    with open_regular(path, what="JSON file")[0] as f:
        while block := f.read(chunk):
            a = np.frombuffer(block, dtype=np.uint8)
            pos = np.flatnonzero(structural[a])
            c = a[pos]
            quote = c == 0x22
            trailing = 0
            bs = a == 0x5C
            if backslashes or bs.any():  # a quote after an odd run of backslashes is inside its string
                idx = np.arange(a.size)
                last_other = np.maximum.accumulate(np.where(bs, -1, idx))
                before = np.where(pos == 0, -1, last_other[np.maximum(pos - 1, 0)])
                run = np.where(pos == 0, backslashes,
                               np.where(before < 0, pos + backslashes, pos - 1 - before))
                quote &= run % 2 == 0
                trailing = int(a.size - 1 - last_other[-1]) + (backslashes if last_other[-1] < 0 else 0)
            parity = np.cumsum(quote, dtype=np.int64) + in_string  # quotes so far, this one included
            inside = ((parity - quote) % 2 == 1) | quote  # a string's own characters and its quotes
            delta = step[c]
            delta[inside] = 0  # brackets inside strings do not nest
            cuts = no_cuts
            if delta.size:
                levels = depth + np.cumsum(delta)
                if levels.max() > limit:
                    raise ConfigError(f"JSON nested too deeply (more than {limit} levels)", path=path)
                if commas:
                    cuts = pos[(c == 0x2C) & ~inside & (levels == 1)]
                depth = int(levels[-1])
                in_string = int(parity[-1] % 2)
            backslashes = trailing
            yield block, cuts


# ------------------------------------------------------------------------------------------------
# YAML


# libyaml's parser when PyYAML has it (the wheels do): the pure-Python scanner is slow on long lines
# (docs/design-notes.md)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _BoundedLoader(_SAFE_LOADER):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader (aliases and nesting still bounded by parse_yaml)."""


class _StrictLoader(_SAFE_LOADER):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader, refusing duplicate keys (the last one silently won before)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key '{key}' (first on line {seen[key]})", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class YamlDoc:
    """A parsed YAML file and its node tree, for errors that name the line of a field."""

    path: Path
    data: Any
    node: Any

    def line(self, *loc: str | int) -> int | None:
        """The line of the key (or item) at ``loc`` (e.g. ``("model_deployments", 2, "base_url")``)."""
        node, line = self.node, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if getattr(k, "value", None) == str(part):
                        node, line = v, k.start_mark.line + 1
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line


def load_yaml(path: str | Path, *, missing: str = "file not found") -> Any:
    return load_yaml_doc(path, missing=missing).data


def load_yaml_doc(path: str | Path, *, missing: str = "file not found", last_key_wins: bool = False) -> YamlDoc:
    """``last_key_wins``: a key repeated in one mapping keeps its last value, as PyYAML's ``safe_load`` does
    (for files another program writes and reads that way: HELM's own configs)."""
    path = Path(path)
    text = read_text(path, missing=missing, what="YAML file")
    return parse_yaml(text, path, last_key_wins=last_key_wins)


def parse_yaml(text: str, path: Path, *, last_key_wins: bool = False) -> YamlDoc:
    loader = None
    try:
        # the reader refuses control characters here already
        loader = (_BoundedLoader if last_key_wins else _StrictLoader)(text)
        node = loader.get_single_node()
        if node is None:
            return YamlDoc(path, None, None)
        _check_expansion(node, path)
        return YamlDoc(path, loader.construct_document(node), node)
    except yaml.YAMLError as err:
        raise yaml_error(err, path) from None
    except RecursionError:
        raise ConfigError(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", path=path) from None
    except ValueError as err:  # an integer of more than 4,300 digits
        raise ConfigError(f"invalid YAML ({_value_error(err)})", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_all(path: str | Path, *, missing: str = "file not found", limit: int = 1000) -> list[Any]:
    """Every document of a multi-document YAML file (``---``; e.g. ``helm template`` output), each with the
    same guards as ``load_yaml`` (duplicate keys, aliases, nesting), at most ``limit`` documents."""
    path = Path(path)
    text = read_text(path, missing=missing, what="YAML file")
    loader = None
    docs: list[Any] = []
    try:
        loader = _StrictLoader(text)
        while loader.check_node():
            node = loader.get_node()
            if len(docs) >= limit:
                raise ConfigError(f"more than {limit} YAML documents", path=path, line=node.start_mark.line + 1)
            _check_expansion(node, path)
            docs.append(loader.construct_document(node))
        return docs
    except yaml.YAMLError as err:
        raise yaml_error(err, path) from None
    except RecursionError:
        raise ConfigError(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", path=path) from None
    except ValueError as err:
        raise ConfigError(f"invalid YAML ({_value_error(err)})", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_expansion(root: Any, path: Path) -> None:
    """Bound what aliases expand to (size after expansion, memoised per node) and refuse recursion."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: Any, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise ConfigError(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", path=path,
                              line=node.start_mark.line + 1)
        if key in on_path:
            raise ConfigError("recursive YAML alias (an anchor used inside itself)", path=path,
                              line=node.start_mark.line + 1)
        total = 1
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            on_path.add(key)
            children = node.value if isinstance(node, yaml.SequenceNode) else [c for kv in node.value for c in kv]
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_YAML_NODES:
                    raise ConfigError(f"YAML expands to more than {MAX_YAML_NODES:,} values (aliases * used "
                                      "too often?)", path=path, line=node.start_mark.line + 1)
            on_path.discard(key)
        sizes[key] = total
        return total

    size(root, 1)


def yaml_error(err: yaml.YAMLError, path: Path) -> ConfigError:
    """A YAML parse error as one line: the file, the line, what the parser said."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return ConfigError(f"invalid YAML ({problem})", path=path, line=None if mark is None else mark.line + 1)


# ------------------------------------------------------------------------------------------------
# names that become folders


_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+\-]{0,127}$")


def plain_name(value: str, *, what: str) -> str:
    """A suite or release name that becomes one folder under the output path (never ``..``, ``/``, ``~``)."""
    if not _PLAIN.match(value or "") or value in (".", "..") or ".." in value:
        raise ConfigError(f"{what} '{escape(value, 80)}' must be a plain name (letters, digits, _ . + -, at most "
                          "128 characters, no / or ..): it names a folder under the output path")
    return value


def env_secret(name: str, env: dict[str, str] | None = None) -> str | None:
    """A secret handed over by environment: ``$NAME`` itself, else the content of the file ``$NAME_FILE``
    names (a mounted Kubernetes Secret key: the chart's way, so the value is in no env var), stripped; None
    when neither is set. An unreadable or empty file is a ``ConfigError`` naming ``NAME_FILE``, never the value."""
    from medhelm.scrub import register_value

    env = os.environ if env is None else env
    if env.get(name):
        register_value(env[name], slot=f"env:{name}")  # held: scrubbed from every text this process emits
        return env[name]
    path = env.get(f"{name}_FILE")
    if not path:
        return None
    value = read_text(path, missing=f"{name}_FILE names a missing file", what=f"{name}_FILE").strip()
    if not value:
        raise ConfigError(f"{name}_FILE names an empty file", path=path)
    register_value(value, slot=f"env:{name}")
    return value
