"""JSON-over-HTTP transport for the model clients (``JsonTransport``): kept-alive connections per deployment, at
most ``connections`` of them (the pool's in-flight cap for the deployment, ``connection_cap``).

One interface, two engines. Direct connections (the normal case inside a cluster) go through ``h1.py``: asyncio
connections with llhttp parsing, the hot path (its CPU per request is measured in bench/bench_scale.py). A
deployment reached through a forward proxy (``HTTP(S)_PROXY``, not bypassed by ``NO_PROXY``) goes through
``_Proxied``, on aiohttp (imported only then): h1 speaks no forward proxy (absolute-form targets, ``CONNECT``
tunnels for HTTPS), and a well-kept client does that more correctly than our own would. Both raise ``h1``'s
``ConnectFailed``/``Timeout``/``Broken``, and ``_exchange`` maps them once: refused/DNS/TLS ->
``ServerUnreachable`` naming the URL; timeouts and broken connections -> retryable ``InferenceError``.

Failure semantics: those three mappings, nothing else — an HTTP status is the caller's to interpret
(``HttpReply``; the providers' ``wire.refusal``); a header with CR/LF or a bad name, a URL that is not
http(s), an unreadable ``options.ca_bundle`` -> ``ConfigError`` naming the deployment.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from medhelm.deployments import header_problem
from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference.h1 import Broken, ConnectFailed, H1Pool, Target, Timeout, target
from medhelm.json_text import loads_json
from medhelm.specs import Deployment

if TYPE_CHECKING:
    import aiohttp

DEFAULT_POOL_SIZE = 64  # connections when the deployment sets no max_concurrency (or the run allows more)


def connection_cap(deployment: Deployment, connections: int | None) -> int:
    """A deployment's connection cap: its ``max_concurrency`` (the pacer's fixed cap), else as many as the caller
    has in flight (the run's ``--max-concurrency``: its workers and ``auto``'s ceiling), at least
    ``DEFAULT_POOL_SIZE`` (a deployment shared by candidates and judges)."""
    return deployment.max_concurrency or max(DEFAULT_POOL_SIZE, connections or 0)
_JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class HttpReply:
    status_code: int
    headers: Mapping[str, str]  # looked up by lower-case names (a case-insensitive mapping)
    content: bytes

    def json(self) -> Any:
        return loads_json(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class JsonTransport:
    def __init__(self, deployment: Deployment, headers: Mapping[str, str],
                 params: Mapping[str, str] | None = None, connections: int | None = None) -> None:
        self._deployment = deployment
        self._limit = connection_cap(deployment, connections)
        self._headers, self._params = dict(headers), dict(params or {})
        for name, value in self._headers.items():  # checked when the YAML is read; here for code-built ones
            problem = header_problem(name, value)
            if problem:
                raise ConfigError(f"deployment '{deployment.name}': header {name[:40]!r} {problem}")
        self._ssl = _tls(deployment)
        self._proxy = _env_proxy(str(deployment.base_url))
        self._proxied: _Proxied | None = None
        self._pool: H1Pool | None = None
        self._targets: dict[str, tuple[Target, bytes]] = {}

    # -- the direct engine (h1): one pool per event loop, each URL's request head encoded once ---------------
    def _pool_for_loop(self) -> H1Pool:
        # A pool belongs to the event loop it was made on; a client reused by a later asyncio.run (tests,
        # sequential doors) gets a fresh one.
        pool = self._pool
        if pool is None or pool.loop is not asyncio.get_running_loop():
            if pool is not None:
                pool.close()
            context = self._ssl if isinstance(self._ssl, ssl.SSLContext) else None
            pool = self._pool = H1Pool(self._limit, context,
                                          min(10.0, self._deployment.timeout_s))
        return pool

    def _target(self, url: str) -> tuple[Target, bytes]:
        """The URL's Target and its request head (Host, fixed headers, the deployment's headers)."""
        found = self._targets.get(url)
        if found is None:
            try:
                tgt = target(url, self._params)
            except (ValueError, UnicodeEncodeError) as err:
                raise ConfigError(f"deployment '{self._deployment.name}': {err}") from None
            lines = {k.lower(): (k, v) for k, v in (("User-Agent", "medhelm"), ("Accept", "application/json"),
                                                   ("Content-Type", "application/json"))}
            default_port = 443 if tgt.scheme == "https" else 80
            host = f"[{tgt.host}]" if ":" in tgt.host else tgt.host
            lines["host"] = ("Host", host if tgt.port == default_port else f"{host}:{tgt.port}")
            lines.update({k.lower(): (k, v) for k, v in self._headers.items()})  # a KServe Host override wins
            head = "".join(f"{k}: {v}\r\n" for k, v in lines.values()).encode("latin-1", "replace")
            found = self._targets[url] = (tgt, head)
        return found

    async def _exchange(self, method: bytes, url: str, body: bytes, timeout_s: float, where: str,
                        extra: Mapping[str, str] | None = None) -> HttpReply:
        """One request on either engine; the one place transport failures become the pipeline's errors."""
        try:
            if self._proxy is None:
                tgt, head = self._target(url)
                if extra:  # per-request headers (a signature, a fresh token): checked like the deployment's own
                    head += _head_lines(extra, self._deployment.name)
                status, headers, content = await self._pool_for_loop().request(method, tgt, head, body, timeout_s)
            else:
                if extra:
                    _head_lines(extra, self._deployment.name)
                if self._proxied is None:
                    self._proxied = _Proxied(self._limit, self._ssl, self._headers, self._params, self._proxy,
                                             self._deployment.timeout_s)
                status, headers, content = await self._proxied.request(method, url, body, timeout_s, extra)
        except ConnectFailed as err:
            raise ServerUnreachable(f"cannot reach {self._deployment.base_url or url} (deployment "
                                    f"'{self._deployment.name}'): {err}") from None
        except Timeout as err:
            raise InferenceError(f"{where}: timed out ({err}, timeout_s={timeout_s:g})", retryable=True) from None
        except Broken as err:
            raise InferenceError(f"{where}: transport error: {err}", retryable=True) from None
        return HttpReply(status, headers, content)

    async def post(self, url: str, body: Mapping[str, Any], where: str) -> tuple[HttpReply, float]:
        """POST JSON -> (reply, seconds). ``where`` names the deployment/URL in error messages."""
        return await self.post_bytes(url, json.dumps(body, ensure_ascii=False).encode("utf-8"), where)

    def request_target(self, url: str) -> tuple[str, str, int, str]:
        """(scheme, host, port, path with the query as sent) of a POST to ``url``: what a request
        signature (SigV4) covers."""
        tgt, _ = self._target(url)
        return tgt.scheme, tgt.host, tgt.port, tgt.path.decode("latin-1")

    async def post_bytes(self, url: str, body: bytes, where: str,
                         headers: Mapping[str, str] | None = None) -> tuple[HttpReply, float]:
        """POST a JSON document already encoded (UTF-8) -> (reply, seconds). ``headers``: this request's
        own, added to the deployment's (a request signature, a token that is refreshed)."""
        started = time.perf_counter()
        reply = await self._exchange(b"POST", url, body, self._deployment.timeout_s, where, headers)
        return reply, time.perf_counter() - started

    async def get_json(self, url: str, timeout_s: float = 10.0) -> Any:
        """GET a small JSON document (model metadata); None on any failure: callers treat it as unknown."""
        try:
            reply = await self._exchange(b"GET", url, b"", timeout_s, url)
            return json.loads(reply.content) if reply.status_code == 200 else None
        except (InferenceError, ConfigError, ValueError):
            return None

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        proxied, self._proxied = self._proxied, None
        if proxied is not None:
            await proxied.aclose()


