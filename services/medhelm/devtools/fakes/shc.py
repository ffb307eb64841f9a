"""A fake of Stanford Health Care's API gateway (Azure API Management) in front of its private Claude (Bedrock)
and Gemini (Vertex) text routes: kinds ``anthropic``/``gemini`` with ``platform: shc``. There is no published
spec: the bodies are the ones HELM's ``StanfordHealthCareClaudeClient`` / ``StanfordHealthCareGoogleClient``
post (crfm-helm's source; tests/providers/test_helm_differential.py shows ours send the same as HELM's own
clients), and tests/providers/test_shc.py runs pubmed_qa through this fake.

The key is the ``Ocp-Apim-Subscription-Key`` header (APIM's 401 otherwise); a body of another shape is a 400.
Faults: ``throttle`` (429, ``Retry-After: 1``), ``overloaded``/``server_error`` (503).
"""

from __future__ import annotations

import secrets
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, count_tokens, json_reply, parse_body


_SHC_CLAUDE_FIELDS = {"model_id": str, "prompt_text": str, "max_tokens": int, "temperature": (int, float)}
_SHC_GOOGLE_CONFIG = {"temperature": (int, float), "topP": (int, float), "topK": int, "candidateCount": int,
                      "maxOutputTokens": int, "stopSequences": list}


class FakeSHCGateway(FakeServer):
    """Azure API Management in front of SHC's Claude (Bedrock) and Gemini (Vertex) routes, strict to the
    bodies HELM's ``StanfordHealthCareClaudeClient`` / ``StanfordHealthCareGoogleClient`` post to
    ``{endpoint}/{deployment}``: ``routes`` maps each route path to ``"claude"`` or ``"google"``. The key is
    the ``Ocp-Apim-Subscription-Key`` header (APIM's 401 otherwise); a body of another shape (an Anthropic
    Messages or ``generateContent`` body, a missing or extra field) is a 400. Claude answers with Bedrock's
    Messages reply (``claude_reply="message"``) or its bare content list (``"list"``); Gemini with the
    ``streamGenerateContent`` chunks as one JSON array (two chunks, the usage on the last), which is what
    HELM's parser reads (``response["content"]`` after wrapping the list)."""

    name = "shc"

    def __init__(self, *args: Any, routes: dict[str, str], subscription_key: str = "shc-key",
                 claude_reply: str = "message", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.routes, self.subscription_key, self.claude_reply = routes, subscription_key, claude_reply

    def echo_error(self, status: int, message: str) -> Reply:
        return json_reply(status, {"statusCode": status, "message": message})

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        kind = self.routes.get(path)
        if kind is None or method != "POST":
            return json_reply(404, {"statusCode": 404, "message": "Resource not found"})
        if headers.get("ocp-apim-subscription-key") != self.subscription_key:
            return json_reply(401, {"statusCode": 401, "message": "Access denied due to invalid subscription key. "
                                                             "Make sure to provide a valid key for an active subscription."})
        data = parse_body(body)
        problem = self._check_claude(data) if kind == "claude" else self._check_google(data)
        if problem:
            return json_reply(400, {"error": {"code": "BadRequest", "message": problem}})
        fault = self._take_fault()
        if fault == "throttle":
            return json_reply(429, {"statusCode": 429, "message": "Rate limit is exceeded. Try again in 1 seconds."},
                         {"Retry-After": "1"})
        if fault in ("overloaded", "server_error"):
            return json_reply(503, {"statusCode": 503, "message": "Service Unavailable"})
        self._accepted(path, headers, data)
        if kind == "claude":
            prompt = data["prompt_text"]
            text = self.answer("", [("user", prompt)])
            words, stop = text.split(), "end_turn"
            if count_tokens(text) > data["max_tokens"]:
                text, stop = " ".join(words[:data["max_tokens"]]), "max_tokens"
            content = [{"type": "text", "text": text}]
            if self.claude_reply == "list":
                return json_reply(200, content)
            return json_reply(200, {"id": "msg_bdrk_" + secrets.token_hex(8), "type": "message", "role": "assistant",
                                    "model": data["model_id"], "content": content, "stop_reason": stop,
                                    "stop_sequence": None, "usage": {"input_tokens": count_tokens(prompt),
                                                                     "output_tokens": count_tokens(text)}})
        prompt = data["contents"]["parts"]["text"]
        config = data["generation_config"]
        text = self.answer("", [("user", prompt)])
        words, finish = text.split(), "STOP"
        if count_tokens(text) > config["maxOutputTokens"]:
            words, finish = words[:config["maxOutputTokens"]], "MAX_TOKENS"
        half = (len(words) + 1) // 2
        pieces = [" ".join(words[:half]), (" " if half < len(words) else "") + " ".join(words[half:])]
        chunks: list[dict[str, Any]] = [{"candidates": [{"content": {"role": "model", "parts": [{"text": pieces[0]}]}}],
                                         "modelVersion": path.rsplit("/", 1)[-1]}]
        chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": pieces[1]}]},
                                       "finishReason": finish}],
                       "usageMetadata": {"promptTokenCount": count_tokens(prompt),
                                         "candidatesTokenCount": len(words),
                                         "totalTokenCount": count_tokens(prompt) + len(words)},
                       "modelVersion": path.rsplit("/", 1)[-1]})
        return json_reply(200, chunks)

    @staticmethod
    def _check_claude(data: Any) -> str | None:
        if not isinstance(data, dict):
            return "the body must be a JSON object"
        if set(data) != set(_SHC_CLAUDE_FIELDS):
            return f"the body's fields must be exactly {sorted(_SHC_CLAUDE_FIELDS)}, got {sorted(data)[:10]}"
        for key, kind in _SHC_CLAUDE_FIELDS.items():
            if not isinstance(data[key], kind) or isinstance(data[key], bool):
                return f"{key}: wrong type"
        return None

    @staticmethod
    def _check_google(data: Any) -> str | None:
        if not isinstance(data, dict) or set(data) != {"contents", "generation_config"}:
            return "the body's fields must be exactly ['contents', 'generation_config']"
        contents = data["contents"]
        if not (isinstance(contents, dict) and set(contents) == {"role", "parts"} and contents["role"] == "user"
                and isinstance(contents["parts"], dict) and set(contents["parts"]) == {"text"}
                and isinstance(contents["parts"]["text"], str)):
            return "contents must be one user object whose parts is one {text} object"
        config = data["generation_config"]
        if not isinstance(config, dict) or set(config) != set(_SHC_GOOGLE_CONFIG):
            return f"generation_config's fields must be exactly {sorted(_SHC_GOOGLE_CONFIG)}"
        for key, kind in _SHC_GOOGLE_CONFIG.items():
            if not isinstance(config[key], kind) or isinstance(config[key], bool):
                return f"generation_config.{key}: wrong type"
        return None
