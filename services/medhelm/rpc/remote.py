"""Client-side adapters: the pipeline's Benchmark and Metric contracts, answered by the gRPC services.

``medhelm job --scenario-service/--jury-service/--metrics-service`` plugs these into the same
``run_suite`` a local run uses, so the records are the same whichever side computed them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from medhelm.benchmarks.base import PromptBudget
from medhelm.rpc import codec
from medhelm.rpc.authz import BearerToken, aio_bearer_interceptors
from medhelm.rpc.scoring import JURY_METRICS
from medhelm.rpc.status import error_from
from medhelm.rpc.tls import read_pem
from medhelm.scoring import registry
from medhelm.scoring.base import Metric, MetricResult, ScoringContext, ScoringItem
from medhelm.specs import BenchmarkSpec, Instance, MetricSpec, Prompt, RunSpec
from medhelm.v1 import common_pb2, jury_pb2_grpc, metrics_pb2_grpc, scenarios_pb2, scenarios_pb2_grpc

# Services restart (rolling updates, node drains): retry UNAVAILABLE a few times before giving up.
# round_robin over every address the name resolves to: behind the chart's headless Services that is every
# replica, so one shard's channel spreads its calls instead of pinning to one pod.
_SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [{
    "name": [{}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.5s", "maxBackoff": "8s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]},
}]})


@dataclass(frozen=True)
class Endpoint:
    """Where a service listens, and how to trust it (CA for TLS; client cert/key for mutual TLS)."""

    address: str
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    max_message_mb: int = 64
    timeout_s: float = 600.0
    token: str | None = field(default=None, repr=False)  # bearer token sent on every call (caller authorization)

    def _options(self) -> list[tuple[str, object]]:
        limit = self.max_message_mb * 1024 * 1024
        return [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit),
                ("grpc.enable_retries", 1), ("grpc.service_config", _SERVICE_CONFIG)]

    def _credentials(self) -> grpc.ChannelCredentials | None:
        if self.ca is None:
            return None
        read = {name: read_pem(path, flag) for name, path, flag in
                (("ca", self.ca, "--tls-ca"), ("cert", self.cert, "--tls-cert"), ("key", self.key, "--tls-key"))
                if path is not None}
        return grpc.ssl_channel_credentials(read["ca"], read.get("key"), read.get("cert"))

    def aio_channel(self) -> grpc.aio.Channel:
        creds = self._credentials()
        extra = aio_bearer_interceptors(self.token) if self.token else None
        if creds is None:
            return grpc.aio.insecure_channel(self.address, options=self._options(), interceptors=extra)
        return grpc.aio.secure_channel(self.address, creds, options=self._options(), interceptors=extra)

    def channel(self) -> grpc.Channel:
        creds = self._credentials()
        if creds is None:
            channel = grpc.insecure_channel(self.address, options=self._options())
        else:
            channel = grpc.secure_channel(self.address, creds, options=self._options())
        return grpc.intercept_channel(channel, BearerToken(self.token)) if self.token else channel


class RemoteBenchmark:
    """A run's benchmark whose instances and prompts come from a ScenarioService.

    The stream is the run's whole selection (the pipeline shards it by position itself, as locally);
    prompts are built server-side for the budget the pipeline asks for."""

    def __init__(self, run: RunSpec, endpoint: Endpoint, max_prompt_tokens: int | None) -> None:
        self._run, self._endpoint, self._budget = run, endpoint, max_prompt_tokens
        self._prompts: dict[str, Prompt] = {}

    @property
    def spec(self) -> BenchmarkSpec:
        return self._run.benchmark

    def instances(self) -> Iterable[Instance]:
        return [inst for inst, _ in self._fetch(self._budget)]

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        if budget.max_prompt_tokens != self._budget:  # asked for another budget than fetched: fetch again
            self._budget = budget.max_prompt_tokens
            self._fetch(self._budget)
        return self._prompts[instance.id]

    def _fetch(self, max_prompt_tokens: int | None) -> list[tuple[Instance, Prompt]]:
        request = scenarios_pb2.StreamInstancesRequest(run_spec_json=codec.dumps(self._run.to_json()),
                                                       shard_index=0, shard_count=1)
        if max_prompt_tokens is not None:
            request.max_prompt_tokens = max_prompt_tokens
        out = []
        with self._endpoint.channel() as channel:
            stub = scenarios_pb2_grpc.ScenarioServiceStub(channel)
            try:
                for item in stub.StreamInstances(request, timeout=self._endpoint.timeout_s):
                    inst = codec.loads(item.instance_json, Instance.from_json, "instance_json")
                    prompt = codec.loads(item.prompt_json, Prompt.from_json, "prompt_json")
                    out.append((inst, prompt))
            except grpc.RpcError as err:
                raise error_from(err, self._endpoint.address) from None
        self._prompts = {inst.id: prompt for inst, prompt in out}
        return out


class RemoteMetric:
    """Some of a run's metrics, scored by a JuryService or MetricsService (one unary call per instance)."""

    remote = True  # the service counts the judgements it made (medhelm_judge_failures_total), not the shard

    def __init__(self, specs: Sequence[MetricSpec], endpoint: Endpoint, *, jury: bool) -> None:
        self._specs = tuple(specs)
        self._endpoint = endpoint
        self._channel = endpoint.aio_channel()
        self._call = (jury_pb2_grpc.JuryServiceStub(self._channel).JudgeOne if jury
                      else metrics_pb2_grpc.MetricsServiceStub(self._channel).Score)
        self._setup: tuple[RunSpec, common_pb2.ScoringSetup] | None = None

    @property
    def stat_names(self) -> tuple[str, ...]:
        return tuple(name for spec in self._specs for name in registry.stat_names(spec))

    async def score(self, item: ScoringItem) -> MetricResult:
        if self._setup is None or self._setup[0] != item.run:
            self._setup = (item.run, codec.setup_message(item.run, self._specs))
        request = common_pb2.ScoreRequest(setup=self._setup[1], item=codec.item_message(item, 0))
        try:
            reply = await self._call(request, timeout=self._endpoint.timeout_s)
        except grpc.aio.AioRpcError as err:
            raise error_from(err, self._endpoint.address) from None
        return codec.metric_result(reply)

    async def aclose(self) -> None:
        await self._channel.close()


@dataclass(frozen=True)
class RemoteScoring:
    """A ``build_metrics`` for ``run_suite``: jury metrics to the JuryService, the rest to the
    MetricsService; whichever service is not given is computed in-process by the registry."""

    jury: Endpoint | None = None
    metrics: Endpoint | None = None

    def __call__(self, specs: Sequence[MetricSpec], ctx: ScoringContext) -> list[Metric]:
        jury = [s for s in specs if s.name in JURY_METRICS]
        other = [s for s in specs if s.name not in JURY_METRICS]
        built: list[Metric] = []
        for group, endpoint, is_jury in ((jury, self.jury, True), (other, self.metrics, False)):
            if not group:
                continue
            if endpoint is None:
                built.extend(registry.build_all(group, ctx))
            else:
                built.append(RemoteMetric(group, endpoint, jury=is_jury))
        return built
