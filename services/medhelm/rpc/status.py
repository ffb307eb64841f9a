"""MedhelmError <-> gRPC status, both ways, keeping the one-line message (never patient text)."""

from __future__ import annotations

import grpc

from medhelm.errors import ConfigError, DataUnavailable, InferenceError, MedhelmError, ServerUnreachable


class LimitExceeded(MedhelmError):
    """A call asked for more than the server's limits allow (RESOURCE_EXHAUSTED)."""


def code_for(err: MedhelmError) -> grpc.StatusCode:
    if isinstance(err, LimitExceeded):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(err, ServerUnreachable):
        return grpc.StatusCode.UNAVAILABLE  # a judge/model server is down: retry later
    if isinstance(err, (DataUnavailable, InferenceError)):
        return grpc.StatusCode.FAILED_PRECONDITION  # the input is fine; the server's world is not ready
    return grpc.StatusCode.INVALID_ARGUMENT  # ConfigError and any other user mistake


def error_from(err: grpc.aio.AioRpcError | grpc.RpcError, address: str) -> MedhelmError:
    """A failed call as the error the caller would have got locally (one line, names the service)."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else "") or str(code)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ConfigError(details)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return DataUnavailable(details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ServerUnreachable(f"service {address} unavailable ({details})")
    return MedhelmError(f"service {address} failed: {code.name if code else 'unknown'}: {details}")
