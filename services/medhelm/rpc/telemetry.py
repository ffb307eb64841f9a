"""Prometheus metrics of one service process: the RPCs, plus every model/judge request its pool makes
(``medhelm.telemetry``, shared with ``medhelm run``/``job``). Its own registry: no global state. The guard every servicer
method runs in: counts, times, limits (calls at once, time per call), one-line statuses.

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
from prometheus_client import Counter, Gauge, Histogram

from medhelm.errors import MedhelmError
from medhelm.rpc.status import code_for, upstream_metadata
from medhelm.scoring.base import MetricResult
from medhelm.telemetry import Telemetry as ProcessTelemetry

log = logging.getLogger("medhelm.rpc")
MAX_DETAILS = 300  # characters of an error's details sent to a caller (a caller's value may be echoed)


@dataclass(frozen=True)
class CallLimits:
    max_calls: int = 32
    max_call_s: float = 900.0

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Telemetry(ProcessTelemetry):
    """The process's model/judge metrics (``medhelm.telemetry``) plus the RPC layer's own."""

    def __init__(self, service: str, *, prices: object | None = None) -> None:
        super().__init__(service, prices=prices)
        r = self.registry
        self.requests = Counter("medhelm_rpc_requests", "RPCs handled", ["service", "method", "code"], registry=r)
        self.latency = Histogram("medhelm_rpc_latency_seconds", "RPC wall time", ["service", "method"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.rpc_in_flight = Gauge("medhelm_rpc_in_flight", "RPCs being handled", ["service", "method"], registry=r)
        self.items = Counter("medhelm_items", "instances streamed or scored", ["service", "method"], registry=r)
        self.refused = Counter("medhelm_rpc_refused", "calls refused by a limit", ["service", "limit"], registry=r)
        self.limits = CallLimits()
        self.calls_now = 0

    def on_scored(self, method: str, result: MetricResult) -> None:
        self.items.labels(self.service, method).inc()
        self.on_judgements(result.judgements)


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
    t.rpc_in_flight.labels(t.service, method).inc()
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
        trailing: tuple[tuple[str, str], ...] = ()
        if isinstance(err, MedhelmError):
            code, details, trailing = code_for(err), cut(str(err)), upstream_metadata(err)
        else:
            code, details = grpc.StatusCode.INTERNAL, f"internal error ({type(err).__name__}); see the server log"
            log.error("%s.%s failed: %s", t.service, method, type(err).__name__)
        if trailing:
            # The service already retried the model server: commit the call (headers sent) so the client's
            # transparent gRPC retries, meant for a restarting service, do not multiply those retries.
            with contextlib.suppress(Exception):
                await context.send_initial_metadata(())
        await context.abort(code, details, trailing_metadata=trailing)
    except BaseException:  # shutdown
        code = grpc.StatusCode.CANCELLED
        raise
    finally:
        watchdog.cancel()
        t.calls_now -= 1
        t.rpc_in_flight.labels(t.service, method).dec()
        t.latency.labels(t.service, method).observe(time.perf_counter() - start)
        t.requests.labels(t.service, method, code.name).inc()


def _context_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    code = context.code() if hasattr(context, "code") else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
