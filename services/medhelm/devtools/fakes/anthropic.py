"""A fake of Anthropic's Messages API (``POST /v1/messages``, docs.anthropic.com's API reference), driven by the
``anthropic`` SDK in tests/providers/test_anthropic.py. The key in ``x-api-key`` (or ``Authorization: Bearer``,
as the 2026 SDKs send it) and a known ``anthropic-version`` (2023-06-01, 2026-10-21) are required; unknown
body fields are refused ("Extra inputs are not permitted"), the first turn must be a user turn,
``thinking.budget_tokens`` >= 1024 and < ``max_tokens``, temperature 1 with thinking. With thinking on, a
``thinking`` block (or with ``redact_thinking = True`` an encrypted ``redacted_thinking`` block) comes before
the text, its tokens billed in ``output_tokens`` with no count of their own, as the API does.

``platform``: ``direct``; ``bedrock`` (``/model/<id>/invoke``, SigV4, ``bedrock-2023-05-31``); ``vertex``
(``...:rawPredict``, bearer, ``vertex-2023-10-16``); both also take ``2026-10-21`` (current SDKs send it).
Errors as ``{"type":"error","error":{...}}``; faults: ``overloaded`` (529 ``overloaded_error``), ``throttle``
(429 ``rate_limit_error``, ``retry-after: 2``), ``server_error`` (500 ``api_error``), ``echo``.
A request with ``"stream": true`` is answered as the Messages API's event stream (``stream_of``: the documented
events in order, text in several deltas; proven with the SDK's ``messages.stream`` in test_anthropic_stream.py);
``stream_fault`` for the next stream: ``overloaded`` (an ``error`` event after ``message_start``), ``cut``.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from medhelm.devtools.fakes.server import THOUGHT, FakeServer, Reply, count_tokens, json_reply, parse_body, text_of
from medhelm.devtools.fakes.sigv4 import SigV4Verifier, amz_error


_ANTHROPIC_FIELDS = {"model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k", "stop_sequences",
                     "metadata", "stream", "thinking", "tools", "tool_choice", "service_tier", "container",
                     "mcp_servers", "context_management", "cache_control", "diagnostics", "inference_geo",
                     "output_config", "user_profile_id", "anthropic_version", "anthropic_beta"}
_ANTHROPIC_VERSIONS = ("2023-01-01", "2023-06-01", "2026-10-21")


class FakeAnthropic(FakeServer):
    name = "anthropic"
    test_environment = {"ANTHROPIC_TEST_KEY": "sk-ant-test-key"}
    test_entry = {"served_model_name": "claude-test", "api_key_env": "ANTHROPIC_TEST_KEY"}
    api_key, platform = "sk-ant-test", "direct"

    def __init__(self, *args: Any, aws_keys: dict[str, str] | None = None, region: str = "us-east-1",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sigv4 = SigV4Verifier(aws_keys or {}, region)
        self.redact_thinking = False  # True: the thinking comes back as a redacted_thinking block (encrypted)
        self.stream_fault: str | None = None  # for the next streamed reply: "overloaded" or "cut"
        self.streamed = 0  # replies sent as an event stream

    def _error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Reply:
        return json_reply(status, {"type": "error", "error": {"type": kind, "message": message}},
                     {"request-id": "req_" + secrets.token_hex(8), **(headers or {})})

    def echo_error(self, status: int, message: str) -> Reply:
        if self.platform == "bedrock":
            return amz_error(status, "UnrecognizedClientException", message)
        return self._error(status, "authentication_error" if status in (401, 403) else "invalid_request_error", message)

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        status, out, content = self._answer_whole(method, path, query, headers, body)
        data = parse_body(body)
        if status != 200 or not (isinstance(data, dict) and data.get("stream") is True):
            return status, out, content
        with self._lock:
            fault, self.stream_fault = self.stream_fault, None
            self.streamed += 1
        headers_out = {k: v for k, v in out.items() if k.lower() != "content-type"}
        return 200, {**headers_out, "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}, \
            stream_of(json.loads(content), fault)

    def _answer_whole(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if method != "POST":
            return self._error(405, "invalid_request_error", "Method Not Allowed")
        if self.platform == "direct":
            if path != "/v1/messages":
                return self._error(404, "not_found_error", "Not Found")
            # the key in x-api-key, or (SDKs from 2026) as a bearer token
            if headers.get("x-api-key") != self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
                return self._error(401, "authentication_error", "invalid x-api-key")
            if not headers.get("anthropic-version"):
                return self._error(400, "invalid_request_error", "anthropic-version: header is required")
            if headers["anthropic-version"] not in _ANTHROPIC_VERSIONS:
                return self._error(400, "invalid_request_error",
                                   f"anthropic-version: unknown version {headers['anthropic-version'][:40]!r}")
            version = None
        elif self.platform == "bedrock":
            m = re.fullmatch(r"/model/([^/]+)/invoke", path)
            if not m:
                return amz_error(404, "UnknownOperationException", "Unknown operation")
            problem = self.sigv4.problem(method, path, query, headers, body)
            if problem:
                status = 403 if problem[0] != "IncompleteSignatureException" else 400
                return amz_error(status, *problem)
            version = "bedrock-2023-05-31"
        else:
            if not re.fullmatch(r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+:rawPredict", path):
                return json_reply(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})
            if headers.get("authorization") != f"Bearer {self.bearer}":
                return json_reply(401, {"error": {"code": 401, "message": "Request had invalid authentication credentials.",
                                                  "status": "UNAUTHENTICATED"}})
            version = "vertex-2023-10-16"
        data = parse_body(body)
        if not isinstance(data, dict):
            return self._error(400, "invalid_request_error", "The request body is not valid JSON.")
        problem = self._check(data, version)
        if problem:
            return self._error(400, "invalid_request_error", problem)
        fault = self._take_fault()
        if fault == "echo":
            quoted = text_of(data["messages"][-1]["content"])[:200]
            return self._error(400, "invalid_request_error", "prompt is too long: " + quoted)
        if fault == "overloaded":
            return self._error(529, "overloaded_error", "Overloaded")
        if fault == "throttle":
            return self._error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute "
                               "rate limit", {"retry-after": "2"})
        if fault == "server_error":
            return self._error(500, "api_error", "Internal server error")
        self._accepted(path, headers, data)
        system = text_of(data.get("system", ""))
        turns = [(m["role"], text_of(m["content"])) for m in data["messages"]]
        text = self.answer(system, turns)
        stops = [s for s in data.get("stop_sequences") or [] if s in text]
        content: list[dict[str, Any]] = []
        thinking_tokens = 0
        if data.get("thinking", {}).get("type") == "enabled":
            thinking_tokens = count_tokens(THOUGHT)
            if self.redact_thinking:  # flagged by the safety systems: the API returns it encrypted
                content.append({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix" + secrets.token_hex(16)})
            else:
                content.append({"type": "thinking", "thinking": THOUGHT,
                                "signature": "EqQBCgIYAhIM" + secrets.token_hex(8)})
        words = text.split()
        limit = data["max_tokens"] - thinking_tokens
        stop_reason = "end_turn"
        if stops:
            text, stop_reason = text.split(stops[0], 1)[0], "stop_sequence"
        elif count_tokens(text) > limit:
            text, stop_reason = " ".join(words[:max(limit, 0)]), "max_tokens"
        content.append({"type": "text", "text": text})
        prompt = count_tokens(system) + sum(count_tokens(t) for _, t in turns)
        out = {"id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
               "model": data.get("model") or path.rsplit("/", 1)[-1].split(":")[0], "content": content,
               "stop_reason": stop_reason, "stop_sequence": stops[0] if stop_reason == "stop_sequence" else None,
               "usage": {"input_tokens": prompt, "output_tokens": count_tokens(text) + thinking_tokens,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
        return json_reply(200, out, {"request-id": "req_" + secrets.token_hex(8)})

    def _check(self, data: dict[str, Any], version: str | None) -> str | None:
        for key in data:
            if key not in _ANTHROPIC_FIELDS or (key == "anthropic_version" and version is None) \
                    or (key == "model" and version is not None):
                return f"{key}: Extra inputs are not permitted"
        # Bedrock and Vertex take their platform version or, for current models, the 2026-10-21 API version
        # (what the anthropic SDK sends since late 2026)
        if version is not None and data.get("anthropic_version") not in (version, "2026-10-21"):
            return f"anthropic_version: Input should be '{version}' or '2026-10-21'"
        if version is None and not isinstance(data.get("model"), str):
            return "model: Field required"
        max_tokens = data.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Field required" if max_tokens is None else "max_tokens: Input should be a valid integer >= 1"
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or set(m) - {"role", "content"}:
                return f"messages.{i}: Input should be a message with role 'user' or 'assistant' and content"
            if not isinstance(m.get("content"), (str, list)):
                return f"messages.{i}.content: Field required"
        if messages[0]["role"] != "user":
            return "messages: first message must use the \"user\" role"
        temperature = data.get("temperature")
        if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 1):
            return "temperature: Input should be less than or equal to 1"
        thinking = data.get("thinking")
        if thinking is not None:
            budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
            if thinking.get("type") == "enabled":
                if not isinstance(budget, int) or budget < 1024:
                    return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                if budget >= max_tokens:
                    return "`max_tokens` must be greater than `thinking.budget_tokens`"
                if temperature is not None and temperature != 1:
                    return "`temperature` may only be set to 1 when thinking is enabled"
        stops = data.get("stop_sequences")
        if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) and s.strip() for s in stops)):
            return "stop_sequences: each stop sequence must contain non-whitespace"
        system = data.get("system")
        if system is not None and not isinstance(system, (str, list)):
            return "system: Input should be a valid string or a list of text blocks"
        return None


PIECE = 7  # characters per delta: every reply of more than a few words comes in several deltas


def event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode("utf-8")


def stream_of(message: dict[str, Any], fault: str | None = None) -> bytes:
    """The event stream describing ``message`` (a Messages API reply); ``fault`` as in the module's doc."""
    usage = dict(message.get("usage") or {})
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    out = [event("message_start", {"type": "message_start", "message": start}),
           event("ping", {"type": "ping"})]
    if fault == "overloaded":
        return b"".join(out) + event("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                          "message": "Overloaded"}})
    for index, block in enumerate(message.get("content") or ()):
        kind = block.get("type")
        if kind == "redacted_thinking":
            out.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                      "content_block": block}))
        else:
            key, delta = ("thinking", "thinking_delta") if kind == "thinking" else ("text", "text_delta")
            empty = {"type": kind, key: ""}
            out.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                      "content_block": empty}))
            text = block.get(key) or ""
            for i in range(0, len(text), PIECE):
                out.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                          "delta": {"type": delta, key: text[i:i + PIECE]}}))
            if kind == "thinking":
                out.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                          "delta": {"type": "signature_delta",
                                                                    "signature": block.get("signature", "")}}))
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(event("message_delta", {"type": "message_delta",
                                       "delta": {"stop_reason": message.get("stop_reason"),
                                                 "stop_sequence": message.get("stop_sequence")},
                                       "usage": {"output_tokens": usage.get("output_tokens")}}))
    if fault == "cut":
        return b"".join(out)
    out.append(event("message_stop", {"type": "message_stop"}))
    return b"".join(out)
