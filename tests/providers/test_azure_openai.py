"""Kind ``azure_openai`` (inference/azure_openai.py) and its fake (devtools/fakes/azure_openai.py): the fake driven
by the official ``openai`` SDK's ``AzureOpenAI`` with an api-key, then our client against it: reasoning tokens,
and workload identity surviving a token the service declares expired (the Entra side: test_entra.py)."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.inference import ClientPool
from medhelm.specs import Deployment
from tests.providers.conftest import FAST, KEYS, entra_env, generate, make_fake, native_deployment, short_request


def test_openai_sdk_against_the_azure_fake_with_an_api_key():
    openai = pytest.importorskip("openai")
    with make_fake("azure_openai", reasoning_tokens=5) as srv:
        client = openai.AzureOpenAI(azure_endpoint=srv.base_url, api_key=KEYS["AZURE_TEST_KEY"],
                                    api_version="2024-10-21", max_retries=0)
        reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "a b c"}],
                                               max_tokens=8, temperature=0, seed=0)
        assert reply.choices[0].message.content == "a b c"
        assert reply.usage.completion_tokens_details.reasoning_tokens == 5
        assert srv.requests[-1]["path"] == "/openai/deployments/gpt-test/chat/completions"
        with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: bogus"):
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}],
                                           extra_body={"bogus": 1})
        srv.fail_next(1, "throttle")
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        assert err.value.response.headers["retry-after-ms"] == "10"
        with pytest.raises(openai.AuthenticationError):
            openai.AzureOpenAI(azure_endpoint=srv.base_url, api_key="wrong", api_version="2024-10-21",
                               max_retries=0).chat.completions.create(model="gpt-test",
                                                                      messages=[{"role": "user", "content": "x"}])


def test_azure_reasoning_tokens(keys):
    with make_fake("azure_openai", reasoning_tokens=12) as srv:
        completion, _ = asyncio.run(generate(native_deployment("azure_openai", srv.base_url), short_request("nine")))
    assert completion.usage.reasoning_tokens == 12 and completion.usage.completion_tokens == 13


def test_azure_openai_with_workload_identity_survives_an_expired_token(tmp_path, monkeypatch):
    sa = tmp_path / "azure-identity-token"
    sa.write_text("projected.sa.token")
    with make_fake("azure_openai", api_key=None, federated_token="projected.sa.token") as srv:
        for k, v in entra_env(srv, AZURE_FEDERATED_TOKEN_FILE=str(sa)).items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AZURE_CLIENT_SECRET", raising=False)
        dep = Deployment(name="azure/wi", model_name="m", kind="azure_openai", base_url=srv.base_url,
                         served_model_name="gpt-test", options={"auth": "entra"})

        async def run():
            pool = ClientPool(retry=FAST)
            client = pool.get(dep)
            try:
                first = await client.generate(short_request("eleven"))
                srv.expire_tokens()  # revoked/expired server-side before our clock says so
                second = await client.generate(short_request("twelve"))
                return first, second, pool.stats[dep.name]
            finally:
                await pool.aclose()

        first, second, stats = asyncio.run(run())
        assert (first.text, second.text) == ("eleven", "twelve") and stats.retries == 1
        grants = [f for f in srv.token_requests if f.get("grant_type")]
        assert len(grants) == 2 and all(f["client_assertion"] == "projected.sa.token" for f in grants)
        assert srv.refused == [(401, "401")]
