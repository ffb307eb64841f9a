"""Seeded, reproducible instance sampling.

A seeded permutation of all instances; the first ``k`` are the sample (kept in the benchmark's own
order). Samples are nested: raising ``--max-eval-instances`` keeps every instance already evaluated.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from medhelm.benchmarks.base import Benchmark
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
    if max_instances is None or max_instances >= len(instances):
        return list(instances)
    order = list(range(len(instances)))
    random.Random(seed).shuffle(order)
    return [instances[i] for i in sorted(order[:max_instances])]


def sample_run(benchmark: Benchmark, spec: RunSpec) -> list[Instance]:
    """The instances a run evaluates, in position order; errors say which run they came from."""
    try:
        return select_instances(list(benchmark.instances()), spec.max_eval_instances, spec.seed,
                                source=spec.benchmark.name)
    except MedhelmError as err:
        raise err.with_context(f"run '{spec.name}': ") from None
