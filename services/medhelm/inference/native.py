"""The request/reply shape the native provider kinds share (anthropic, gemini, bedrock, mistral, vertex_text):
``NativeClient`` — one URL per deployment, a JSON body built from the request, per-request auth headers (a SigV4
signature, a Google OAuth token) and the gateway options (``gateway.py``).

Failure semantics: a provider's error reply is ``wire.refusal``'s, its type or code read from the body
(``wire.error_parts``) or Bedrock's ``x-amzn-ErrorType``: rate-limited for 429/503/529 and for the "slow down"
codes in ``NativeClient.throttled`` (``wire.THROTTLED``; a subclass may add its provider's) whatever their
status, transient for 408 and every other 5xx (the wait at least the server's ``retry-after-ms`` or
``Retry-After``), fatal otherwise; the message names the deployment, the URL, the HTTP status and the provider's
error type/message passed through ``safe_server_message`` (withheld if it quotes the prompt). A 401/403 lets the
subclass drop its token (``on_refused``). A body that is not the answer's shape is transient
(``wire.malformed``). A missing option or variable is a ``ConfigError`` naming it (never its value).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from medhelm.inference.gateway import gateway_headers
from medhelm.inference.http import HttpReply, JsonTransport
from medhelm.inference.outcome import Refusal, Reply, WireClient
from medhelm.inference.wire import THROTTLED, error_parts, malformed, refusal, safe_server_message
from medhelm.specs import Completion, Deployment, GenerationRequest


def provider_error(where: str, reply: HttpReply, request: GenerationRequest,
                   throttled: frozenset[str] = THROTTLED) -> Refusal:
    """A native provider's error reply, its type or code named in the message and read for throttling."""
    try:
        kind, message = error_parts(reply.json())
    except ValueError:
        kind, message = "", reply.text
    amz = reply.headers.get("x-amzn-errortype")
    if amz:
        kind = amz.split(":", 1)[0]
    kind = kind.rsplit("#", 1)[-1]  # "com.amazon...#ThrottlingException" -> "ThrottlingException"
    text = safe_server_message(message, request) if message else ""
    label = f"{kind}: {text}" if kind and text else kind or text
    return refusal(where, reply, safe_server_message(label, request) if label else "", code=kind, throttled=throttled)


class NativeClient(WireClient):
    """The shape every native kind shares: one URL per deployment, a JSON body built from the request,
    per-request auth headers (a SigV4 signature, an Entra token), the provider's errors mapped once.
    A subclass sets ``_url`` and implements ``payload`` and ``parse``; it may override ``auth_headers`` and
    ``on_refused``, and extend ``throttled`` with its provider's own "slow down" error codes."""

    throttled: frozenset[str] = THROTTLED

    def __init__(self, deployment: Deployment, url: str, headers: Mapping[str, str],
                 connections: int | None = None) -> None:
        self._deployment, self._url = deployment, url
        self._transport = JsonTransport(deployment, {**gateway_headers(deployment), **headers},
                                        connections=connections)

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    @property
    def endpoint_url(self) -> str:
        """Where the requests go (a run's access record keeps it without credentials or query string)."""
        return self._url

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, data: Any, latency: float) -> Completion:
        raise NotImplementedError

    def decode(self, reply: HttpReply, request: GenerationRequest) -> Any:
        """A successful reply's body as the data ``parse`` reads (JSON; a streamed reply is read whole by its
        kind); ValueError for a body cut short or of another shape (retried as malformed)."""
        return reply.json()

    async def auth_headers(self, body: bytes) -> Mapping[str, str] | None:
        return None

    def on_refused(self, status: int) -> None:
        """A 401/403 came back (an expired token is dropped here)."""

    async def attempt(self, request: GenerationRequest) -> Reply:
        body = json.dumps(self.payload(request), ensure_ascii=False).encode("utf-8")
        reply, latency = await self._transport.post_bytes(self._url, body, self._where(),
                                                          await self.auth_headers(body))
        if reply.status_code >= 400:
            if reply.status_code in (401, 403):
                self.on_refused(reply.status_code)
            raise provider_error(self._where(), reply, request, self.throttled)
        try:
            data = self.decode(reply, request)
        except ValueError:
            raise malformed(self._where(), reply) from None
        try:
            return Reply(self.parse(data, latency), reply.headers)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            raise malformed(self._where(), reply) from None

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _where(self) -> str:
        return f"deployment '{self._deployment.name}' ({self._url})"
