"""What the Jury and Metrics servicers share: build a run's metrics once, score items with them.

The metrics are the registry's own (``scoring.registry.build_all``), reached through one ClientPool,
so a remote score is the same computation as a local one."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from medhelm.deployments import DeploymentRegistry
from medhelm.errors import ConfigError
from medhelm.pipeline.execute import merge_results
from medhelm.rpc import codec
from medhelm.scoring import registry
from medhelm.scoring.base import Metric, MetricResult, ScoringContext, ScoringItem
from medhelm.specs import MetricSpec, RunSpec
from medhelm.v1 import common_pb2

JURY_METRICS = frozenset({"jury_score"})  # registry names whose factory calls judge models


@dataclass(frozen=True)
class Setup:
    spec: RunSpec
    metrics: tuple[MetricSpec, ...]


class MetricHost:
    def __init__(self, deployments: DeploymentRegistry, pool: object, *, base_dir: Path = Path("."),
                 accept: Callable[[MetricSpec], bool] = lambda spec: True, what: str = "metric",
                 max_runs: int = 16, max_concurrency: int = 16) -> None:
        self._deployments, self._pool, self._base_dir = deployments, pool, base_dir
        self._accept, self._what = accept, what
        self._built: OrderedDict[tuple[tuple[MetricSpec, ...], str], list[Metric]] = OrderedDict()
        self._max_runs = max_runs
        self._lock = asyncio.Lock()
        self.max_concurrency = max_concurrency

    def setup(self, msg: common_pb2.ScoringSetup) -> Setup:
        spec = codec.run_spec(msg.run_spec_json, "setup.run_spec_json")
        metrics = codec.metric_specs(msg.metric_spec_json, "setup.metric_spec_json") or \
            tuple(m for m in spec.benchmark.metrics if self._accept(m))
        if not metrics:
            raise ConfigError(f"run '{spec.name}' has no {self._what} to score", field="setup.metric_spec_json")
        for m in metrics:
            if not self._accept(m):
                raise ConfigError(f"'{m.name}' is not a {self._what}", field="setup.metric_spec_json")
            registry.lookup(m).validate(m)
        return Setup(spec, metrics)

    async def score(self, setup: Setup, item: ScoringItem) -> MetricResult:
        metrics = await self._metrics(setup)
        results = await asyncio.gather(*(m.score(item) for m in metrics))
        return merge_results(results)

    async def score_request(self, request: common_pb2.ScoreRequest,
                            on_result: Callable[[MetricResult], None]) -> common_pb2.MetricResult:
        """A unary call: decode, score, report, encode."""
        setup = self.setup(request.setup)
        result = await self.score(setup, codec.scoring_item(setup.spec, request.item))
        on_result(result)
        return codec.result_message(result, request.item.position)

    async def score_stream(self, requests: AsyncIterator[common_pb2.ScoreStreamRequest],
                           on_result: Callable[[MetricResult], None]) -> AsyncIterator[common_pb2.MetricResult]:
        """One setup, then items; results come back as each finishes (bounded concurrency)."""
        first = await anext(aiter(requests), None)
        if first is None:
            return
        if first.WhichOneof("body") != "setup":
            raise ConfigError("the first message of a stream must be a setup", field="setup")
        setup = self.setup(first.setup)
        queue: asyncio.Queue[common_pb2.MetricResult | BaseException | None] = asyncio.Queue()
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(msg: common_pb2.ScoringItem) -> None:
            try:
                result = await self.score(setup, codec.scoring_item(setup.spec, msg))
                on_result(result)
                await queue.put(codec.result_message(result, msg.position))
            except BaseException as err:  # noqa: BLE001 - handed to the reader, which raises it
                await queue.put(err)
            finally:
                gate.release()

        async def feed() -> None:
            tasks = set()
            try:
                async for msg in requests:
                    if msg.WhichOneof("body") != "item":
                        raise ConfigError("only one setup per stream", field="setup")
                    await gate.acquire()
                    task = asyncio.create_task(one(msg.item))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if tasks:
                    await asyncio.gather(*tasks)
            except BaseException as err:  # noqa: BLE001
                await queue.put(err)
            finally:
                await queue.put(None)

        feeder = asyncio.create_task(feed())
        try:
            while (got := await queue.get()) is not None:
                if isinstance(got, BaseException):
                    raise got
                yield got
        finally:
            feeder.cancel()

    async def _metrics(self, setup: Setup) -> list[Metric]:
        key = (setup.metrics, setup.spec.deployment)
        async with self._lock:
            if key in self._built:
                self._built.move_to_end(key)
                return self._built[key]
            ctx = ScoringContext(deployments=self._deployments, clients=self._pool,  # type: ignore[arg-type]
                                 evaluated_deployment=setup.spec.deployment, base_dir=self._base_dir)
            built = await asyncio.to_thread(registry.build_all, setup.metrics, ctx)
            self._built[key] = built
            while len(self._built) > self._max_runs:
                _, old = self._built.popitem(last=False)
                for m in old:
                    await m.aclose()
            return built

    async def aclose(self) -> None:
        for metrics in self._built.values():
            for m in metrics:
                await m.aclose()
        self._built.clear()
