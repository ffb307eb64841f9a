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
