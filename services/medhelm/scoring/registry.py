"""Metric registry: name -> factory. Each metric module exposes ``FACTORIES``; this merges them (the
factory types live in ``factory.py``, below both, so the scorer modules never import this one).

A factory validates its ``MetricSpec`` at plan time (before anything is written) and builds the
metric at run time. Several names may share a *family* (e.g. rouge_1/rouge_2/rouge_l are computed
together): ``build_all`` builds each family once per distinct argument set.

Which module defines which name is a static table (``MODULE_OF``), so a run imports only the scorers it
uses: an exact-match suite never loads the jury, ROUGE or the catalogue-specific scorers.
tests/core/test_metric_registry.py keeps the table equal to the modules' own ``FACTORIES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

from medhelm.errors import ConfigError
from medhelm.scoring.base import Metric, ScoringContext
from medhelm.scoring.factory import MetricFactory, ResolveContext
from medhelm.specs import MetricSpec

__all__ = ["MetricFactory", "ResolveContext", "build_all", "factories", "lookup", "resolve_all", "stat_names",
           "validate"]


# metric name -> the module whose FACTORIES defines it
MODULE_OF: dict[str, str] = {
    **dict.fromkeys(("exact_match", "quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match"),
                    "medhelm.scoring.exact"),
    **dict.fromkeys(("rouge_1", "rouge_2", "rouge_l"), "medhelm.scoring.overlap"),
    # optional dependencies (torch for BERTScore) are touched only when a run asks for them
    **dict.fromkeys(("BERTScore-P", "BERTScore-R", "BERTScore-F"), "medhelm.scoring.bertscore"),
    "jury_score": "medhelm.scoring.jury",
    "multiple_choice": "medhelm.scoring.choice",
    "medcalc_bench_accuracy": "medhelm.scoring.medcalc",
    "medec": "medhelm.scoring.medec",
    "mimiciv_billing_code_f1": "medhelm.scoring.icd10",
    "ehr_sql_execution_accuracy": "medhelm.scoring.ehrsql",
}


def names() -> tuple[str, ...]:
    """Every metric name, without importing a scorer."""
    return tuple(sorted(MODULE_OF))


def factories() -> dict[str, MetricFactory]:
    """Every factory (imports every scorer module)."""
    return {name: _factory(name) for name in MODULE_OF}


def _factory(name: str) -> MetricFactory:
    return importlib.import_module(MODULE_OF[name]).FACTORIES[name]


def lookup(spec: MetricSpec, *, where: str = "") -> MetricFactory:
    if spec.name not in MODULE_OF:
        raise ConfigError(f"unknown metric '{spec.name}' (known: {', '.join(names())})", path=where or None,
                          field="metrics")
    return _factory(spec.name)


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
