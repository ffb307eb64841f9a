"""Anthropic Messages API (kind ``anthropic``): Claude directly, on Amazon Bedrock, or on Google Vertex AI.

Our own HTTP transport (``http.py``), not the ``anthropic`` SDK: the SDK (httpx, pydantic models) adds start-up
time and CPU per request and buys nothing for one POST (docs/benchmarks.md, "Native provider clients";
bench/bench_native_clients.py). ``options``:

* ``platform``: ``direct`` (default) | ``bedrock`` | ``vertex`` | ``shc``;
* direct: ``base_url`` (default ``https://api.anthropic.com``) + ``/v1/messages``, the key from
  ``api_key_env`` in ``x-api-key``, ``anthropic_version`` header (default ``2023-06-01``);
* bedrock: ``POST <base_url>/model/<model>/invoke`` (``base_url`` default
  ``https://bedrock-runtime.<region>.amazonaws.com``), body ``anthropic_version: bedrock-2023-05-31``,
  SigV4-signed (``sigv4.py``; credentials from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
  ``AWS_SESSION_TOKEN``), ``region`` (or ``AWS_REGION``, else ``AWS_DEFAULT_REGION``);
* vertex: ``POST <base_url>/v1/projects/<project>/locations/<region>/publishers/anthropic/models/<model>:rawPredict``
  (``base_url`` default ``https://<region>-aiplatform.googleapis.com``), body ``anthropic_version:
  vertex-2023-10-16``, an OAuth token (``options.access_token_file`` or ``api_key_env``);
* shc: Stanford Health Care's Claude route as HELM's ``StanfordHealthCareClaudeClient`` calls it — ``POST
  <base_url>`` (the gateway's whole route, ``{endpoint}/{deployment}``) with SHC's own body ``{"model_id",
  "prompt_text", "max_tokens", "temperature"}`` (the messages joined into one prompt text as HELM's prompt
  is), only the gateway's subscription key; the reply is the Bedrock Messages body or its bare ``content``
  list (HELM takes either). No thinking, no stop sequences, no system field: SHC's body has none;
* ``thinking_budget``: extended thinking with that many tokens (``max_tokens`` grows by it, temperature
  is left to the API: thinking requires its default);
* ``stream: true`` (platform direct; set for HELM's entries whose ``args.stream`` is true, the ``-thinking``
  ones): the request asks for Anthropic's server-sent event stream (``"stream": true``), as HELM's SDK call
  ``messages.stream`` does, and the reply is read whole and accumulated into the Message it describes
  (``read_stream``: ``message_start``, ``content_block_start``/``_delta``/``_stop``, ``message_delta``,
  ``message_stop``; ``ping`` and event types added later are skipped). A long thinking request keeps bytes
  flowing, so no proxy drops it as idle (the SDKs refuse a non-streamed request whose ``max_tokens`` may take
  more than 10 minutes). A reply that is not an event stream (a gateway that answers whole) is read as JSON;
* the gateway options of ``native.py``.

Failure semantics: ``native.NativeClient`` (529 ``overloaded_error`` and 429 are retried, honouring
``retry-after``); ``stop_reason: refusal`` is a completion with ``finish_reason: content_filter`` and the
text the model gave. An ``error`` event inside a streamed reply (HTTP 200; ``overloaded_error``, ``api_error``)
is that error: retried when it is one of the client's ``throttled`` codes or ``api_error``, else not; a stream that ends
before ``message_stop`` is a malformed body (retried). Usage: ``prompt_tokens`` = input + cache reads + cache writes; ``completion_tokens`` =
``output_tokens``, thinking included. ``reasoning_tokens`` is ``usage.output_tokens_details.thinking_tokens``
when Anthropic states it; when it does not (one ``output_tokens``, billed for the whole thinking even when the
reply carries a summary or a ``redacted_thinking`` block) and the reply holds thinking blocks, it is our
estimate (``tokens.split_reasoning``: ``output_tokens`` less the answer's ≈4-characters-per-token share),
flagged ``reasoning_estimated``.
``request_shape: helm`` (set by ``helm_env.py`` for HELM's ``AnthropicMessagesClient`` entries, platform
direct): HELM's body, field for field (``_helm_payload``).
The completion's text is the ``text`` blocks only: thinking never reaches a metric or the record.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from medhelm.errors import ConfigError
from medhelm.inference import sigv4
from medhelm.inference.gateway import api_key, api_url
from medhelm.inference.google_adc import bearer_source
from medhelm.inference.http import HttpReply
from medhelm.inference.native import NativeClient
from medhelm.inference.outcome import Outcome, Refusal, Verdict
from medhelm.inference.sigv4 import AWS_REGION_VARIABLES, aws_credentials, sign_for
from medhelm.inference.wire import (answered_model, int_or_none, joined_prompt, option, safe_server_message,
                                    split_system)
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage
from medhelm.tokens import split_reasoning

DEFAULT_VERSION = "2023-06-01"
BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"
_TOP_P_REFUSED = re.compile(r"^claude-[^-]+-4-[56]")  # Claude 4.5/4.6 take temperature or top_p, not both
_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "content_filter",
         "tool_use": "tool_calls", "pause_turn": "stop"}


class AnthropicClient(NativeClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        self.platform = str(deployment.options.get("platform") or "direct")
        self._model = deployment.served_model_name or deployment.model_name
        self._signer: tuple[sigv4.Credentials, str, str] | None = None
        self._bearer = None
        headers: dict[str, str] = {}
        if self.platform == "direct":
            url = api_url(deployment, deployment.base_url or "https://api.anthropic.com", "/v1/messages")
            headers["anthropic-version"] = str(deployment.options.get("anthropic_version") or DEFAULT_VERSION)
            key = api_key(deployment)
            if key:
                headers["x-api-key"] = key
        elif self.platform == "bedrock":
            region = option(deployment, "region", env=AWS_REGION_VARIABLES)
            base = deployment.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
            url = api_url(deployment, base, f"/model/{urllib.parse.quote(self._model, safe='')}/invoke")
            self._signer = (aws_credentials(deployment), region, "bedrock")
        elif self.platform == "vertex":
            region = option(deployment, "region")
            project = option(deployment, "project")
            base = deployment.base_url or f"https://{region}-aiplatform.googleapis.com"
            url = api_url(deployment, base, f"/v1/projects/{project}/locations/{region}/publishers/anthropic/"
                                            f"models/{urllib.parse.quote(self._model, safe='@')}:rawPredict")
            self._bearer = bearer_source(deployment)
        elif self.platform == "shc":
            if not deployment.base_url:
                raise ConfigError(f"deployment '{deployment.name}': platform shc needs base_url (the gateway's "
                                  "route, {endpoint}/{deployment})")
            url = api_url(deployment, deployment.base_url, "")
        else:
            raise ConfigError(f"deployment '{deployment.name}': options.platform must be direct, bedrock, "
                              "vertex or shc")
        super().__init__(deployment, url, headers, connections)
        budget = deployment.options.get("thinking_budget")
        self._thinking = int(budget) if budget else 0
        self._helm = deployment.options.get("request_shape") == "helm" and self.platform == "direct"
        self._stream = deployment.options.get("stream") is True
        if self._stream and self.platform != "direct":
            raise ConfigError(f"deployment '{deployment.name}': options.stream is read on platform direct only "
                              "(Bedrock and Vertex stream by other routes)")
        if self._thinking and self.platform == "shc":
            raise ConfigError(f"deployment '{deployment.name}': options.thinking_budget cannot be sent on platform "
                              "shc (SHC's Claude body has no thinking field)")

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        body = self._payload(request)
        if self._stream:
            body["stream"] = True
        return body

    def _payload(self, request: GenerationRequest) -> dict[str, Any]:
        if self.platform == "shc":  # HELM's StanfordHealthCareClaudeClient.get_request, field for field
            return {"model_id": self._model, "prompt_text": joined_prompt(request),
                    "max_tokens": request.max_tokens, "temperature": request.temperature}
        if self._helm:
            return self._helm_payload(request)
        system, turns = split_system(request)
        body: dict[str, Any] = {}
        if self.platform == "direct":
            body["model"] = self._model
        else:
            body["anthropic_version"] = BEDROCK_VERSION if self.platform == "bedrock" else VERTEX_VERSION
        body["max_tokens"] = request.max_tokens + self._thinking
        body["messages"] = [{"role": role, "content": text} for role, text in turns]
        if system:
            body["system"] = system
        if self._thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": self._thinking}
        else:
            body["temperature"] = request.temperature
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        return body

    def _helm_payload(self, request: GenerationRequest) -> dict[str, Any]:
        """HELM's ``AnthropicMessagesClient`` body for a text prompt, in its order: the prompt as one user
        message, ``stop_sequences`` (a list, empty when none), the request's ``max_tokens`` (the thinking
        budget is not added), ``temperature``, ``top_p`` 1 and ``top_k`` 1 (HELM's defaults), ``thinking`` with
        the budget (then no ``top_k``); no ``top_p`` for Claude 4.5/4.6 (``^claude-[^-]+-4-[56]``)."""
        body: dict[str, Any] = {"messages": [{"role": "user", "content": joined_prompt(request)}],
                                "model": self._model, "stop_sequences": list(request.stop),
                                "max_tokens": request.max_tokens, "temperature": request.temperature,
                                "top_p": 1, "top_k": 1}
        if self._thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": self._thinking}
            del body["top_k"]
        if _TOP_P_REFUSED.match(self._model):
            del body["top_p"]
        return body

    async def auth_headers(self, body: bytes) -> Mapping[str, str] | None:
        if self._signer is not None:
            return sign_for(self._transport, self._url, self._signer, body)
        if self._bearer is not None:
            return await self._bearer.headers()
        return None

    def decode(self, reply: HttpReply, request: GenerationRequest) -> Any:
        if not self._stream or "text/event-stream" not in reply.headers.get("content-type", ""):
            return reply.json()
        try:
            return read_stream(reply.content)
        except (KeyError, IndexError, TypeError, AttributeError, UnicodeDecodeError):
            raise ValueError("not Anthropic's event stream") from None
        except StreamError as err:
            kind = err.kind
            message = safe_server_message(f"{kind}: {err.message}" if err.message else kind, request)
            verdict = (Verdict.RATE_LIMITED if kind in self.throttled
                       else Verdict.TRANSIENT if kind == "api_error" else Verdict.FATAL)
            raise Refusal(f"{self._where()}: HTTP {reply.status_code}, then an error event: {message}",
                          Outcome(verdict, None, reply.headers), status=reply.status_code) from None

    def parse(self, data: Any, latency: float) -> Completion:
        if isinstance(data, list):  # SHC's route may answer with the bare content list (HELM wraps it too)
            data = {"content": data}
        blocks = data["content"]
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        thought = any(b.get("type") in ("thinking", "redacted_thinking") for b in blocks)
        usage = data.get("usage") or {}
        prompt = int_or_none(usage.get("input_tokens"))
        if prompt is not None:
            prompt += sum(int_or_none(usage.get(k)) or 0 for k in ("cache_read_input_tokens",
                                                                     "cache_creation_input_tokens"))
        stop = data.get("stop_reason")
        output = int_or_none(usage.get("output_tokens"))
        details = usage.get("output_tokens_details")
        stated = int_or_none(details.get("thinking_tokens")) if isinstance(details, Mapping) else None
        estimated = stated is None and thought
        # the count Anthropic states when it does; else, when the reply thought, our estimate (flagged)
        thinking = stated if stated is not None else split_reasoning(output, text) if thought else None
        return Completion(text=text, finish_reason=_STOP.get(stop, stop),
                          usage=Usage(prompt_tokens=prompt, completion_tokens=output, latency_s=latency,
                                      reasoning_tokens=thinking, reasoning_estimated=estimated),
                          model=answered_model(data.get("model")))


class StreamError(Exception):
    """An ``error`` event in Anthropic's event stream: ``{"type": "error", "error": {"type", "message"}}``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(kind)
        self.kind, self.message = kind, message


def sse_events(raw: bytes) -> list[tuple[str, str]]:
    """(event name, data) of each event of a ``text/event-stream`` body (the WHATWG rules: lines end in CRLF,
    LF or CR; ``event:`` names, ``data:`` lines join with LF, one space after the colon dropped, ``:`` starts a
    comment, a blank line ends an event; an event left open at the end is dropped, as the spec says)."""
    out: list[tuple[str, str]] = []
    name, data = "", []
    for line in raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                out.append((name or "message", "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return out


def read_stream(raw: bytes) -> dict[str, Any]:
    """Anthropic's streamed Messages reply -> the Message it describes, accumulated as the SDK accumulates it:
    ``message_start`` gives the message (empty content), each content block starts, grows by its deltas
    (``text_delta``, ``thinking_delta``, ``signature_delta``; others are kept out of the text) and stops,
    ``message_delta`` sets ``stop_reason``/``stop_sequence`` and the usage so far (its counts replace the
    start's), ``message_stop`` ends it. ValueError when the stream ends before ``message_stop`` or is not one;
    StreamError for an ``error`` event."""
    message: dict[str, Any] | None = None
    for name, data in sse_events(raw):
        event = json.loads(data)
        kind = event.get("type") or name
        if kind == "error":
            err = event.get("error") if isinstance(event.get("error"), Mapping) else {}
            raise StreamError(str(err.get("type") or "error"), str(err.get("message") or ""))
        if kind == "message_start":
            message = dict(event["message"])
            message["content"], message["usage"] = list(message.get("content") or ()), dict(message.get("usage") or {})
        elif message is None:
            if kind != "ping":
                raise ValueError("an event before message_start")
        elif kind == "content_block_start":
            blocks = message["content"]
            index = int(event["index"])
            blocks.extend({} for _ in range(index + 1 - len(blocks)))
            blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = message["content"][int(event["index"])], event["delta"]
            for delta_type, key in (("text_delta", "text"), ("thinking_delta", "thinking")):
                if delta.get("type") == delta_type:
                    block[key] = block.get(key, "") + delta[key]
            if delta.get("type") == "signature_delta":
                block["signature"] = delta["signature"]
        elif kind == "message_delta":
            message.update({k: v for k, v in (event.get("delta") or {}).items() if k in ("stop_reason", "stop_sequence")})
            message["usage"].update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            return message
    raise ValueError("the event stream ended before message_stop")
