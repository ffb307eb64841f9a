"""What every native kind's client does alike (anthropic, gemini, bedrock, azure_openai through the one
ClientPool, against their fakes): an answer with usage and the system prompt where each API wants it, the
providers' throttling and overload retried with the waits they send, refusals failing at once and named, a
missing option a ConfigError, the endpoint and the answering model named for the access record. A provider's
own behaviour is tested in its tests/providers/test_<kind>.py."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference import ClientPool, make_client
from medhelm.specs import Deployment
from tests.providers.conftest import (
    FAST,
    deployment_entry,
    generate,
    make_fake,
    native_deployment,
    short_request,
)

# the kinds these tests cover; a kind joins them with its line in each table below
KINDS = ("anthropic", "gemini", "bedrock", "azure_openai")


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_answers_with_usage(kind, keys):
    with make_fake(kind) as srv:
        completion, stats = asyncio.run(generate(native_deployment(kind, srv.base_url), short_request()))
        assert completion.text in ("Yes", "No") and completion.finish_reason == "stop"
        assert completion.usage.prompt_tokens > 5 and completion.usage.completion_tokens == 1
        assert stats.requests == 1 and stats.retries == 0
        body = srv.requests[-1]["body"]
    # the system prompt travels where each API wants it
    system = {"anthropic": lambda b: b["system"], "gemini": lambda b: b["systemInstruction"]["parts"][0]["text"],
              "bedrock": lambda b: b["system"][0]["text"], "azure_openai": lambda b: b["messages"][0]["content"]}
    assert system[kind](body) == "Answer briefly."


@pytest.mark.parametrize("kind,fault", [("anthropic", "overloaded"), ("anthropic", "throttle"), ("gemini", "throttle"),
                                        ("gemini", "overloaded"), ("bedrock", "throttle"), ("bedrock", "overloaded"),
                                        ("azure_openai", "throttle"), ("azure_openai", "server_error")])
def test_provider_limits_are_retried(kind, fault, keys):
    with make_fake(kind) as srv:
        srv.fail_next(2, fault)
        completion, stats = asyncio.run(generate(native_deployment(kind, srv.base_url), short_request()))
        assert completion.text in ("Yes", "No") and completion.usage.attempts == 3
        assert stats.retries == 2 and stats.requests == 3 and srv.request_count == 3
        assert [status for status, _ in srv.refused][-2:] == [
            {"overloaded": {"anthropic": 529, "gemini": 503, "bedrock": 503}, "throttle": dict.fromkeys(KINDS, 429),
             "server_error": {"azure_openai": 500}}[fault][kind]] * 2


def test_error_types_and_waits_as_the_providers_send_them(keys):
    async def one(dep):
        client = make_client(dep)
        try:
            with pytest.raises(InferenceError) as err:
                await client.generate(short_request())
            return err.value
        finally:
            await client.aclose()

    with make_fake("anthropic") as srv:
        srv.fail_next(1, "overloaded")
        err = asyncio.run(one(native_deployment("anthropic", srv.base_url)))
        assert err.retryable and err.status == 529 and "overloaded_error" in str(err)
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(native_deployment("anthropic", srv.base_url)))
        assert err.retryable and err.status == 429 and "rate_limit_error" in str(err) and err.retry_after == 2.0
    with make_fake("gemini") as srv:
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(native_deployment("gemini", srv.base_url)))
        assert err.retryable and err.status == 429 and "RESOURCE_EXHAUSTED" in str(err)
    with make_fake("bedrock") as srv:
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(native_deployment("bedrock", srv.base_url)))
        assert err.retryable and "ThrottlingException" in str(err)
    with make_fake("azure_openai") as srv:
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(native_deployment("azure_openai", srv.base_url)))
        assert err.retryable and err.retry_after == pytest.approx(0.010)  # retry-after-ms wins over retry-after


def test_refusals_fail_at_once_and_name_the_cause(keys, monkeypatch):
    with make_fake("bedrock") as srv:
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        with pytest.raises(InferenceError) as err:
            asyncio.run(generate(native_deployment("bedrock", srv.base_url), short_request()))
        assert not err.value.retryable and err.value.status == 403 and "InvalidSignatureException" in str(err.value)
        assert "not-the-secret" not in str(err.value) and srv.request_count == 0
    with make_fake("anthropic") as srv:
        dep = native_deployment("anthropic", srv.base_url, anthropic_version="1999-01-01")
        with pytest.raises(InferenceError) as err:
            asyncio.run(generate(dep, short_request()))
        assert not err.value.retryable and "invalid_request_error" in str(err.value)


def test_missing_configuration_is_a_config_error(keys, monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(ConfigError, match="options.region"):
        make_client(Deployment(name="b", model_name="m", kind="bedrock"))
    with pytest.raises(ConfigError, match="options.project"):
        make_client(Deployment(name="v", model_name="m", kind="gemini", api_key_env="GEMINI_TEST_KEY",
                               options={"platform": "vertex", "region": "r"}))
    with pytest.raises(ConfigError, match="platform"):
        make_client(Deployment(name="a", model_name="m", kind="anthropic", options={"platform": "azure"}))
    for kind in ("anthropic", "gemini"):  # SHC's text routes: a gateway route, and no field for thinking
        with pytest.raises(ConfigError, match="platform shc needs base_url"):
            make_client(Deployment(name="s", model_name="m", kind=kind, options={"platform": "shc"}))
        with pytest.raises(ConfigError, match="thinking_budget cannot be sent on platform shc"):
            make_client(Deployment(name="s", model_name="m", kind=kind, base_url="https://gw/route",
                                   options={"platform": "shc", "thinking_budget": 1024}))


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_names_its_endpoint_and_the_model_that_answered(kind, keys):
    """What a run's access record keeps (issue 51): the endpoint without credentials or query string, the model
    asked for, and the model the provider says answered (Anthropic `model`, Gemini `modelVersion`, Azure
    `model`; Bedrock Converse names none)."""
    with make_fake(kind) as srv:
        dep = native_deployment(kind, srv.base_url)

        async def go():
            pool = ClientPool(retry=FAST)
            try:
                window = pool.watch(dep.name)
                completion = await pool.get(dep).generate(short_request())
                return completion, pool.get(dep).endpoint(), window
            finally:
                await pool.aclose()

        completion, endpoint, window = asyncio.run(go())
    assert endpoint["endpoint"] == srv.base_url and endpoint["kind"] == kind
    assert endpoint["served_model"] == (dep.served_model_name or dep.model_name)
    answered = {"anthropic": "claude-test", "gemini": "gemini-test", "bedrock": None, "azure_openai": "gpt-test"}[kind]
    assert completion.model == answered
    assert window.to_json()["answered_models"] == ([answered] if answered else []) and window.requests == 1


def test_a_default_endpoint_is_named_without_its_key(keys):
    """A deployment without base_url: the provider's own URL, never the key a query string may carry."""
    for kind, options, host in (("gemini", {}, "https://generativelanguage.googleapis.com/"),
                                ("anthropic", {}, "https://api.anthropic.com/"),
                                ("bedrock", {"region": "eu-central-1"}, "https://bedrock-runtime.eu-central-1.amazonaws.com/")):
        entry = deployment_entry(kind, "http://unused.invalid", **options)
        entry.pop("max_sequence_length")
        entry["base_url"] = None
        dep = Deployment(**entry)
        pool = ClientPool()
        described = pool.get(dep).endpoint()
        asyncio.run(pool.aclose())
        assert described["endpoint"].startswith(host), described
        assert "?" not in described["endpoint"] and "key" not in described["endpoint"].lower(), described
