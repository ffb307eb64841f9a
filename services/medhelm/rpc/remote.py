"""Client-side adapters: the pipeline's Benchmark and Metric contracts, answered by the gRPC services.

``medhelm job --scenario-service/--jury-service/--metrics-service`` plugs these into the same
``run_suite`` a local run uses, so the records are the same whichever side computed them.

The services take file arguments only as names relative to their benchmark root (``rpc/owned.py``): the
run spec a service is sent has each of them (``config_path=``, ``data_path=``, ``jury_config_path=``,
``prompt_path=``) rewritten as its path relative to ``Endpoint.benchmark_roots``, the folder the job shares
with the services (``--benchmark-root``; in the chart, the data volume). A file outside them is a
``ConfigError`` naming the run and the field, before anything is sent (``names_for``).

A service that is down (a restart, a drain, a rolling update: UNAVAILABLE without the service's
``medhelm-upstream`` marker) is waited for: each call is retried with jittered exponential backoff (0.5 s
doubling to 10 s) until ``Endpoint.retry_s`` (default 120 s, ``MEDHELM_SERVICE_RETRY_S``) has passed, then it
fails as ``ServerUnreachable`` naming the service. Scoring calls are idempotent and an instance stream is
re-read from its start, so a retry never duplicates anything. A failure of the model behind the service (the
marker) is not retried here: the instance fails as it would locally, and the next run retries it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from medhelm.benchmarks import configurable
from medhelm.benchmarks.base import PromptBudget
from medhelm.errors import ConfigError
from medhelm.rpc import codec
from medhelm.rpc.authz import BearerToken, aio_bearer_interceptors
from medhelm.rpc.scoring import JURY_METRICS
from medhelm.rpc.status import error_from, service_down
from medhelm.rpc.tls import read_pem
from medhelm.scoring import registry
from medhelm.scoring.base import Metric, MetricResult, ScoringContext, ScoringItem
from medhelm.specs import BenchmarkSpec, FrozenMap, Instance, MetricSpec, Prompt, RunSpec
from medhelm.v1 import common_pb2, jury_pb2_grpc, metrics_pb2_grpc, scenarios_pb2, scenarios_pb2_grpc

# Transparent retries of UNAVAILABLE inside gRPC (a few, over seconds); the bounded wait for a service that is
# down for longer (a restart) is the loop around each call (_Patience, Endpoint.retry_s).
# round_robin over every address the name resolves to: behind the chart's headless Services that is every
# replica, so one shard's channel spreads its calls instead of pinning to one pod.
_SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [{
    "name": [{}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.5s", "maxBackoff": "8s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]},
}]})


DEFAULT_RETRY_S = 120.0  # longer than a pod restart or a rolling update of one replica
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 0.5, 10.0


def default_retry_s() -> float:
    """``MEDHELM_SERVICE_RETRY_S`` (seconds, >= 0), else ``DEFAULT_RETRY_S``."""
    raw = os.environ.get("MEDHELM_SERVICE_RETRY_S", "")
    try:
        value = float(raw) if raw else DEFAULT_RETRY_S
    except ValueError:
        raise ConfigError(f"MEDHELM_SERVICE_RETRY_S must be a number of seconds, got {raw[:40]!r}") from None
    if not 0 <= value <= 86_400:
        raise ConfigError("MEDHELM_SERVICE_RETRY_S must be between 0 and 86400 seconds")
    return value


class _Patience:
    """The retry budget of one call: ``wait()`` gives the next backoff delay, or None once it is spent."""

    def __init__(self, budget_s: float) -> None:
        self._deadline = time.monotonic() + budget_s
        self._delay = _BACKOFF_FIRST_S
        self.attempts = 1

    def wait(self) -> float | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            return None
        delay = min(left, random.uniform(self._delay / 2, self._delay))  # jitter: shards do not retry in step
        self._delay = min(self._delay * 2, _BACKOFF_MAX_S)
        self.attempts += 1
        return delay


def _gave_up(err: grpc.RpcError, address: str, patience: _Patience, budget_s: float):
    from medhelm.errors import ServerUnreachable

    details = (err.details() if hasattr(err, "details") else "") or "UNAVAILABLE"
    return ServerUnreachable(f"service {address} unavailable: gave up after {patience.attempts} attempt(s), "
                             f"retry budget {budget_s:g} s ({details})")


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
    benchmark_roots: tuple[Path, ...] = ()  # the folder(s) shared with the services: file args are sent as names
    retry_s: float = field(default_factory=default_retry_s)  # how long a call waits for a service that is down

    def _options(self) -> list[tuple[str, object]]:
        limit = self.max_message_mb * 1024 * 1024
        # reconnect at most 5 s apart: gRPC's default backs off to 120 s, longer than the whole retry budget
        return [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit),
                ("grpc.enable_retries", 1), ("grpc.service_config", _SERVICE_CONFIG),
                ("grpc.initial_reconnect_backoff_ms", 500), ("grpc.min_reconnect_backoff_ms", 500),
                ("grpc.max_reconnect_backoff_ms", 5000)]

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


def names_for(run: RunSpec, roots: Sequence[Path]) -> RunSpec:
    """``run`` as a service is sent it: every file argument a name relative to one of ``roots``.

    Absolute paths (and relative ones found from the working directory, as the planner found them) are
    rewritten; a relative value that is not a file here is sent as it is (a name the service resolves).
    A file outside every root is a ConfigError: the service could not, and must not, open it."""
    from medhelm.confine import inside, real, roots_of, shown
    from medhelm.rpc.owned import PATH_ARGS, _is_builtin_jury, check_name

    resolved_roots = roots_of(roots)
    args = dict(run.benchmark_args)
    for key in PATH_ARGS:
        value = str(args.get(key) or "")
        if not value or (key == "jury_config_path" and _is_builtin_jury(value)):
            continue
        given = Path(value).expanduser()
        here = given if given.is_absolute() else Path.cwd() / given
        if not given.is_absolute() and not here.exists():
            args[key] = check_name(value, key)
            continue
        path = real(here)
        root = next((r for r in resolved_roots if inside(path, r)), None)
        if root is None or path == root:
            raise ConfigError(f"run '{run.name}': {key} '{shown(value)}' is not under a --benchmark-root folder "
                              f"(env MEDHELM_BENCHMARK_ROOTS): the services are sent file names relative to the "
                              f"folder they share with this job", field=key)
        args[key] = path.relative_to(root).as_posix()
    return dataclasses.replace(run, benchmark_args=FrozenMap(args))


class RemoteBenchmark:
    """A run's benchmark whose instances and prompts come from a ScenarioService.

    The stream is the run's whole selection (the pipeline shards it by position itself, as locally);
    prompts are built server-side for the budget the pipeline asks for."""

    def __init__(self, run: RunSpec, endpoint: Endpoint, max_prompt_tokens: int | None) -> None:
        self._run, self._endpoint, self._budget = run, endpoint, max_prompt_tokens
        self._wire = names_for(run, endpoint.benchmark_roots)  # refused here, before a call, when not shared
        self._prompts: dict[str, Prompt] = {}

    @property
    def spec(self) -> BenchmarkSpec:
        return self._run.benchmark

    def instances(self) -> Iterable[Instance]:
        return [inst for inst, _ in self._fetch(self._budget)]

    def record_instance(self, instance: Instance) -> Instance:
        """What the record keeps of an instance: the rule the benchmark applies in one process (a configurable
        benchmark, the one run with ``config_path=``, leaves ``extra`` out), so a sharded run's records equal a
        single process's byte for byte."""
        return configurable.record_instance(instance) if "config_path" in self._run.benchmark_args else instance

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        if budget.max_prompt_tokens != self._budget:  # asked for another budget than fetched: fetch again
            self._budget = budget.max_prompt_tokens
            self._fetch(self._budget)
        return self._prompts[instance.id]

    def _fetch(self, max_prompt_tokens: int | None) -> list[tuple[Instance, Prompt]]:
        request = scenarios_pb2.StreamInstancesRequest(run_spec_json=codec.dumps(self._wire.to_json()),
                                                       shard_index=0, shard_count=1)
        if max_prompt_tokens is not None:
            request.max_prompt_tokens = max_prompt_tokens
        patience = _Patience(self._endpoint.retry_s)
        with self._endpoint.channel() as channel:
            stub = scenarios_pb2_grpc.ScenarioServiceStub(channel)
            while True:
                out = []  # a retried stream is read again from its start: nothing twice
                try:
                    for item in stub.StreamInstances(request, timeout=self._endpoint.timeout_s):
                        inst = codec.loads(item.instance_json, Instance.from_json, "instance_json")
                        prompt = codec.loads(item.prompt_json, Prompt.from_json, "prompt_json")
                        out.append((inst, prompt))
                    break
                except grpc.RpcError as err:
                    if not service_down(err):
                        raise error_from(err, self._endpoint.address) from None
                    delay = patience.wait()
                    if delay is None:
                        raise _gave_up(err, self._endpoint.address, patience, self._endpoint.retry_s) from None
                    time.sleep(delay)
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
            wire = names_for(item.run, self._endpoint.benchmark_roots)
            self._setup = (item.run, codec.setup_message(wire, self._specs))
        request = common_pb2.ScoreRequest(setup=self._setup[1], item=codec.item_message(item, 0))
        patience = _Patience(self._endpoint.retry_s)
        while True:
            try:
                reply = await self._call(request, timeout=self._endpoint.timeout_s)
                return codec.metric_result(reply)
            except grpc.aio.AioRpcError as err:
                if not service_down(err):
                    raise error_from(err, self._endpoint.address) from None
                delay = patience.wait()
                if delay is None:
                    raise _gave_up(err, self._endpoint.address, patience, self._endpoint.retry_s) from None
                await asyncio.sleep(delay)

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
