"""Client for KServe's Open Inference Protocol v2 over gRPC: ``inference.GRPCInferenceService/ModelInfer``
(stubs from protos/medhelm/oip/v2, KServe's published grpc_predict_v2.proto), the ``kserve_v2`` kind with
``options.protocol: grpc``.

The request is the REST client's (``kserve_v2.py``): one BYTES input tensor with the prompt text, the
generation settings as request parameters, the text read from the named BYTES output (``contents`` or
``raw_output_contents``), token counts and ``finish_reason`` from response parameters or outputs. KServe's
``InferParameter`` holds a bool, an int64 or a string only, so a float (temperature) travels as its
``repr`` string and a list (stop sequences) as its JSON text. ``base_url`` names the predictor's gRPC port:
``http://host:8081`` is a plaintext channel, ``https://`` a TLS one (``options.ca_bundle`` for an internal
CA); ``options.headers`` become call metadata (a ``Host`` header becomes the channel's ``:authority``, as
an Istio ingress routes on it) and the API key is sent as ``authorization: Bearer``. One HTTP/2 channel
per deployment and event loop carries every request; the pool caps how many are in flight.

Failure semantics, as the REST client's (the status is the HTTP equivalent, for metrics and records):
UNAVAILABLE (KServe: model not ready, server not ready), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
INTERNAL, UNKNOWN, ABORTED, CANCELLED -> a transient ``outcome.Refusal`` (RESOURCE_EXHAUSTED and UNAVAILABLE
rate-limited, as their HTTP 429 and 503); UNAVAILABLE because nothing answered
(connection refused, DNS, TLS handshake) -> ``ServerUnreachable`` (the run stops after the retries);
INVALID_ARGUMENT (KServe: ``InvalidInput``, e.g. a prompt over the window), NOT_FOUND (no such model),
FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED -> a per-instance
error, not retried. Error messages name the deployment, URL and gRPC code, and carry the server's text
only through ``wire.safe_server_message`` (never the prompt).
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import grpc
from grpc import aio

from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference.kserve_v2 import extra_parameters, parameters, prompt_text
from medhelm.inference.outcome import Outcome, Refusal, Verdict, verdict_for
from medhelm.inference.wire import answered_model, key_headers, safe_server_message, strip_reasoning
from medhelm.oip.v2 import grpc_predict_v2_pb2 as pb
from medhelm.oip.v2 import grpc_predict_v2_pb2_grpc as pb_grpc
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage

_MAX_MESSAGE = 64 * 1024 * 1024  # long clinical notes and judge prompts; gRPC's default cap is 4 MB

Code = grpc.StatusCode
# The HTTP status each gRPC code corresponds to (grpc-gateway's table), so records and metrics read alike.
HTTP_EQUIVALENT = {
    Code.INVALID_ARGUMENT: 400, Code.FAILED_PRECONDITION: 400, Code.OUT_OF_RANGE: 400, Code.UNAUTHENTICATED: 401,
    Code.PERMISSION_DENIED: 403, Code.NOT_FOUND: 404, Code.ALREADY_EXISTS: 409, Code.ABORTED: 409,
    Code.RESOURCE_EXHAUSTED: 429, Code.CANCELLED: 499, Code.UNKNOWN: 500, Code.INTERNAL: 500, Code.DATA_LOSS: 500,
    Code.UNIMPLEMENTED: 501, Code.UNAVAILABLE: 503, Code.DEADLINE_EXCEEDED: 504,
}
RETRYABLE = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.RESOURCE_EXHAUSTED, Code.INTERNAL,
                       Code.UNKNOWN, Code.ABORTED, Code.CANCELLED})
# gRPC core's words for "nobody answered" (as opposed to a server that answered UNAVAILABLE itself)
_NO_CONNECTION = re.compile(r"failed to connect|connection refused|dns resolution failed|name resolution|"
                            r"handshake failed|no route to host|network is unreachable", re.IGNORECASE)
_INT_FORMATS = {"INT64": "<q", "INT32": "<i", "UINT64": "<Q", "UINT32": "<I"}


class KServeV2GrpcClient:
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:  # pools none
        if not deployment.base_url:
            raise ConfigError(f"deployment '{deployment.name}' has no base_url")
        self._deployment = deployment
        parts = urlsplit(deployment.base_url)
        if not parts.port:
            raise ConfigError(f"deployment '{deployment.name}': base_url must name the predictor's gRPC port "
                              f"(e.g. http://host:8081) with options.protocol: grpc")
        self._target = f"{parts.hostname}:{parts.port}"
        self._tls = parts.scheme == "https"
        self._url = f"{deployment.base_url.rstrip('/')} (gRPC ModelInfer)"
        self._model = deployment.served_model_name or deployment.model_name
        options = deployment.options
        self._input = str(options.get("input_name", "text_input"))
        self._output = str(options.get("output_name", "text_output"))
        self._extra = {k: _param(v, deployment, k) for k, v in extra_parameters(deployment).items()}
        headers = {k.lower(): v for k, v in key_headers(deployment).items()}
        self._authority = headers.pop("host", None)
        self._metadata = tuple(headers.items())
        self._root_certs = _ca_bundle(deployment) if self._tls else None
        self._channel: aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stub: pb_grpc.GRPCInferenceServiceStub | None = None

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def _stub_for_loop(self) -> pb_grpc.GRPCInferenceServiceStub:
        # An aio channel belongs to the event loop it was made on; a client reused by a later asyncio.run
        # (tests, sequential doors) gets a fresh one.
        loop = asyncio.get_running_loop()
        if self._stub is None or self._loop is not loop:
            options = [("grpc.max_send_message_length", _MAX_MESSAGE),
                       ("grpc.max_receive_message_length", _MAX_MESSAGE),
                       ("grpc.enable_retries", 0)]  # the pool retries, with its own backoff and accounting
            if self._authority:
                options.append(("grpc.default_authority", self._authority))
            if self._tls:
                creds = grpc.ssl_channel_credentials(root_certificates=self._root_certs)
                self._channel = aio.secure_channel(self._target, creds, options=options)
            else:
                self._channel = aio.insecure_channel(self._target, options=options)
            self._loop, self._stub = loop, pb_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    def message(self, request: GenerationRequest) -> pb.ModelInferRequest:
        """The ModelInferRequest sent for ``request`` (public so tests can inspect it)."""
        params = {k: _param(v, self._deployment, k) for k, v in parameters(request, {}).items()}
        params.update(self._extra)
        tensor = pb.ModelInferRequest.InferInputTensor(
            name=self._input, datatype="BYTES", shape=[1],
            contents=pb.InferTensorContents(bytes_contents=[prompt_text(request).encode("utf-8")]))
        return pb.ModelInferRequest(model_name=self._model, inputs=[tensor], parameters=params)

    async def generate(self, request: GenerationRequest) -> Completion:
        stub = self._stub_for_loop()
        started = time.perf_counter()
        try:
            response = await stub.ModelInfer(self.message(request), timeout=self._deployment.timeout_s,
                                             metadata=self._metadata or None)
        except aio.AioRpcError as err:
            raise self._rpc_error(err, request) from None
        return self._parse(response, time.perf_counter() - started)

    async def ready(self) -> bool:
        """ModelReady for the served model (False when the server says no or cannot be asked)."""
        try:
            reply = await self._stub_for_loop().ModelReady(pb.ModelReadyRequest(name=self._model), timeout=10,
                                                           metadata=self._metadata or None)
        except aio.AioRpcError:
            return False
        return reply.ready

    async def context_window(self) -> int | None:
        """The Open Inference Protocol has no standard field for it: set ``max_sequence_length``."""
        return None

    async def aclose(self) -> None:
        channel, loop = self._channel, self._loop
        self._channel = self._stub = self._loop = None
        if channel is not None and loop is asyncio.get_running_loop():
            await channel.close()

    def _where(self) -> str:
        return f"deployment '{self._deployment.name}' ({self._url})"

    def _rpc_error(self, err: aio.AioRpcError, request: GenerationRequest) -> InferenceError:
        code, details = err.code(), err.details() or ""
        if code is Code.UNAVAILABLE and _NO_CONNECTION.search(details):
            return ServerUnreachable(f"cannot reach {self._deployment.base_url} over gRPC (deployment "
                                     f"'{self._deployment.name}'): {' '.join(details.split())[:200]}")
        if code is Code.DEADLINE_EXCEEDED:
            return InferenceError(f"{self._where()}: timed out (gRPC DEADLINE_EXCEEDED, "
                                  f"timeout_s={self._deployment.timeout_s})", retryable=True)
        message = safe_server_message(details, request)
        status = HTTP_EQUIVALENT.get(code, 500)
        # a retryable code reads as its HTTP equivalent (RESOURCE_EXHAUSTED and UNAVAILABLE: rate-limited)
        verdict = verdict_for(status, retry=True) if code in RETRYABLE else Verdict.FATAL
        return Refusal(f"{self._where()}: gRPC {code.name}" + (f": {message}" if message else ""), Outcome(verdict),
                       status=status)

    def _parse(self, response: pb.ModelInferResponse, latency: float) -> Completion:
        outputs = {o.name: i for i, o in enumerate(response.outputs)}
        try:
            index = outputs.get(self._output, 0)
            raw = _bytes_elements(response, index)
            text = raw[0].decode("utf-8")
        except (IndexError, UnicodeDecodeError, struct.error):
            raise InferenceError(f"{self._where()}: malformed v2 response (no text in output "
                                 f"'{self._output}')", retryable=True, status=200) from None
        params = response.parameters
        finish = params["finish_reason"].string_param if "finish_reason" in params else None
        return Completion(
            text=strip_reasoning(text), finish_reason=finish or None,
            usage=Usage(prompt_tokens=_count(response, outputs, "prompt_tokens"),
                        completion_tokens=_count(response, outputs, "completion_tokens"), latency_s=latency),
            model=answered_model(response.model_name, response.model_version))


def _param(value: Any, deployment: Deployment, name: str) -> pb.InferParameter:
    """A request parameter as KServe's InferParameter (bool | int64 | string)."""
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        return pb.InferParameter(int64_param=value)
    if isinstance(value, float):
        return pb.InferParameter(string_param=repr(value))
    if isinstance(value, str):
        return pb.InferParameter(string_param=value)
    if isinstance(value, (list, tuple, Mapping)):
        return pb.InferParameter(string_param=json.dumps(value))
    raise ConfigError(f"deployment '{deployment.name}': parameter '{name}' has a type gRPC v2 cannot send "
                      f"({type(value).__name__})")


