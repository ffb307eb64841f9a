"""Anthropic's streamed Messages reply: HELM's ``-thinking`` entries (``args.stream: true``) call the SDK's
``messages.stream``, and so ask for the event stream; medhelm sends the same request (the differential test
compares it) and reads the stream (``anthropic.read_stream``). The fake (devtools/fakes/anthropic.py) is
proven first with the official ``anthropic`` SDK: what the SDK accumulates from the fake's stream is the Message
the fake answers whole; then medhelm's client reads the same stream to the same answer, and an error event or
a stream cut short are what they are (retried, the prompt never quoted)."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.fakes.anthropic import FakeAnthropic
from medhelm.errors import InferenceError
from medhelm.inference import make_client
from medhelm.inference.anthropic import read_stream
from medhelm.inference.outcome import Verdict, outcome_of
from medhelm.specs import GenerationRequest, Message

KEY = "sk-ant-stream-test"
PROMPT = "Is the patient febrile after surgery? Answer yes or no, then say why in one sentence."
ANSWER = "Yes: a temperature of 38.9 C on the second day after surgery is a fever."


def _answer(request) -> str:
    return ANSWER
THINKING = {"name": "anthropic/claude-sonnet-4-20250514-thinking-1k", "model_name": "anthropic/claude-sonnet-4-20250514",
            "client_spec": {"class_name": "helm.clients.anthropic_client.AnthropicMessagesClient",
                            "args": {"anthropic_model_name": "claude-sonnet-4-20250514",
                                     "thinking_budget_tokens": 1024, "stream": True}}}


def _kw(**more):
    return {"model": "claude-sonnet-4-20250514", "max_tokens": 2048, "thinking": {"type": "enabled",
                                                                                 "budget_tokens": 1024},
            "messages": [{"role": "user", "content": PROMPT}], **more}


def _same_message(streamed, whole) -> None:
    assert [b.type for b in streamed.content] == [b.type for b in whole.content]
    for a, b in zip(streamed.content, whole.content):
        assert a.model_dump(exclude={"signature", "data"}) == b.model_dump(exclude={"signature", "data"})
    assert (streamed.stop_reason, streamed.stop_sequence) == (whole.stop_reason, whole.stop_sequence)
    assert streamed.usage.input_tokens == whole.usage.input_tokens
    assert streamed.usage.output_tokens == whole.usage.output_tokens


def test_the_official_sdk_reads_the_fakes_stream_as_the_message_it_answers_whole():
    anthropic = pytest.importorskip("anthropic")
    with FakeAnthropic(_answer, api_key=KEY) as srv:
        client = anthropic.Anthropic(api_key=KEY, base_url=srv.base_url, max_retries=0)
        whole = client.messages.create(**_kw())
        with client.messages.stream(**_kw()) as stream:
            texts = list(stream.text_stream)
            streamed = stream.get_final_message()
        assert srv.streamed == 1 and srv.requests[-1]["body"]["stream"] is True
        assert len(texts) > 1 and "".join(texts) == whole.content[-1].text  # several deltas, one text
        _same_message(streamed, whole)
        assert streamed.content[0].type == "thinking" and streamed.content[0].signature
        # the raw events, in the documented order
        kinds = [e.type for e in client.messages.create(**_kw(), stream=True)]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
        assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2
        # a stop sequence and the reason it stopped
        stop = client.messages.create(**_kw(stop_sequences=["surgery"], stream=False))
        assert stop.stop_reason == "stop_sequence"
        with client.messages.stream(**_kw(stop_sequences=["surgery"])) as stream:
            _same_message(stream.get_final_message(), stop)
        # redacted thinking comes whole in its content_block_start
        srv.redact_thinking = True
        with client.messages.stream(**_kw()) as stream:
            final = stream.get_final_message()
        assert isinstance(final.content[0], anthropic.types.RedactedThinkingBlock) and final.content[0].data
        srv.redact_thinking = False
        # an error event after HTTP 200: the SDK raises the API's error
        srv.stream_fault = "overloaded"
        with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
            with client.messages.stream(**_kw()) as stream:
                stream.get_final_message()


def _deployment(tmp_path, monkeypatch, srv):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.base_url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    (tmp_path / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [THINKING]}))
    (tmp_path / "credentials.conf").write_text(f'anthropicApiKey: "{KEY}"\n')
    return DeploymentRegistry.load(tmp_path).get(THINKING["name"])


async def _ask(dep, request):
    client = make_client(dep)
    try:
        return await client.generate(request)
    finally:
        await client.aclose()


def test_medhelm_streams_helms_thinking_entries_and_reads_what_the_sdk_reads(tmp_path, monkeypatch):
    anthropic = pytest.importorskip("anthropic")
    request = GenerationRequest((Message("user", PROMPT),), max_tokens=2048, temperature=1.0)
    with FakeAnthropic(_answer, api_key=KEY) as srv:
        dep = _deployment(tmp_path, monkeypatch, srv)
        assert dep.options.get("stream") is True
        ours = asyncio.run(_ask(dep, request))
        sent = srv.requests[-1]["body"]
        assert sent["stream"] is True and sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
        assert srv.streamed == 1
        sdk = anthropic.Anthropic(api_key=KEY, base_url=srv.base_url, max_retries=0)
        known = ("model", "max_tokens", "messages", "thinking", "stop_sequences")  # the 2026 SDK's own arguments
        with sdk.messages.stream(**{k: sent[k] for k in known},
                                 extra_body={k: v for k, v in sent.items() if k not in (*known, "stream")}) as stream:
            final = stream.get_final_message()
        assert ours.text == "".join(b.text for b in final.content if b.type == "text") and ours.text
        assert ours.finish_reason == "stop" and final.stop_reason == "end_turn"
        assert (ours.usage.prompt_tokens, ours.usage.completion_tokens) == (final.usage.input_tokens,
                                                                            final.usage.output_tokens)
        assert ours.usage.reasoning_tokens and ours.usage.reasoning_estimated  # no stated count: estimated
        # an error event mid-stream: overloaded, retried and paced as a throttle; the prompt is not quoted
        srv.stream_fault = "overloaded"
        with pytest.raises(InferenceError) as err:
            asyncio.run(_ask(dep, request))
        assert err.value.retryable and outcome_of(err.value).verdict is Verdict.RATE_LIMITED
        assert "overloaded_error" in str(err.value)
        # a stream that ends before message_stop: a malformed body, retried
        srv.stream_fault = "cut"
        with pytest.raises(InferenceError, match="malformed") as err:
            asyncio.run(_ask(dep, request))
        assert err.value.retryable and "febrile" not in str(err.value)


def test_the_reader_follows_the_event_stream_rules():
    # CRLF and CR line ends, a comment, data split over two lines, a ping and an unknown event type
    raw = ('event: message_start\r\ndata: {"type": "message_start", "message": {"id": "m", "type": "message", '
           '"role": "assistant", "model": "c", "content": [], "stop_reason": null, "usage": {"input_tokens": 3, '
           '"output_tokens": 1}}}\r\n\r\n: keep-alive\r\rnevent: ping\ndata: {"type": "ping"}\n\n'
           'event: content_block_start\ndata: {"type": "content_block_start", "index": 0,\ndata: '
           '"content_block": {"type": "text", "text": ""}}\n\n'
           'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": '
           '{"type": "text_delta", "text": "Ye"}}\n\n'
           'event: future_event\ndata: {"type": "future_event"}\n\n'
           'event: content_block_delta\ndata:{"type": "content_block_delta", "index": 0, "delta": '
           '{"type": "text_delta", "text": "s"}}\n\n'
           'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
           'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "max_tokens", '
           '"stop_sequence": null}, "usage": {"output_tokens": 2}}\n\n'
           'event: message_stop\ndata: {"type": "message_stop"}\n\n').encode()
    message = read_stream(raw)
    assert message["content"] == [{"type": "text", "text": "Yes"}]
    assert message["stop_reason"] == "max_tokens" and message["usage"] == {"input_tokens": 3, "output_tokens": 2}
    with pytest.raises(ValueError):
        read_stream(raw.split(b"event: message_stop")[0])
