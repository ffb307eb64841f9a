"""Metric registry: name -> factory. Each metric module exposes ``FACTORIES``; this merges them (the
factory types live in ``factory.py``, below both, so the scorer modules never import this one).

A factory validates its ``MetricSpec`` at plan time (before anything is written) and builds the
metric at run time. Several names may share a *family* (e.g. rouge_1/rouge_2/rouge_l are computed
together): ``build_all`` builds each family once per distinct argument set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from medhelm.errors import ConfigError
from medhelm.scoring.base import Metric, ScoringContext
from medhelm.scoring.factory import MetricFactory, ResolveContext
from medhelm.specs import MetricSpec

__all__ = ["MetricFactory", "ResolveContext", "build_all", "factories", "lookup", "resolve_all", "stat_names",
           "validate"]


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
