"""What a metric module gives the registry: a ``MetricFactory`` per metric name, and the plan-time
``ResolveContext`` a factory may read.

Kept apart from ``registry.py`` so imports point down only: the scorer modules import these types, and the
registry imports the scorer modules to merge their ``FACTORIES``. Pure data; nothing here can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from medhelm.scoring.base import Metric, ScoringContext
from medhelm.specs import FrozenMap, MetricSpec

if TYPE_CHECKING:  # pragma: no cover
    from medhelm.deployments import DeploymentRegistry


@dataclass(frozen=True)
class MetricFactory:
    build: Callable[[MetricSpec, ScoringContext], Metric]
    stat_names: Callable[[MetricSpec], tuple[str, ...]]  # what the metric will emit (first = main)
    validate: Callable[[MetricSpec], None] = lambda spec: None  # raise ConfigError on bad args
    family: str = ""  # names with the same family and args are built once
    description: str = ""
    # plan time: fill in arguments that depend on the run (e.g. the jury's judges from
    # jury_config_path= or the default jury); must be pure and deterministic.
    resolve: Callable[[MetricSpec, ResolveContext], MetricSpec] = lambda spec, ctx: spec


@dataclass(frozen=True)
class ResolveContext:
    benchmark_args: FrozenMap  # the run entry's benchmark args (jury_config_path=, ...)
    base_dir: Path  # folder relative paths are resolved against
    deployments: DeploymentRegistry
    evaluated_deployment: str  # the candidate model's deployment (self-preference guard)
    warn: Callable[[str], None] = lambda msg: None
