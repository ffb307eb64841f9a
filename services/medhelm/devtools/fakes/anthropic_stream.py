"""Anthropic's streamed Messages reply (``"stream": true``), as the Messages API's streaming reference documents
it, on top of ``FakeAnthropic`` (devtools/fake_providers.py), which checks the request and composes the
whole reply: that reply is sent as the server-sent event stream describing it, ``Content-Type:
text/event-stream``, each event ``event: <type>`` and ``data: <json>`` then a blank line, in the documented
order: ``message_start`` (the message with empty ``content``, ``stop_reason`` null, the input usage), a
``ping``, per content block ``content_block_start`` (an empty ``text`` or ``thinking`` block; a
``redacted_thinking`` block whole), ``content_block_delta`` events (``text_delta``, ``thinking_delta`` then one
``signature_delta``) and ``content_block_stop``, then ``message_delta`` (``stop_reason``, ``stop_sequence``, the
cumulative ``usage.output_tokens``) and ``message_stop``. A request without ``stream`` is answered whole.

Faults in the stream (``stream_fault``, for the next streamed reply): ``overloaded`` (HTTP 200, then an
``error`` event ``overloaded_error`` after ``message_start``, as the API reports overload mid-stream), ``cut``
(the stream ends before ``message_stop``). tests/providers/test_anthropic_stream.py proves the fake with the
official ``anthropic`` SDK (``messages.stream`` accumulates the same Message the fake composed)."""

from __future__ import annotations

import json
from typing import Any

from medhelm.devtools.fake_providers import FakeAnthropic, Reply, _parse_body

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


class FakeAnthropicStream(FakeAnthropic):
    """``FakeAnthropic`` that answers a request with ``"stream": true`` as Anthropic's event stream."""

    name = "anthropic"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream_fault: str | None = None
        self.streamed = 0  # replies sent as an event stream

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        status, out, content = super().route(method, path, query, headers, body)
        data = _parse_body(body)
        if status != 200 or not (isinstance(data, dict) and data.get("stream") is True):
            return status, out, content
        with self._lock:
            fault, self.stream_fault = self.stream_fault, None
            self.streamed += 1
        headers_out = {k: v for k, v in out.items() if k.lower() != "content-type"}
        return 200, {**headers_out, "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}, \
            stream_of(json.loads(content), fault)
