"""The Open Inference Protocol v2 gRPC client (``kserve_v2`` with ``options.protocol: grpc``) against a gRPC
``inference.GRPCInferenceService`` on 127.0.0.1 built from the same stubs, answering as scripted, through
the real ClientPool: status codes -> retried / per-instance error / unreachable, raw and typed output
contents, metadata and parameters as sent. (The real KServe ModelServer is tested in tests/engines.)"""

from __future__ import annotations

import asyncio
import json
import struct

import grpc
import pytest
from grpc import aio

from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference import ClientPool, RetryPolicy, make_client
from medhelm.oip.v2 import grpc_predict_v2_pb2 as pb
from medhelm.oip.v2 import grpc_predict_v2_pb2_grpc as pb_grpc
from medhelm.specs import Deployment, GenerationRequest, Message


class _Servicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self) -> None:
        self.script: list = []  # (code, details) to abort with, then answers
        self.seen: list = []  # (request, metadata)
        self.raw = False

    async def ModelInfer(self, request, context):  # noqa: N802
        self.seen.append((request, dict(context.invocation_metadata())))
        if self.script:
            code, details = self.script.pop(0)
            await context.abort(code, details)
        text = ("echo:" + request.inputs[0].contents.bytes_contents[0].decode()[-5:]).encode()
        params = {"finish_reason": pb.InferParameter(string_param="stop"),
                  "prompt_tokens": pb.InferParameter(int64_param=11)}
        if self.raw:  # raw_output_contents, as servers that send binary data do
            return pb.ModelInferResponse(
                model_name=request.model_name, parameters=params,
                outputs=[pb.ModelInferResponse.InferOutputTensor(name="text_output", datatype="BYTES", shape=[1]),
                         pb.ModelInferResponse.InferOutputTensor(name="completion_tokens", datatype="INT64",
                                                                 shape=[1])],
                raw_output_contents=[struct.pack("<I", len(text)) + text, struct.pack("<q", 3)])
        return pb.ModelInferResponse(
            model_name=request.model_name, parameters=params,
            outputs=[pb.ModelInferResponse.InferOutputTensor(
                name="text_output", datatype="BYTES", shape=[1],
                contents=pb.InferTensorContents(bytes_contents=[text])),
                pb.ModelInferResponse.InferOutputTensor(
                name="completion_tokens", datatype="INT64", shape=[1],
                contents=pb.InferTensorContents(int64_contents=[3]))])


async def _serve(servicer: _Servicer):
    server = aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def _deployment(port: int, **options) -> Deployment:
    return Deployment(name="kserve-grpc/tiny", model_name="test/tiny", kind="kserve_v2",
                      base_url=f"http://127.0.0.1:{port}", served_model_name="tiny-llm",
                      options={"protocol": "grpc", "parameters": {"top_p": 1.0},
                               "headers": {"Host": "tiny.models.example", "X-Team": "radiology"}, **options})


def _request(**kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("system", "Be brief."), Message("user", "Summarise the note.")),
                             **{"max_tokens": 8, "temperature": 0.7, "stop": ("\n", "END"), **kw})


def _run(servicer: _Servicer, deployment_options=None, request=None, retry=None):
    async def go():
        server, port = await _serve(servicer)
        pool = ClientPool(retry=retry or RetryPolicy(max_attempts=4, base_delay_s=0.01, jitter="none"))
        try:
            try:
                result = await pool.get(_deployment(port, **(deployment_options or {}))).generate(
                    request or _request())
            except InferenceError as err:
                result = err
            return result, pool.total()
        finally:
            await pool.aclose()
            await server.stop(None)

    return asyncio.run(go())


@pytest.mark.parametrize("raw", [False, True])
def test_generate_with_retries_and_what_is_sent(raw):
    servicer = _Servicer()
    servicer.raw = raw
    servicer.script = [(grpc.StatusCode.UNAVAILABLE, "Model with name tiny-llm is not ready."),
                       (grpc.StatusCode.UNKNOWN, "Unexpected <class 'AttributeError'>")]
    completion, stats = _run(servicer)
    assert not isinstance(completion, InferenceError), completion
    assert completion.text == "echo:note." and completion.finish_reason == "stop"
    assert completion.usage.prompt_tokens == 11 and completion.usage.completion_tokens == 3
    assert stats.retries == 2 and stats.errors == 0
    request, metadata = servicer.seen[-1]
    assert request.model_name == "tiny-llm"
    [tensor] = request.inputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == ("text_input", "BYTES", [1])
    assert tensor.contents.bytes_contents == [b"Be brief.\n\nSummarise the note."]
    params = {k: v.WhichOneof("parameter_choice") and getattr(v, v.WhichOneof("parameter_choice"))
              for k, v in request.parameters.items()}
    # KServe's InferParameter has no double and no list: temperature as its repr, stops as JSON text
    assert params == {"max_tokens": 8, "temperature": "0.7", "stop": json.dumps(["\n", "END"]), "seed": 0,
                      "top_p": "1.0"}
    assert metadata["x-team"] == "radiology" and "host" not in metadata  # Host -> the channel's :authority


def test_refusals_are_per_instance_errors_without_the_prompt():
    for code, status in ((grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.NOT_FOUND, 404),
                         (grpc.StatusCode.UNIMPLEMENTED, 501), (grpc.StatusCode.PERMISSION_DENIED, 403)):
        servicer = _Servicer()
        servicer.script = [(code, "refused: Summarise the note. is too long for this model")]
        err, stats = _run(servicer)
        assert isinstance(err, InferenceError) and not err.retryable and err.status == status, err
        assert f"gRPC {code.name}" in str(err) and "Summarise the note" not in str(err)
        assert stats.requests == 1 and stats.retries == 0


def test_retries_run_out_and_nobody_listening_is_unreachable(refused_port):
    servicer = _Servicer()
    servicer.script = [(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full")] * 3
    err, stats = _run(servicer, retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, jitter="none",
                                                  rate_limit_wait_s=0.0))
    assert isinstance(err, InferenceError) and err.retryable and err.status == 429 and stats.requests == 3
    # a full queue is the server's rate limit (429): by default it is waited out past max_attempts (retry.py)
    servicer = _Servicer()
    servicer.script = [(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full")] * 3
    done, stats = _run(servicer, retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, jitter="none"))
    assert not isinstance(done, InferenceError) and done.usage.attempts == 4 and stats.requests == 4, done

    async def unreachable():
        pool = ClientPool(retry=RetryPolicy(max_attempts=2, base_delay_s=0.01, jitter="none"))
        try:
            await pool.get(_deployment(refused_port)).generate(_request())
        finally:
            await pool.aclose()

    with pytest.raises(ServerUnreachable, match=rf"cannot reach http://127\.0\.0\.1:{refused_port} over gRPC"):
        asyncio.run(unreachable())


def test_bad_configuration_is_a_config_error():
    with pytest.raises(ConfigError, match="options.protocol must be 'rest' or 'grpc'"):
        make_client(Deployment(name="k/x", model_name="m", kind="kserve_v2", base_url="http://127.0.0.1:8081",
                               options={"protocol": "websocket"}))
    with pytest.raises(ConfigError, match="gRPC port"):
        make_client(Deployment(name="k/x", model_name="m", kind="kserve_v2", base_url="http://models.internal",
                               options={"protocol": "grpc"}))
    with pytest.raises(ConfigError, match="parameter 'mode'"):
        make_client(Deployment(name="k/x", model_name="m", kind="kserve_v2", base_url="http://127.0.0.1:8081",
                               options={"protocol": "grpc", "parameters": {"mode": None}}))
