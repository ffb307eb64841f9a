"""Prometheus metrics of every process that evaluates: ``medhelm run``, a ``medhelm job`` shard, the services.

One ``Telemetry`` per process holds its own registry (no global state) with the default process,
platform and GC collectors and ``medhelm_build_info``. The inference pool and the pipeline report
to it through *bound* handles (``bind_client(deployment, role)``, ``bind_run(deployment, benchmark)``)
whose label children are resolved once, so a request costs a few counter increments and no label
lookups (the hot path stays cheap).

What is counted (names in docs/observability.md):

* per model request (``generate`` call): its outcome (``ok`` | ``error`` | ``cached``), its wall time
  including retries and back-off (cache hits excluded), tokens of requests that reached a model, tokens
  served from the cache apart, cost so far from the price table;
* per attempt (an HTTP call or an in-process generation): its result code (``200``, ``429``, ``500``,
  ``malformed``, ``transport``, ``unreachable`` ...), its wall time, retries, attempts in flight;
* per run: instances planned, resumed (found finished on disk), done, failed (``error``: the server
  refused the request for good; ``retries_exhausted``: left for the next run), unscored (main stat None);
* per judgement: judge failures by judge, criterion and status.

Labels are deployment, role (candidate | judge), benchmark, outcome/code/reason, judge, criterion and
status names: all bounded by configuration, never instance ids, prompts, answers or error messages.
Failure semantics: a metric update never raises into the pipeline (prometheus_client does not raise on
inc/observe); exporting is best effort and never stops a run.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from typing import TYPE_CHECKING

from medhelm.errors import InferenceError, ServerUnreachable
from medhelm.records import JudgeScore
from medhelm.specs import Completion, Deployment

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_client import Counter

# Model calls take from milliseconds (cache-warm small models) to minutes (long notes on a busy GPU).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

CANDIDATE, JUDGE = "candidate", "judge"


@dataclass(frozen=True)
class Rates:
    """USD per prompt token, per completion token, per second of model time (GPU-priced deployments)."""

    prompt: float = 0.0
    completion: float = 0.0
    per_second: float = 0.0


def rates_from(prices: object | None, deployment: Deployment) -> Rates | None:
    """The deployment's rates from a ``store.costs.PriceTable`` (by deployment, then model name); None = no price.

    A GPU-priced deployment is charged for the model time of its attempts (the summarize cost uses the
    runs' wall time, which only exists at the end)."""
    by_name: Mapping[str, object] = getattr(prices, "by_name", None) or {}
    price = by_name.get(deployment.name) or by_name.get(deployment.model_name)
    if price is None:
        return None
    gpu_hour = getattr(price, "gpu_hour", None)
    if gpu_hour is not None:
        return Rates(per_second=gpu_hour * getattr(price, "gpus", 1.0) / 3600.0)
    return Rates(prompt=(getattr(price, "input_per_million", None) or 0.0) / 1e6,
                 completion=(getattr(price, "output_per_million", None) or 0.0) / 1e6)


def attempt_code(err: InferenceError | None) -> str:
    """The bounded label of one attempt's result: the HTTP status, or what went wrong without one."""
    if err is None:
        return "200"
    if isinstance(err, ServerUnreachable):
        return "unreachable"
    if err.status is None:
        return "transport"  # timed out, connection reset mid-request
    if 200 <= err.status < 300:
        return "malformed"  # a 200 whose body was not a completion
    return str(err.status)


class Telemetry:
    """The metrics of one process. ``service`` names it in ``medhelm_build_info`` (run, job, jury ...)."""

    def __init__(self, service: str, *, prices: object | None = None) -> None:
        # prometheus_client is imported here, not at module level: a run without --metrics-port only needs
        # the null handles below, and the import costs CPU before its first model request.
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
        from prometheus_client.gc_collector import GCCollector
        from prometheus_client.platform_collector import PlatformCollector
        from prometheus_client.process_collector import ProcessCollector

        from medhelm.version import __version__

        self.service = service
        self.prices = prices
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Info("medhelm_build", "version of the medhelm code serving these metrics", registry=r).info(
            {"version": __version__, "service": service, "python": platform.python_version()})
        cl = ["deployment", "role"]
        self.model_requests = Counter("medhelm_model_requests", "model/judge requests (generate calls) by outcome: "
                                      "ok, error (failed for good, after retries), cached (answered by the cache)",
                                      [*cl, "outcome"], registry=r)
        self.attempts = Counter("medhelm_model_attempts", "calls that reached (or tried to reach) a model, by result "
                                "code (HTTP status, malformed, transport, unreachable)", [*cl, "code"], registry=r)
        self.retries = Counter("medhelm_model_retries", "attempts that failed and were retried", cl, registry=r)
        self.in_flight = Gauge("medhelm_model_requests_in_flight", "attempts being served by a model right now",
                               cl, registry=r)
        self.tokens = Counter("medhelm_tokens", "tokens of requests that reached a model (kind: prompt, "
                              "completion, reasoning: the part of completion spent thinking, where the provider "
                              "states it)", [*cl, "kind"], registry=r)
        self.cached_tokens = Counter("medhelm_cached_tokens", "tokens of answers served from the request cache "
                                     "(no model used them)", [*cl, "kind"], registry=r)
        self.attempt_latency = Histogram("medhelm_model_attempt_duration_seconds", "wall time of one attempt "
                                         "(failed ones included)", cl, buckets=LATENCY_BUCKETS, registry=r)
        self.request_latency = Histogram("medhelm_model_request_duration_seconds", "wall time of one request "
                                         "including its retries and back-off (cache hits excluded)", cl,
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.cost = Counter("medhelm_cost_usd", "cost so far from the price table (deployments with a price only)",
                            cl, registry=r)
        rl = ["deployment", "benchmark"]
        self.planned = Counter("medhelm_instances_planned", "instances this process was given to evaluate",
                               rl, registry=r)
        self.resumed = Counter("medhelm_instances_resumed", "planned instances found finished on disk (resume)",
                               rl, registry=r)
        self.done = Counter("medhelm_instances_done", "instances evaluated and recorded with scores", rl,
                            registry=r)
        self.failed = Counter("medhelm_instances_failed", "instances that failed (reason: error = the server "
                              "refused for good, recorded; retries_exhausted = left for the next run)",
                              [*rl, "reason"], registry=r)
        self.unscored = Counter("medhelm_instances_unscored", "recorded instances whose main stat is unscored",
                                rl, registry=r)
        self.runs_active = Gauge("medhelm_runs_in_progress", "runs being evaluated by this process", rl, registry=r)
        self.last_progress = Gauge("medhelm_last_progress_timestamp_seconds", "when an instance last finished "
                                   "(done or failed) in this process (unix)", registry=r)
        self.last_progress.set(time.time())
        self.judge_failures = Counter("medhelm_judge_failures", "judge scores that are not ok (status: unscored = "
                                      "unparseable answer, error = the judge refused)", ["judge", "criterion",
                                                                                          "status"], registry=r)
        self.judgements = Counter("medhelm_judgements", "judge scores produced (any status)", ["judge"], registry=r)
        dl = ["deployment"]
        self.pacing_limit = Gauge("medhelm_pacing_limit", "requests a deployment may have in flight now (adaptive "
                                  "concurrency, --max-concurrency auto)", dl, registry=r)
        self.pacing_plateau = Gauge("medhelm_pacing_plateau", "the concurrency past which the deployment's "
                                    "throughput stopped growing, as last measured", dl, registry=r)
        self.rate_limited = Counter("medhelm_rate_limited", "attempts the server refused as too many (429, 503, "
                                    "529 overloaded): each halves an adaptive limit", dl, registry=r)
        self.pacing_wait = Counter("medhelm_pacing_wait_seconds", "time requests waited to start: for a slot, "
                                   "the rate budget or a server's Retry-After", dl, registry=r)
        self.pacing_learnt_requests = Gauge("medhelm_pacing_learnt_requests_per_second", "the request rate "
                                            "auto learnt from a gateway's 429s (no rate headers)", dl, registry=r)
        self.pacing_learnt_tokens = Gauge("medhelm_pacing_learnt_tokens_per_second", "the token rate auto learnt "
                                          "from a gateway's 429s (the client's estimate of tokens)", dl, registry=r)

    # -- binding (once per client / run) -----------------------------------------------------
    def bind_client(self, deployment: Deployment, role: str = CANDIDATE) -> ClientMetrics:
        return ClientMetrics(self, deployment, role)

    def bind_run(self, deployment: str, benchmark: str) -> RunMetrics:
        return RunMetrics(self, deployment, benchmark)

    def bind_pacing(self, deployment: Deployment) -> PacingMetrics:
        return PacingMetrics(self, deployment.name)

    def on_judgements(self, judgements: Iterable[JudgeScore]) -> None:
        for j in judgements:
            self.judgements.labels(j.judge).inc()
            if j.status.value != "ok":
                self.judge_failures.labels(j.judge, j.criterion, j.status.value).inc()


class PacingMetrics:
    """One deployment's pacer gauges (``inference/pacing.Pacer`` calls these; candidate and judge share them)."""

    __slots__ = ("_limit", "_plateau", "_limited", "_wait", "_t", "_deployment")

    def __init__(self, t: Telemetry, deployment: str) -> None:
        self._limit, self._plateau = t.pacing_limit.labels(deployment), t.pacing_plateau.labels(deployment)
        self._limited, self._wait = t.rate_limited.labels(deployment), t.pacing_wait.labels(deployment)
        self._t, self._deployment = t, deployment  # the learnt rates' series appear once a rate is learnt

    def limit_changed(self, limit: int, plateau: int | None) -> None:
        self._limit.set(limit)
        if plateau is not None:
            self._plateau.set(plateau)

    def rate_limited(self) -> None:
        self._limited.inc()

    def waited(self, seconds: float) -> None:
        self._wait.inc(seconds)

    def rate_learnt(self, requests_per_s: float, tokens_per_s: float | None) -> None:
        self._t.pacing_learnt_requests.labels(self._deployment).set(requests_per_s)
        if tokens_per_s is not None:
            self._t.pacing_learnt_tokens.labels(self._deployment).set(tokens_per_s)


class ClientMetrics:
    """One (deployment, role)'s children, resolved once; the pool calls these per request / attempt."""

    __slots__ = ("_t", "_labels", "_ok", "_error", "_cached", "_retries", "_in_flight", "_tok_p", "_tok_c", "_tok_r",
                 "_ctok_p", "_ctok_c", "_attempt_latency", "_request_latency", "_codes", "_rates", "_cost")

    def __init__(self, t: Telemetry, deployment: Deployment, role: str) -> None:
        name = deployment.name
        self._t, self._labels = t, (name, role)
        self._ok, self._error, self._cached = (t.model_requests.labels(name, role, o) for o in ("ok", "error", "cached"))
        self._retries = t.retries.labels(name, role)
        self._in_flight = t.in_flight.labels(name, role)
        self._tok_p, self._tok_c = t.tokens.labels(name, role, "prompt"), t.tokens.labels(name, role, "completion")
        self._tok_r = None  # made on the first reasoning count: no series for models that never state one
        self._ctok_p = t.cached_tokens.labels(name, role, "prompt")
        self._ctok_c = t.cached_tokens.labels(name, role, "completion")
        self._attempt_latency = t.attempt_latency.labels(name, role)
        self._request_latency = t.request_latency.labels(name, role)
        self._codes: dict[str, Counter] = {}
        self._rates = rates_from(t.prices, deployment)
        self._cost = t.cost.labels(name, role) if self._rates is not None else None

    # attempts (inside the retry loop, holding the deployment's concurrency slot)
    def attempt_started(self) -> None:
        self._in_flight.inc()

    def attempt_cancelled(self) -> None:
        self._in_flight.dec()  # cancelled (run stopped): neither a result nor a latency

    def attempt_finished(self, seconds: float, err: InferenceError | None) -> None:
        self._in_flight.dec()
        self._attempt_latency.observe(seconds)
        code = attempt_code(err)
        child = self._codes.get(code)
        if child is None:
            child = self._codes[code] = self._t.attempts.labels(*self._labels, code)
        child.inc()
        if self._cost is not None and self._rates.per_second:
            self._cost.inc(seconds * self._rates.per_second)

    def retried(self) -> None:
        self._retries.inc()

    # requests (one generate call: cache lookup, then retries)
    def cache_hit(self, completion: Completion) -> None:
        self._cached.inc()
        u = completion.usage
        if u.prompt_tokens:
            self._ctok_p.inc(u.prompt_tokens)
        if u.completion_tokens:
            self._ctok_c.inc(u.completion_tokens)

    def request_finished(self, seconds: float, completion: Completion | None) -> None:
        self._request_latency.observe(seconds)
        if completion is None:
            self._error.inc()
            return
        self._ok.inc()
        u = completion.usage
        if u.prompt_tokens:
            self._tok_p.inc(u.prompt_tokens)
        if u.completion_tokens:
            self._tok_c.inc(u.completion_tokens)
        if u.reasoning_tokens:
            if self._tok_r is None:
                self._tok_r = self._t.tokens.labels(*self._labels, "reasoning")
            self._tok_r.inc(u.reasoning_tokens)
        if self._cost is not None and (self._rates.prompt or self._rates.completion):
            self._cost.inc((u.prompt_tokens or 0) * self._rates.prompt
                           + (u.completion_tokens or 0) * self._rates.completion)


class RunMetrics:
    """One run's (deployment, benchmark) instance counters; the pipeline calls these per instance."""

    __slots__ = ("_t", "_planned", "_resumed", "_done", "_error", "_exhausted", "_unscored", "_active")

    def __init__(self, t: Telemetry, deployment: str, benchmark: str) -> None:
        self._t = t
        self._planned = t.planned.labels(deployment, benchmark)
        self._resumed = t.resumed.labels(deployment, benchmark)
        self._done = t.done.labels(deployment, benchmark)
        self._error = t.failed.labels(deployment, benchmark, "error")
        self._exhausted = t.failed.labels(deployment, benchmark, "retries_exhausted")
        self._unscored = t.unscored.labels(deployment, benchmark)
        self._active = t.runs_active.labels(deployment, benchmark)

    def started(self, planned: int, resumed: int) -> None:
        self._planned.inc(planned)
        self._resumed.inc(resumed)
        self._active.inc()

    def finished(self) -> None:
        self._active.dec()

    def recorded(self, *, error: bool, unscored: bool) -> None:
        (self._error if error else self._done).inc()
        if unscored and not error:
            self._unscored.inc()
        self._t.last_progress.set(time.time())

    def retries_exhausted(self) -> None:
        self._exhausted.inc()
        self._t.last_progress.set(time.time())

    def judgements(self, judgements: Iterable[JudgeScore]) -> None:
        self._t.on_judgements(judgements)


class _NullClientMetrics:
    def attempt_started(self) -> None: ...
    def attempt_cancelled(self) -> None: ...
    def attempt_finished(self, seconds: float, err: InferenceError | None) -> None: ...
    def retried(self) -> None: ...
    def cache_hit(self, completion: Completion) -> None: ...
    def request_finished(self, seconds: float, completion: Completion | None) -> None: ...


class _NullRunMetrics:
    def started(self, planned: int, resumed: int) -> None: ...
    def finished(self) -> None: ...
    def recorded(self, *, error: bool, unscored: bool) -> None: ...
    def retries_exhausted(self) -> None: ...
    def judgements(self, judgements: Iterable[JudgeScore]) -> None: ...


NULL_CLIENT_METRICS = _NullClientMetrics()
NULL_RUN_METRICS = _NullRunMetrics()


def serve_http(telemetry: Telemetry, port: int, host: str = "127.0.0.1"):
    """Serve ``/metrics`` in a daemon thread; returns (server, bound port). ``port`` 0 = any free port."""
    from prometheus_client import start_http_server

    from medhelm.errors import ConfigError

    try:
        server, _thread = start_http_server(port, addr=host, registry=telemetry.registry)
    except OSError as err:
        raise ConfigError(f"cannot serve metrics on {host}:{port} ({err.strerror or err}): choose another port with "
                          "--metrics-port (0: any free port, -1: none)") from None
    return server, server.server_port


def push_final(telemetry: Telemetry, gateway: str, *, job: str, grouping: Mapping[str, str]) -> str | None:
    """Push this process's final values to a Prometheus Pushgateway (replacing its group). None = pushed,
    else a one-line reason (the run's results never depend on it)."""
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(gateway, job=job, registry=telemetry.registry, grouping_key=dict(grouping), timeout=10)
    except Exception as err:  # noqa: BLE001 - best effort: report, never fail the run for it
        return f"could not push metrics to {gateway}: {type(err).__name__}"
    return None
