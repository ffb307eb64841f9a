"""Async client for any OpenAI-compatible chat endpoint: vLLM, KServe's Hugging Face runtime
(``.../openai/v1``), llama.cpp server, Azure OpenAI.

Connections are kept alive and capped at the deployment's ``max_concurrency`` (``http.py``).
Deployment ``options`` understood here:

* ``api_version`` — sent as the ``api-version`` query parameter (Azure OpenAI);
* ``auth_header`` — header carrying the raw key instead of ``Authorization: Bearer`` (Azure: ``api-key``);
  ``key_headers`` — the key in each header named (``Authorization`` as a bearer token): HELM's Azure classes;
* ``headers`` — extra, non-secret headers (e.g. a KServe ``Host`` override);
* ``ca_bundle`` — a PEM file of the CA that signed an internal HTTPS endpoint;
* ``subscription_key_env`` / ``subscription_key_header`` — an API gateway's key (``gateway.py``);
* ``api`` — ``chat`` (default, ``/chat/completions``) or ``completions`` (the legacy ``/completions`` route
  HELM's ``VLLMClient`` calls: the prompt's messages joined as one text), ``responses`` (OpenAI's Responses
  API) or ``together`` (Together's inference API, HELM's ``TogetherClient``: ``together.py``);
* reasoning models: ``reasoning_effort`` (sent as is: ``low`` | ``medium`` | ``high``), ``thinking_budget``
  (tokens added to every request's ``max_tokens``, so a 1-token multiple-choice answer still has room after
  the thinking), ``max_tokens_param: max_completion_tokens`` (OpenAI's o-series and GPT-5 refuse
  ``max_tokens``) and ``sampling: false`` (temperature and stop are not sent: those models refuse them);
* ``request_shape: helm`` — the body HELM's ``OpenAIClient`` sends for a text prompt, field for field, on the
  chat route or the completions route (HELM's ``_to_raw_completion_request``) (set
  by ``helm_env.py`` for Stanford Health Care's OpenAI-shaped classes): the prompt as one user message,
  ``temperature``, ``top_p`` 1, ``n`` 1, ``stop`` (``null`` when none), ``max_tokens``, ``presence_penalty``
  and ``frequency_penalty`` 0, no ``seed``; for a model whose name starts ``o1``/``o3``/``o4`` HELM's
  o-series rules (``max_completion_tokens``, no sampling fields, no ``stop: null``);
* ``request_shape: helm_together`` — HELM's ``TogetherChatClient``'s body with the model's default stop tokens
  from Together's model list (``together.py``; ``together_logprobs`` 0 for HELM's ``disable_logprobs``);
* ``request_shape: helm_hf`` — HELM's ``HuggingFaceInferenceProvidersClient``'s body as huggingface_hub's
  ``InferenceClient.chat_completion`` sends it (``frequency_penalty``/``presence_penalty`` 0, ``logprobs``
  false, ``n`` 1, ``stop`` a list, ``top_p`` 1, ``stream`` false), at the URL that client builds from the base
  URL (``.../v1`` + ``/chat/completions``; a root or another path + ``/v1/chat/completions``);
* ``extra_body`` — a mapping of server-specific fields added to every request body (fields we set win), part
  of the cache key: vLLM's ``structured_outputs`` or ``chat_template_kwargs`` (Qwen3's ``enable_thinking``).

Reasoning: only the final answer is kept as the completion's text — ``message.content``, never vLLM's
``reasoning_content``/``reasoning`` — and a leading ``<think>...</think>`` block is cut when the server did
not split it (no reasoning parser). ``usage.completion_tokens_details.reasoning_tokens`` is recorded as
``Usage.reasoning_tokens`` (of ``completion_tokens``) when the server states a positive count. A reply that
thought (``reasoning_content``/``reasoning``, or a ``<think>`` block cut here) without a stated count — vLLM
0.32 with ``--reasoning-parser`` states ``reasoning_tokens: 0`` (measured, tests/engines) — gets our estimate
(``tokens.split_reasoning``), flagged ``reasoning_estimated``; with no answer at all (the budget ran out while
thinking) every completion token was thinking (exact). A reply with no sign of thinking leaves it None.

Failure semantics: an error reply is ``wire.refusal``'s (429/503/529 rate-limited, 408 and 5xx transient, a 401
with an Entra token transient once the token is dropped, the rest fatal; the wait from ``retry-after-ms`` (Azure)
or ``Retry-After``); a body that does not parse is transient (``wire.malformed``). An answer comes back with the
reply's headers (``outcome.Reply``), which the deployment's pacer reads for the server's rate limits. Kind ``azure_openai``
(``azure_openai.py``) is this client with Azure's URL layout and an Entra ID token per request.

``context_window()`` reads the served model's ``max_model_len`` from ``GET <base_url>/models`` (vLLM) for
deployments that do not state ``max_sequence_length``. The API key is read from the environment variable *named* by ``deployment.api_key_env``; it is never part
of a spec, a log or an error. Error messages name the deployment and URL, never the prompt.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from medhelm.errors import ConfigError
from medhelm.inference import together
from medhelm.inference.http import HttpReply, JsonTransport
from medhelm.inference.outcome import Refusal, Reply, WireClient
from medhelm.inference.wire import (answered_model, joined_prompt, key_headers, malformed, refusal,
                                    safe_server_message, server_message, strip_reasoning)
from medhelm.json_text import scalar_json
from medhelm.specs import Completion, Deployment, FrozenMap, GenerationRequest, Usage
from medhelm.tokens import split_reasoning


class OpenAIClient(WireClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        if not deployment.base_url:
            raise ConfigError(f"deployment '{deployment.name}' has no base_url")
        self._deployment = deployment
        options = deployment.options
        api = str(options.get("api") or "chat")
        self._responses = api == "responses"
        self._chat = api == "chat"
        self._together = api == "together"  # Together's inference API (HELM's TogetherClient)
        route = {"chat": "/chat/completions", "completions": "/completions", "responses": "/responses"}
        if api not in route and not self._together:
            raise ConfigError(f"deployment '{deployment.name}': options.api must be chat, completions, responses "
                              "or together")
        self._url = (together.inference_url(deployment.base_url) if self._together
                     else deployment.base_url.rstrip("/") + route[api])
        self._hf = options.get("request_shape") == "helm_hf" and self._chat
        if self._hf:
            self._url = hf_chat_url(deployment.base_url)
        self._model = deployment.served_model_name or deployment.model_name
        self._body_head = '{"model":' + json.dumps(self._model, ensure_ascii=False) + ',"messages":'
        self._thinking = int(options.get("thinking_budget") or 0)
        self._max_key = str(options.get("max_tokens_param") or "max_tokens")
        self._sampling = options.get("sampling", True) is not False
        self._effort = options.get("reasoning_effort")
        shape = options.get("request_shape", "medhelm")
        if shape not in ("medhelm", "helm", "helm_together", "helm_hf") or (shape == "helm" and self._responses) or (
                shape in ("helm_together", "helm_hf") and not self._chat):
            raise ConfigError(f"deployment '{deployment.name}': options.request_shape must be medhelm, helm (the "
                              "chat and completions routes), helm_together or helm_hf (the chat route)")
        self._helm = shape == "helm"
        # HELM's TogetherChatClient: the model's default stop tokens, read once from Together's model list
        self._together_chat = shape == "helm_together"
        self._together_stops: list[str] | None = None
        self._together_logprobs = 0 if options.get("together_logprobs") == 0 else 1
        self._reasoning_model = is_reasoning_model(deployment.model_name)
        extra = options.get("extra_body")
        if extra is not None and not isinstance(extra, Mapping):
            raise ConfigError(f"deployment '{deployment.name}': options.extra_body must be a mapping of body fields")
        self._extra = FrozenMap(extra).to_json() if extra else {}  # plain JSON, nested too
        params = {"api-version": str(options["api_version"])} if options.get("api_version") else None
        self._transport = JsonTransport(deployment, key_headers(deployment), params, connections=connections)
        self._auth = None  # an object with ``async headers()`` and ``invalidate()`` (Entra ID), or None

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (public so tests and dry runs can inspect it)."""
        if self._together or self._together_chat:
            return self._together_payload(request)
        if self._hf:  # HELM's _make_raw_request, as huggingface_hub sends it (None fields dropped)
            return {"model": self._model, "frequency_penalty": 0, "logprobs": False, "max_tokens": request.max_tokens,
                    "n": 1, "presence_penalty": 0, "stop": list(request.stop), "temperature": request.temperature,
                    "top_p": 1, "stream": False, "messages": [{"role": "user", "content": joined_prompt(request)}]}
        if self._responses:
            body = self._responses_payload(request)
        else:
            body = self._helm_payload(request) if self._helm else self._own_payload(request)
        if request.json_schema is not None and not self._responses:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": ({"name": "response", "schema": json.loads(request.json_schema)} if not self._helm
                                else helm_json_schema(json.loads(request.json_schema))),
            }
        if self._effort is not None and not self._responses and (self._reasoning_model or not self._helm):
            body["reasoning_effort"] = self._effort  # HELM's OpenAIClient: only for its reasoning models
        for key, value in self._extra.items():
            body.setdefault(key, value)
        return body

    def _own_payload(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model}
        if self._chat:
            body["messages"] = [m.to_json() for m in request.messages]
        else:
            body["prompt"] = joined_prompt(request)
        body[self._max_key] = request.max_tokens + self._thinking  # the answer's budget after the thinking
        if self._sampling:
            body["temperature"] = request.temperature
        if request.stop and self._sampling:
            body["stop"] = list(request.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = request.top_logprobs
        return body

    def _helm_payload(self, request: GenerationRequest) -> dict[str, Any]:
        """HELM's ``OpenAIClient._make_chat_raw_request`` for a text prompt (``request.prompt``), in its order
        (``_to_raw_completion_request`` on the completions route)."""
        if not self._chat:
            return {"model": self._model, "prompt": joined_prompt(request), "temperature": request.temperature,
                    "n": 1, "max_tokens": request.max_tokens + self._thinking, "best_of": 1, "logprobs": 1,
                    "stop": list(request.stop) or None, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0,
                    "echo": False}
        body: dict[str, Any] = {"model": self._model,
                                "messages": [{"role": "user", "content": joined_prompt(request)}],
                                "temperature": request.temperature, "top_p": 1, "n": 1,
                                "stop": list(request.stop) or None,  # HELM: "API doesn't like empty list"
                                "max_tokens": request.max_tokens + self._thinking,
                                "presence_penalty": 0, "frequency_penalty": 0}
        if self._reasoning_model:
            if body["max_tokens"]:
                body["max_completion_tokens"] = body.pop("max_tokens")
            if body["stop"] is None:
                body.pop("stop")
            for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
                body.pop(key)
        elif self._deployment.options.get("vision_language") and body["stop"] is None:
            body.pop("stop")  # HELM: is_vlm(request.model) -> no null stop
        if engine_of(self._deployment.model_name).startswith(("gpt-4o-audio-preview", "gpt-4o-mini-audio-preview")):
            body["modalities"] = ["text"]  # HELM's audio-preview rule: text out, no null stop
            if body.get("stop", ()) is None:
                body.pop("stop")
        return body

    def _together_payload(self, request: GenerationRequest) -> dict[str, Any]:
        """HELM's Together bodies (``together.py``); before the model list is read, no default stops."""
        if self._together:
            return together.inference_body(self._model, self._deployment.model_name, joined_prompt(request),
                                           request)
        return together.chat_body(self._model, joined_prompt(request), request, self._together_stops or (),
                                  self._together_logprobs)

    async def _read_together_stops(self) -> None:
        if self._together_stops is None:
            listing = await self._transport.get_json(self._deployment.base_url.rstrip("/") + "/models")
            self._together_stops = together.default_stops(listing, self._model, self._where())

    def _responses_payload(self, request: GenerationRequest) -> dict[str, Any]:
        """HELM's ``OpenAIResponseClient._make_raw_request`` for a text prompt: OpenAI's Responses API."""
        body: dict[str, Any] = {"model": self._model, "input": joined_prompt(request), "top_p": 1,
                                "max_output_tokens": max(16, request.max_tokens + self._thinking),
                                "temperature": request.temperature, "store": False}
        if self._effort is not None:
            body["reasoning"] = {"effort": self._effort}
        if self._reasoning_model:
            body.setdefault("reasoning", {})["summary"] = "detailed"
            body.pop("temperature")
            body.pop("top_p")
        return body

    def body(self, request: GenerationRequest) -> bytes:
        """``payload(request)`` as the bytes sent, the messages' JSON reused from the cache key."""
        if (self._helm or self._hf or self._responses or self._together or self._together_chat or request.json_schema is not None or request.top_logprobs or not self._chat or self._thinking
                or self._extra
                or self._effort is not None or not self._sampling or self._max_key != "max_tokens"):
            return json.dumps(self.payload(request), ensure_ascii=False).encode("utf-8")
        text = (self._body_head + request.messages_json() + ',"max_tokens":' + scalar_json(request.max_tokens)
                + ',"temperature":' + scalar_json(request.temperature)
                + (',"stop":' + json.dumps(list(request.stop), ensure_ascii=False) if request.stop else "")
                + (',"seed":' + scalar_json(request.seed) if request.seed is not None else "") + "}")
        return text.encode("utf-8")

    async def attempt(self, request: GenerationRequest) -> Reply:
        auth = await self._auth.headers() if self._auth is not None else None
        if self._together_chat:
            await self._read_together_stops()
        response, latency = await self._transport.post_bytes(self._url, self.body(request), self._where(), auth)
        if response.status_code >= 400:
            if response.status_code == 401 and self._auth is not None:
                self._auth.invalidate()  # expired or revoked: the retry fetches a fresh token
            raise self._http_error(response, request)
        if self._responses:
            return Reply(_parse_responses(response, latency, self._where()), response.headers)
        if self._together:
            return Reply(together.parse_inference(response, latency, self._where(),
                                                  lambda message: safe_server_message(message, request)),
                         response.headers)
        return Reply(_parse(response, latency, self._where(), chat=self._chat), response.headers)

    async def context_window(self) -> int | None:
        """The served model's context length as the server states it: vLLM lists ``max_model_len`` for
        each model in ``GET <base_url>/models``. None when the server does not say (or cannot be asked)."""
        data = await self._transport.get_json(self._deployment.base_url.rstrip("/") + "/models")
        models = data.get("data") if isinstance(data, Mapping) else None
        if not isinstance(models, list):
            return None
        for entry in models:
            if isinstance(entry, Mapping) and entry.get("id") == self._model:
                value = entry.get("max_model_len")
                return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        return None

    async def post(self, url: str, body: dict[str, Any]) -> tuple[HttpReply, float]:
        """POST JSON on a kept-alive connection -> (reply, seconds); transport failures are InferenceErrors."""
        return await self._transport.post(url, body, self._where())

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _where(self) -> str:
        return f"deployment '{self._deployment.name}' ({self._url})"

    def _http_error(self, response: HttpReply, request: GenerationRequest) -> Refusal:
        # a 401 with a token: once more with a fresh one
        return refusal(self._where(), response, server_message(response, request),
                       retry=response.status_code == 401 and self._auth is not None, content_filter=_filtered(response))


def _parse(response: HttpReply, latency: float, where: str, *, chat: bool = True) -> Completion:
    try:
        data = response.json()
        choice = data["choices"][0]
        if chat:
            # the answer only: vLLM's reasoning parser puts the thinking in reasoning_content (or reasoning)
            message = choice.get("message") or {}
            content = message.get("content") or ""
            thought = bool(message.get("reasoning_content") or message.get("reasoning"))
        else:
            content, thought = choice.get("text") or "", False
        if not isinstance(content, str):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise malformed(where, response) from None
    usage = data.get("usage") or {}
    if type(usage) is not dict and not isinstance(usage, Mapping):  # a JSON object is a dict: no ABC check
        usage = {}
    text = strip_reasoning(content)
    thinking = reasoning_tokens(usage)
    completion = usage.get("completion_tokens")
    estimated = False
    if (thinking is None and (thought or text != content) and isinstance(completion, int)
            and not isinstance(completion, bool) and completion > 0):
        # thought, and no count stated (vLLM 0.32's parser states reasoning_tokens 0): no answer means every
        # generated token thought (cut off by the budget); else our estimate, flagged
        thinking = split_reasoning(completion, text)
        estimated = bool(text)
    return Completion(
        text=text,
        finish_reason=choice.get("finish_reason"),
        usage=Usage(prompt_tokens=usage.get("prompt_tokens"), completion_tokens=completion,
                    latency_s=latency, reasoning_tokens=thinking, reasoning_estimated=estimated),
        model=answered_model(data.get("model")),
    )


def _parse_responses(response: HttpReply, latency: float, where: str) -> Completion:
    """A Responses API reply: the ``output_text`` parts of its ``message`` items (``reasoning`` items, the
    thinking's summary, are not the answer); ``usage.output_tokens_details.reasoning_tokens`` as stated."""
    try:
        data = response.json()
        text = "".join(part["text"] for item in data["output"] if item.get("type") == "message"
                       for part in item.get("content") or () if part.get("type") == "output_text")
        status = data.get("status")
        reason = (data.get("incomplete_details") or {}).get("reason")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise malformed(where, response) from None
    usage = data.get("usage") or {}
    if not isinstance(usage, Mapping):
        usage = {}
    details = usage.get("output_tokens_details")
    thinking = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    thinking = thinking if isinstance(thinking, int) and not isinstance(thinking, bool) and thinking > 0 else None
    finish = "length" if reason == "max_output_tokens" else "content_filter" if reason == "content_filter" else (
        "stop" if status == "completed" else status)
    return Completion(text=text, finish_reason=finish,
                      usage=Usage(prompt_tokens=usage.get("input_tokens"), completion_tokens=usage.get("output_tokens"),
                                  latency_s=latency, reasoning_tokens=thinking),
                      model=answered_model(data.get("model")))


_REASONING_MODEL = re.compile(r"^(?:o\d+|gpt-5)")


def hf_chat_url(base_url: str) -> str:
    """huggingface_hub's chat URL for a base URL (``_build_chat_completion_url``): kept when it ends in
    ``/chat/completions``, ``/chat/completions`` after ``/v1``, else ``/v1/chat/completions`` after the path."""
    parts = urllib.parse.urlsplit(base_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions" if path.endswith("/v1") else "/v1/chat/completions"
    return urllib.parse.urlunsplit(parts._replace(path=path))


def engine_of(model_name: str) -> str:
    """HELM's ``request.model_engine``: the model name's second part (``openai/o3-mini`` -> ``o3-mini``)."""
    parts = model_name.split("/")
    return parts[1] if len(parts) > 1 else model_name


def is_reasoning_model(model_name: str) -> bool:
    """HELM's ``OpenAIClientUtils.is_reasoning_model`` on the model's engine: ``^o\\d+`` or ``^gpt-5``. Those
    models take ``max_completion_tokens`` and refuse the sampling fields."""
    return bool(_REASONING_MODEL.match(engine_of(model_name)))


def helm_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """HELM's ``response_format.json_schema`` for a request's schema: OpenAI's strict structured outputs
    (``additionalProperties: false`` and every property required unless the schema says otherwise)."""
    schema = dict(schema)
    schema.setdefault("additionalProperties", False)
    if "required" not in schema:
        schema["required"] = list((schema.get("properties") or {}).keys())
    return {"name": "response", "description": "", "schema": schema, "strict": True}


def reasoning_tokens(usage: Mapping[str, Any]) -> int | None:
    """``completion_tokens_details.reasoning_tokens`` when a positive integer, else None. OpenAI states 0 for
    every model that does not think (gpt-4o): kept as None so those records keep their bytes."""
    details = usage.get("completion_tokens_details")
    if details is None:
        return None
    value = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _filtered(response: HttpReply) -> bool:
    """Azure's content filter refused the prompt (``error.code`` or its ``innererror.code``
    ``content_filter``): an outcome of that instance, not a fault of the run."""
    try:
        err = response.json().get("error")
    except (ValueError, AttributeError):
        return False
    if not isinstance(err, Mapping):
        return False
    inner = err.get("innererror") if isinstance(err.get("innererror"), Mapping) else {}
    return "content_filter" in (err.get("code"), inner.get("code"))
