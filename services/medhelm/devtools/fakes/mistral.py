"""A fake of Mistral AI's chat completions API (``POST /v1/chat/completions``, docs.mistral.ai's API
reference), strict as the service: ``Authorization: Bearer <key>`` (401 ``Unauthorized`` otherwise), the
request fields of ``ChatCompletionRequest`` only (another is a 422 ``extra_forbidden``, in FastAPI's
``detail`` list as Mistral answers), ``messages`` non-empty with roles system/user/assistant/tool,
``temperature`` >= 0, ``max_tokens`` >= 0. Faults on demand (``fail_next``): ``throttle`` (429, Mistral's
rate-limit message), ``server_error`` (503), ``echo`` (a 400 quoting the prompt).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, count_tokens, json_reply, parse_body

FIELDS = frozenset({"model", "temperature", "top_p", "max_tokens", "stream", "stop", "random_seed", "metadata",
                    "messages", "response_format", "tools", "tool_choice", "presence_penalty", "frequency_penalty",
                    "n", "prediction", "parallel_tool_calls", "prompt_mode", "safe_prompt"})
ROLES = frozenset({"system", "user", "assistant", "tool"})


class FakeMistral(FakeServer):
    name = "mistral"
    api_key = "mistral-test-key"

    @staticmethod
    def _invalid(loc: list[Any], msg: str, kind: str) -> Reply:
        return json_reply(422, {"object": "error", "message": {"detail": [{"type": kind, "loc": ["body", *loc],
                                                                       "msg": msg, "input": None}]},
                                "type": "invalid_request_message_error", "param": None, "code": None})

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if method != "POST" or path != "/v1/chat/completions":
            return json_reply(404, {"detail": "Not Found"})
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return json_reply(401, {"message": "Unauthorized", "request_id": secrets.token_hex(16)})
        data = parse_body(body)
        if not isinstance(data, dict):
            return self._invalid([], "Input should be a valid dictionary or object", "model_attributes_type")
        for key in data:
            if key not in FIELDS:
                return self._invalid([key], "Extra inputs are not permitted", "extra_forbidden")
        if not isinstance(data.get("model"), str):
            return self._invalid(["model"], "Field required", "missing")
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._invalid(["messages"], "List should have at least 1 item after validation", "too_short")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), (str, list)):
                return self._invalid(["messages", i], "Input tag does not match any of the expected tags",
                                     "union_tag_invalid")
        temperature, limit = data.get("temperature"), data.get("max_tokens")
        if temperature is not None and not (isinstance(temperature, (int, float)) and temperature >= 0):
            return self._invalid(["temperature"], "Input should be greater than or equal to 0", "greater_than_equal")
        if limit is not None and not (isinstance(limit, int) and limit >= 0):
            return self._invalid(["max_tokens"], "Input should be greater than or equal to 0", "greater_than_equal")
        if data.get("stream"):
            return self._invalid(["stream"], "this fake answers whole replies only", "value_error")
        fault = self._take_fault()
        if fault == "throttle":
            return json_reply(429, {"message": "Requests rate limit exceeded"}, {"Retry-After": "1"})
        if fault in ("server_error", "overloaded"):
            return json_reply(503, {"object": "error", "message": "Service unavailable.", "type": "service_unavailable",
                                    "param": None, "code": "1000"})
        if fault == "echo":
            return json_reply(400, {"object": "error", "message": "Prompt too long: " + str(messages[-1]["content"])[:200],
                                    "type": "invalid_request_error", "param": None, "code": None})
        self._accepted(path, headers, data)
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system" and isinstance(m["content"], str))
        turns = [(m["role"], m["content"]) for m in messages if m["role"] != "system" and isinstance(m["content"], str)]
        text, finish = self.answer(system, turns), "stop"
        if isinstance(limit, int) and count_tokens(text) > limit:
            text, finish = " ".join(text.split()[:limit]), "length"
        for stop in data.get("stop") or []:
            text = text.split(stop, 1)[0]
        prompt = sum(count_tokens(t) for _, t in turns) + count_tokens(system)
        return json_reply(200, {"id": secrets.token_hex(16), "object": "chat.completion", "model": data["model"],
                                "created": int(time.time()),
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                                     "tool_calls": None, "prefix": False},
                                             "finish_reason": finish}],
                                "usage": {"prompt_tokens": prompt, "completion_tokens": count_tokens(text),
                                          "total_tokens": prompt + count_tokens(text)}})
