"""Our native clients (kinds anthropic, gemini, bedrock, azure_openai) through the one ClientPool, against the
strict fakes the official SDKs accept (test_fakes_match_official_sdks.py): request shapes, usage and
reasoning tokens, the providers' throttling mapped to our retries, a safety block as a per-instance outcome,
SigV4 and Entra ID, the API-gateway options."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference import ClientPool, RetryPolicy, make_client
from medhelm.inference.entra import EntraToken
from medhelm.specs import Deployment, GenerationRequest, Message
from tests.providers.conftest import AWS_KEY, KEYS, KINDS, deployment_entry, make_fake

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.0, max_delay_s=0.0, jitter="none")


def _deployment(kind: str, base_url: str, **options) -> Deployment:
    entry = deployment_entry(kind, base_url, **options)
    entry.pop("max_sequence_length")
    return Deployment(**entry)


def _request(text: str = "Is aspirin an NSAID? yes or no", **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("system", "Answer briefly."), Message("user", text)), max_tokens=16, **kw)


async def _generate(dep: Deployment, request: GenerationRequest, policy: RetryPolicy = FAST):
    pool = ClientPool(retry=policy)
    try:
        completion = await pool.get(dep).generate(request)
        return completion, pool.stats[dep.name]
    finally:
        await pool.aclose()


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_answers_with_usage(kind, keys):
    with make_fake(kind) as srv:
        completion, stats = asyncio.run(_generate(_deployment(kind, srv.base_url), _request()))
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
        completion, stats = asyncio.run(_generate(_deployment(kind, srv.base_url), _request()))
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
                await client.generate(_request())
            return err.value
        finally:
            await client.aclose()

    with make_fake("anthropic") as srv:
        srv.fail_next(1, "overloaded")
        err = asyncio.run(one(_deployment("anthropic", srv.base_url)))
        assert err.retryable and err.status == 529 and "overloaded_error" in str(err)
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(_deployment("anthropic", srv.base_url)))
        assert err.retryable and err.status == 429 and "rate_limit_error" in str(err) and err.retry_after == 2.0
    with make_fake("gemini") as srv:
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(_deployment("gemini", srv.base_url)))
        assert err.retryable and err.status == 429 and "RESOURCE_EXHAUSTED" in str(err)
    with make_fake("bedrock") as srv:
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(_deployment("bedrock", srv.base_url)))
        assert err.retryable and "ThrottlingException" in str(err)
    with make_fake("azure_openai") as srv:
        srv.fail_next(1, "throttle")
        err = asyncio.run(one(_deployment("azure_openai", srv.base_url)))
        assert err.retryable and err.retry_after == pytest.approx(0.010)  # retry-after-ms wins over retry-after


def test_refusals_fail_at_once_and_name_the_cause(keys, monkeypatch):
    with make_fake("bedrock") as srv:
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        with pytest.raises(InferenceError) as err:
            asyncio.run(_generate(_deployment("bedrock", srv.base_url), _request()))
        assert not err.value.retryable and err.value.status == 403 and "InvalidSignatureException" in str(err.value)
        assert "not-the-secret" not in str(err.value) and srv.request_count == 0
    with make_fake("anthropic") as srv:
        dep = _deployment("anthropic", srv.base_url, anthropic_version="1999-01-01")
        with pytest.raises(InferenceError) as err:
            asyncio.run(_generate(dep, _request()))
        assert not err.value.retryable and "invalid_request_error" in str(err.value)


def test_anthropic_on_bedrock_and_vertex(keys, tmp_path):
    with make_fake("anthropic", platform="bedrock", aws_keys={AWS_KEY: KEYS["AWS_SECRET_ACCESS_KEY"]}) as srv:
        dep = _deployment("anthropic", srv.base_url, platform="bedrock", region="us-east-1")
        completion, _ = asyncio.run(_generate(dep, _request("one two")))
        assert completion.text == "one two"
        assert srv.requests[-1]["path"] == "/model/claude-test/invoke"
    token = tmp_path / "token"
    token.write_text("ya29.from-a-sidecar\n")
    with make_fake("anthropic", platform="vertex", bearer="ya29.from-a-sidecar") as srv:
        dep = _deployment("anthropic", srv.base_url, platform="vertex", region="europe-west1", project="p1",
                          access_token_file=str(token))
        completion, _ = asyncio.run(_generate(dep, _request("three four")))
        assert completion.text == "three four"
        assert srv.requests[-1]["body"]["anthropic_version"] == "vertex-2023-10-16"


def test_gemini_vertex_and_thinking_tokens_apart(keys, tmp_path):
    token = tmp_path / "token"
    token.write_text("ya29.vertex")
    with make_fake("gemini", platform="vertex", bearer="ya29.vertex", thinking_tokens=40) as srv:
        dep = _deployment("gemini", srv.base_url, platform="vertex", region="europe-west4", project="p1",
                          access_token_file=str(token), thinking_budget=256)
        completion, _ = asyncio.run(_generate(dep, _request("five six")))
    assert completion.text == "five six"
    assert completion.usage.reasoning_tokens == 40 and completion.usage.completion_tokens == 2 + 40
    assert srv.requests[-1]["body"]["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 256}


def test_anthropic_thinking_request_is_what_the_api_accepts(keys):
    with make_fake("anthropic") as srv:
        dep = _deployment("anthropic", srv.base_url, thinking_budget=1024)
        completion, _ = asyncio.run(_generate(dep, _request("seven eight")))
        body = srv.requests[-1]["body"]
    # max_tokens grows by the budget, temperature is left out (thinking requires the default): accepted
    assert body["max_tokens"] == 16 + 1024 and "temperature" not in body
    assert completion.text == "seven eight"  # the thinking block is not part of the answer
    # one output_tokens count, thinking included (the fake bills 12 thinking + 2 answer tokens); Anthropic states
    # no thinking count, so ours is an estimate, flagged: 14 less the answer's 11 characters / 4 (3) = 11
    usage = completion.usage
    assert (usage.completion_tokens, usage.reasoning_tokens, usage.reasoning_estimated) == (14, 11, True)
    assert usage.to_json()["reasoning_tokens_estimated"] is True


@pytest.mark.parametrize("redacted", [False, True])
def test_thinking_apart_from_the_answer_on_anthropic_and_bedrock(keys, redacted):
    """Thinking blocks (Anthropic ``thinking``/``redacted_thinking``, Converse ``reasoningContent``) never reach
    the answer; their tokens, which the providers bill inside the one output count, are estimated apart."""
    for kind, options in (("anthropic", {"thinking_budget": 1024}),
                          ("bedrock", {"additional_model_request_fields": {
                              "thinking": {"type": "enabled", "budget_tokens": 1024}}})):
        with make_fake(kind) as srv:
            srv.redact_thinking = redacted
            completion, _ = asyncio.run(_generate(_deployment(kind, srv.base_url, **options), _request("yes")))
            body = srv.requests[-1]["body"]
        assert completion.text == "yes", kind
        usage = completion.usage
        assert (usage.completion_tokens, usage.reasoning_tokens, usage.reasoning_estimated) == (13, 12, True), kind
    # Converse: maxTokens holds the budget too and temperature is not sent (Bedrock refuses both otherwise)
    assert body["inferenceConfig"] == {"maxTokens": 16 + 1024}


def test_no_thinking_no_reasoning_count(keys):
    for kind in ("anthropic", "bedrock"):
        with make_fake(kind) as srv:
            completion, _ = asyncio.run(_generate(_deployment(kind, srv.base_url), _request("yes")))
        assert completion.usage.reasoning_tokens is None and not completion.usage.reasoning_estimated
        assert "reasoning_tokens" not in completion.usage.to_json()


def test_azure_reasoning_tokens(keys):
    with make_fake("azure_openai", reasoning_tokens=12) as srv:
        completion, _ = asyncio.run(_generate(_deployment("azure_openai", srv.base_url), _request("nine")))
    assert completion.usage.reasoning_tokens == 12 and completion.usage.completion_tokens == 13


def test_gemini_safety_block_is_an_outcome_not_a_crash(keys):
    with make_fake("gemini", block_marker="FORBIDDEN-TOPIC") as srv:
        completion, stats = asyncio.run(_generate(_deployment("gemini", srv.base_url),
                                                  _request("tell me about FORBIDDEN-TOPIC")))
    assert completion.text == "" and completion.finish_reason == "content_filter"
    assert completion.usage.prompt_tokens > 0 and stats.errors == 0 and stats.retries == 0


def test_gateway_subscription_key_and_base_path(keys):
    """An API gateway in front of Anthropic: its key in Ocp-Apim-Subscription-Key, its own base path."""
    with make_fake("anthropic") as srv:
        dep = _deployment("anthropic", srv.base_url, subscription_key_env="GATEWAY_TEST_KEY")
        asyncio.run(_generate(dep, _request()))
        assert srv.requests[-1]["headers"]["ocp-apim-subscription-key"] == KEYS["GATEWAY_TEST_KEY"]
    with make_fake("azure_openai") as srv:  # and on the openai kind, with another header name
        dep = Deployment(name="gw/openai", model_name="m", kind="openai", base_url=srv.base_url +
                         "/openai/deployments/gpt-test", api_key_env="AZURE_TEST_KEY",
                         options={"api_version": "2024-10-21", "auth_header": "api-key",
                                  "subscription_key_env": "GATEWAY_TEST_KEY", "subscription_key_header": "x-gw-key"})
        completion, _ = asyncio.run(_generate(dep, _request("ten")))
        assert completion.text == "ten" and srv.requests[-1]["headers"]["x-gw-key"] == KEYS["GATEWAY_TEST_KEY"]
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        make_client(_deployment("gemini", "http://127.0.0.1:9", subscription_key_env="NOT_SET_ANYWHERE"))


# -- Entra ID --------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _entra_env(srv, **extra) -> dict[str, str]:
    return {"AZURE_TENANT_ID": srv.tenant, "AZURE_CLIENT_ID": srv.client_id, "AZURE_AUTHORITY_HOST": srv.base_url,
            **extra}


def test_entra_token_is_refreshed_before_it_expires():
    with make_fake("azure_openai", api_key=None, token_lifetime_s=3600) as srv:
        clock = Clock()
        token = EntraToken("azure/x", env=_entra_env(srv, AZURE_CLIENT_SECRET=srv.client_secret), clock=clock)

        async def run() -> list[str]:
            got = [(await token.headers())["Authorization"]]
            clock.now += 3600 - 301  # more than 5 minutes left: the same token
            got.append((await token.headers())["Authorization"])
            clock.now += 2  # within 5 minutes of expiry: a fresh one, before the old one expires
            got.append((await token.headers())["Authorization"])
            return got

        first, same, fresh = asyncio.run(run())
    assert first == same != fresh and token.fetches == 2 and token.method == "client_secret"


def test_entra_concurrent_requests_share_one_fetch():
    with make_fake("azure_openai", api_key=None) as srv:
        token = EntraToken("azure/x", env=_entra_env(srv, AZURE_CLIENT_SECRET=srv.client_secret))

        async def run():
            return await asyncio.gather(*(token.headers() for _ in range(20)))

        assert len({h["Authorization"] for h in asyncio.run(run())}) == 1 and token.fetches == 1


def test_azure_openai_with_workload_identity_survives_an_expired_token(tmp_path, monkeypatch):
    sa = tmp_path / "azure-identity-token"
    sa.write_text("projected.sa.token")
    with make_fake("azure_openai", api_key=None, federated_token="projected.sa.token") as srv:
        for k, v in _entra_env(srv, AZURE_FEDERATED_TOKEN_FILE=str(sa)).items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AZURE_CLIENT_SECRET", raising=False)
        dep = Deployment(name="azure/wi", model_name="m", kind="azure_openai", base_url=srv.base_url,
                         served_model_name="gpt-test", options={"auth": "entra"})

        async def run():
            pool = ClientPool(retry=FAST)
            client = pool.get(dep)
            try:
                first = await client.generate(_request("eleven"))
                srv.expire_tokens()  # revoked/expired server-side before our clock says so
                second = await client.generate(_request("twelve"))
                return first, second, pool.stats[dep.name]
            finally:
                await pool.aclose()

        first, second, stats = asyncio.run(run())
        assert (first.text, second.text) == ("eleven", "twelve") and stats.retries == 1
        grants = [f for f in srv.token_requests if f.get("grant_type")]
        assert len(grants) == 2 and all(f["client_assertion"] == "projected.sa.token" for f in grants)
        assert srv.refused == [(401, "401")]


def test_entra_managed_identity_and_a_wrong_secret():
    with make_fake("azure_openai", api_key=None, identity_header="hdr") as srv:
        token = EntraToken("azure/mi", env={"IDENTITY_ENDPOINT": srv.base_url + "/msi/token", "IDENTITY_HEADER": "hdr"})
        header = asyncio.run(token.headers())["Authorization"]
        assert token.method == "managed_identity" and header[7:] in srv.tokens
        bad = EntraToken("azure/x", env=_entra_env(srv, AZURE_CLIENT_SECRET="wrong-secret"))
        with pytest.raises(InferenceError) as err:
            asyncio.run(bad.headers())
        assert "invalid_client" in str(err.value) and "AADSTS7000215" in str(err.value)
        assert "wrong-secret" not in str(err.value) and not err.value.retryable
    with pytest.raises(ConfigError, match="AZURE_TENANT_ID"):
        EntraToken("azure/x", env={"AZURE_CLIENT_SECRET": "s", "AZURE_CLIENT_ID": "c"})


def test_entra_managed_identity_through_imds():
    with make_fake("azure_openai", api_key=None) as srv:
        token = EntraToken("azure/imds", env={"AZURE_POD_IDENTITY_AUTHORITY_HOST": srv.base_url})
        header = asyncio.run(token.headers())["Authorization"]
    assert header[7:] in srv.tokens
    assert srv.token_requests[-1] == {"api-version": "2018-02-01", "resource": "https://cognitiveservices.azure.com"}


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


def test_reasoning_tokens_reach_the_telemetry_apart(keys):
    from medhelm.telemetry import Telemetry

    telemetry = Telemetry("run")
    with make_fake("gemini", thinking_tokens=30) as srv:
        dep = _deployment("gemini", srv.base_url)

        async def run() -> None:
            pool = ClientPool(retry=FAST, observer=telemetry)
            try:
                for text in ("a b", "c d e"):
                    await pool.get(dep).generate(_request(text))
            finally:
                await pool.aclose()

        asyncio.run(run())

    def tokens(kind: str) -> float | None:
        return telemetry.registry.get_sample_value("medhelm_tokens_total", {"deployment": dep.name,
                                                                            "role": "candidate", "kind": kind})

    assert tokens("reasoning") == 60 and tokens("completion") == 2 + 3 + 60


def test_a_gateway_route_as_the_whole_url_with_keys_from_credentials_conf(keys, tmp_path, monkeypatch):
    """A HELM prod_env entry behind a gateway (helm_env.py's translation): the subscription key from
    credentials.conf, the route as the whole URL (``api_path: ""``)."""
    (tmp_path / "credentials.conf").write_text('gatewayApiKey: "apim-from-credentials"\n')
    with make_fake("anthropic", api_key="sk-direct") as srv:
        monkeypatch.setenv("ANTHROPIC_TEST_KEY", "sk-direct")
        dep = _deployment("anthropic", srv.base_url + "/v1/messages", api_path="",
                          credentials={"source": str(tmp_path / "credentials.conf"), "name": "gatewayApiKey",
                                       "as": "subscription_key"})
        completion, _ = asyncio.run(_generate(dep, _request("route ok")))
        assert completion.text == "route ok"
        assert srv.requests[-1]["headers"]["ocp-apim-subscription-key"] == "apim-from-credentials"


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_names_its_endpoint_and_the_model_that_answered(kind, keys):
    """What a run's access record keeps (issue 51): the endpoint without credentials or query string, the model
    asked for, and the model the provider says answered (Anthropic `model`, Gemini `modelVersion`, Azure
    `model`; Bedrock Converse names none)."""
    with make_fake(kind) as srv:
        dep = _deployment(kind, srv.base_url)

        async def go():
            pool = ClientPool(retry=FAST)
            try:
                window = pool.watch(dep.name)
                completion = await pool.get(dep).generate(_request())
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
