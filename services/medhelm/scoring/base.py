"""The scoring contract: a metric scores one finished instance at a time.

Metrics are async because some wait on the network (the jury); CPU-bound metrics run their work
in a thread, or in the service's worker processes when ``ScoringContext.cpu`` is set (``scoring/cpu.py``),
so the event loop keeps requests in flight. A stat value of
``None`` means *unscored* (e.g. every judge failed): it is counted as such, never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from medhelm.records import JudgeScore
from medhelm.specs import Completion, Instance, Prompt, RunSpec, Usage

if TYPE_CHECKING:  # pragma: no cover
    from medhelm.scoring.cpu import CpuPool
    from medhelm.deployments import DeploymentRegistry
    from medhelm.inference import ClientPool


@dataclass(frozen=True)
class ScoringItem:
    run: RunSpec
    instance: Instance
    prompt: Prompt
    completion: Completion


@dataclass(frozen=True)
class MetricResult:
    stats: dict[str, float | None]
    judgements: tuple[JudgeScore, ...] = ()
    judge_usage: Usage = field(default_factory=Usage)


class Metric(Protocol):
    @property
    def stat_names(self) -> tuple[str, ...]:
        """Every stat this metric emits (the first is its main stat)."""
        ...

    async def score(self, item: ScoringItem) -> MetricResult: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ScoringContext:
    """What metric factories may use: judges are deployments reached through the shared pool."""

    deployments: DeploymentRegistry
    clients: ClientPool
    evaluated_deployment: str = ""  # the model under evaluation (self-preference guard)
    base_dir: Path = Path(".")
    # A service scores items its callers sent: nothing in them (an instance's db_path) names a file.
    untrusted_items: bool = False
    sql_database: Path | None = None  # the EHRSQL database the server chose (overrides the instance's)
    max_query_s: float | None = None  # the server's cap on a metric's own query time limit
    cpu: CpuPool | None = None  # worker processes for CPU-heavy scoring (a service's); None = threads
