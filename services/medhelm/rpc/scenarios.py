"""ScenarioService: the catalogue, one benchmark's spec, and the instances (with prompts) of a run's shard.

Selection and sharding are the pipeline's (``stream_run``, ``Shard``): a shard streamed from here
holds exactly the positions ``medhelm run`` would evaluate in that shard.

Callers name benchmarks; file arguments are confined to the operator's roots (``owned.py``). A stream
builds each prompt as it is sent and waits for the client to take it (gRPC flow control), so a stalled
client holds one shared copy of the benchmark and a message, not the whole shard."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import grpc

from medhelm.benchmarks.base import Benchmark, PromptBudget
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.pipeline import Shard
from medhelm.pipeline.sampling import stream_run
from medhelm.rpc import codec
from medhelm.rpc.owned import ServerBenchmarks
from medhelm.rpc.telemetry import Telemetry, rpc_method
from medhelm.runentries import parse_run_entry
from medhelm.specs import BenchmarkSpec, FrozenMap, RunSpec
from medhelm.v1 import scenarios_pb2, scenarios_pb2_grpc


class ScenarioServicer(scenarios_pb2_grpc.ScenarioServiceServicer):
    def __init__(self, telemetry: Telemetry, *, benchmarks: ServerBenchmarks) -> None:
        self.telemetry = telemetry
        self._benchmarks = benchmarks

    @rpc_method
    async def ListBenchmarks(self, request: scenarios_pb2.ListBenchmarksRequest,
                             context: grpc.aio.ServicerContext) -> scenarios_pb2.ListBenchmarksResponse:
        from medhelm.benchmarks.catalogue import all_entries

        specs = [e.spec({}) for e in all_entries()]
        if request.category:
            specs = [s for s in specs if s.category == request.category]
            if not specs:
                raise ConfigError(f"no benchmark in category '{request.category}'", field="category")
        return scenarios_pb2.ListBenchmarksResponse(benchmarks=[_info(s) for s in specs])

    @rpc_method
    async def DescribeBenchmark(self, request: scenarios_pb2.DescribeBenchmarkRequest,
                                context: grpc.aio.ServicerContext) -> scenarios_pb2.BenchmarkInfo:
        bench = await asyncio.to_thread(self._resolve, request.name, FrozenMap(dict(request.args)))
        return _info(bench.spec)

    @rpc_method
    async def StreamInstances(self, request: scenarios_pb2.StreamInstancesRequest,
                              context: grpc.aio.ServicerContext) -> AsyncIterator[scenarios_pb2.InstanceItem]:
        spec = codec.run_spec(request.run_spec_json)
        shard = Shard(request.shard_index, request.shard_count) if request.shard_count > 1 else None
        budget = PromptBudget(max_prompt_tokens=request.max_prompt_tokens
                              if request.HasField("max_prompt_tokens") else None)
        bench = await asyncio.to_thread(self._for_run, spec)
        instances = await asyncio.to_thread(stream_run, bench, spec)  # the sample, read as it is sent
        for position, instance in enumerate(instances):
            if shard is None or shard.owns(position):
                prompt = bench.prompt(instance, budget)
                self.telemetry.items.labels(self.telemetry.service, "StreamInstances").inc()
                yield scenarios_pb2.InstanceItem(position=position, instance_json=codec.dumps(instance.to_json()),
                                                 prompt_json=codec.dumps(prompt.to_json()))

    def _resolve(self, name: str, args: FrozenMap) -> Benchmark:
        return self._benchmarks.resolve(name, args)  # paths confined to the operator's roots

    def _for_run(self, spec: RunSpec) -> Benchmark:
        bench = self._resolve(parse_run_entry(spec.entry).name, spec.benchmark_args)
        # Metrics are resolved at plan time (judges filled in); everything else must match, or the
        # server's catalogue is not the client's and its prompts would differ.
        if _without_metrics(bench.spec) != _without_metrics(spec.benchmark):
            raise DataUnavailable(f"benchmark '{spec.benchmark.name}' on this server differs from the client's "
                                  f"(different medhelm versions or config files?)")
        return bench


def _without_metrics(spec: BenchmarkSpec) -> BenchmarkSpec:
    return dataclasses.replace(spec, metrics=())


def _info(spec: BenchmarkSpec) -> scenarios_pb2.BenchmarkInfo:
    return scenarios_pb2.BenchmarkInfo(name=spec.name, category=spec.category, subcategory=spec.subcategory,
                                       access=spec.access.value, main_metric=spec.main_metric,
                                       spec_json=codec.dumps(spec.to_json()))
