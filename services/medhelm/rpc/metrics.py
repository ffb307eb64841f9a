"""MetricsService: per-instance scores (any registered metric) and the aggregates of a run or a suite.

Aggregation is the pipeline's own (``pipeline/aggregate.py``), so a run's stats from here equal its stats.json.

``AggregateRun`` folds each message's records into the pipeline's order-independent ``Aggregator`` as it
arrives, so nothing per record is kept. What a call may make the service hold is bounded by bytes, not only
by records (``AggregateLimits``; every breach ends the call with RESOURCE_EXHAUSTED and one line naming the
server flag): the records of one call (``--max-aggregate-records``), the distinct (stat, split) names, which
are the caller's (``--max-aggregate-names``, each name at most ``max_name_chars``), the bytes those names'
running sums hold (``--max-aggregate-mb``, counted before a name is kept: a pair's sums plus its two strings)
and the answer (at most ``--max-message-mb``, counted as names arrive, so an answer that could not be sent is
refused before it is built). One call therefore holds at most ``--max-aggregate-mb`` of sums plus the message
being read and folded (gRPC's buffers and the decoded message: a small multiple of ``--max-message-mb``; one
decoded record at a time), and at most ``--max-aggregate-calls`` calls are read at once (the others wait their
turn without reading): the process holds at most that many times one call (stated and measured in
docs/benchmarks.md, section *abuse-aggregate*).

Folding is CPU work in pure Python: it runs on one worker thread of the servicer, never on the event loop,
so health on the service port and every other call are answered while a long stream is folded (the loop takes
the GIL back within the server's switch interval, ``rpc/server.py``). Calls that fold at the same time take
turns on that thread, ``FOLD_CHUNK`` records at a time, so a small call waits for one chunk, not for a
16 MB message."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from medhelm.errors import ConfigError
from medhelm.pipeline.aggregate import Aggregator, aggregate, scored_row
from medhelm.rundir import RunDir
from medhelm.rpc import codec
from medhelm.rpc.scoring import MetricHost
from medhelm.rpc.status import LimitExceeded
from medhelm.rpc.telemetry import Telemetry, rpc_method
from medhelm.records import InstanceResult
from medhelm.specs import RunSpec
from medhelm.v1 import common_pb2, metrics_pb2, metrics_pb2_grpc

MB = 1024 * 1024
# One (stat, split) pair's running sums at most, its two strings aside: the Aggregator's list of nine, two lists
# of float partials (Shewchuk: at most ~40 each), big ints, the dict slot and key tuple (bench/bench_abuse.py).
PAIR_BYTES = 2048
# One Stat.to_json() in the answer without its two names: keys, two counts, six floats at 24 characters each.
STAT_JSON_BYTES = 330
FOLD_CHUNK = 1000  # records folded per turn on the fold thread


@dataclass(frozen=True)
class AggregateLimits:
    """What one AggregateRun call may make the service hold (the module docstring)."""

    max_records: int = 1_000_000
    max_names: int = 10_000  # distinct (stat, split) pairs; a real run has tens
    max_name_chars: int = 256  # one stat or split name
    max_held_mb: int = 32  # the pairs' running sums and names, counted before each new pair is kept
    max_answer_mb: int = 16  # the RunStats answer (the server's --max-message-mb)
    max_calls: int = 4  # AggregateRun calls read and folded at once; more wait their turn, reading nothing


class _Fold:
    """One call's Aggregator, each caller-chosen name counted against the limits before it is kept."""

    def __init__(self, limits: AggregateLimits) -> None:
        self.limits, self.agg = limits, Aggregator()
        self.records, self.held, self.answer = 0, 0, 2  # the answer's "[]"

    def add(self, lines: Sequence[str]) -> None:
        limits = self.limits
        if self.records + len(lines) > limits.max_records:
            raise LimitExceeded(f"more than {limits.max_records:,} records in one AggregateRun call "
                                f"(the server's --max-aggregate-records)")
        for line in lines:
            row = scored_row(codec.loads(line, InstanceResult.from_json, "instance_result_json"))
            if row is None:
                continue
            split, stats = row
            for name in stats:
                if (name, split) not in self.agg:
                    self._admit(name, split)
            self.agg.add(row)
        self.records += len(lines)

    def _admit(self, name: str, split: str) -> None:
        limits = self.limits
        longest = max(len(name), len(split))
        if longest > limits.max_name_chars:
            raise LimitExceeded(f"a stat or split name of {longest:,} characters in AggregateRun (this server "
                                f"takes names of at most {limits.max_name_chars:,})")
        if len(self.agg) >= limits.max_names:
            raise LimitExceeded(f"more than {limits.max_names:,} distinct (stat, split) names in one AggregateRun "
                                f"call (the server's --max-aggregate-names)")
        self.held += PAIR_BYTES + sys.getsizeof(name) + sys.getsizeof(split)
        if self.held > limits.max_held_mb * MB:
            raise LimitExceeded(f"the stats of this AggregateRun call would hold more than {limits.max_held_mb} MB "
                                f"(the server's --max-aggregate-mb)")
        self.answer += STAT_JSON_BYTES + len(codec.dumps(name).encode()) + len(codec.dumps(split).encode()) + 1
        if self.answer > limits.max_answer_mb * MB:
            raise LimitExceeded(f"the answer of this AggregateRun call would exceed {limits.max_answer_mb} MB "
                                f"(the server's --max-message-mb)")

    def answer_json(self) -> str:
        text = codec.dumps([s.to_json() for s in self.agg.stats()])
        if len(text.encode()) > self.limits.max_answer_mb * MB:  # the running count above is an upper bound
            raise LimitExceeded(f"the answer of this AggregateRun call would exceed {self.limits.max_answer_mb} MB "
                                f"(the server's --max-message-mb)")
        return text


_SUITE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class MetricsServicer(metrics_pb2_grpc.MetricsServiceServicer):
    def __init__(self, telemetry: Telemetry, host: MetricHost, *, output_path: Path,
                 limits: AggregateLimits = AggregateLimits()) -> None:
        self.telemetry, self._host, self._output = telemetry, host, Path(output_path)
        self._limits = limits
        self._folder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aggregate")
        self._turns = asyncio.Semaphore(limits.max_calls)

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
        async with self._turns:  # a message being read costs a multiple of its size: a few calls at a time
            return await self._aggregate(request_iterator)

    async def _aggregate(self, request_iterator: AsyncIterator[metrics_pb2.AggregateRunRequest]) -> metrics_pb2.RunStats:
        spec: RunSpec | None = None
        fold = _Fold(self._limits)
        loop = asyncio.get_running_loop()
        async for msg in request_iterator:
            if spec is None:
                spec = codec.run_spec(msg.run_spec_json)
            lines = msg.instance_result_json
            for start in range(0, len(lines), FOLD_CHUNK):  # a chunk at a time: other calls' chunks in between
                await loop.run_in_executor(self._folder, fold.add, lines[start:start + FOLD_CHUNK])
        if spec is None:
            raise ConfigError("empty stream: the first message must carry run_spec_json", field="run_spec_json")
        stats_json = await loop.run_in_executor(self._folder, fold.answer_json)
        return metrics_pb2.RunStats(run=spec.name, stats_json=stats_json, instances=fold.records)

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
