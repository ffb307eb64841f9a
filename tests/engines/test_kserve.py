"""The ``kserve_v2`` deployment kind against a real KServe ModelServer (kserve 0.21 SDK, Open Inference
Protocol v2 over REST and over gRPC, ``inference.GRPCInferenceService`` on its grpc_port) serving the same
SmolLM2-135M-Instruct weights as the vLLM server, greedy decoding: the same pubmed_qa run gives the same
records through vLLM, KServe REST and KServe gRPC; KServe's errors map to our retry/failure semantics on
both transports (model not ready -> retried; prompt too long, unknown model -> a per-instance error;
nothing listening -> unreachable)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request

import pytest

from medhelm.errors import InferenceError, ServerUnreachable
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import Deployment, DeploymentKind, GenerationRequest, Message
from tests.engines.conftest import (
    MAX_MODEL_LEN,
    SERVED,
    Engine,
    kserve_deployment,
    kserve_grpc_deployment,
    medhelm,
    only_run,
    records,
    vllm_deployment,
    write_deployments,
)

pytestmark = [pytest.mark.engines, pytest.mark.slow]


def test_pubmed_qa_same_records_through_kserve_rest_grpc_and_vllm(kserve, vllm, mirror, tmp_path):
    outs = {}
    for name, deployment in (("kserve", kserve_deployment(kserve, max_sequence_length=MAX_MODEL_LEN)),
                             ("grpc", kserve_grpc_deployment(kserve, max_sequence_length=MAX_MODEL_LEN)),
                             ("vllm", vllm_deployment(vllm))):
        local = tmp_path / f"env-{name}"
        write_deployments(local, [deployment])
        proc = medhelm("run", "-r", f"pubmed_qa:model=huggingface/smollm2-135m-instruct,"
                       f"model_deployment={deployment['name']}", "--data-dir", str(mirror), "--offline", "-m", "4",
                       "-o", str(tmp_path / name), "--local-path", str(local), "-q")
        assert proc.returncode == 0, proc.stderr
        run_dir = only_run(tmp_path / name)
        assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
        outs[name] = {r["instance"]["id"]: r for r in records(run_dir)}
    assert outs["kserve"].keys() == outs["vllm"].keys() == outs["grpc"].keys()
    for iid, k in outs["kserve"].items():
        v, g = outs["vllm"][iid], outs["grpc"][iid]
        # REST and gRPC to the same predictor: the same record, bar the measured latency
        for rec in (k, g):
            rec["completion"]["usage"].pop("latency_s")
        assert {**g, "run": None} == {**k, "run": None}, iid
        assert k["prompt"] == v["prompt"]
        # the same prompt tokens (both apply the model's chat template to one user turn) and the same
        # greedy answer from the same fp32 weights
        assert k["completion"]["usage"]["prompt_tokens"] == v["completion"]["usage"]["prompt_tokens"]
        assert k["completion"]["text"] == v["completion"]["text"], iid
        assert k["stats"] == v["stats"]


def _model_ready(engine: Engine) -> bool:
    """KServe's own readiness of the served model (REST; the gRPC port answers from the same data plane)."""
    try:
        with urllib.request.urlopen(f"{engine.root}/v2/models/{SERVED}/ready", timeout=10) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def _request(text: str, max_tokens: int = 8) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), max_tokens=max_tokens, temperature=0.0)


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_kserve_errors_map_to_retry_and_failure(protocol, kserve, engines_built, refused_port):
    async def ask(deployment: Deployment, request: GenerationRequest, retry: RetryPolicy):
        pool = ClientPool(retry=retry)
        try:
            return await pool.get(deployment).generate(request), pool.total()
        except InferenceError as err:
            return err, pool.total()
        finally:
            await pool.aclose()

    grpc = protocol == "grpc"
    if grpc and not kserve.grpc_port:
        pytest.skip("the reused KServe server's gRPC port is unknown: set MEDHELM_TEST_KSERVE_GRPC_PORT")

    def url(engine: Engine) -> str:
        return f"http://127.0.0.1:{engine.grpc_port}" if grpc else engine.root

    base = Deployment(name=f"kserve-{protocol}/smollm2", model_name="huggingface/smollm2-135m-instruct",
                      kind=DeploymentKind.KSERVE_V2, base_url=url(kserve), served_model_name=SERVED,
                      max_sequence_length=MAX_MODEL_LEN, options={"protocol": protocol})
    # a prompt over the model's window: KServe answers 400 (InvalidInput) -> not retried, a clear error
    err, stats = asyncio.run(ask(base, _request("word " * 1500), RetryPolicy(max_attempts=3, base_delay_s=0.1)))
    assert isinstance(err, InferenceError) and not err.retryable and err.status == 400
    assert "maximum context length" in str(err) and "word word" not in str(err) and stats.requests == 1
    assert ("gRPC INVALID_ARGUMENT" if grpc else "HTTP 400") in str(err)
    # an unknown model: 404, not retried
    missing = dataclasses.replace(base, served_model_name="no-such-model")
    err, stats = asyncio.run(ask(missing, _request("hi"), RetryPolicy(max_attempts=3, base_delay_s=0.1)))
    assert isinstance(err, InferenceError) and not err.retryable and err.status == 404 and stats.requests == 1
    # nothing listening: unreachable, retried, then the run would stop (ServerUnreachable)
    gone = dataclasses.replace(base, base_url=f"http://127.0.0.1:{refused_port}")
    err, stats = asyncio.run(ask(gone, _request("hi"), RetryPolicy(max_attempts=2, base_delay_s=0.1)))
    assert isinstance(err, ServerUnreachable) and stats.requests == 2 and stats.retries == 1

    # model not ready yet (weights still loading): KServe answers REST 503; over gRPC kserve 0.21 calls the
    # model's load() again, which says ModelNotReady, and its interceptor's mapping of that fails
    # ("'ModelNotReady' object has no attribute 'reason'") -> UNKNOWN: either way retried until ready
    # The model turns ready load_delay seconds after the server is live. When a starved machine takes longer
    # than that from "live" to the first request, that request finds the model ready and nothing is shown
    # about not-ready answers: the same run is repeated with twice the delay (an unready model is never
    # answered, so a request before readiness is always retried: a client that did not retry fails below).
    result = stats = None
    for delay in (20, 40, 80, 160):
        late = Engine("kserve", 0, 0, env={"MEDHELM_KSERVE_LOAD_DELAY": str(delay), "MEDHELM_ENGINE_WAIT": "live"})
        late.start()
        try:
            deployment = dataclasses.replace(base, base_url=url(late))
            if _model_ready(late):
                continue  # ready before we asked: proves nothing, try a longer delay
            # retries cover any delay here (600 x at most 2 s): the budget only stops a hung test
            result, stats = asyncio.run(ask(deployment, _request("Say yes."),
                                            RetryPolicy(max_attempts=600, base_delay_s=0.5, max_delay_s=2.0,
                                                        jitter="none")))
            if not isinstance(result, InferenceError) and stats.retries == 0 and stats.errors == 0:
                continue  # the model turned ready between the check and the first request: try a longer delay
        finally:
            late.stop()
        break
    assert result is not None, "the model was ready before the first request even with a 160 s load delay"
    assert not isinstance(result, InferenceError), result
    assert result.text and stats.retries >= 1 and stats.errors == 0