class _Proxied:
    """``H1Pool.request``'s counterpart through a forward proxy, on aiohttp: raises the same ``ConnectFailed``,
    ``Timeout`` and ``Broken``, so ``JsonTransport`` maps one set of failures."""

    def __init__(self, limit: int, tls: ssl.SSLContext | bool, headers: Mapping[str, str],
                 params: Mapping[str, str], proxy: str, timeout_s: float) -> None:
        self._limit, self._ssl, self._headers, self._params = limit, tls, dict(headers), dict(params)
        self._proxy, self._timeout_s = proxy, timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self._limit, ssl=self._ssl)
            # trust_env=False: aiohttp would look up netrc and proxy variables in a thread per request;
            # the proxy (HTTP(S)_PROXY / NO_PROXY) is resolved once by JsonTransport instead.
            timeout = aiohttp.ClientTimeout(total=self._timeout_s, sock_connect=min(10.0, self._timeout_s))
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers, timeout=timeout,
                                                  trust_env=False)
        return self._session

    async def request(self, method: bytes, url: str, body: bytes, timeout_s: float,
                      extra: Mapping[str, str] | None) -> tuple[int, Mapping[str, str], bytes]:
        import aiohttp

        session = self._session_for_loop()
        post = method == b"POST"
        try:
            async with session.request(method.decode("ascii"), url, data=body if post else None,
                                       headers={**_JSON, **(extra or {})} if post else None,
                                       params=self._params or None, proxy=self._proxy,
                                       timeout=aiohttp.ClientTimeout(total=timeout_s,
                                                                     sock_connect=min(10.0, timeout_s))) as response:
                # aiohttp's headers are case-insensitive already: no per-response copy with lower-case names
                return response.status, response.headers, await response.read()
        except aiohttp.ClientConnectorError as err:  # refused, DNS failure, TLS handshake: nobody answered
            raise ConnectFailed(_reason(err)) from None
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as err:
            raise Timeout(type(err).__name__) from None
        except aiohttp.ClientError as err:  # connection reset mid-request, truncated payload
            raise Broken(_reason(err)) from None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                await session.close()
            except RuntimeError:  # made on an event loop that is gone: nothing left to close politely
                pass


def _head_lines(headers: Mapping[str, str], name: str) -> bytes:
    for key, value in headers.items():
        problem = header_problem(key, value)
        if problem:
            raise ConfigError(f"deployment '{name}': header {key[:40]!r} {problem}")
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1", "replace")


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
    from urllib.request import getproxies, proxy_bypass  # here: at the top, its import slows every run's start

    parts = urllib.parse.urlsplit(url)
    proxy = getproxies().get(parts.scheme)
    if not proxy or proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _reason(err: Exception) -> str:
    text = " ".join(str(err).split())
    return text[:200] if text else type(err).__name__
