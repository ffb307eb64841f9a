"""Engine failures as gRPC status codes: a model server still throttling/failing/timing out after retries is
UNAVAILABLE (retryable) and comes back to the caller as a retryable inference error; a request the server
refused for good is INVALID_ARGUMENT; missing data FAILED_PRECONDITION; the service itself down stays
"unreachable" (the run stops, resumable)."""

from __future__ import annotations

import grpc
import pytest

from medhelm.errors import ConfigError, DataUnavailable, InferenceError, ServerUnreachable
from medhelm.rpc.status import UPSTREAM_KEY, code_for, error_from, upstream_metadata

CASES = [
    (InferenceError("HTTP 429", retryable=True, status=429), grpc.StatusCode.UNAVAILABLE, "retryable"),
    (InferenceError("HTTP 503", retryable=True, status=503), grpc.StatusCode.UNAVAILABLE, "retryable"),
    (InferenceError("timed out", retryable=True), grpc.StatusCode.UNAVAILABLE, "retryable"),
    (ServerUnreachable("cannot reach judge"), grpc.StatusCode.UNAVAILABLE, "unreachable"),
    (InferenceError("HTTP 400: context too long", status=400), grpc.StatusCode.INVALID_ARGUMENT, None),
    (ConfigError("bad rubric", field="rubric"), grpc.StatusCode.INVALID_ARGUMENT, None),
    (DataUnavailable("gated"), grpc.StatusCode.FAILED_PRECONDITION, None),
]


class _CallError(grpc.RpcError):
    def __init__(self, code, details, trailing):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


@pytest.mark.parametrize(("err", "code", "upstream"), CASES)
def test_engine_errors_map_to_status_and_back(err, code, upstream):
    assert code_for(err) == code
    trailing = upstream_metadata(err)
    assert dict(trailing).get(UPSTREAM_KEY) == upstream
    back = error_from(_CallError(code, str(err), trailing), "jury:50051")
    if upstream == "retryable":
        assert type(back) is InferenceError and back.retryable  # the instance is retried on the next run
    elif upstream == "unreachable":
        assert isinstance(back, ServerUnreachable)
    elif code == grpc.StatusCode.INVALID_ARGUMENT:
        assert isinstance(back, ConfigError)
    assert str(err) in str(back)


def test_the_service_itself_unavailable_is_unreachable():
    back = error_from(_CallError(grpc.StatusCode.UNAVAILABLE, "connection refused", ()), "jury:50051")
    assert isinstance(back, ServerUnreachable) and "jury:50051" in str(back)
