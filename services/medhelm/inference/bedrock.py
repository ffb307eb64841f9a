"""Amazon Bedrock Converse (kind ``bedrock``): any Bedrock model through one request shape, SigV4-signed.

``POST <base_url>/model/<modelId>/converse`` (``base_url`` default
``https://bedrock-runtime.<region>.amazonaws.com``; a VPC endpoint or a gateway path works the same).
Our own transport and signer (``sigv4.py``), not boto3: boto3+botocore are ~100 MB installed and ~0.3 s to
import, and their client serialises through a model of every AWS API (bench/bench_native_clients.py).
``options``: ``region`` (or ``AWS_REGION``, else ``AWS_DEFAULT_REGION``); credential variable names ``aws_access_key_env``,
``aws_secret_key_env``, ``aws_session_token_env``; ``additional_model_request_fields`` (a mapping sent
as is, e.g. Claude's ``{"thinking": {"type": "enabled", "budget_tokens": 2048}}``: then ``maxTokens`` is the
request's plus the budget and ``temperature`` is not sent, as for kind ``anthropic``); ``request_shape: helm``
(HELM's ``BedrockNovaClient`` entries: its body, the prompt as one user turn, ``topP`` 1, no stop sequences);
the gateway options.

Failure semantics: ``native.NativeClient``. The error type comes from ``x-amzn-ErrorType`` (or ``__type``):
``ThrottlingException``, ``ServiceUnavailableException``, ``ModelNotReadyException`` and every 5xx are
retried; ``ValidationException``/``AccessDeniedException``/a bad signature fail at once. A guardrail or
content filter stop (``guardrail_intervened``, ``content_filtered``) is a completion with
``finish_reason: content_filter``. Usage: ``inputTokens``/``outputTokens``; reasoning content blocks
(``reasoningContent``: ``reasoningText`` or ``redactedContent``) are not part of the answer text, and
Converse states no separate reasoning count (``outputTokens`` holds it): when the reply holds reasoning
blocks, ``reasoning_tokens`` is our estimate (``tokens.split_reasoning``), flagged ``reasoning_estimated``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from medhelm.inference.anthropic import aws_credentials, sign_for
from medhelm.inference.gateway import api_url
from medhelm.inference.native import AWS_REGION_VARIABLES, NativeClient, int_or_none, option, split_system
from medhelm.inference.openai import joined_prompt
from medhelm.specs import Completion, Deployment, FrozenMap, GenerationRequest, Usage
from medhelm.tokens import split_reasoning

_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
         "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}


class BedrockClient(NativeClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        region = option(deployment, "region", env=AWS_REGION_VARIABLES)
        base = deployment.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        model = deployment.served_model_name or deployment.model_name
        url = api_url(deployment, base, f"/model/{urllib.parse.quote(model, safe='')}/converse")
        self._signer = (aws_credentials(deployment), region, "bedrock")
        extra = deployment.options.get("additional_model_request_fields")
        self._extra = FrozenMap(extra).to_json() if isinstance(extra, Mapping) else None  # plain JSON, nested too
        thinking = (self._extra or {}).get("thinking")
        budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) and thinking.get("type") == "enabled" \
            else None
        # Claude's extended thinking through Converse: maxTokens holds the budget too, temperature is not sent
        self._thinking = budget if isinstance(budget, int) and not isinstance(budget, bool) else 0
        super().__init__(deployment, url, {}, connections)

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        if self._deployment.options.get("request_shape") == "helm":
            # HELM's BedrockNovaClient.convert_request_to_raw_request for a text prompt (no stop, no system)
            return {"inferenceConfig": {"temperature": request.temperature, "maxTokens": request.max_tokens,
                                        "topP": 1},
                    "messages": [{"role": "user", "content": [{"text": joined_prompt(request)}]}]}
        system, turns = split_system(request)
        body: dict[str, Any] = {"messages": [{"role": role, "content": [{"text": text}]} for role, text in turns]}
        if system:
            body["system"] = [{"text": system}]
        config: dict[str, Any] = {"maxTokens": request.max_tokens + self._thinking}
        if not self._thinking:
            config["temperature"] = request.temperature
        if request.stop:
            config["stopSequences"] = list(request.stop)
        body["inferenceConfig"] = config
        if self._extra:
            body["additionalModelRequestFields"] = self._extra
        return body

    async def auth_headers(self, body: bytes) -> Mapping[str, str] | None:
        return sign_for(self._transport, self._url, self._signer, body)

    def parse(self, data: Any, latency: float) -> Completion:
        blocks = data["output"]["message"]["content"]
        text = "".join(b["text"] for b in blocks if "text" in b)
        thought = any("reasoningContent" in b for b in blocks)  # reasoningText or redactedContent
        usage = data.get("usage") or {}
        prompt = int_or_none(usage.get("inputTokens"))
        if prompt is not None:
            prompt += sum(int_or_none(usage.get(k)) or 0 for k in ("cacheReadInputTokens", "cacheWriteInputTokens"))
        stop = data.get("stopReason")
        output = int_or_none(usage.get("outputTokens"))
        thinking = split_reasoning(output, text) if thought else None  # Converse states no count: our estimate
        return Completion(text=text, finish_reason=_STOP.get(stop, stop),
                          usage=Usage(prompt_tokens=prompt, completion_tokens=output, latency_s=latency,
                                      reasoning_tokens=thinking, reasoning_estimated=thinking is not None))
