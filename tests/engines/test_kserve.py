"""The ``kserve_v2`` deployment kind against a real KServe ModelServer (kserve 0.21 SDK, Open Inference
Protocol v2 REST) serving the same SmolLM2-135M-Instruct weights as the vLLM server, greedy decoding:
the same pubmed_qa run gives the same records through either engine; KServe's errors map to our
retry/failure semantics (model not ready -> retried; prompt too long -> a per-instance error)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from medhelm.errors import InferenceError
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import Deployment, DeploymentKind, GenerationRequest, Message
from tests.engines.conftest import (
    MAX_MODEL_LEN,
    SERVED,
    Engine,
    free_port,
    kserve_deployment,
    medhelm,
    only_run,
    records,
    vllm_deployment,
    write_deployments,
)

pytestmark = [pytest.mark.engines, pytest.mark.slow]


def test_pubmed_qa_same_records_through_kserve_and_vllm(kserve, vllm, mirror, tmp_path):
    outs = {}
    for name, deployment in (("kserve", kserve_deployment(kserve, max_sequence_length=MAX_MODEL_LEN)),
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
    assert outs["kserve"].keys() == outs["vllm"].keys()
    for iid, k in outs["kserve"].items():
        v = outs["vllm"][iid]
        assert k["prompt"] == v["prompt"]
        # the same prompt tokens (both apply the model's chat template to one user turn) and the same
        # greedy answer from the same fp32 weights
        assert k["completion"]["usage"]["prompt_tokens"] == v["completion"]["usage"]["prompt_tokens"]
        assert k["completion"]["text"] == v["completion"]["text"], iid
        assert k["stats"] == v["stats"]


def _request(text: str, max_tokens: int = 8) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), max_tokens=max_tokens, temperature=0.0)


def test_kserve_errors_map_to_retry_and_failure(kserve, engines_built):
    async def ask(deployment: Deployment, request: GenerationRequest, retry: RetryPolicy):
        pool = ClientPool(retry=retry)
        try:
            return await pool.get(deployment).generate(request), pool.total()
        except InferenceError as err:
            return err, pool.total()
        finally:
            await pool.aclose()

    base = Deployment(name="kserve/smollm2", model_name="huggingface/smollm2-135m-instruct",
                      kind=DeploymentKind.KSERVE_V2, base_url=kserve.root, served_model_name=SERVED,
                      max_sequence_length=MAX_MODEL_LEN)
    # a prompt over the model's window: KServe answers 400 (InvalidInput) -> not retried, a clear error
    err, stats = asyncio.run(ask(base, _request("word " * 1500), RetryPolicy(max_attempts=3, base_delay_s=0.1)))
    assert isinstance(err, InferenceError) and not err.retryable and err.status == 400
    assert "maximum context length" in str(err) and "word word" not in str(err) and stats.requests == 1
    # an unknown model: 404, not retried
    missing = dataclasses.replace(base, served_model_name="no-such-model")
    err, stats = asyncio.run(ask(missing, _request("hi"), RetryPolicy(max_attempts=3, base_delay_s=0.1)))
    assert isinstance(err, InferenceError) and not err.retryable and err.status == 404 and stats.requests == 1

    # model not ready yet (weights still loading): KServe answers 503 -> retried until it is ready
    late = Engine("kserve", free_port(), free_port(), env={"MEDHELM_KSERVE_LOAD_DELAY": "8",
                                                           "MEDHELM_ENGINE_WAIT": "live"})
    late.start()
    try:
        deployment = dataclasses.replace(base, base_url=late.root)
        result, stats = asyncio.run(ask(deployment, _request("Say yes."),
                                        RetryPolicy(max_attempts=12, base_delay_s=0.5, max_delay_s=2.0)))
        assert not isinstance(result, InferenceError), result
        assert result.text and stats.retries >= 1 and stats.errors == 0
    finally:
        late.stop()
