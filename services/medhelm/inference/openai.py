"""Async client for any OpenAI-compatible chat endpoint: vLLM, KServe's Hugging Face runtime
(``.../openai/v1``), llama.cpp server, Azure OpenAI.

Connections are kept alive and capped at the deployment's ``max_concurrency`` (``http.py``).
Deployment ``options`` understood here:

* ``api_version`` — sent as the ``api-version`` query parameter (Azure OpenAI);
* ``auth_header`` — header carrying the raw key instead of ``Authorization: Bearer`` (Azure: ``api-key``);
* ``headers`` — extra, non-secret headers (e.g. a KServe ``Host`` override);
* ``ca_bundle`` — a PEM file of the CA that signed an internal HTTPS endpoint.

``context_window()`` reads the served model's ``max_model_len`` from ``GET <base_url>/models`` (vLLM) for
deployments that do not state ``max_sequence_length``. The API key is read from the environment variable *named* by ``deployment.api_key_env``; it is never part
of a spec, a log or an error. Error messages name the deployment and URL, never the prompt.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference.http import HttpReply, JsonTransport
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage, scalar_json

_SERVER_MESSAGE_CHARS = 300
_RETRYABLE_STATUS = frozenset({408, 429})  # plus every 5xx


class OpenAIClient:
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        if not deployment.base_url:
            raise ConfigError(f"deployment '{deployment.name}' has no base_url")
        self._deployment = deployment
        self._url = deployment.base_url.rstrip("/") + "/chat/completions"
        self._model = deployment.served_model_name or deployment.model_name
        self._body_head = '{"model":' + json.dumps(self._model, ensure_ascii=False) + ',"messages":'
        options = deployment.options
        params = {"api-version": str(options["api_version"])} if options.get("api_version") else None
        self._transport = JsonTransport(deployment, _headers(deployment), params, connections=connections)

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (public so tests and dry runs can inspect it)."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [m.to_json() for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = request.top_logprobs
        if request.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": json.loads(request.json_schema)},
            }
        return body

    def body(self, request: GenerationRequest) -> bytes:
        """``payload(request)`` as the bytes sent, the messages' JSON reused from the cache key."""
        if request.json_schema is not None or request.top_logprobs:
            return json.dumps(self.payload(request), ensure_ascii=False).encode("utf-8")
        text = (self._body_head + request.messages_json() + ',"max_tokens":' + scalar_json(request.max_tokens)
                + ',"temperature":' + scalar_json(request.temperature)
                + (',"stop":' + json.dumps(list(request.stop), ensure_ascii=False) if request.stop else "")
                + (',"seed":' + scalar_json(request.seed) if request.seed is not None else "") + "}")
        return text.encode("utf-8")

    async def generate(self, request: GenerationRequest) -> Completion:
        response, latency = await self._transport.post_bytes(self._url, self.body(request), self._where())
        if response.status_code >= 400:
            raise self._http_error(response, request)
        return _parse(response, latency, self._where())

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

    def _http_error(self, response: HttpReply, request: GenerationRequest) -> InferenceError:
        status = response.status_code
        retryable = status in _RETRYABLE_STATUS or status >= 500
        message = _server_message(response, request)
        return InferenceError(f"{self._where()}: HTTP {status}" + (f": {message}" if message else ""),
                              retryable=retryable, status=status,
                              retry_after=_retry_after(response.headers.get("retry-after")))


def _headers(deployment: Deployment) -> dict[str, str]:
    headers = {str(k): str(v) for k, v in (deployment.options.get("headers") or {}).items()}
    if deployment.api_key_env:
        from medhelm.files import env_secret

        key = env_secret(deployment.api_key_env)  # or the file $<name>_FILE names (the chart mounts keys so)
        if not key:
            raise ConfigError(f"environment variable {deployment.api_key_env} (or {deployment.api_key_env}_FILE) is not set "
                              f"(api_key_env of deployment '{deployment.name}')")
        auth_header = deployment.options.get("auth_header")
        if auth_header:
            headers[str(auth_header)] = key
        else:
            headers["Authorization"] = f"Bearer {key}"
    return headers


def _parse(response: HttpReply, latency: float, where: str) -> Completion:
    try:
        data = response.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        # A proxy cut the body short or the server answered with something else: worth another try.
        raise InferenceError(f"{where}: malformed response body (HTTP {response.status_code})",
                             retryable=True, status=response.status_code) from None
    usage = data.get("usage") or {}
    return Completion(
        text=strip_reasoning(content),
        finish_reason=choice.get("finish_reason"),
        usage=Usage(prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                    latency_s=latency),
    )


_THINK = re.compile(r"\A\s*<think>.*?</think>\s*", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """Drop a reasoning model's leading ``<think>...</think>`` block and keep the answer.

    An unclosed block means the model ran out of tokens while thinking: there is no answer (""), and the
    caller keeps the finish_reason. Templates that open the block in the prompt leave only ``</think>``."""
    stripped = text.lstrip()
    if stripped.startswith("<think>"):
        match = _THINK.match(stripped)
        return stripped[match.end():] if match else ""
    if "</think>" in text and "<think>" not in text:
        return text.split("</think>", 1)[1].lstrip()
    return text


def _server_message(response: HttpReply, request: GenerationRequest) -> str:
    """The server's own error text, shortened, and withheld if it quotes the prompt (PHI)."""
    try:
        data = response.json()
    except ValueError:
        message = response.text
    else:
        message = _find_message(data)
    return safe_server_message(message, request)


def safe_server_message(message: object, request: GenerationRequest) -> str:
    """A server's error text made fit for an error record: one line, shortened, without links or encoded
    runs, and withheld if it quotes the prompt (PHI). Every client kind passes its server's text here."""
    message = " ".join(str(message).split())[:_SERVER_MESSAGE_CHARS]
    if _quotes_prompt(message, request):
        return "[server message withheld: it quotes the prompt]"
    return _defanged(message)


_LINK = re.compile(r"(?i)(?:[a-z][a-z0-9+.\-]*://|www\.)\S+|!?\[[^\]]*\]\([^)]*\)?|<[^>]*>")
_BLOB = re.compile(r"[A-Za-z0-9+/=_%\-]{32,}")


def _defanged(message: str) -> str:
    """A server's error text without links, markup or long encoded runs: a hostile endpoint can put the
    prompt in base64 or a URL, which the literal-quote check above cannot see; none of it is kept."""
    return _BLOB.sub("[…]", _LINK.sub("[…]", message))


def _find_message(data: Any) -> str:
    if isinstance(data, Mapping):
        err = data.get("error")
        if isinstance(err, Mapping):
            return str(err.get("message") or err)
        for key in ("error", "message", "detail"):
            if data.get(key):
                return str(data[key])
    return json.dumps(data)[:_SERVER_MESSAGE_CHARS]


def _quotes_prompt(message: str, request: GenerationRequest, window: int = 24) -> bool:
    for m in request.messages:
        text = " ".join(m.content.split())
        for i in range(0, max(len(text) - window, 0) + 1, window // 2):
            chunk = text[i:i + window]
            if len(chunk) >= min(window, 12) and chunk in message:
                return True
    return False


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
