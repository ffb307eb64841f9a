"""Gemini ``generateContent`` (kind ``gemini``): the public Gemini API or Vertex AI.

Our own HTTP transport, not ``google-genai`` (which brings google-auth, httpx, pydantic and websockets;
bench/bench_native_clients.py). ``options``:

* ``platform``: ``public`` (default) | ``vertex`` | ``shc``;
* public: ``POST <base_url>/v1beta/models/<model>:generateContent`` (``base_url`` default
  ``https://generativelanguage.googleapis.com``), the key from ``api_key_env`` in ``x-goog-api-key``;
* vertex: ``POST <base_url>/v1/projects/<project>/locations/<region>/publishers/google/models/<model>:generateContent``
  (``base_url`` default ``https://<region>-aiplatform.googleapis.com``), an OAuth token from
  ``options.access_token_file`` or ``api_key_env``;
* shc: Stanford Health Care's Gemini route as HELM's ``StanfordHealthCareGoogleClient`` calls it — ``POST
  <base_url>`` (the gateway's whole route) with HELM's body: ``contents`` one user object whose ``parts`` is one
  text object (the messages joined), ``generation_config`` with ``temperature``, ``topP`` 1, ``topK`` 1
  (HELM passes its ``top_k_per_token``, 1, as Gemini's topK), ``candidateCount`` 1, ``maxOutputTokens``,
  ``stopSequences`` (a list, empty when none); the reply is the streamed chunks as one JSON array
  (``streamGenerateContent``), whose texts are joined as HELM joins them;
* ``thinking_budget``: ``generationConfig.thinkingConfig.thinkingBudget`` (0 turns thinking off on 2.5 Flash);
* ``api_version``: the public API's version path (default ``v1beta``); the gateway options of ``native.py``;
* ``request_shape: helm`` (HELM's ``GoogleGenAIClient`` entries): the body google-genai sends for HELM's
  config — the prompt as one user turn, ``topP``/``topK`` 1, ``candidateCount`` 1, ``stopSequences``, zero
  penalties, the entry's ``thinking_config`` as given (``options.thinking_config``); ``request_shape: helm_vertex``
  (HELM's ``VertexAIChatClient``): what vertexai.preview's GenerativeModel sends for its call — to Vertex's
  ``v1beta1`` path, the prompt as one user turn,
  ``temperature``, ``maxOutputTokens``, ``topK``/``topP`` 1, ``candidateCount`` 1, ``stopSequences`` when any;
* ``safety_settings``: Vertex/Gemini ``safetySettings`` as given (a list of ``{category, threshold}``; the HELM
  import sets HELM's default, ``BLOCK_NONE`` for every category, on ``VertexAIChatClient`` entries).

Failure semantics: ``native.NativeClient`` (429 ``RESOURCE_EXHAUSTED`` and 503 ``UNAVAILABLE`` are retried,
``Retry-After`` honoured). A safety block is an outcome of that instance, not an error of the run: a prompt
blocked (``promptFeedback.blockReason``) or an answer stopped for ``SAFETY``/``RECITATION``/``BLOCKLIST``/
``PROHIBITED_CONTENT``/``SPII`` is a completion with ``finish_reason: content_filter`` and the text given
so far (usually none); the record keeps it and the metrics score it as the empty answer it is.
Usage: ``completion_tokens`` = ``candidatesTokenCount`` + ``thoughtsTokenCount`` (every generated token,
OpenAI's convention) and ``reasoning_tokens`` = ``thoughtsTokenCount``; parts marked ``thought`` are not
part of the answer text.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from medhelm.errors import ConfigError
from medhelm.inference.gateway import api_key, api_url
from medhelm.inference.google_adc import bearer_source
from medhelm.inference.native import NativeClient
from medhelm.inference.wire import answered_model, int_or_none, joined_prompt, option, split_system
from medhelm.specs import Completion, Deployment, FrozenMap, GenerationRequest, Usage

BLOCKED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})
_STOP = {"STOP": "stop", "MAX_TOKENS": "length"}


class GeminiClient(NativeClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        self.platform = str(deployment.options.get("platform") or "public")
        model = urllib.parse.quote(deployment.served_model_name or deployment.model_name, safe="@")
        headers: dict[str, str] = {}
        self._bearer = None
        if self.platform == "public":
            base = deployment.base_url or "https://generativelanguage.googleapis.com"
            version = str(deployment.options.get("api_version") or "v1beta")
            url = api_url(deployment, base, f"/{version}/models/{model}:generateContent")
            key = api_key(deployment)
            if key:
                headers["x-goog-api-key"] = key
        elif self.platform == "vertex":
            region, project = option(deployment, "region"), option(deployment, "project")
            base = deployment.base_url or f"https://{region}-aiplatform.googleapis.com"
            # HELM's VertexAIChatClient uses vertexai.preview's GenerativeModel: Vertex's v1beta1 API
            version = "v1beta1" if deployment.options.get("request_shape") == "helm_vertex" else "v1"
            served = deployment.served_model_name or deployment.model_name
            # a model of another publisher is named by its resource path (publishers/meta/models/llama-...-maas)
            resource = served if served.startswith("publishers/") else f"publishers/google/models/{model}"
            url = api_url(deployment, base, f"/{version}/projects/{project}/locations/{region}/{resource}"
                                            ":generateContent")
            self._bearer = bearer_source(deployment)
        elif self.platform == "shc":
            if not deployment.base_url:
                raise ConfigError(f"deployment '{deployment.name}': platform shc needs base_url (the gateway's "
                                  "route, {endpoint}/{deployment})")
            url = api_url(deployment, deployment.base_url, "")
        else:
            raise ConfigError(f"deployment '{deployment.name}': options.platform must be public, vertex or shc")
        super().__init__(deployment, url, headers, connections)
        budget = deployment.options.get("thinking_budget")
        self._thinking = int(budget) if budget is not None else None
        shape = deployment.options.get("request_shape")
        self._helm = shape == "helm" and self.platform != "shc"
        self._helm_vertex = shape == "helm_vertex" and self.platform != "shc"
        safety = deployment.options.get("safety_settings")
        self._safety = [dict(s) if isinstance(s, Mapping) else s for s in safety] \
            if isinstance(safety, (list, tuple)) and self.platform != "shc" else None
        thinking_config = deployment.options.get("thinking_config")
        self._thinking_config = FrozenMap(thinking_config).to_json() if isinstance(thinking_config, Mapping) else None
        if self._thinking is not None and self.platform == "shc":
            raise ConfigError(f"deployment '{deployment.name}': options.thinking_budget cannot be sent on platform "
                              "shc (SHC's Gemini body has no thinkingConfig)")

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        body = self._payload(request)
        if self._safety:
            body["safetySettings"] = self._safety
        return body

    def _payload(self, request: GenerationRequest) -> dict[str, Any]:
        if self.platform == "shc":  # HELM's StanfordHealthCareGoogleClient.get_request, field for field
            return {"contents": {"role": "user", "parts": {"text": joined_prompt(request)}},
                    "generation_config": {"temperature": request.temperature, "topP": 1, "topK": 1,
                                          "candidateCount": 1, "maxOutputTokens": request.max_tokens,
                                          "stopSequences": list(request.stop)}}
        if self._helm:  # HELM's GoogleGenAIClient: the GenerateContentConfig it builds, as google-genai sends it
            config: dict[str, Any] = {"temperature": request.temperature, "topP": 1.0, "topK": 1.0,
                                      "candidateCount": 1, "maxOutputTokens": request.max_tokens,
                                      "stopSequences": list(request.stop), "presencePenalty": 0.0,
                                      "frequencyPenalty": 0.0}
            if self._thinking_config:
                config["thinkingConfig"] = self._thinking_config  # the entry's thinking_config, as given
            return {"contents": [{"parts": [{"text": joined_prompt(request)}], "role": "user"}],
                    "generationConfig": config}
        if self._helm_vertex:  # HELM's VertexAIChatClient: GenerativeModel.generate_content([prompt], config)
            config = {"temperature": request.temperature, "topP": 1.0, "topK": 1.0, "candidateCount": 1,
                      "maxOutputTokens": request.max_tokens}
            if request.stop:
                config["stopSequences"] = list(request.stop)
            return {"contents": [{"role": "user", "parts": [{"text": joined_prompt(request)}]}],
                    "generationConfig": config}
        system, turns = split_system(request)
        body: dict[str, Any] = {"contents": [{"role": "model" if role == "assistant" else "user",
                                              "parts": [{"text": text}]} for role, text in turns]}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {"maxOutputTokens": request.max_tokens, "temperature": request.temperature}
        if request.stop:
            config["stopSequences"] = list(request.stop)[:5]  # the API takes at most 5
        if request.seed is not None:
            config["seed"] = request.seed
        if request.json_schema is not None:
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = json.loads(request.json_schema)
        if self._thinking is not None:
            config["thinkingConfig"] = {"thinkingBudget": self._thinking}
        body["generationConfig"] = config
        return body

    async def auth_headers(self, body: bytes) -> Mapping[str, str] | None:
        return await self._bearer.headers() if self._bearer is not None else None

    def on_refused(self, status: int) -> None:
        if self._bearer is not None:
            self._bearer.invalidate()  # a token revoked early: the retry fetches a new one

    def parse(self, data: Any, latency: float) -> Completion:
        if isinstance(data, list):
            data = merged_chunks(data)
        meta = data.get("usageMetadata") or {}
        thoughts = int_or_none(meta.get("thoughtsTokenCount"))
        answer = int_or_none(meta.get("candidatesTokenCount"))
        completion = answer + (thoughts or 0) if answer is not None else thoughts
        usage = Usage(prompt_tokens=int_or_none(meta.get("promptTokenCount")), completion_tokens=completion,
                      latency_s=latency, reasoning_tokens=thoughts)
        candidates = data.get("candidates") or []
        if not candidates:
            feedback = data.get("promptFeedback") or {}
            if feedback.get("blockReason"):
                return Completion(text="", finish_reason="content_filter", usage=usage)
            raise ValueError("no candidates")
        first = candidates[0]
        parts = (first.get("content") or {}).get("parts") or []
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        reason = first.get("finishReason")
        finish = "content_filter" if reason in BLOCKED else _STOP.get(reason, reason.lower() if reason else None)
        return Completion(text=text, finish_reason=finish, usage=usage, model=answered_model(data.get("modelVersion")))


def merged_chunks(chunks: list[Any]) -> dict[str, Any]:
    """``streamGenerateContent``'s chunks (one JSON array) as one ``generateContent`` reply: the first
    candidate's parts in order, the last finish reason and usage stated, a prompt block from any chunk."""
    parts: list[Any] = []
    merged: dict[str, Any] = {}
    finish = None
    for chunk in chunks:
        if chunk.get("promptFeedback"):
            merged["promptFeedback"] = chunk["promptFeedback"]
        if chunk.get("usageMetadata"):
            merged["usageMetadata"] = chunk["usageMetadata"]
        for candidate in (chunk.get("candidates") or [])[:1]:
            parts.extend((candidate.get("content") or {}).get("parts") or [])
            finish = candidate.get("finishReason") or finish
    if parts or finish:
        merged["candidates"] = [{"content": {"role": "model", "parts": parts}, "finishReason": finish}]
    return merged
