"""Mistral AI's chat completions API (kind ``mistral``), as the official ``mistralai`` SDK calls it.

``POST <base_url>/chat/completions`` (``base_url`` default ``https://api.mistral.ai/v1``), ``Authorization:
Bearer <key>`` (``api_key_env``, or credentials.conf's ``<host>ApiKey`` for a HELM entry), JSON body with the
fields ``Mistral().chat.complete`` sends: ``model``, ``messages`` (``{"content", "role"}``), ``temperature``,
``max_tokens``, ``stream: false``, ``stop`` when set, ``random_seed`` (the request's seed) and ``safe_prompt:
false`` (Mistral's safety system prompt would change the benchmark's prompt). ``request_shape: helm`` (HELM's
``MistralAIClient`` entries): the body HELM's client has the SDK send — the prompt as one user message,
``top_p`` 1, ``random_seed`` null, ``safe_prompt`` false and no ``stop`` (HELM builds one but never passes it).
Our own HTTP, not the SDK (httpx, pydantic and the SDK's generated models for one POST).

Failure semantics: ``native.NativeClient`` — 429 and 5xx are retried with the server's ``Retry-After``;
401/422 fail that instance at once with Mistral's message (withheld when it quotes the prompt). The reply is
OpenAI's chat shape: the first choice's text (a list of content chunks joined by their ``text``), its
``finish_reason`` (``model_length`` is ``length``), ``usage.prompt_tokens`` / ``completion_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from medhelm.inference.gateway import api_key, api_url
from medhelm.inference.native import NativeClient
from medhelm.inference.wire import int_or_none, joined_prompt
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage

BASE_URL = "https://api.mistral.ai/v1"
_FINISH = {"model_length": "length"}


class MistralClient(NativeClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        url = api_url(deployment, deployment.base_url or BASE_URL, "/chat/completions")
        key = api_key(deployment)
        super().__init__(deployment, url, {"Authorization": f"Bearer {key}"} if key else {}, connections)
        self._model = deployment.served_model_name or deployment.model_name
        self._helm = deployment.options.get("request_shape") == "helm"

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        if self._helm:  # HELM's MistralAIClient._send_request, as mistralai 1.x serializes it
            return {"model": self._model, "messages": [{"content": joined_prompt(request), "role": "user"}],
                    "temperature": request.temperature, "top_p": 1.0, "max_tokens": request.max_tokens,
                    "stream": False, "random_seed": None, "safe_prompt": False}
        body: dict[str, Any] = {"model": self._model,
                                "messages": [{"content": m.content, "role": m.role} for m in request.messages],
                                "temperature": request.temperature, "max_tokens": request.max_tokens,
                                "stream": False, "safe_prompt": False}
        if request.stop:
            body["stop"] = list(request.stop)
        if request.seed is not None:
            body["random_seed"] = request.seed
        return body

    def parse(self, data: Any, latency: float) -> Completion:
        choice = data["choices"][0]
        content = choice["message"].get("content") or ""
        if isinstance(content, list):  # content chunks (reasoning models): the text ones are the answer
            content = "".join(c.get("text", "") for c in content if isinstance(c, Mapping) and c.get("type") == "text")
        usage = data.get("usage") or {}
        reason = choice.get("finish_reason")
        return Completion(text=str(content), finish_reason=_FINISH.get(reason, reason),
                          usage=Usage(prompt_tokens=int_or_none(usage.get("prompt_tokens")),
                                      completion_tokens=int_or_none(usage.get("completion_tokens")),
                                      latency_s=latency))
