"""Kind ``mistral`` (inference/mistral.py) and its fake (devtools/fakes/mistral.py). The fake is proven with
the official ``mistralai`` SDK (the 1.x line HELM's ``mistral`` extra pins): its chat.complete is answered and
its 401 raised as the SDK raises it. Our client against the fake: answers and usage, retries on 429, a 401
named; a HELM ``MistralAIClient`` entry sends the body the SDK sends for HELM's call, byte for byte as JSON.
(The differential test against HELM's own client is in test_helm_differential.py.)"""

from __future__ import annotations

import asyncio

import pytest
import yaml

from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.fakes.mistral import FakeMistral
from medhelm.errors import InferenceError
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import Deployment, GenerationRequest, Message

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.0, max_delay_s=0.0, jitter="none")
KEY = "mistral-test-key"


def _sdk(base_url: str, key: str = KEY):
    mistralai = pytest.importorskip("mistralai")
    if not hasattr(mistralai, "Mistral"):
        pytest.skip("mistralai 1.x (HELM's pin) is needed: its Mistral class")
    return mistralai.Mistral(api_key=key, server_url=base_url)


async def _generate(dep: Deployment, request: GenerationRequest):
    pool = ClientPool(retry=FAST)
    try:
        return await pool.get(dep).generate(request), pool.stats[dep.name]
    finally:
        await pool.aclose()


def _dep(base_url: str, **options) -> Deployment:
    return Deployment(name="mistral/large", model_name="mistralai/mistral-large-2407", kind="mistral",
                      base_url=base_url + "/v1", served_model_name="mistral-large-2407", api_key_env="MISTRAL_TEST_KEY",
                      options=options)


def test_the_official_sdk_accepts_the_fake():
    with FakeMistral(api_key=KEY) as fake:
        sdk = _sdk(fake.base_url)
        reply = sdk.chat.complete(model="mistral-large-2407", temperature=0.0, max_tokens=16, random_seed=1,
                                  messages=[{"role": "system", "content": "Answer briefly."},
                                            {"role": "user", "content": "Is aspirin an NSAID? yes or no"}],
                                  stop=["\n\n"], safe_prompt=False)
        assert reply.choices[0].message.content in ("Yes", "No") and reply.usage.completion_tokens == 1
        assert fake.requests[-1]["headers"]["authorization"] == f"Bearer {KEY}"
        from mistralai.models import SDKError

        with pytest.raises(SDKError) as caught:
            _sdk(fake.base_url, "wrong").chat.complete(model="m", messages=[{"role": "user", "content": "x"}])
        assert caught.value.status_code == 401 and fake.refused[-1][0] == 401


def test_our_client_answers_retries_and_names_a_refusal(monkeypatch):
    monkeypatch.setenv("MISTRAL_TEST_KEY", KEY)
    request = GenerationRequest((Message("system", "Answer briefly."), Message("user", "Is aspirin an NSAID? yes or no")),
                                max_tokens=16, stop=("\n\n",), seed=7)
    with FakeMistral(api_key=KEY) as fake:
        completion, stats = asyncio.run(_generate(_dep(fake.base_url), request))
        assert completion.text in ("Yes", "No") and completion.finish_reason == "stop"
        assert completion.usage.prompt_tokens and completion.usage.completion_tokens == 1
        assert fake.requests[-1]["body"] == {
            "model": "mistral-large-2407", "messages": [{"content": "Answer briefly.", "role": "system"},
                                                        {"content": "Is aspirin an NSAID? yes or no", "role": "user"}],
            "temperature": 0.0, "max_tokens": 16, "stream": False, "safe_prompt": False, "stop": ["\n\n"],
            "random_seed": 7}
        fake.fail_next(2, "throttle")
        completion, stats = asyncio.run(_generate(_dep(fake.base_url), request))
        assert completion.usage.attempts == 3 and [s for s, _ in fake.refused][-2:] == [429, 429]
        monkeypatch.setenv("MISTRAL_TEST_KEY", "revoked")
        with pytest.raises(InferenceError) as caught:
            asyncio.run(_generate(_dep(fake.base_url), request))
        assert caught.value.status == 401 and not caught.value.retryable and "Unauthorized" in str(caught.value)
        assert "revoked" not in str(caught.value) and "mistral/large" in str(caught.value)


def test_a_helm_entry_sends_what_the_sdk_sends_for_helms_call(tmp_path, monkeypatch):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    prompt = "Is the patient febrile? Answer yes or no."
    with FakeMistral(api_key=KEY) as fake:
        monkeypatch.setenv("MISTRAL_BASE_URL", fake.base_url + "/v1")
        # HELM's MistralAIClient._send_request for a text prompt, through the SDK HELM pins
        _sdk(fake.base_url).chat.complete(model="mistral-large-2407", messages=[{"role": "user", "content": prompt}],
                                          temperature=0.0, max_tokens=5, top_p=1, random_seed=None,
                                          safe_prompt=False)
        theirs = fake.requests[-1]
        (tmp_path / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [{
            "name": "mistralai/mistral-large-2407", "model_name": "mistralai/mistral-large-2407",
            "tokenizer_name": "mistralai/Mistral-7B-v0.1", "max_sequence_length": 128000,
            "client_spec": {"class_name": "helm.clients.mistral_client.MistralAIClient",
                            "args": {"mistral_model": "mistral-large-2407"}}}]}))
        (tmp_path / "credentials.conf").write_text(f'mistralaiApiKey: "{KEY}"\n')
        dep = DeploymentRegistry.load(tmp_path).get("mistralai/mistral-large-2407")
        assert dep.kind.value == "mistral" and dep.served_model_name == "mistral-large-2407"
        asyncio.run(_generate(dep, GenerationRequest((Message("user", prompt),), max_tokens=5)))
        ours = fake.requests[-1]
        assert ours["body"] == theirs["body"] and ours["path"] == theirs["path"]
        assert ours["headers"]["authorization"] == theirs["headers"]["authorization"]
