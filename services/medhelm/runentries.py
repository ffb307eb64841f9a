"""Run entries (``name:k=v,k=v``) and HELM's ``.conf`` files (``entries: [{description: "...", priority: 1}]``).

Values stay strings: whoever consumes an argument parses it with a clear error (no silent coercion).
The ``.conf`` reader understands the HOCON subset HELM's run-entry files use: ``#``/``//`` comments,
quoted or bare keys, ``:`` or ``=``, optional commas, nested lists/objects, and includes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError, escape
from medhelm.specs import FrozenMap

# run-entry keys that select the model or change generation, rather than the benchmark
MODEL_KEYS = frozenset({"model", "model_deployment"})
RUN_KEYS = frozenset({"max_eval_instances", "num_output_tokens", "max_tokens", "temperature", "seed"})


@dataclass(frozen=True)
class RunEntry:
    text: str  # as written
    name: str  # the benchmark's run-entry name
    args: FrozenMap  # every k=v (strings)
    priority: int = 1
    source: str = "--run-entries"  # where it came from (a .conf path, for error messages)
    base_dir: Path = field(default=Path("."), compare=False)  # the .conf's folder (relative config_path)

    @property
    def model(self) -> str | None:
        return self.args.get("model")

    @property
    def deployment(self) -> str | None:
        return self.args.get("model_deployment")

    @property
    def benchmark_args(self) -> FrozenMap:
        return FrozenMap({k: v for k, v in self.args.items() if k not in MODEL_KEYS | RUN_KEYS})

    @property
    def run_args(self) -> FrozenMap:
        return FrozenMap({k: v for k, v in self.args.items() if k in RUN_KEYS})


_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_run_entry(text: str, *, source: str = "--run-entries", priority: int = 1,
                    base_dir: Path = Path(".")) -> RunEntry:
    raw = text.strip()
    if _CONTROL.search(raw) or len(raw) > 4000:
        raise ConfigError(f"bad run entry '{escape(raw, 120)}': control characters (newline, tab, NUL) or more than "
                          "4000 characters", path=source)
    name, sep, rest = raw.partition(":")
    name = name.strip()
    # HELM writes some names with a comma instead of a colon (med_dialog,subset=x:model=...)
    if "," in name and "=" in name:
        name, _, pre = name.partition(",")
        rest = pre + ("," + rest if rest else "")
    if not name or not _NAME.match(name):
        raise ConfigError(f"bad run entry '{escape(raw)}': expected '<benchmark>:key=value,...'", path=source)
    args: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))) if sep or rest else ():
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ConfigError(f"bad run entry '{escape(raw)}': '{escape(part, 80)}' is not key=value", path=source)
        if key in args and args[key] != value:
            raise ConfigError(f"bad run entry '{escape(raw)}': '{escape(key, 80)}' given twice", path=source)
        args[key] = value
    return RunEntry(text=raw, name=name, args=FrozenMap(args), priority=priority, source=source, base_dir=base_dir)


def parse_hocon(text: str, path: Path) -> dict[str, Any]:
    """The HOCON subset below as nested dicts/lists (HELM's ``.conf`` files and ``credentials.conf``)."""
    doc = _HoconParser(text, path).parse_document()
    files.check_depth(doc, path)
    return doc


def read_conf(path: str | Path) -> list[RunEntry]:
    path = Path(path)
    text = files.read_text(path, what=".conf file")
    try:
        doc = parse_hocon(text, path)
    except RecursionError:
        raise ConfigError(f"nested too deeply (more than {files.MAX_DEPTH} levels)", path=path) from None
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise ConfigError("expected 'entries: [ {description: \"...\", priority: N}, ... ]'", path=path)
    out: list[RunEntry] = []
    base_dir = path.parent.resolve()
    for i, item in enumerate(entries):
        if not isinstance(item, dict) or not isinstance(item.get("description"), str):
            raise ConfigError("each entry needs a string 'description'", path=path, field=f"entries[{i}]")
        prio = item.get("priority", 1)
        if isinstance(prio, bool) or not isinstance(prio, int) and not (isinstance(prio, str) and
                                                                        re.fullmatch(r"-?\d{1,9}", prio.strip())):
            raise ConfigError("priority must be an integer", path=path, field=f"entries[{i}].priority")
        prio = int(prio)
        out.append(parse_run_entry(item["description"], source=str(path), priority=prio, base_dir=base_dir))
    return out


def select(entries: Iterable[RunEntry], *, priority: int | None = None,
           models_to_run: Iterable[str] | None = None) -> list[RunEntry]:
    """HELM semantics: ``--priority N`` keeps entries with priority <= N; ``--models-to-run`` filters by model."""
    models = set(models_to_run or ())
    kept = []
    for e in entries:
        if priority is not None and e.priority > priority:
            continue
        if models and e.model not in models and e.deployment not in models:
            continue
        kept.append(e)
    return kept


# ------------------------------------------------------------------------------------------------
# a small HOCON-subset reader (with line numbers in errors)

_TOKEN = re.compile(
    r'(?P<ws>[ \t\r]+)|(?P<nl>\n)|(?P<comment>(#|//)[^\n]*)|(?P<str>"[^"\\\n]*(?:\\.[^"\\\n]*)*")'
    r"|(?P<punct>[{}\[\]:=,])|(?P<bare>[^\s{}\[\]:=,\"#]+)"
)


class _HoconParser:
    def __init__(self, text: str, path: Path) -> None:
        self.path = path
        self.tokens: list[tuple[str, str, int]] = []
        line = 1
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ConfigError(f"unexpected character {escape(repr(text[pos]))}", path=path, line=line)
            kind = m.lastgroup or ""
            value = m.group()
            if kind == "nl":
                self.tokens.append(("nl", "\n", line))
                line += 1
            elif kind == "str":
                self.tokens.append(("str", _unescape(value[1:-1]), line))
            elif kind in ("punct", "bare"):
                self.tokens.append((kind, value, line))
            pos = m.end()
        self.tokens.append(("eof", "", line))
        self.i = 0

    def _peek(self, skip_nl: bool = True) -> tuple[str, str, int]:
        while skip_nl and self.tokens[self.i][0] == "nl":
            self.i += 1
        return self.tokens[self.i]

    def _next(self) -> tuple[str, str, int]:
        tok = self._peek()
        self.i += 1
        return tok

    def _fail(self, msg: str, tok: tuple[str, str, int]) -> ConfigError:
        return ConfigError(msg, path=self.path, line=tok[2])

    def parse_document(self) -> dict[str, Any]:
        if self._peek()[1] == "{":
            obj = self._object()
        else:
            obj = self._members(end="eof")
        tok = self._peek()
        if tok[0] != "eof":
            raise self._fail(f"unexpected '{tok[1]}'", tok)
        return obj

    def _object(self) -> dict[str, Any]:
        self._next()  # {
        obj = self._members(end="}")
        self._next()  # }
        return obj

    def _members(self, end: str) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        while True:
            tok = self._peek()
            if (end == "eof" and tok[0] == "eof") or (tok[0] == "punct" and tok[1] == end):
                return obj
            if tok[0] == "eof":
                raise self._fail(f"missing '{end}'", tok)
            if tok[0] not in ("str", "bare"):
                raise self._fail(f"expected a key, found '{tok[1]}'", tok)
            self._next()
            sep = self._peek()
            if sep[0] == "punct" and sep[1] in ":=":
                self._next()
            elif not (sep[0] == "punct" and sep[1] in "{["):
                raise self._fail(f"expected ':' after key '{tok[1]}'", sep)
            obj[tok[1]] = self._value()
            nxt = self._peek()
            if nxt[0] == "punct" and nxt[1] == ",":
                self._next()

    def _value(self) -> Any:
        tok = self._peek()
        if tok[0] == "punct" and tok[1] == "{":
            return self._object()
        if tok[0] == "punct" and tok[1] == "[":
            self._next()
            items: list[Any] = []
            while True:
                t = self._peek()
                if t[0] == "punct" and t[1] == "]":
                    self._next()
                    return items
                if t[0] == "eof":
                    raise self._fail("missing ']'", t)
                items.append(self._value())
                t = self._peek()
                if t[0] == "punct" and t[1] == ",":
                    self._next()
        if tok[0] == "str":
            self._next()
            return tok[1]
        if tok[0] == "bare":
            self._next()
            return _bare(tok[1])
        raise self._fail(f"expected a value, found '{tok[1] or 'end of file'}'", tok)


def _bare(v: str) -> Any:
    if v in ("true", "false"):
        return v == "true"
    if v == "null":
        return None
    if re.fullmatch(r"-?\d{1,18}", v):  # longer digit runs stay text (int() refuses > 4,300 digits)
        return int(v)
    return v


def _unescape(s: str) -> str:
    return re.sub(r'\\(["\\/nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)
