"""What the OAuth token sources share (Google ADC in ``google_adc.py``, Microsoft Entra ID in ``entra.py``):
one token request over urllib (``request_token``) and the cache in front of it (``TokenCache``).

``TokenCache``: a token is reused until ``refresh_margin_s`` before it expires, then fetched once for all the
requests waiting (an asyncio lock; the fetch runs in a worker thread, off the event loop: token requests are
rare, about hourly); ``invalidate`` drops it (a 401 from the model), so the retry fetches a fresh one.

Failure semantics of ``request_token``: a refused request is an ``InferenceError`` naming the endpoint (``what``),
the HTTP status and the OAuth ``error`` code (``describe`` may add the provider's own code), never a secret,
an assertion or a token; retryable for 429, 5xx, an unreachable endpoint and a reply without ``access_token``.
The token is registered with ``scrub`` under ``slot`` before it is returned."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from medhelm.errors import InferenceError
from medhelm.scrub import register


class TokenCache:
    """``headers()`` gives ``Authorization: Bearer <token>`` from ``fetch`` (() -> (token, seconds valid)); the
    token sources subclass it, passing their own fetch."""

    def __init__(self, fetch: Callable[[], tuple[str, float]], *, refresh_margin_s: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._fetch_token, self._margin, self._clock = fetch, refresh_margin_s, clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock: asyncio.Lock | None = None

    def invalidate(self) -> None:
        self._token, self._expires_at = None, 0.0

    def _stale(self) -> bool:
        return self._token is None or self._clock() >= self._expires_at - self._margin

    async def headers(self) -> dict[str, str]:
        if self._stale():
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._stale():
                    token, lifetime = await asyncio.to_thread(self._fetch_token)
                    self._token, self._expires_at = token, self._clock() + lifetime
        return {"Authorization": f"Bearer {self._token}"}


def request_token(request: urllib.request.Request, what: str, *, slot: str, timeout_s: float,
                  opener: urllib.request.OpenerDirector | None = None,
                  describe: Callable[[dict[str, Any]], str] | None = None,
                  token_field: str = "access_token") -> tuple[str, dict[str, Any]]:
    """Send one token request -> (the access token, the reply's JSON object). ``token_field``: where the reply
    holds the token (Google's IAM Credentials API: ``accessToken``)."""
    try:
        with (opener.open(request, timeout=timeout_s) if opener is not None
              else urllib.request.urlopen(request, timeout=timeout_s)) as reply:
            data = json.loads(reply.read())
    except urllib.error.HTTPError as err:
        try:
            body = json.loads(err.read() or b"{}")
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        code = body.get("error")
        if isinstance(code, dict):  # Google's API error: {"error": {"code", "message", "status"}}
            code = code.get("status")
        detail = (describe(body) if describe is not None else str(code)[:80]) if isinstance(code, str) else ""
        raise InferenceError(f"{what}: HTTP {err.code}" + (f": {detail}" if detail else ""),
                             retryable=err.code == 429 or err.code >= 500, status=err.code) from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or type(err).__name__
        raise InferenceError(f"{what}: failed ({reason})", retryable=True) from None
    token = data.get(token_field) if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise InferenceError(f"{what}: the reply has no {token_field}", retryable=True)
    register(token, slot=slot)
    return token, data
