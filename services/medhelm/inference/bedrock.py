"""Amazon Bedrock Converse (kind ``bedrock``): any Bedrock model through one request shape, SigV4-signed.

``POST <base_url>/model/<modelId>/converse`` (``base_url`` default
``https://bedrock-runtime.<region>.amazonaws.com``; a VPC endpoint or a gateway path works the same).
Our own transport and signer (``sigv4.py``), not boto3: boto3+botocore are a large install and slow to import,
and their client serialises through a model of every AWS API (docs/benchmarks.md, "Native provider clients").
``options``: ``region`` (or ``AWS_REGION``, else ``AWS_DEFAULT_REGION``); credential variable names ``aws_access_key_env``,
``aws_secret_key_env``, ``aws_session_token_env``; ``additional_model_request_fields`` (a mapping sent
as is, e.g. Claude's ``{"thinking": {"type": "enabled", "budget_tokens": 2048}}``: then ``maxTokens`` is the
request's plus the budget and ``temperature`` is not sent, as for kind ``anthropic``); ``request_shape: helm``
(HELM's ``BedrockNovaClient`` entries: its body, the prompt as one user turn, ``topP`` 1, no stop sequences);
the gateway options; ``bedrock_invoke: llama | mistral | titan`` (HELM's ``BedrockLlamaClient``/
``BedrockMistralClient``/``BedrockTitanClient`` entries): ``POST .../model/<modelId>/invoke`` with that family's
own body as HELM builds it (the prompt in ``[INST]`` tags for Llama and Mistral; Titan's
``textGenerationConfig``) and its reply (Llama's stated token counts; Titan's).

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

from medhelm.errors import ConfigError
from medhelm.inference.gateway import api_url
from medhelm.inference.native import NativeClient
from medhelm.inference.sigv4 import AWS_REGION_VARIABLES, aws_credentials, sign_for
from medhelm.inference.wire import int_or_none, joined_prompt, option, split_system
from medhelm.specs import Completion, Deployment, FrozenMap, GenerationRequest, Usage
from medhelm.tokens import split_reasoning

_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
         "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}


class BedrockClient(NativeClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        region = option(deployment, "region", env=AWS_REGION_VARIABLES)
        base = deployment.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        model = deployment.served_model_name or deployment.model_name
        self._invoke = deployment.options.get("bedrock_invoke")
        if self._invoke is not None and self._invoke not in _INVOKE_FORMATS:
            raise ConfigError(f"deployment '{deployment.name}': options.bedrock_invoke must be one of "
                              f"{', '.join(_INVOKE_FORMATS)}")
        action = "invoke" if self._invoke else "converse"
        url = api_url(deployment, base, f"/model/{urllib.parse.quote(model, safe='')}/{action}")
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
        if self._invoke:
            return _invoke_body(self._invoke, request)
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
        # InvokeModel takes an Accept header, and botocore signs it (our transport sends application/json)
        return sign_for(self._transport, self._url, self._signer, body,
                        accept="application/json" if self._invoke else None)

    def parse(self, data: Any, latency: float) -> Completion:
        if self._invoke:
            return _invoke_reply(self._invoke, data, latency)
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


# HELM's BedrockClient subclasses call InvokeModel with each model family's own body (helm/clients/
# bedrock_client.py): the prompt in Llama's and Mistral's [INST] tags, Titan's textGenerationConfig
_INVOKE_FORMATS = ("llama", "mistral", "titan")
_INVOKE_STOP = {"stop": "stop", "length": "length", "FINISH": "stop", "LENGTH": "length"}


def _invoke_body(family: str, request: GenerationRequest) -> dict[str, Any]:
    prompt = joined_prompt(request)
    if family == "titan":
        return {"inputText": prompt, "textGenerationConfig": {"maxTokenCount": request.max_tokens,
                                                              "stopSequences": [], "temperature": request.temperature,
                                                              "topP": 1}}
    length = "max_gen_len" if family == "llama" else "max_tokens"
    return {"prompt": f"[INST]{prompt}[/INST]", "temperature": request.temperature, "top_p": 1,
            length: request.max_tokens}


def _invoke_reply(family: str, data: Any, latency: float) -> Completion:
    """The family's InvokeModel reply: Llama ``generation`` with its token counts, Mistral ``outputs[0]``,
    Titan ``results[0]``; the text with leading white space cut, as HELM cuts it."""
    if family == "llama":
        text, stop = data["generation"], data.get("stop_reason")
        prompt, output = int_or_none(data.get("prompt_token_count")), int_or_none(data.get("generation_token_count"))
    elif family == "mistral":
        first = data["outputs"][0]
        text, stop, prompt, output = first["text"], first.get("stop_reason"), None, None
    else:
        first = data["results"][0]
        text, stop = first["outputText"], first.get("completionReason")
        prompt, output = int_or_none(data.get("inputTextTokenCount")), int_or_none(first.get("tokenCount"))
    if not isinstance(text, str):
        raise TypeError("no text")
    return Completion(text=text.lstrip(), finish_reason=_INVOKE_STOP.get(stop, stop),
                      usage=Usage(prompt_tokens=prompt, completion_tokens=output, latency_s=latency))
