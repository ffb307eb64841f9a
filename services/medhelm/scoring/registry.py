"""Metric registry: name -> factory. Each metric module exposes ``FACTORIES``; this merges them.

A factory validates its ``MetricSpec`` at plan time (before anything is written) and builds the
metric at run time. Several names may share a *family* (e.g. rouge_1/rouge_2/rouge_l are computed
together): ``build_all`` builds each family once per distinct argument set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from medhelm.errors import ConfigError
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


def factories() -> dict[str, MetricFactory]:
    # Imported here, not at module level, so `medhelm --help` stays fast and optional
    # dependencies (torch for BERTScore) are only touched when a run asks for them.
    from medhelm.scoring import bertscore, exact, overlap
    from medhelm.scoring import jury
    from medhelm.scoring import special

    merged: dict[str, MetricFactory] = {}
    for module in (exact, overlap, bertscore, jury, special):
        merged.update(getattr(module, "FACTORIES", {}))
    return merged


def lookup(spec: MetricSpec, *, where: str = "") -> MetricFactory:
    table = factories()
    if spec.name not in table:
        known = ", ".join(sorted(table))
        raise ConfigError(f"unknown metric '{spec.name}' (known: {known})", path=where or None, field="metrics")
    return table[spec.name]


def validate(specs: Sequence[MetricSpec], *, where: str = "") -> None:
    if not specs:
        raise ConfigError("no metrics specified", path=where or None, field="metrics")
    for spec in specs:
        lookup(spec, where=where).validate(spec)


def resolve_all(specs: Sequence[MetricSpec], ctx: ResolveContext) -> tuple[MetricSpec, ...]:
    return tuple(lookup(spec).resolve(spec, ctx) for spec in specs)


def stat_names(spec: MetricSpec) -> tuple[str, ...]:
    return lookup(spec).stat_names(spec)


def build_all(specs: Iterable[MetricSpec], ctx: ScoringContext) -> list[Metric]:
    built: dict[tuple[str, object], Metric] = {}
    for spec in specs:
        factory = lookup(spec)
        key = (factory.family or spec.name, spec.args if factory.family else spec)
        if key not in built:
            built[key] = factory.build(spec, ctx)
    return list(built.values())
