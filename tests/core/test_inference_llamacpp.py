"""The in-process llama.cpp client on the real embedded SmolLM2-135M-Instruct GGUF."""

from __future__ import annotations

import asyncio
import json

import pytest

from medhelm.deployments import DEFAULT_DEPLOYMENT, DeploymentRegistry
from medhelm.errors import ConfigError, InferenceError
from medhelm.inference import ClientPool
from medhelm.inference.llamacpp import LlamaCppClient
from medhelm.specs import Deployment, GenerationRequest, Message

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def smollm2() -> Deployment:
    builtin = DeploymentRegistry.load().get(DEFAULT_DEPLOYMENT)
    # a small context keeps the KV cache (and the test) light; the built-in uses 8192
    return Deployment(**{**builtin.to_json(), "options": {"n_ctx": 1024, "n_threads": 1}})


@pytest.fixture(scope="module")
def client(smollm2) -> LlamaCppClient:
    c = LlamaCppClient(smollm2)
    c.load()
    yield c
    asyncio.run(c.aclose())


def ask(text: str, **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), **{"max_tokens": 24, **kw})


def test_generates_text_with_token_counts(client):
    completion = asyncio.run(client.generate(ask("What is the capital of France? Answer in one word.")))
    assert completion.text.strip() and completion.finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 5 and 0 < completion.usage.completion_tokens <= 24
    assert completion.usage.latency_s > 0


def test_temperature_zero_is_deterministic(client):
    req = ask("Name one symptom of influenza.", max_tokens=16)

    async def twice():
        return await client.generate(req), await client.generate(req)

    a, b = asyncio.run(twice())
    assert a.text == b.text and a.text


def test_json_schema_gives_valid_json(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "confidence": {"type": "integer"}},
              "required": ["answer", "confidence"]}
    completion = asyncio.run(client.generate(ask("Is aspirin safe for children with chickenpox? Reply in JSON.",
                                                 max_tokens=48, json_schema=json.dumps(schema))))
    data = json.loads(completion.text)
    assert data["answer"] in ("yes", "no") and isinstance(data["confidence"], int)


def test_count_tokens_uses_the_model_tokenizer(client):
    assert client.count_tokens("") == 0
    short, longer = client.count_tokens("fever"), client.count_tokens("fever and chills for three days")
    assert 1 <= short < longer <= 12
    assert client.count_tokens("pneumonia " * 100) >= 100


def test_prompt_longer_than_the_context_is_not_retryable(client):
    with pytest.raises(InferenceError, match=r"context window \(n_ctx=1024\)") as info:
        asyncio.run(client.generate(ask("patient history " * 800)))
    assert not info.value.retryable
    assert "patient history" not in str(info.value)


def test_pool_serialises_concurrent_requests_and_counts_tokens(smollm2):
    pool = ClientPool()

    async def go():
        client = pool.get(smollm2)
        try:
            return await asyncio.gather(*(client.generate(ask(f"Say the number {i}.", max_tokens=6))
                                          for i in range(3))), client.count_tokens("hello world")
        finally:
            await pool.aclose()

    completions, n = asyncio.run(go())
    assert all(c.text for c in completions) and n == 2
    assert pool.stats[smollm2.name].requests == 3 and pool.stats[smollm2.name].errors == 0


def test_missing_gguf_file_is_a_config_error(tmp_path, smollm2):
    dep = Deployment(**{**smollm2.to_json(), "name": "local/missing", "gguf_path": str(tmp_path / "none.gguf")})
    with pytest.raises(ConfigError, match="none.gguf"):
        asyncio.run(LlamaCppClient(dep).generate(ask("hi")))


def test_context_window_is_n_ctx_and_the_pool_takes_the_smaller(client, smollm2):
    assert asyncio.run(client.context_window()) == 1024
    # the fixture states max_sequence_length 8192 but loads n_ctx 1024: the limit llama.cpp enforces wins
    assert smollm2.max_sequence_length == 8192

    async def window(dep: Deployment) -> int | None:
        pool = ClientPool()
        try:
            return await pool.get(dep).context_window()
        finally:
            await pool.aclose()

    assert asyncio.run(window(smollm2)) == 1024
    bare = {**smollm2.to_json(), "name": "local/bare", "max_sequence_length": None, "options": {}}
    assert asyncio.run(window(Deployment(**bare))) == 4096  # neither says: llama.cpp's default n_ctx here
    small = {**bare, "name": "local/small", "max_sequence_length": 512, "options": {"n_ctx": 2048}}
    assert asyncio.run(window(Deployment(**small))) == 512


@pytest.mark.slow
def test_embedded_aci_bench_candidate_and_judge_prompts_fit_n_ctx(smollm2, shared_data, tmp_path):
    """An ACI-Bench dialogue is longer than n_ctx 1024; the deployment does not state max_sequence_length.
    The candidate prompt and the judge's prompt are fitted to llama.cpp's own window: no instance and no
    judgement fails for length."""
    from medhelm.cli import main
    from medhelm.rundir import RunDir

    dep = {**smollm2.to_json(), "name": "local/smollm2-1k", "max_sequence_length": None,
           "options": {"n_ctx": 1024, "n_threads": 1}}
    local = tmp_path / "env"
    local.mkdir()
    (local / "model_deployments.yaml").write_text(json.dumps({"model_deployments": [dep]}))
    jury = tmp_path / "jury.yaml"
    jury.write_text("judges:\n  - name: local/smollm2-1k\nmax_tokens: 300\nstructured_output: true\n")
    entry = (f"aci_bench:model=huggingfacetb/smollm2-135m-instruct,model_deployment=local/smollm2-1k,"
             f"subset=clinicalnlp_taskB_test1,jury_config_path={jury}")
    rc = main(["run", "-r", entry, "--data-dir", str(shared_data), "--offline", "-m", "1",
               "--num-output-tokens", "64", "-o", str(tmp_path / "out"), "--local-path", str(local), "-q"])
    assert rc == 0
    [run] = [RunDir(p) for p in (tmp_path / "out" / "runs" / "default").iterdir()]
    [rec] = list(run.iter_records())
    assert rec.error is None and rec.prompt.truncated  # the dialogue was cut to fit
    assert rec.completion.usage.prompt_tokens + 64 <= 1024
    assert rec.judgements and not [j for j in rec.judgements if j.status.value == "error"], rec.judgements
    assert rec.judge_usage.prompt_tokens > 0
