"""MedhelmError <-> gRPC status, both ways, keeping the one-line message (never patient text).

A model/judge server that failed (429, 5xx, timeouts, after the service's own retries) is UNAVAILABLE
(retryable) with the trailing metadata ``medhelm-upstream``, so the caller can tell "the judge behind the
service is failing" (an instance to retry later) from "the service itself is down"; a request the model
server refused for good (a 400) is INVALID_ARGUMENT; data that is not there is FAILED_PRECONDITION.
"""

from __future__ import annotations

import grpc

from medhelm.errors import ConfigError, DataUnavailable, InferenceError, MedhelmError, ServerUnreachable


UPSTREAM_KEY = "medhelm-upstream"  # trailing metadata: "retryable" | "unreachable" (the model server behind us)


class LimitExceeded(MedhelmError):
    """A call asked for more than the server's limits allow (RESOURCE_EXHAUSTED)."""


def code_for(err: MedhelmError) -> grpc.StatusCode:
    if isinstance(err, LimitExceeded):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(err, InferenceError):  # ServerUnreachable included
        # a judge/model server is down or throttling (retryable: try later); a 400 is the request's fault
        return grpc.StatusCode.UNAVAILABLE if err.retryable else grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(err, DataUnavailable):
        return grpc.StatusCode.FAILED_PRECONDITION  # the input is fine; the server's world is not ready
    return grpc.StatusCode.INVALID_ARGUMENT  # ConfigError and any other user mistake


def upstream_metadata(err: MedhelmError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata that marks a failure of the model server behind the service (else empty)."""
    if isinstance(err, InferenceError) and err.retryable:
        return ((UPSTREAM_KEY, "unreachable" if isinstance(err, ServerUnreachable) else "retryable"),)
    return ()


def error_from(err: grpc.aio.AioRpcError | grpc.RpcError, address: str) -> MedhelmError:
    """A failed call as the error the caller would have got locally (one line, names the service)."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else "") or str(code)
    upstream = _upstream(err)
    if code == grpc.StatusCode.UNAVAILABLE and upstream == "retryable":
        return InferenceError(details, retryable=True)  # the instance is retried on the next run, as locally
    if code == grpc.StatusCode.UNAVAILABLE and upstream == "unreachable":
        return ServerUnreachable(details)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ConfigError(details)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return DataUnavailable(details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ServerUnreachable(f"service {address} unavailable ({details})")
    return MedhelmError(f"service {address} failed: {code.name if code else 'unknown'}: {details}")


def service_down(err: object) -> bool:
    """UNAVAILABLE from the service itself (refused, reset, restarting), not from the model server behind it
    (which the service marks with ``medhelm-upstream``): what a client waits out (rpc/remote.py)."""
    code = err.code() if hasattr(err, "code") else None  # type: ignore[attr-defined]
    return code == grpc.StatusCode.UNAVAILABLE and _upstream(err) is None


def _upstream(err: object) -> str | None:
    try:
        pairs = err.trailing_metadata() or ()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not a call error with metadata
        return None
    for key, value in pairs:
        if key == UPSTREAM_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None
