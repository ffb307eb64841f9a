"""What the Jury and Metrics servicers share: build a run's metrics once, score items with them.

The metrics are the registry's own (``scoring.registry.build_all``), reached through one ClientPool,
so a remote score is the same computation as a local one.

The server owns what a metric may reach (``owned.py``): with ``benchmarks`` set, the run's benchmark is
resolved on the server and the caller's metric specs must be among the ones the server resolves for it
(its judges, rubrics, prompt templates and arguments), otherwise INVALID_ARGUMENT; the EHRSQL database
is the server's copy's, opened read-only with the server's time limit as a cap. CPU-heavy metrics run
in the service's scoring processes (``cpu``, ``scoring/cpu.py``): health and new calls are answered
meanwhile. ``benchmarks=None`` (``--allow-caller-metrics``) trusts the caller's specs, still without
caller database paths."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from medhelm.deployments import DeploymentRegistry
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.pipeline.execute import merge_results
from medhelm.rpc import codec
from medhelm.rpc.owned import ServerBenchmarks
from medhelm.rpc.status import LimitExceeded
from medhelm.runentries import parse_run_entry
from medhelm.scoring import registry
from medhelm.scoring.base import Metric, MetricResult, ScoringContext, ScoringItem
from medhelm.scoring.cpu import CpuPool
from medhelm.specs import MetricSpec, RunSpec
from medhelm.v1 import common_pb2

JURY_METRICS = frozenset({"jury_score"})  # registry names whose factory calls judge models
SQL_METRICS = frozenset({"ehr_sql_execution_accuracy"})  # registry names that open a database
MAX_ITEM_BYTES = 1024 * 1024  # one instance + prompt + completion; far above any real clinical note
log = logging.getLogger("medhelm.rpc")


@dataclass(frozen=True)
class Setup:
    spec: RunSpec
    metrics: tuple[MetricSpec, ...]
    database: Path | None = None  # the EHRSQL database the server chose for this run's benchmark


class MetricHost:
    def __init__(self, deployments: DeploymentRegistry, pool: object, *, base_dir: Path = Path("."),
                 accept: Callable[[MetricSpec], bool] = lambda spec: True, what: str = "metric",
                 max_runs: int = 16, max_concurrency: int = 16,
                 benchmarks: ServerBenchmarks | None = None, max_query_s: float = 10.0,
                 max_item_bytes: int = MAX_ITEM_BYTES, cpu: CpuPool | None = None) -> None:
        self._deployments, self._pool, self._base_dir = deployments, pool, base_dir
        self._accept, self._what = accept, what
        self._built: OrderedDict[tuple, list[Metric]] = OrderedDict()
        self._max_runs = max_runs
        self._lock = asyncio.Lock()
        self.max_concurrency = max_concurrency
        self._benchmarks, self._max_query_s, self._max_item_bytes = benchmarks, max_query_s, max_item_bytes
        self._owned: OrderedDict[tuple, tuple[tuple[MetricSpec, ...], Path | None]] = OrderedDict()
        self._cpu = cpu  # worker processes for CPU-heavy metrics: scoring never holds this process's GIL long

    async def setup(self, msg: common_pb2.ScoringSetup) -> Setup:
        spec = codec.run_spec(msg.run_spec_json, "setup.run_spec_json")
        metrics = codec.metric_specs(msg.metric_spec_json, "setup.metric_spec_json") or \
            tuple(m for m in spec.benchmark.metrics if self._accept(m))
        if not metrics:
            raise ConfigError(f"run '{spec.name}' has no {self._what} to score", field="setup.metric_spec_json")
        for m in metrics:
            if not self._accept(m):
                raise ConfigError(f"'{m.name}' is not a {self._what}", field="setup.metric_spec_json")
            registry.lookup(m).validate(m)
        database = None
        if self._benchmarks is not None:
            allowed, database = await self._server_metrics(spec)
            for m in metrics:
                if m not in allowed:
                    raise ConfigError(f"metric '{m.name}' differs from benchmark '{spec.benchmark.name}' as configured "
                                      f"on this server (judges, prompts and arguments are the server's)",
                                      field="setup.metric_spec_json")
        elif any(m.name in SQL_METRICS for m in metrics):
            raise ConfigError("EHRSQL is scored only against the server's own copy of the benchmark "
                              "(start the service without --allow-caller-metrics)", field="setup.metric_spec_json")
        return Setup(spec, metrics, database)

    async def _server_metrics(self, spec: RunSpec) -> tuple[tuple[MetricSpec, ...], Path | None]:
        """The run's metrics as the server resolves them (its files, deployments and jury), and its database."""
        key = (parse_run_entry(spec.entry).name, tuple(sorted(spec.benchmark_args.items())), spec.deployment)
        if key in self._owned:
            return self._owned[key]
        assert self._benchmarks is not None
        with self._benchmarks.hiding_paths():
            found = await asyncio.to_thread(self._resolve_metrics, key[0], spec)
        self._owned[key] = found
        while len(self._owned) > self._max_runs:
            self._owned.popitem(last=False)
        return found

    def _resolve_metrics(self, name: str, spec: RunSpec) -> tuple[tuple[MetricSpec, ...], Path | None]:
        assert self._benchmarks is not None
        args = self._benchmarks.args(spec.benchmark_args)  # the names, as the server's own paths
        bench = self._benchmarks.resolve(name, spec.benchmark_args)
        rctx = registry.ResolveContext(benchmark_args=args, base_dir=self._base_dir, deployments=self._deployments,
                                       evaluated_deployment=spec.deployment,
                                       warn=lambda msg: log.warning("%s", msg))
        metrics = registry.resolve_all(bench.spec.metrics, rctx)
        database = None
        if any(m.name in SQL_METRICS for m in metrics):
            first = next(iter(bench.instances()), None)
            raw = first.extra.get("db_path") if first is not None else None
            database = Path(str(raw)) if raw else None
            if database is None or not database.is_file():
                raise DataUnavailable(f"benchmark '{bench.spec.name}': its database is not on this server")
        return metrics, database

    def item(self, setup: Setup, msg: common_pb2.ScoringItem) -> ScoringItem:
        """Decode one item, refused past the per-item cap (scoring work grows with its text)."""
        size = msg.ByteSize()
        if size > self._max_item_bytes:
            raise LimitExceeded(f"item at position {msg.position} is {size:,} bytes; this server scores items of at "
                                f"most {self._max_item_bytes:,} bytes")
        return codec.scoring_item(setup.spec, msg)

    async def score(self, setup: Setup, item: ScoringItem) -> MetricResult:
        metrics = await self._metrics(setup)
        results = await asyncio.gather(*(m.score(item) for m in metrics))
        return merge_results(results)

    async def score_request(self, request: common_pb2.ScoreRequest,
                            on_result: Callable[[MetricResult], None]) -> common_pb2.MetricResult:
        """A unary call: decode, score, report, encode."""
        setup = await self.setup(request.setup)
        result = await self.score(setup, self.item(setup, request.item))
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
        setup = await self.setup(first.setup)
        # Bounded both ways: at most max_concurrency items are being scored, and at most max_concurrency
        # results wait for a client that does not read them (then scoring, and reading its items, pauses).
        queue: asyncio.Queue[common_pb2.MetricResult | BaseException | None] = \
            asyncio.Queue(maxsize=self.max_concurrency)
        gate = asyncio.Semaphore(self.max_concurrency)
        tasks: set[asyncio.Task] = set()

        async def one(msg: common_pb2.ScoringItem) -> None:
            try:
                got: common_pb2.MetricResult | BaseException
                try:
                    result = await self.score(setup, self.item(setup, msg))
                    on_result(result)
                    got = codec.result_message(result, msg.position)
                except Exception as err:  # noqa: BLE001 - handed to the reader, which raises it
                    got = err
                await queue.put(got)
            finally:
                gate.release()

        async def feed() -> None:
            end: BaseException | None = None
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
            except Exception as err:  # noqa: BLE001
                end = err
            await queue.put(end)

        feeder = asyncio.create_task(feed())
        try:
            while (got := await queue.get()) is not None:
                if isinstance(got, BaseException):
                    raise got
                yield got
        finally:  # the stream ended, failed or was cancelled: nothing waits for what is still running
            feeder.cancel()
            for task in list(tasks):
                task.cancel()

    async def _metrics(self, setup: Setup) -> list[Metric]:
        key = (setup.metrics, setup.spec.deployment, setup.database)
        async with self._lock:
            if key in self._built:
                self._built.move_to_end(key)
                return self._built[key]
            ctx = ScoringContext(deployments=self._deployments, clients=self._pool,  # type: ignore[arg-type]
                                 evaluated_deployment=setup.spec.deployment, base_dir=self._base_dir,
                                 untrusted_items=True, sql_database=setup.database, max_query_s=self._max_query_s,
                                 cpu=self._cpu)
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
        if self._cpu is not None:
            await self._cpu.aclose()
