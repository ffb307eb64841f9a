"""A metric from a plain function ``(instance, answer_text) -> {stat: value}``: the shape of every special
scorer (MedCalc, MEDEC, EHRSQL, ICD-10, multiple choice). Functions that do real work (running SQL) are
run in a thread so the event loop keeps requests in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from medhelm.errors import ConfigError
from medhelm.scoring.base import MetricResult, ScoringContext, ScoringItem
from medhelm.scoring.factory import MetricFactory
from medhelm.specs import Instance, MetricSpec

ScoreFn = Callable[[Instance, str], Mapping[str, float | None]]


@dataclass(frozen=True)
class InstanceMetric:
    names: tuple[str, ...]
    fn: ScoreFn
    threaded: bool = False

    @property
    def stat_names(self) -> tuple[str, ...]:
        return self.names

    async def score(self, item: ScoringItem) -> MetricResult:
        text = item.completion.text if item.completion else ""
        if self.threaded:
            stats = await asyncio.to_thread(self.fn, item.instance, text)
        else:
            stats = self.fn(item.instance, text)
        return MetricResult(stats={n: stats.get(n) for n in self.names})

    async def aclose(self) -> None:
        return None


def instance_metric_factory(names: tuple[str, ...], fn: ScoreFn, *, description: str,
                            arg_names: tuple[str, ...] = (),
                            bind: Callable[[MetricSpec], ScoreFn] | None = None,
                            threaded: bool = False) -> MetricFactory:
    """``bind(spec)`` builds the function from the spec's args (e.g. a timeout); args are validated by name."""

    def validate(spec: MetricSpec) -> None:
        unknown = set(spec.args) - set(arg_names)
        if unknown:
            raise ConfigError(f"metric '{spec.name}' does not accept {sorted(unknown)} "
                              f"(accepted: {', '.join(arg_names) or 'none'})", field="metrics")
        if bind is not None:
            bind(spec)

    def build(spec: MetricSpec, ctx: ScoringContext) -> InstanceMetric:
        return InstanceMetric(names, bind(spec) if bind else fn, threaded)

    return MetricFactory(build=build, stat_names=lambda spec: names, validate=validate,
                         family=names[0], description=description)


def arg_float(spec: MetricSpec, key: str, default: float, *, minimum: float = 0.0) -> float:
    raw: Any = spec.args.get(key, default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"metric '{spec.name}': {key} must be a number", field="metrics") from None
    if value <= minimum:
        raise ConfigError(f"metric '{spec.name}': {key} must be > {minimum}", field="metrics")
    return value
