"""MetricsService: per-instance scores (any registered metric) and the aggregates of a run or a suite.

Aggregation is the pipeline's own (``pipeline/aggregate.py``), so a run's stats from here equal its stats.json."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from medhelm.errors import ConfigError
from medhelm.pipeline.aggregate import aggregate, aggregate_rows, scored_row
from medhelm.rundir import RunDir
from medhelm.rpc import codec
from medhelm.rpc.scoring import MetricHost
from medhelm.rpc.status import LimitExceeded
from medhelm.rpc.telemetry import Telemetry, rpc_method
from medhelm.specs import InstanceResult, RunSpec
from medhelm.v1 import common_pb2, metrics_pb2, metrics_pb2_grpc

_SUITE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class MetricsServicer(metrics_pb2_grpc.MetricsServiceServicer):
    def __init__(self, telemetry: Telemetry, host: MetricHost, *, output_path: Path,
                 max_records: int = 1_000_000) -> None:
        self.telemetry, self._host, self._output = telemetry, host, Path(output_path)
        self._max_records = max_records

    @rpc_method
    async def Score(self, request: common_pb2.ScoreRequest,
                    context: grpc.aio.ServicerContext) -> common_pb2.MetricResult:
        return await self._host.score_request(request, lambda r: self.telemetry.on_scored("Score", r))

    @rpc_method
    async def ScoreStream(self, request_iterator: AsyncIterator[common_pb2.ScoreStreamRequest],
                          context: grpc.aio.ServicerContext) -> AsyncIterator[common_pb2.MetricResult]:
        async for msg in self._host.score_stream(request_iterator,
                                                 lambda r: self.telemetry.on_scored("ScoreStream", r)):
            yield msg

    @rpc_method
    async def AggregateRun(self, request_iterator: AsyncIterator[metrics_pb2.AggregateRunRequest],
                           context: grpc.aio.ServicerContext) -> metrics_pb2.RunStats:
        spec: RunSpec | None = None
        # Only (position, split, stats) of each record is kept: memory grows with the number of records,
        # never with their text, and past max_records the call is refused.
        rows: list[tuple[int, tuple | None]] = []
        async for msg in request_iterator:
            if spec is None:
                spec = codec.run_spec(msg.run_spec_json)
            if len(rows) + len(msg.instance_result_json) > self._max_records:
                raise LimitExceeded(f"more than {self._max_records} records in one AggregateRun call "
                                    f"(the server's --max-aggregate-records)")
            for line in msg.instance_result_json:
                rec = codec.loads(line, InstanceResult.from_json, "instance_result_json")
                rows.append((rec.position, scored_row(rec)))
        if spec is None:
            raise ConfigError("empty stream: the first message must carry run_spec_json", field="run_spec_json")
        rows.sort(key=lambda r: r[0])
        stats = aggregate_rows(row for _, row in rows)
        return metrics_pb2.RunStats(run=spec.name, stats_json=codec.dumps([s.to_json() for s in stats]),
                                    instances=len(rows))

    @rpc_method
    async def AggregateSuite(self, request: metrics_pb2.AggregateSuiteRequest,
                             context: grpc.aio.ServicerContext) -> metrics_pb2.SuiteStats:
        if not _SUITE.match(request.suite) or request.suite.startswith(".."):
            raise ConfigError("must be a plain suite name", field="suite")
        suite_dir = self._output / "runs" / request.suite
        if not suite_dir.is_dir():
            raise ConfigError(f"no suite '{request.suite}' in this server's results", field="suite")
        runs = []
        for path in sorted(p for p in suite_dir.iterdir() if p.is_dir()):
            run = RunDir(path)
            if not run.exists():
                continue
            status = run.status()
            if run.has_stats() and "instances_done" in status:
                stats, done = run.stats(), int(status["instances_done"])
            else:  # not collected yet: derive from the records written so far
                records = sorted(run.latest_records().values(), key=lambda r: r.position)
                stats, done = aggregate(records), len(records)
            runs.append(metrics_pb2.RunStats(run=run.spec().name, stats_json=codec.dumps([s.to_json() for s in stats]),
                                             instances=done, status=str(status.get("status", "partial"))))
        return metrics_pb2.SuiteStats(suite=request.suite, runs=runs)
