"""A fake of Amazon Bedrock's Converse API (``POST /model/<id>/converse``, the Bedrock API reference), driven by
boto3's ``bedrock-runtime`` client in tests/providers/test_bedrock.py. Every request's SigV4 signature is
recomputed as received (``sigv4.py``: 403 ``InvalidSignatureException`` on a mismatch,
``UnrecognizedClientException`` for an unknown key, ``Signature expired`` beyond 5 minutes); unknown fields,
a first turn not the user's, content blocks of more than one key, temperature above 1 or ``maxTokens`` < 1 are a 400
``ValidationException``.

Claude's thinking through ``additionalModelRequestFields.thinking`` answers with a ``reasoningContent`` block
(``reasoningText`` + signature, or ``redactedContent`` with ``redact_thinking = True``) billed in
``outputTokens``; Claude's thinking rules (budget >= 1024 and < ``maxTokens``, temperature 1 only) are
refused as ``ValidationException``. Faults: ``throttle`` (429 ``ThrottlingException`` in
``x-amzn-ErrorType``), ``overloaded``/``server_error`` (503 ``ServiceUnavailableException``), ``echo``.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from medhelm.devtools.fakes.server import THOUGHT, FakeServer, Reply, count_tokens, json_reply, parse_body, text_of
from medhelm.devtools.fakes.sigv4 import SigV4Verifier, amz_error


_CONVERSE_FIELDS = {"messages", "system", "inferenceConfig", "toolConfig", "guardrailConfig",
                    "additionalModelRequestFields", "promptVariables", "additionalModelResponseFieldPaths",
                    "requestMetadata", "performanceConfig", "serviceTier"}
_CONVERSE_CONFIG = {"maxTokens", "temperature", "topP", "stopSequences"}


def _converse_thinking(data: dict[str, Any]) -> Any:
    """The thinking budget of a Converse request to Claude (additionalModelRequestFields.thinking), else None."""
    extra = data.get("additionalModelRequestFields")
    thinking = extra.get("thinking") if isinstance(extra, dict) else None
    return thinking.get("budget_tokens") if isinstance(thinking, dict) and thinking.get("type") == "enabled" else None


class FakeBedrock(FakeServer):
    name = "bedrock"
    test_environment = {"AWS_ACCESS_KEY_ID": "AKIDMEDHELMTEST", "AWS_SECRET_ACCESS_KEY": "medhelm/secret/for+tests",
                        "AWS_SESSION_TOKEN": None}
    test_entry = {"served_model_name": "anthropic.claude-test-v1:0", "options": {"region": "us-east-1"}}

    @classmethod
    def accepting(cls, **kwargs: Any) -> FakeBedrock:
        env = cls.test_environment
        return cls(**{"aws_keys": {env["AWS_ACCESS_KEY_ID"]: env["AWS_SECRET_ACCESS_KEY"]}, **kwargs})

    def __init__(self, *args: Any, aws_keys: dict[str, str] | None = None, region: str = "us-east-1",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sigv4 = SigV4Verifier(aws_keys or {"AKIDEXAMPLE": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}, region)
        self.redact_thinking = False  # True: reasoningContent.redactedContent instead of reasoningText

    def echo_error(self, status: int, message: str) -> Reply:
        return amz_error(status, "UnrecognizedClientException", message)

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        m = re.fullmatch(r"/model/([^/]+)/converse", path)
        if not m or method != "POST":
            return amz_error(404, "UnknownOperationException", "Unknown operation")
        problem = self.sigv4.problem(method, path, query, headers, body)
        if problem:
            return amz_error(403 if problem[0] != "IncompleteSignatureException" else 400, *problem)
        data = parse_body(body)
        if not isinstance(data, dict):
            return amz_error(400, "SerializationException", "Could not parse the request body")
        problem_text = self._check(data)
        if problem_text:
            return amz_error(400, "ValidationException", problem_text)
        fault = self._take_fault()
        if fault == "echo":
            return amz_error(400, "ValidationException", "Input is too long for requested model: "
                              + text_of(data["messages"][-1]["content"])[:200])
        if fault == "throttle":
            return amz_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
        if fault in ("overloaded", "server_error"):
            return amz_error(503, "ServiceUnavailableException", "The service is temporarily unavailable.")
        self._accepted(path, headers, data)
        system = text_of(data.get("system"))
        turns = [(msg["role"], text_of(msg["content"])) for msg in data["messages"]]
        text = self.answer(system, turns)
        config = data.get("inferenceConfig") or {}
        stop = "end_turn"
        blocks: list[dict[str, Any]] = []
        thinking_tokens = 0
        if _converse_thinking(data):  # Claude's extended thinking: a reasoningContent block before the text
            thinking_tokens = count_tokens(THOUGHT)
            blocks.append({"reasoningContent": {"reasoningText": {"text": THOUGHT,
                                                                  "signature": "EqQBCgIYAhIM" + secrets.token_hex(8)}}}
                          if not self.redact_thinking else
                          {"reasoningContent": {"redactedContent": "RW5jcnlwdGVk" + secrets.token_hex(8)}})
        limit = config["maxTokens"] - thinking_tokens if isinstance(config.get("maxTokens"), int) else None
        if limit is not None and count_tokens(text) > limit:
            text, stop = " ".join(text.split()[:max(limit, 0)]), "max_tokens"
        prompt = count_tokens(system) + sum(count_tokens(t) for _, t in turns)
        out = count_tokens(text) + thinking_tokens
        blocks.append({"text": text})
        return json_reply(200, {"output": {"message": {"role": "assistant", "content": blocks}},
                                "stopReason": stop, "usage": {"inputTokens": prompt, "outputTokens": out,
                                                              "totalTokens": prompt + out},
                                "metrics": {"latencyMs": 1}}, {"x-amzn-RequestId": secrets.token_hex(8)})

    @staticmethod
    def _check(data: dict[str, Any]) -> str | None:
        for key in data:
            if key not in _CONVERSE_FIELDS:
                return (f"Malformed input request: extraneous key [{key}] is not permitted, please reformat your "
                        "input and try again.")
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant") or \
                    not isinstance(msg.get("content"), list) or set(msg) - {"role", "content"}:
                return f"1 validation error detected: Value at 'messages.{i + 1}' failed to satisfy constraint"
            for block in msg["content"]:
                if not isinstance(block, dict) or len(block) != 1:
                    return f"1 validation error detected: Value at 'messages.{i + 1}.content' failed to satisfy constraint"
        if messages[0]["role"] != "user":
            return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
        system = data.get("system")
        if system is not None and not (isinstance(system, list) and all(isinstance(b, dict) for b in system)):
            return "1 validation error detected: Value at 'system' failed to satisfy constraint"
        config = data.get("inferenceConfig") or {}
        for key in config:
            if key not in _CONVERSE_CONFIG:
                return f"Malformed input request: extraneous key [inferenceConfig.{key}] is not permitted"
        temperature = config.get("temperature")
        if temperature is not None and not (0 <= temperature <= 1):
            return ("1 validation error detected: Value at 'inferenceConfig.temperature' failed to satisfy "
                    "constraint: Member must have value less than or equal to 1")
        max_tokens = config.get("maxTokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return ("1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy "
                    "constraint: Member must have value greater than or equal to 1")
        budget = _converse_thinking(data)
        if budget is not None:  # Claude's rules for thinking, passed through by Converse
            if not isinstance(budget, int) or budget < 1024:
                return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            if isinstance(max_tokens, int) and budget >= max_tokens:
                return "`max_tokens` must be greater than `thinking.budget_tokens`"
            if temperature is not None and temperature != 1:
                return "`temperature` may only be set to 1 when thinking is enabled"
        return None
