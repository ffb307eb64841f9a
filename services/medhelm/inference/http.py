"""JSON-over-HTTP transport for the model clients: one aiohttp session per deployment, kept-alive
connections capped at the deployment's ``max_concurrency``.

Why aiohttp and not httpx: at 16 requests in flight httpx (httpcore + anyio) spent 1.3-3 ms of CPU per
request on this 2-core machine, aiohttp 0.3 ms (bench/bench_core.py); the client's CPU is what stretches
the wall time of a run once the server is fast. Transport failures are mapped here, once:
refused/DNS/TLS -> ``ServerUnreachable`` naming the URL; timeouts and broken connections -> retryable
``InferenceError``. HTTP statuses are the caller's to interpret (``HttpReply``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.specs import Deployment

DEFAULT_POOL_SIZE = 64
_JSON = {"Content-Type": "application/json"}  # connections when the deployment sets no max_concurrency


@dataclass(frozen=True)
class HttpReply:
    status_code: int
    headers: Mapping[str, str]  # looked up by lower-case names (a case-insensitive mapping)
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class JsonTransport:
    def __init__(self, deployment: Deployment, headers: Mapping[str, str],
                 params: Mapping[str, str] | None = None) -> None:
        self._deployment = deployment
        self._headers, self._params = dict(headers), dict(params or {})
        self._ssl = _tls(deployment)
        self._timeout = aiohttp.ClientTimeout(total=deployment.timeout_s,
                                              sock_connect=min(10.0, deployment.timeout_s))
        self._proxy = _env_proxy(str(deployment.base_url))
        self._session: aiohttp.ClientSession | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        # A session belongs to the event loop it was made on; a client reused by a later asyncio.run
        # (tests, sequential doors) gets a fresh one.
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self._deployment.max_concurrency or DEFAULT_POOL_SIZE,
                                             ssl=self._ssl)
            # trust_env=False: aiohttp would look up netrc and proxy variables in a thread per request;
            # the proxy (HTTP(S)_PROXY / NO_PROXY) is resolved once in __init__ instead.
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers,
                                                  timeout=self._timeout, trust_env=False)
        return self._session

    async def post(self, url: str, body: Mapping[str, Any], where: str) -> tuple[HttpReply, float]:
        """POST JSON -> (reply, seconds). ``where`` names the deployment/URL in error messages."""
        return await self.post_bytes(url, json.dumps(body, ensure_ascii=False).encode("utf-8"), where)

    async def post_bytes(self, url: str, body: bytes, where: str) -> tuple[HttpReply, float]:
        """POST a JSON document already encoded (UTF-8) -> (reply, seconds)."""
        session = self._session_for_loop()
        started = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=_JSON, params=self._params or None,
                                    proxy=self._proxy) as response:
                content = await response.read()
                # aiohttp's headers are case-insensitive already: no per-response copy with lower-case names
                reply = HttpReply(response.status, response.headers, content)
        except aiohttp.ClientConnectorError as err:  # refused, DNS failure, TLS handshake: nobody answered
            raise ServerUnreachable(f"cannot reach {self._deployment.base_url} (deployment "
                                    f"'{self._deployment.name}'): {_reason(err)}") from None
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as err:
            raise InferenceError(f"{where}: timed out ({type(err).__name__}, "
                                 f"timeout_s={self._deployment.timeout_s})", retryable=True) from None
        except aiohttp.ClientError as err:  # connection reset mid-request, truncated payload
            raise InferenceError(f"{where}: transport error: {_reason(err)}", retryable=True) from None
        return reply, time.perf_counter() - started

    async def get_json(self, url: str, timeout_s: float = 10.0) -> Any:
        """GET a small JSON document (model metadata); None on any failure: callers treat it as unknown."""
        session = self._session_for_loop()
        try:
            async with session.get(url, params=self._params or None, proxy=self._proxy,
                                   timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                if response.status != 200:
                    return None
                return json.loads(await response.read())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                await session.close()
            except RuntimeError:  # made on an event loop that is gone: nothing left to close politely
                pass


def _tls(deployment: Deployment) -> ssl.SSLContext | bool:
    """Verification on (aiohttp's default context), or a hospital's internal CA via ``options.ca_bundle``."""
    ca_bundle = deployment.options.get("ca_bundle")
    if not ca_bundle:
        return True
    try:
        return ssl.create_default_context(cafile=str(ca_bundle))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"deployment '{deployment.name}': cannot load options.ca_bundle ({err})",
                          path=ca_bundle) from None


def _env_proxy(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) sets for ``url``, if any."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _reason(err: Exception) -> str:
    text = " ".join(str(err).split())
    return text[:200] if text else type(err).__name__