def _bytes_elements(response: pb.ModelInferResponse, index: int) -> list[bytes]:
    """A BYTES output's elements, from ``contents`` or from ``raw_output_contents`` (length-prefixed)."""
    if len(response.raw_output_contents) > index:
        data, out, at = response.raw_output_contents[index], [], 0
        while at < len(data):
            (n,) = struct.unpack_from("<I", data, at)
            out.append(bytes(data[at + 4:at + 4 + n]))
            at += 4 + n
        return out
    return list(response.outputs[index].contents.bytes_contents)


def _count(response: pb.ModelInferResponse, outputs: Mapping[str, int], name: str) -> int | None:
    """A token count from an output tensor of that name, else a response parameter; None when neither."""
    if name in outputs:
        i = outputs[name]
        tensor = response.outputs[i]
        fmt = _INT_FORMATS.get(tensor.datatype)
        if len(response.raw_output_contents) > i and fmt:
            try:
                return struct.unpack_from(fmt, response.raw_output_contents[i])[0]
            except struct.error:  # shorter than one element: not reported
                return None
        c = tensor.contents
        for values in (c.int64_contents, c.int_contents, c.uint64_contents, c.uint_contents):
            if values:
                return int(values[0])
    if name in response.parameters:
        p = response.parameters[name]
        if p.HasField("int64_param"):
            return p.int64_param
        if p.HasField("string_param") and p.string_param.isdigit():
            return int(p.string_param)
    return None


def _ca_bundle(deployment: Deployment) -> bytes | None:
    path = deployment.options.get("ca_bundle")
    if not path:
        return None  # gRPC's bundled roots
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ConfigError(f"deployment '{deployment.name}': cannot read options.ca_bundle ({err.strerror})",
                          path=path) from None
