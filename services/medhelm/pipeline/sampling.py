"""Seeded, reproducible instance sampling, streamed.

A seeded permutation of all instances; the first ``k`` are the sample (kept in the benchmark's own
order). Samples are nested: raising ``--max-eval-instances`` keeps every instance already evaluated.

``stream_run`` gives the same sample as ``select_instances`` without holding the instances: a benchmark
whose ``instances()`` is a ``StreamedInstances`` (re-readable, its length and the uniqueness of its ids
checked when it was loaded) is read again for every pass; the permutation is ``random.Random(seed).shuffle``
of the positions in a 4-byte ``array`` (the same algorithm on the same values, so the same permutation as
on a list) and the sample is kept as one byte per instance. A benchmark that returns a list or tuple is
sampled in memory as before.

Failure semantics: a benchmark without instances or with a repeated id is a ConfigError naming the run.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterable, Iterator, Sequence

from medhelm.benchmarks.base import Benchmark, StreamedInstances
from medhelm.errors import ConfigError, MedhelmError
from medhelm.specs import Instance, RunSpec


def select_instances(instances: Sequence[Instance], max_instances: int | None, seed: int, *,
                     source: str = "") -> list[Instance]:
    seen: set[str] = set()
    for inst in instances:
        if inst.id in seen:
            raise ConfigError(f"duplicate instance id '{inst.id}' (ids must be unique to resume runs)",
                              path=source or None)
        seen.add(inst.id)
    if not instances:
        raise ConfigError("the benchmark has no instances", path=source or None)
    chosen = select_positions(len(instances), max_instances, seed)
    if chosen is None:
        return list(instances)
    return [inst for inst, keep in zip(instances, chosen) if keep]


def select_positions(count: int, max_instances: int | None, seed: int) -> bytearray | None:
    """Which of ``count`` positions the sample keeps (1 = kept); None = all of them."""
    if max_instances is None or max_instances >= count:
        return None
    order = array("I" if count < 2**32 else "Q", range(count))
    random.Random(seed).shuffle(order)
    chosen = bytearray(count)
    for i in memoryview(order)[:max_instances]:
        chosen[i] = 1
    return chosen


class Sample:
    """The instances a run evaluates, in position order; iterable more than once (a streamed source is
    read again each time). ``count`` is known without reading them."""

    def __init__(self, source: Iterable[Instance], chosen: bytearray | None, count: int) -> None:
        self._source, self._chosen, self.count = source, chosen, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Instance]:
        if self._chosen is None:
            yield from self._source
            return
        chosen = self._chosen
        for i, inst in enumerate(self._source):
            if chosen[i]:
                yield inst

    def ids(self) -> Iterator[str]:
        """The sampled ids in position order (a streamed source reads only its id column)."""
        ids = self._source.ids() if isinstance(self._source, StreamedInstances) else (i.id for i in self._source)
        if self._chosen is None:
            yield from ids
            return
        chosen = self._chosen
        for i, iid in enumerate(ids):
            if chosen[i]:
                yield iid


def stream_run(benchmark: Benchmark, spec: RunSpec) -> Sample:
    """The run's sample, streamed when the benchmark streams; errors say which run they came from."""
    try:
        source = benchmark.instances()
        if isinstance(source, StreamedInstances):
            count = len(source)
            if not count:
                raise ConfigError("the benchmark has no instances", path=spec.benchmark.name or None)
            chosen = select_positions(count, spec.max_eval_instances, spec.seed)
            return Sample(source, chosen, count if chosen is None else spec.max_eval_instances)
        picked = select_instances(list(source), spec.max_eval_instances, spec.seed, source=spec.benchmark.name)
        return Sample(picked, None, len(picked))
    except MedhelmError as err:
        raise err.with_context(f"run '{spec.name}': ") from None


def sample_run(benchmark: Benchmark, spec: RunSpec) -> list[Instance]:
    """The instances a run evaluates, in position order, as a list (``stream_run`` does not hold them)."""
    sample = stream_run(benchmark, spec)
    try:
        return list(sample)
    except MedhelmError as err:
        raise err.with_context(f"run '{spec.name}': ") from None
