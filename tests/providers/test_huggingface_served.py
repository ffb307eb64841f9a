"""HELM's HuggingFaceClient entries (the model loaded inside HELM's process) run against the hospital's own
OpenAI-compatible server of that model (helm_env.SERVED_LOCALLY): <host>BaseUrl in credentials.conf, else
MEDHELM_HF_BASE_URL. Unmapped, the entry is kept and a run naming it is refused in one line saying what to set.
The server here is the OpenAI mock (devtools/mock_openai.py) the openai SDK tests already prove."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import GenerationRequest, Message

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=0.0, jitter="none")
QWEN = {"name": "huggingface/qwen2.5-7b-instruct", "model_name": "qwen/qwen2.5-7b-instruct",
        "tokenizer_name": "qwen/qwen2.5-7b-instruct", "max_sequence_length": 32768,
        "client_spec": {"class_name": "helm.clients.huggingface_client.HuggingFaceClient",
                        "args": {"pretrained_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "device_map": "auto",
                                 "torch_dtype": "torch.bfloat16"}}}
GPT2 = {"name": "huggingface/gpt2", "model_name": "openai/gpt2", "tokenizer_name": "huggingface/gpt2",
        "max_sequence_length": 1024,
        "client_spec": {"class_name": "helm.clients.huggingface_client.HuggingFaceClient",
                        "args": {"apply_chat_template": False}}}


def _load(tmp_path, credentials: str = ""):
    (tmp_path / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [QWEN, GPT2]}))
    (tmp_path / "credentials.conf").write_text(credentials)
    return DeploymentRegistry.load(tmp_path)


async def _generate(dep, request):
    pool = ClientPool(retry=FAST)
    try:
        return await pool.get(dep).generate(request)
    finally:
        await pool.aclose()


@pytest.mark.parametrize("how", ["credentials", "variable"])
def test_a_mapped_entry_reaches_the_local_server(tmp_path, monkeypatch, how):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    with MockOpenAIServer() as server:
        base = server.base_url
        if how == "variable":
            monkeypatch.setenv("MEDHELM_HF_BASE_URL", base)
            registry = _load(tmp_path)
        else:
            monkeypatch.delenv("MEDHELM_HF_BASE_URL", raising=False)
            registry = _load(tmp_path, f'huggingfaceBaseUrl: "{base}"\n')
        qwen, gpt2 = registry.get("huggingface/qwen2.5-7b-instruct"), registry.get("huggingface/gpt2")
        assert (qwen.kind.value, qwen.base_url, qwen.served_model_name) == ("openai", base, "Qwen/Qwen2.5-7B-Instruct")
        assert gpt2.served_model_name == "openai/gpt2" and gpt2.options.get("api") == "completions"
        request = GenerationRequest((Message("user", "Is aspirin an NSAID? yes or no"),), max_tokens=4)
        assert asyncio.run(_generate(qwen, request)).text
        assert asyncio.run(_generate(gpt2, request)).text is not None
        paths = [m["target"].split("?")[0] for m in server.request_meta]
        assert paths[-2:] == ["/v1/chat/completions", "/v1/completions"]
        assert [body["model"] for body in server.requests[-2:]] == ["Qwen/Qwen2.5-7B-Instruct", "openai/gpt2"]


def test_an_unmapped_entry_is_kept_and_refused_saying_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    monkeypatch.delenv("MEDHELM_HF_BASE_URL", raising=False)
    registry = _load(tmp_path)
    assert "huggingface/gpt2" not in registry
    refusal = registry.unrunnable["huggingface/gpt2"].refusal()
    assert "HuggingFaceClient" in refusal and "MEDHELM_HF_BASE_URL" in refusal and "BaseUrl" in refusal
    assert "\n" not in refusal
