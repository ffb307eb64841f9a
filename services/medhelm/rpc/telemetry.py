"""Prometheus metrics of one service process (its own registry: no global state), and the guard every
servicer method runs in: counts, times, limits (calls at once, time per call), one-line statuses.

Labels are service/method/status/deployment names only: never prompt, completion or patient text.
Limits: past ``CallLimits.max_calls`` calls in flight a new call is refused RESOURCE_EXHAUSTED at once
(health is a separate servicer and never counted); a call still running after ``max_call_s`` (waiting on
a stalled client included) is cancelled with DEADLINE_EXCEEDED. Error details are cut to 300 characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from dataclasses import dataclass
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from medhelm.errors import MedhelmError
from medhelm.rpc.status import code_for
from medhelm.scoring.base import MetricResult

log = logging.getLogger("medhelm.rpc")
MAX_DETAILS = 300  # characters of an error's details sent to a caller (a caller's value may be echoed)


@dataclass(frozen=True)
class CallLimits:
    max_calls: int = 32
    max_call_s: float = 900.0

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Telemetry:
    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("medhelm_rpc_requests", "RPCs handled", ["service", "method", "code"], registry=r)
        self.latency = Histogram("medhelm_rpc_latency_seconds", "RPC wall time", ["service", "method"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("medhelm_rpc_in_flight", "RPCs being handled", ["service", "method"], registry=r)
        self.items = Counter("medhelm_items", "instances streamed or scored", ["service", "method"], registry=r)
        self.inference = Counter("medhelm_inference_requests", "model/judge requests",
                                 ["deployment", "outcome"], registry=r)
        self.cache_hits = Counter("medhelm_cache_hits", "requests answered by the request cache",
                                  ["deployment"], registry=r)
        self.tokens = Counter("medhelm_tokens", "tokens used", ["deployment", "kind"], registry=r)
        self.inference_latency = Histogram("medhelm_inference_latency_seconds", "model/judge request wall time",
                                           ["deployment"], buckets=_LATENCY_BUCKETS, registry=r)
        self.judge_failures = Counter("medhelm_judge_failures", "judge scores that are not ok",
                                      ["judge", "status"], registry=r)
        self.refused = Counter("medhelm_rpc_refused", "calls refused by a limit", ["service", "limit"], registry=r)
        self.limits = CallLimits()
        self.calls_now = 0

    # -- InferenceObserver (the ClientPool calls this for every candidate/judge request) --------
    def on_request(self, deployment: str, *, cached: bool, attempts: int, latency_s: float,
                   prompt_tokens: int | None, completion_tokens: int | None, error: str | None,
                   **_: object) -> None:
        self.inference.labels(deployment, "error" if error else "ok").inc()
        if cached:
            self.cache_hits.labels(deployment).inc()
        else:
            self.inference_latency.labels(deployment).observe(latency_s)
        if prompt_tokens:
            self.tokens.labels(deployment, "prompt").inc(prompt_tokens)
        if completion_tokens:
            self.tokens.labels(deployment, "completion").inc(completion_tokens)

    def on_scored(self, method: str, result: MetricResult) -> None:
        self.items.labels(self.service, method).inc()
        for j in result.judgements:
            if j.status.value != "ok":
                self.judge_failures.labels(j.judge, j.status.value).inc()


def rpc_method(func: Callable[..., Any]) -> Callable[..., Any]:
    """Count, time and guard one servicer method (unary or server-streaming) of a servicer with ``.telemetry``.

    A ``MedhelmError`` becomes INVALID_ARGUMENT / FAILED_PRECONDITION / UNAVAILABLE with its one-line
    message; anything else becomes INTERNAL naming only the exception type (its text may hold PHI)."""
    method = func.__name__

    if inspect.isasyncgenfunction(func):
        @functools.wraps(func)
        async def stream(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with _guard(self.telemetry, method, context):
                async for item in func(self, request, context):
                    yield item
        return stream

    @functools.wraps(func)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async with _guard(self.telemetry, method, context):
            return await func(self, request, context)
        raise AssertionError("unreachable: _guard re-raises")  # pragma: no cover
    return unary


def cut(details: str, limit: int = MAX_DETAILS) -> str:
    text = " ".join(details.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextlib.asynccontextmanager
async def _guard(t: Telemetry, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    limits = t.limits
    if t.calls_now >= limits.max_calls:
        t.refused.labels(t.service, "max_calls").inc()
        t.requests.labels(t.service, method, grpc.StatusCode.RESOURCE_EXHAUSTED.name).inc()
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"server busy: {limits.max_calls} calls in flight; retry later")
    t.calls_now += 1
    t.in_flight.labels(t.service, method).inc()
    start = time.perf_counter()
    code = grpc.StatusCode.OK
    task = asyncio.current_task()
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        if task is not None:
            task.cancel()

    watchdog = asyncio.get_running_loop().call_later(limits.max_call_s, expire)
    try:
        yield
    except grpc.aio.AbortError:  # the servicer aborted with its own status
        code = _context_code(context)
        raise
    except asyncio.CancelledError:
        if not expired:  # cancelled by the client or by shutdown
            code = grpc.StatusCode.CANCELLED
            raise
        code = grpc.StatusCode.DEADLINE_EXCEEDED
        t.refused.labels(t.service, "max_call_s").inc()
        task.uncancel() if task is not None else None
        await context.abort(code, f"call took longer than the server's limit of {limits.max_call_s:g} s")
    except Exception as err:  # noqa: BLE001 - every failure becomes a status, never a traceback
        if isinstance(err, MedhelmError):
            code, details = code_for(err), cut(str(err))
        else:
            code, details = grpc.StatusCode.INTERNAL, f"internal error ({type(err).__name__}); see the server log"
            log.error("%s.%s failed: %s", t.service, method, type(err).__name__)
        await context.abort(code, details)
    except BaseException:  # shutdown
        code = grpc.StatusCode.CANCELLED
        raise
    finally:
        watchdog.cancel()
        t.calls_now -= 1
        t.in_flight.labels(t.service, method).dec()
        t.latency.labels(t.service, method).observe(time.perf_counter() - start)
        t.requests.labels(t.service, method, code.name).inc()


def _context_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    code = context.code() if hasattr(context, "code") else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
