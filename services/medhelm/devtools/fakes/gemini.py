"""A fake of Gemini's ``generateContent`` (ai.google.dev's REST reference and Vertex AI's), driven by the
``google-genai`` SDK in tests/providers/test_gemini.py. ``platform``: ``public`` (``POST
/v1beta/models/<m>:generateContent``, the key in ``x-goog-api-key`` or ``?key=``; none is a 403, a wrong one
400 ``API key not valid``) or ``vertex`` (``/v1/projects/<p>/locations/<r>/publishers/google/models/<m>``,
``Authorization: Bearer``, 401 ``UNAUTHENTICATED`` otherwise).

Unknown fields are refused as Google's JSON parser does (``Unknown name "x"``; camelCase or snake_case
accepted), as are roles other than user/model, temperature outside [0, 2] and more than 5 stop sequences. A
prompt holding ``block_marker`` is blocked (``promptFeedback.blockReason: SAFETY``, no candidates);
``thinking_tokens`` > 0 reports ``thoughtsTokenCount``. Faults: ``throttle`` (429 ``RESOURCE_EXHAUSTED``),
``overloaded``/``server_error`` (503 ``UNAVAILABLE``), ``echo``.
"""

from __future__ import annotations

import re
import secrets
import urllib.parse
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, count_tokens, json_reply, parse_body, text_of


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


_GEMINI_FIELDS = {"contents", "systemInstruction", "generationConfig", "safetySettings", "tools", "toolConfig",
                  "cachedContent", "labels", "model"}
_GEMINI_CONFIG = {"stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema", "candidateCount",
                  "maxOutputTokens", "temperature", "topP", "topK", "seed", "presencePenalty", "frequencyPenalty",
                  "responseLogprobs", "logprobs", "thinkingConfig", "responseModalities", "mediaResolution",
                  "speechConfig", "enableEnhancedCivicAnswers", "routingConfig", "audioTimestamp",
                  "imageConfig", "modelSelectionConfig"}
_GEMINI_THINKING = {"thinkingBudget", "includeThoughts", "thinkingLevel"}


class FakeGemini(FakeServer):
    name = "gemini"
    test_environment = {"GEMINI_TEST_KEY": "AIza-test-key"}
    test_entry = {"served_model_name": "gemini-test", "api_key_env": "GEMINI_TEST_KEY"}
    api_key, platform = "AIza-test", "public"

    def __init__(self, *args: Any, block_marker: str | None = None, thinking_tokens: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.block_marker, self.thinking_tokens = block_marker, thinking_tokens

    @staticmethod
    def _error(code: int, status: str, message: str) -> Reply:
        return json_reply(code, {"error": {"code": code, "message": message, "status": status}})

    def echo_error(self, status: int, message: str) -> Reply:
        return self._error(status, "UNAUTHENTICATED" if status == 401 else "INVALID_ARGUMENT", message)

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if self.platform == "public":
            m = re.fullmatch(r"/v1(?:beta|alpha)?/models/([^/:]+):generateContent", path)
            key = headers.get("x-goog-api-key") or dict(urllib.parse.parse_qsl(query)).get("key")
            if not m or method != "POST":
                return self._error(404, "NOT_FOUND", "Not found")
            if not key:
                return self._error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers "
                                   "without established identity). Please use API Key or other form of API consumer "
                                   "identity to call this API.")
            if key != self.api_key:
                return self._error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        else:
            m = re.fullmatch(r"/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/google/models/([^/:]+)"
                             r":generateContent", path)
            if not m or method != "POST":
                return self._error(404, "NOT_FOUND", "Not found")
            if headers.get("authorization") != f"Bearer {self.bearer}":
                return self._error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. "
                                   "Expected OAuth 2 access token, login cookie or other valid authentication credential.")
        data = parse_body(body)
        if not isinstance(data, dict):
            return self._error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        problem = self._check(data)
        if problem:
            return self._error(400, "INVALID_ARGUMENT", problem)
        fault = self._take_fault()
        if fault == "echo":
            return self._error(400, "INVALID_ARGUMENT", "The input token count exceeds the maximum: "
                               + text_of(data["contents"][-1].get("parts"))[:200])
        if fault == "throttle":
            return json_reply(429, {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                              "status": "RESOURCE_EXHAUSTED"}})
        if fault in ("overloaded", "server_error"):
            return self._error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
        self._accepted(path, headers, data)
        system = text_of((data.get("systemInstruction") or data.get("system_instruction") or {}).get("parts"))
        turns = [("assistant" if c.get("role") == "model" else "user", text_of(c.get("parts"))) for c in data["contents"]]
        prompt = count_tokens(system) + sum(count_tokens(t) for _, t in turns)
        config = data.get("generationConfig") or data.get("generation_config") or {}
        config = {_camel(k): v for k, v in config.items()}
        thinking = {_camel(k): v for k, v in (config.get("thinkingConfig") or {}).items()}
        thoughts = self.thinking_tokens if thinking.get("thinkingBudget", 1) != 0 else 0
        usage: dict[str, Any] = {"promptTokenCount": prompt}
        if self.block_marker and any(self.block_marker in t for _, t in turns) or \
                (self.block_marker and self.block_marker in system):
            usage["totalTokenCount"] = prompt
            return json_reply(200, {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]},
                "usageMetadata": usage, "modelVersion": m.group(1)})
        text = self.answer(system, turns)
        finish = "STOP"
        limit = config.get("maxOutputTokens")
        if isinstance(limit, int) and count_tokens(text) > limit:
            text, finish = " ".join(text.split()[:limit]), "MAX_TOKENS"
        for stop in config.get("stopSequences") or []:
            if stop in text:
                text = text.split(stop, 1)[0]
        usage.update(candidatesTokenCount=count_tokens(text), totalTokenCount=prompt + count_tokens(text) + thoughts)
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return json_reply(200, {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                                "finishReason": finish, "index": 0}],
                                "usageMetadata": usage, "modelVersion": m.group(1),
                                "responseId": secrets.token_urlsafe(12)})

    def _check(self, data: dict[str, Any]) -> str | None:
        for key in data:
            if _camel(key) not in _GEMINI_FIELDS:
                return f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
        contents = data.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        for i, c in enumerate(contents):
            if not isinstance(c, dict) or set(c) - {"role", "parts"}:
                return f'Invalid JSON payload received. Unknown name in "contents[{i}]": Cannot find field.'
            if c.get("role") not in (None, "user", "model"):
                return f"Please use a valid role: user, model. (contents[{i}].role)"
            parts = c.get("parts")
            if not isinstance(parts, list) or not parts:
                return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        config = data.get("generationConfig", data.get("generation_config"))
        if config is not None:
            if not isinstance(config, dict):
                return 'Invalid value at \'generation_config\': Starting an object on a scalar field'
            for key, value in config.items():
                if _camel(key) not in _GEMINI_CONFIG:
                    return f'Invalid JSON payload received. Unknown name "{key}" at \'generation_config\': Cannot find field.'
                if _camel(key) == "thinkingConfig":
                    for k in value or {}:
                        if _camel(k) not in _GEMINI_THINKING:
                            return (f'Invalid JSON payload received. Unknown name "{k}" at '
                                    "'generation_config.thinking_config': Cannot find field.")
            temperature = config.get("temperature")
            if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 2):
                return "* GenerateContentRequest.generation_config.temperature: must be in [0.0, 2.0]"
            stops = config.get("stopSequences", config.get("stop_sequences")) or []
            if len(stops) > 5:
                return "* GenerateContentRequest.generation_config.stop_sequences: at most 5 stop sequences"
        return None
