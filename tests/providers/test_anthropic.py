"""Kind ``anthropic`` (inference/anthropic.py) and its fake (devtools/fakes/anthropic.py): the fake driven by the
official ``anthropic`` SDK (direct, ``AnthropicBedrock`` signing SigV4, ``AnthropicVertex``), then our client
against it on each platform, Claude's thinking (Messages ``thinking`` blocks and, on Bedrock Converse,
``reasoningContent``) kept apart from the answer with its tokens estimated apart."""

from __future__ import annotations

import asyncio

import pytest

from tests.providers.conftest import (
    KEYS,
    generate,
    make_fake,
    native_deployment,
    post_json,
    short_request,
)

AWS_KEY, AWS_SECRET = KEYS["AWS_ACCESS_KEY_ID"], KEYS["AWS_SECRET_ACCESS_KEY"]  # what the Bedrock fake accepts


def test_anthropic_sdk_against_the_fake():
    anthropic = pytest.importorskip("anthropic")
    with make_fake("anthropic") as srv:
        client = anthropic.Anthropic(api_key=KEYS["ANTHROPIC_TEST_KEY"], base_url=srv.base_url, max_retries=0)
        msg = client.messages.create(model="claude-test", max_tokens=64, system="Answer yes or no.",
                                     messages=[{"role": "user", "content": "Is the sky blue? yes or no"}])
        assert msg.type == "message" and msg.stop_reason == "end_turn"
        assert msg.content[0].type == "text" and msg.content[0].text in ("Yes", "No")
        assert msg.usage.input_tokens > 0 and msg.usage.output_tokens == 1
        sent = srv.requests[-1]
        assert sent["headers"]["anthropic-version"] in ("2023-06-01", "2026-10-21")
        assert sent["body"]["system"] == "Answer yes or no."
        # extended thinking: the SDK reads our thinking block back as a ThinkingBlock
        msg = client.messages.create(model="claude-test", max_tokens=2048, thinking={"type": "enabled",
                                                                                     "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": "Why?"}])
        assert [b.type for b in msg.content] == ["thinking", "text"] and msg.content[0].signature
        assert msg.usage.output_tokens > len(msg.content[1].text.split())  # the thinking is billed in it
        srv.redact_thinking = True  # flagged thinking comes back encrypted: the SDK's RedactedThinkingBlock
        msg = client.messages.create(model="claude-test", max_tokens=2048, thinking={"type": "enabled",
                                                                                     "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": "Why?"}])
        assert isinstance(msg.content[0], anthropic.types.RedactedThinkingBlock) and msg.content[0].data
        assert msg.content[1].type == "text" and msg.usage.output_tokens > 1
        srv.redact_thinking = False
        # refused as the real API refuses: unknown field, thinking budget under 1024, wrong key
        with pytest.raises(anthropic.BadRequestError, match="Extra inputs are not permitted"):
            client.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}],
                                   extra_body={"seed": 1})
        with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
            client.messages.create(model="claude-test", max_tokens=2048, messages=[{"role": "user", "content": "x"}],
                                   thinking={"type": "enabled", "budget_tokens": 100})
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(api_key="wrong", base_url=srv.base_url, max_retries=0).messages.create(
                model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        # overload: HTTP 529 overloaded_error, which the SDK itself treats as a server error and retries
        srv.fail_next(1, "overloaded")
        with pytest.raises(anthropic.APIStatusError) as err:
            client.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        assert err.value.status_code == 529 and err.value.body["error"]["type"] == "overloaded_error"
        srv.fail_next(1, "overloaded")
        retrying = anthropic.Anthropic(api_key=KEYS["ANTHROPIC_TEST_KEY"], base_url=srv.base_url, max_retries=1)
        assert retrying.messages.create(model="claude-test", max_tokens=8,
                                        messages=[{"role": "user", "content": "x"}]).content[0].text == "x"
        # the header the SDK always sends is required: without it, a 400 naming it
        status, body = post_json(srv.base_url + "/v1/messages", {"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "x"}]}, {"x-api-key": KEYS["ANTHROPIC_TEST_KEY"]})
        assert status == 400 and body["error"]["message"] == "anthropic-version: header is required"


def test_anthropic_bedrock_sdk_signs_what_the_fake_verifies():
    anthropic = pytest.importorskip("anthropic")
    pytest.importorskip("botocore")
    with make_fake("anthropic", platform="bedrock", aws_keys={AWS_KEY: AWS_SECRET}) as srv:
        client = anthropic.AnthropicBedrock(aws_access_key=AWS_KEY, aws_secret_key=AWS_SECRET, aws_region="us-east-1",
                                            base_url=srv.base_url, max_retries=0)
        msg = client.messages.create(model="anthropic.claude-test-v1:0", max_tokens=32,
                                     messages=[{"role": "user", "content": "Is it? yes or no"}])
        assert msg.content[0].text in ("Yes", "No")
        assert srv.requests[-1]["path"] == "/model/anthropic.claude-test-v1:0/invoke" or \
            srv.requests[-1]["path"].startswith("/model/anthropic.claude-test-v1")
        assert srv.requests[-1]["body"]["anthropic_version"] in ("bedrock-2023-05-31", "2026-10-21")
        bad = anthropic.AnthropicBedrock(aws_access_key=AWS_KEY, aws_secret_key="not-the-secret",
                                         aws_region="us-east-1", base_url=srv.base_url, max_retries=0)
        with pytest.raises(anthropic.PermissionDeniedError, match="signature"):
            bad.messages.create(model="anthropic.claude-test-v1:0", max_tokens=8,
                                messages=[{"role": "user", "content": "x"}])


def test_anthropic_vertex_sdk_against_the_fake():
    anthropic = pytest.importorskip("anthropic")
    with make_fake("anthropic", platform="vertex", bearer="ya29.vertex-token") as srv:
        client = anthropic.AnthropicVertex(region="europe-west1", project_id="hospital-proj",
                                           access_token="ya29.vertex-token", base_url=srv.base_url + "/v1",
                                           max_retries=0)
        msg = client.messages.create(model="claude-test@20250101", max_tokens=32,
                                     messages=[{"role": "user", "content": "one two three"}])
        assert msg.content[0].text == "one two three"
        assert srv.requests[-1]["path"] == ("/v1/projects/hospital-proj/locations/europe-west1/publishers/anthropic/"
                                            "models/claude-test@20250101:rawPredict")
        assert srv.requests[-1]["body"]["anthropic_version"] in ("vertex-2023-10-16", "2026-10-21")


def test_anthropic_on_bedrock_and_vertex(keys, tmp_path):
    with make_fake("anthropic", platform="bedrock", aws_keys={AWS_KEY: KEYS["AWS_SECRET_ACCESS_KEY"]}) as srv:
        dep = native_deployment("anthropic", srv.base_url, platform="bedrock", region="us-east-1")
        completion, _ = asyncio.run(generate(dep, short_request("one two")))
        assert completion.text == "one two"
        assert srv.requests[-1]["path"] == "/model/claude-test/invoke"
    token = tmp_path / "token"
    token.write_text("ya29.from-a-sidecar\n")
    with make_fake("anthropic", platform="vertex", bearer="ya29.from-a-sidecar") as srv:
        dep = native_deployment("anthropic", srv.base_url, platform="vertex", region="europe-west1", project="p1",
                          access_token_file=str(token))
        completion, _ = asyncio.run(generate(dep, short_request("three four")))
        assert completion.text == "three four"
        assert srv.requests[-1]["body"]["anthropic_version"] == "vertex-2023-10-16"


def test_anthropic_thinking_request_is_what_the_api_accepts(keys):
    with make_fake("anthropic") as srv:
        dep = native_deployment("anthropic", srv.base_url, thinking_budget=1024)
        completion, _ = asyncio.run(generate(dep, short_request("seven eight")))
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
            completion, _ = asyncio.run(generate(native_deployment(kind, srv.base_url, **options), short_request("yes")))
            body = srv.requests[-1]["body"]
        assert completion.text == "yes", kind
        usage = completion.usage
        assert (usage.completion_tokens, usage.reasoning_tokens, usage.reasoning_estimated) == (13, 12, True), kind
    # Converse: maxTokens holds the budget too and temperature is not sent (Bedrock refuses both otherwise)
    assert body["inferenceConfig"] == {"maxTokens": 16 + 1024}


def test_no_thinking_no_reasoning_count(keys):
    for kind in ("anthropic", "bedrock"):
        with make_fake(kind) as srv:
            completion, _ = asyncio.run(generate(native_deployment(kind, srv.base_url), short_request("yes")))
        assert completion.usage.reasoning_tokens is None and not completion.usage.reasoning_estimated
        assert "reasoning_tokens" not in completion.usage.to_json()
