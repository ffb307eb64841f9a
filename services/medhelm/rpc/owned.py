"""What a service resolves for itself: callers name benchmarks, the server owns the paths.

A run's benchmark arguments that name files (``config_path``, ``data_path``, ``jury_config_path``) are
accepted only inside the operator's ``--benchmark-root`` folders (symlinks followed, ``..`` collapsed,
``~`` refused); relative values are looked up under each root, so a caller may send just a name such as
``qa/benchmark.yaml``. Files a benchmark YAML names must lie under the same roots. With no roots
configured, no path argument is accepted at all.

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

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from medhelm import benchmarks
from medhelm.benchmarks.base import Benchmark, LoadContext
from medhelm.confine import confined, roots_of
from medhelm.specs import FrozenMap

PATH_ARGS = ("config_path", "data_path", "jury_config_path")


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


def confine_args(args: Mapping[str, str], roots: tuple[Path, ...]) -> FrozenMap:
    """The run's benchmark args with every path argument replaced by its real path under ``roots``."""
    out = dict(args)
    for key in PATH_ARGS:
        value = out.get(key)
        if value is None or value == "":
            continue
        if key == "jury_config_path" and _is_builtin_jury(str(value)):
            continue  # a built-in jury by name: no path
        out[key] = str(confined(str(value), roots, field=f"benchmark_args.{key}", what="file under "
                                "the service's --benchmark-root folders"))
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
        bench = benchmarks.resolve(name, ctx)
        with self._lock:
            self._cache[key] = bench
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return bench


def places_from(roots: tuple[Path, ...] | list[Path], **kw: object) -> DataPlaces:
    return DataPlaces(roots=roots_of(roots), **kw)  # type: ignore[arg-type]

