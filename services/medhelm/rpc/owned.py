"""What a service resolves for itself: callers name benchmarks, the server owns the paths.

A run's benchmark arguments that name files (``config_path``, ``data_path``, ``jury_config_path``,
``prompt_path``) are *names*, not paths: a file's path relative to the operator's ``--benchmark-root``
folders, such as ``qa/benchmark.yaml``. The wire never carries a server path: absolute values, ``~``,
``.``/``..`` segments, backslashes and control characters are refused before the file system is touched
(``check_name``), and the name's real path (symlinks followed) must still lie under a root and be a file
(``data_path`` may name a folder, as gated releases are).
Refusals never show the server's folders, and errors from reading a named benchmark show its files by name
(``hiding_paths``). Files a benchmark YAML names must lie under the same roots. With
no roots configured, no file name is accepted at all. Clients turn their own paths into names
(``rpc/remote.py``: ``medhelm job --benchmark-root``, the folder it shares with the services).

Resolved benchmarks are cached (a few, by arguments and file modification times): concurrent streams of
one benchmark share one copy of its rows instead of each holding its own.

The metrics a Jury/Metrics service scores with are the benchmark's as the server resolves them (its own
catalogue or config file, its own model deployments and jury): a caller-written judge prompt, judge list
or metric argument is refused unless the operator started the service with ``--allow-caller-metrics``.
The EHRSQL database is the one the server's copy of the benchmark names, never the caller's.

Failure semantics: every refusal is a ``ConfigError`` (INVALID_ARGUMENT) naming the field; missing data
on the server is ``DataUnavailable`` (FAILED_PRECONDITION).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from medhelm import benchmarks
from medhelm.benchmarks.base import Benchmark, LoadContext
from medhelm.confine import confined, roots_of, shown
from medhelm.errors import ConfigError, DataUnavailable, MedhelmError
from medhelm.specs import FrozenMap

PATH_ARGS = ("config_path", "data_path", "jury_config_path", "prompt_path")
_MAX_NAME = 1024


@dataclass(frozen=True)
class DataPlaces:
    """Where a service may read benchmark data: its mirror, its download cache and the operator's roots."""

    roots: tuple[Path, ...] = ()
    data_dir: Path | None = None
    cache_dir: Path = Path("benchmark_output/scenarios")
    offline: bool = False


def _is_builtin_jury(value: str) -> bool:
    from medhelm.scoring.jury.config import CONFIG_DIR

    return "/" not in value and not value.endswith((".yaml", ".yml")) and (CONFIG_DIR / f"jury_{value}.yaml").is_file()


def check_name(value: str, field: str) -> str:
    """``value`` if it is a file name relative to a benchmark root (``qa/benchmark.yaml``), else ConfigError."""
    text = str(value)
    parts = text.split("/")
    if (not text or len(text) > _MAX_NAME or text.startswith("~") or "\\" in text
            or any(ord(c) < 32 or ord(c) == 127 for c in text) or any(p in ("", ".", "..") for p in parts)):
        raise ConfigError(f"'{shown(text)}' is not a benchmark file name: give the file's path relative to the "
                          f"service's benchmark root, e.g. 'qa/benchmark.yaml' (absolute paths, '~' and '..' "
                          f"are refused)", field=field)
    return text


def confine_args(args: Mapping[str, str], roots: tuple[Path, ...]) -> FrozenMap:
    """The run's benchmark args with every file name replaced by its real path under ``roots``."""
    out = dict(args)
    for key in PATH_ARGS:
        value = out.get(key)
        if value is None or value == "":
            continue
        if key == "jury_config_path" and _is_builtin_jury(str(value)):
            continue  # a built-in jury by name: no path
        field = f"benchmark_args.{key}"
        name = check_name(str(value), field)
        if not roots:
            raise ConfigError(f"'{shown(name)}': this service accepts no file names (its operator gave no "
                              f"--benchmark-root)", field=field)
        try:
            path = confined(name, roots, field=field)
        except ConfigError:  # its message lists the server's folders: a caller is told less
            raise ConfigError(f"'{shown(name)}' is not a file under this service's benchmark root",
                              field=field) from None
        if not (path.exists() if key == "data_path" else path.is_file()):  # data_path may name a folder
            raise ConfigError(f"'{shown(name)}': no such file under this service's benchmark root", field=field)
        out[key] = str(path)
    return FrozenMap(out)


def _stamp(args: FrozenMap) -> tuple:
    """Modification times of the files the args name (an edited file is resolved afresh)."""
    stamps = []
    for key in PATH_ARGS:
        value = args.get(key)
        try:
            stamps.append(os.stat(str(value)).st_mtime_ns if value else None)
        except OSError:
            stamps.append(None)
    return tuple(stamps)


@dataclass
class ServerBenchmarks:
    """Benchmarks resolved by the server for callers' run specs (confined, cached, thread-safe)."""

    places: DataPlaces
    max_cached: int = 4
    _cache: OrderedDict = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def args(self, args: Mapping[str, str]) -> FrozenMap:
        return confine_args(args, self.places.roots)

    def resolve(self, name: str, args: Mapping[str, str]) -> Benchmark:
        """Blocking (reads files): call from a thread."""
        safe = self.args(args)
        key = (name, tuple(sorted(safe.items())), _stamp(safe))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        p = self.places
        base = p.roots[0] if p.roots else Path("/nonexistent-base")
        ctx = LoadContext(args=safe, data_dir=p.data_dir, cache_dir=p.cache_dir, offline=p.offline, base_dir=base,
                          data_roots=p.roots, any_path=False, cwd_allowed=False)
        with self.hiding_paths():
            bench = benchmarks.resolve(name, ctx)
        with self._lock:
            self._cache[key] = bench
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return bench


    @contextlib.contextmanager
    def hiding_paths(self) -> Iterator[None]:
        """Errors raised inside name files as the caller did: relative to the roots, never the server's paths."""
        try:
            yield
        except MedhelmError as err:
            text = str(err)
            p = self.places
            for root in sorted(p.roots, key=lambda r: -len(str(r))):
                text = text.replace(f"{root}/", "").replace(str(root), "<benchmark root>")
            for folder, label in ((p.data_dir, "<data dir>"), (p.cache_dir, "<download cache>")):
                if folder is not None:
                    text = text.replace(str(Path(folder).absolute()), label).replace(str(folder), label)
            if text == str(err):
                raise
            cls = type(err) if isinstance(err, (ConfigError, DataUnavailable)) else MedhelmError
            raise cls(text) from None


def places_from(roots: tuple[Path, ...] | list[Path], **kw: object) -> DataPlaces:
    return DataPlaces(roots=roots_of(roots), **kw)  # type: ignore[arg-type]

