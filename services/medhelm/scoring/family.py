"""Registry entries for a metric *family*: several stat names computed together by one metric.

Asking for any member (e.g. ``rouge_l``) builds the family once and emits all of its stats; the
member asked for is the main stat (the leaderboard column when it is a benchmark's first metric).
"""

from __future__ import annotations

from collections.abc import Callable

from medhelm.errors import ConfigError
from medhelm.scoring.base import Metric, ScoringContext
from medhelm.scoring.factory import MetricFactory, ResolveContext
from medhelm.specs import MetricSpec


def no_args(spec: MetricSpec) -> None:
    if spec.args:
        raise ConfigError(f"metric '{spec.name}' takes no arguments (got {', '.join(sorted(spec.args))})",
                          field="metrics")


def family_factories(stats: tuple[str, ...], *, family: str, build: Callable[[MetricSpec, ScoringContext], Metric],
                     describe: Callable[[str], str], validate: Callable[[MetricSpec], None] = no_args,
                     resolve: Callable[[MetricSpec, ResolveContext], MetricSpec] | None = None,
                     ) -> dict[str, MetricFactory]:
    def stat_names(spec: MetricSpec) -> tuple[str, ...]:
        return (spec.name, *(s for s in stats if s != spec.name))

    extra = {"resolve": resolve} if resolve else {}
    return {name: MetricFactory(build=build, stat_names=stat_names, validate=validate, family=family,
                                description=describe(name), **extra)
            for name in stats}
