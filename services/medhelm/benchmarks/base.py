"""The benchmark contract the pipeline relies on.

A benchmark is data plus small hooks: a ``BenchmarkSpec`` (taxonomy, access, metrics, ...),
a loader that yields ``Instance`` values, and a prompt builder. ``benchmarks.resolve()`` turns a
run entry's name and arguments into a ``Benchmark``; nothing else in the pipeline knows about
individual benchmarks.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from medhelm.specs import BenchmarkSpec, FrozenMap, Instance, Prompt
from medhelm.tokens import approx_tokens


@dataclass(frozen=True)
class PromptBudget:
    """How many prompt tokens fit (context window minus max output), and how to count them."""

    max_prompt_tokens: int | None = None
    count_tokens: Callable[[str], int] = approx_tokens


@dataclass(frozen=True)
class LoadContext:
    """Where a loader may read data from. Loaders read ``data_dir`` (the air-gapped mirror) first."""

    args: FrozenMap = field(default_factory=FrozenMap)  # run-entry benchmark args (data_path=, subset=, ...)
    data_dir: Path | None = None  # --data-dir / MEDHELM_DATA_DIR: upstream file names, copied in once
    cache_dir: Path = Path("benchmark_output/scenarios")  # downloads land here, once
    offline: bool = False  # never reach the network (MEDHELM_OFFLINE=1); missing data -> DataUnavailable
    base_dir: Path = Path(".")  # for relative paths given by the user (run entry / conf file folder)
    # Files a benchmark YAML names (dataset_file, prompt_file) must lie under the YAML's folder, the working
    # directory (cwd_allowed: the CLI user's own choice; never in a service) or one of these roots
    # (--data-root), unless any_path (--allow-any-data-path, the user's explicit choice).
    data_roots: tuple[Path, ...] = ()
    any_path: bool = False
    cwd_allowed: bool = True


class StreamedInstances(abc.ABC):
    """A benchmark's instances read from their source again at every pass, never all held in memory.

    Its length and the uniqueness of its ids were checked when the benchmark was loaded, so the pipeline
    samples it without reading it first (``pipeline.sampling.stream_run``)."""

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Instance]: ...

    @abc.abstractmethod
    def __len__(self) -> int: ...

    def ids(self) -> Iterator[str]:
        """The ids in order (a source may read less than whole instances for these)."""
        return (inst.id for inst in self)

    def __getitem__(self, index: int) -> Instance:
        """The ``index``-th instance (reads up to it: for small uses and tests)."""
        if index < 0:
            index += len(self)
        for i, inst in enumerate(self):
            if i == index:
                return inst
        raise IndexError(index)


class Benchmark(Protocol):
    """A benchmark resolved for one set of run-entry arguments."""

    @property
    def spec(self) -> BenchmarkSpec: ...

    def instances(self) -> Iterable[Instance]:
        """All instances, in a stable order (sampling happens in the pipeline, seeded): a list or tuple, or a
        ``StreamedInstances`` for a source too large to hold.

        Raises ``DataUnavailable`` / ``ConfigError`` with the files expected and where access is
        requested; never returns silently fewer instances."""
        ...

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        """The chat prompt for one instance; truncates context (never the question) to fit."""
        ...

    # Optional: ``record_instance(instance) -> Instance``, the instance as the run's record keeps it (without
    # what the record holds elsewhere already); a benchmark without it has its instances recorded as they are.
