"""Prometheus metrics of one service process: the RPCs, plus every model/judge request its pool makes
(``medhelm.telemetry``, shared with ``medhelm run``/``job``). Its own registry: no global state.

Labels are service/method/status/deployment names only: never prompt, completion or patient text.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from prometheus_client import Counter, Gauge, Histogram

from medhelm.errors import MedhelmError
from medhelm.rpc.status import code_for, upstream_metadata
from medhelm.scoring.base import MetricResult
from medhelm.telemetry import Telemetry as ProcessTelemetry

log = logging.getLogger("medhelm.rpc")

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


@contextlib.asynccontextmanager
async def _guard(t: Telemetry, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    t.rpc_in_flight.labels(t.service, method).inc()
    start = time.perf_counter()
    code = grpc.StatusCode.OK
    try:
        yield
    except grpc.aio.AbortError:  # the servicer aborted with its own status
        code = _context_code(context)
        raise
    except Exception as err:  # noqa: BLE001 - every failure becomes a status, never a traceback
        trailing: tuple[tuple[str, str], ...] = ()
        if isinstance(err, MedhelmError):
            code, details, trailing = code_for(err), str(err), upstream_metadata(err)
        else:
            code, details = grpc.StatusCode.INTERNAL, f"internal error ({type(err).__name__}); see the server log"
            log.error("%s.%s failed: %s", t.service, method, type(err).__name__)
        if trailing:
            # The service already retried the model server: commit the call (headers sent) so the client's
            # transparent gRPC retries, meant for a restarting service, do not multiply those retries.
            with contextlib.suppress(Exception):
                await context.send_initial_metadata(())
        await context.abort(code, details, trailing_metadata=trailing)
    except BaseException:  # cancelled by the client or by shutdown
        code = grpc.StatusCode.CANCELLED
        raise
    finally:
        t.rpc_in_flight.labels(t.service, method).dec()
        t.latency.labels(t.service, method).observe(time.perf_counter() - start)
        t.requests.labels(t.service, method, code.name).inc()


def _context_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    code = context.code() if hasattr(context, "code") else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
