"""A lean HTTP/1.1 client for the inference hot path: kept-alive connections on asyncio, responses parsed
by llhttp (Node.js's parser, via ``httptools``).

Why not aiohttp here: aiohttp's client spends several times this client's CPU per request (its
request/response objects, multidict headers, tracing hooks, stream readers; measured in bench/bench_scale.py,
docs/benchmarks.md); a suite of 100,000 instances against a fast server is then bound by the client's CPU, not
by the model. This client does one ``transport.write`` per request and lets llhttp parse the reply. What makes
HTTP hard to get right is kept in well-kept code: parsing (status line, headers, chunked and
close-delimited bodies, keep-alive rules) is llhttp's, TLS is the ``ssl`` module's through asyncio. Anything
this client does not do (a forward proxy from ``HTTP(S)_PROXY``) stays on aiohttp (``http._Proxied``, behind
the same failures).

Failure semantics, per case (the caller, ``JsonTransport``, maps them to the pipeline's errors):

* connect refused, DNS failure, TLS handshake failure -> ``ConnectFailed`` (nobody answered);
* connect or response slower than the deadline -> ``Timeout`` (a reply's deadline is checked in ticks of
  ``_TICK`` = 50 ms, so it fires up to 50 ms late); the connection is closed, never reused;
* the server closes or resets the connection before the reply is complete -> ``Broken``. One exception: a
  kept-alive connection that the server had closed while it sat idle (nothing of the reply received) is
  replaced by a fresh one and the request sent again, once; that is what every HTTP/1.1 client does;
* a reply that llhttp cannot parse -> ``Broken`` (the connection is dropped).

A reply is (status, headers with lower-case names, body). Bodies sent with ``Content-Encoding: gzip`` or
``deflate`` (we never ask for them) are decoded.
"""

from __future__ import annotations

import asyncio
import collections
import math
import ssl
import zlib
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import httptools

_MAX_IDLE_PER_HOST = 256
_TICK = 0.05  # s: a reply's deadline is enforced at most this late
_BURST = 8  # requests written at once when this many wait for the next turn of the loop


class H1Error(Exception):
    """Base of this module's failures; the message never carries a request or reply body."""


class ConnectFailed(H1Error):
    pass


class Timeout(H1Error):
    pass


class Broken(H1Error):
    pass


@dataclass(frozen=True)
class Target:
    """Where a URL's requests go, with the request head's fixed part already encoded."""

    scheme: str
    host: str
    port: int
    path: bytes  # path and query, as sent on the request line

    @property
    def key(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def target(url: str, params: dict[str, str] | None = None) -> Target:
    """Split ``url`` (http or https) into a Target; ``params`` are appended as its query."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    query = "&".join(q for q in (parts.query, urlencode(params) if params else "") if q)
    path = (parts.path or "/") + (f"?{query}" if query else "")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Target(parts.scheme, parts.hostname, port, path.encode("ascii"))


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection carrying one request at a time."""

    __slots__ = ("transport", "parser", "waiter", "status", "headers", "body", "got_bytes", "closed",
                 "_until_close", "uses", "keep_alive")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.got_bytes = False
        self.closed = False
        self.uses = 0
        self.keep_alive = False
        self._until_close = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection's framing cannot be trusted
            self.close()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(Broken("the server switched protocols"))
        except httptools.HttpParserError as err:
            self._fail(Broken(f"unparsable reply ({type(err).__name__})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self._until_close and self.status:  # a reply without a length ends where the connection does
            self._complete()
        elif not self.got_bytes:
            waiter.set_exception(_Stale())
        else:
            waiter.set_exception(Broken("the server closed the connection mid-reply"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:  # httptools passes whole names and values
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        old = self.headers.get(key)
        self.headers[key] = text if old is None else old + ", " + text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._until_close = ("content-length" not in self.headers
                             and "chunked" not in self.headers.get("transfer-encoding", "").lower()
                             and self.status >= 200 and self.status not in (204, 304))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.status < 200:  # 1xx interim reply: the real one follows on the same connection
            self.headers, self.body, self.status = {}, [], 0
            return
        self.keep_alive = self.parser.should_keep_alive()  # llhttp knows only while the message is current
        self._complete()

    def _complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, err: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(err)
        self.close()

    # used by the pool
    def start(self, waiter: asyncio.Future) -> None:
        self.waiter, self.status, self.headers, self.body, self.got_bytes = waiter, 0, {}, [], False
        self._until_close = self.keep_alive = False
        self.uses += 1

    def reusable(self) -> bool:
        return not self.closed and not self._until_close and self.keep_alive

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Stale(Exception):
    """A kept-alive connection the server had already closed: nothing of the reply arrived."""


class H1Pool:
    """Kept-alive connections per (scheme, host, port), at most ``limit`` open at once; bound to the event
    loop it was first used on (the owner makes a new pool for a new loop)."""

    def __init__(self, limit: int, ssl_context: ssl.SSLContext | None, connect_timeout_s: float) -> None:
        self._limit = max(1, limit)
        self._ssl = ssl_context
        self._connect_timeout = connect_timeout_s
        self._idle: dict[tuple[str, str, int], list[_Connection]] = collections.defaultdict(list)
        self._open = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self.connections_made = 0  # for tests and benchmarks: how often a connection was opened
        self.loop = asyncio.get_running_loop()
        self._outbox: list[tuple[_Connection, bytes]] = []  # requests to send at the next turn (see _send)
        # replies awaited, by the deadline's tick: one timer a tick, not one a request (see _watch)
        self._expiry: dict[int, tuple[set[asyncio.Future], asyncio.TimerHandle]] = {}

    def _send(self, conn: _Connection, message: bytes) -> None:
        """Write ``message`` on ``conn`` with the other requests made in this turn of the event loop: they go
        out together at the start of the next turn (before any reply is read), or at once when
        ``_BURST`` are waiting. Requests sent one by one between the replies' processing wake a local
        server once a request, and each wake-up (an inter-processor interrupt, costly in a VM) is paid by
        our send(2): in bursts the server wakes once and finds them all. ``_BURST`` bounds the wait a request
        can add: a burst sent together comes back together, and its replies' processing then delays the next
        requests, so a burst is kept small (the measurements behind both: docs/design-notes.md)."""
        outbox = self._outbox
        outbox.append((conn, message))
        if len(outbox) >= _BURST:
            self._send_queued()
        elif len(outbox) == 1:
            self.loop.call_soon(self._send_queued)

    def _send_queued(self) -> None:
        outbox, self._outbox = self._outbox, []
        for conn, message in outbox:
            if not conn.closed:  # timed out, cancelled or dropped meanwhile: its request failed already
                conn.transport.write(message)  # type: ignore[union-attr]

    def _watch(self, waiter: asyncio.Future, deadline: float) -> int:
        """Fail ``waiter`` with Timeout once ``deadline`` has passed, at most ``_TICK`` s late. Requests whose
        deadlines fall in the same tick share one timer, cancelled when the last of them is answered: a
        timer a request (a TimerHandle, a heap push with Python comparisons, a cancel) is CPU on every request."""
        tick = math.ceil(deadline / _TICK)
        group = self._expiry.get(tick)
        if group is None:
            group = self._expiry[tick] = (set(), self.loop.call_at(tick * _TICK, self._expire_tick, tick))
        group[0].add(waiter)
        return tick

    def _unwatch(self, waiter: asyncio.Future, tick: int) -> None:
        group = self._expiry.get(tick)
        if group is not None:
            group[0].discard(waiter)
            if not group[0]:
                group[1].cancel()
                del self._expiry[tick]

    def _expire_tick(self, tick: int) -> None:
        waiters, _ = self._expiry.pop(tick, (set(), None))
        for waiter in waiters:
            _expire(waiter)

    async def request(self, method: bytes, tgt: Target, head: bytes, body: bytes,
                      timeout_s: float) -> tuple[int, dict[str, str], bytes]:
        """Send ``method`` to ``tgt`` with the encoded header lines ``head`` (each ending in CRLF, Host
        included) and ``body``; -> (status, headers, body). Raises ConnectFailed / Timeout / Broken."""
        loop = self.loop
        deadline = loop.time() + timeout_s
        message = b"".join((method, b" ", tgt.path, b" HTTP/1.1\r\n", head, b"Content-Length: ",
                            str(len(body)).encode("ascii"), b"\r\n\r\n", body))
        for attempt in (0, 1):
            conn = await self._acquire(tgt, deadline)
            reused = conn.uses > 0
            waiter = loop.create_future()
            conn.start(waiter)
            tick = self._watch(waiter, deadline)
            try:
                self._send(conn, message)
                await waiter
            except _Stale:
                self._discard(conn)
                if reused and attempt == 0:
                    continue
                raise Broken("the server closed the connection before replying") from None
            except BaseException:
                conn.waiter = None
                self._discard(conn)
                raise
            finally:
                self._unwatch(waiter, tick)
            status, headers, content = conn.status, conn.headers, b"".join(conn.body)
            if conn.reusable():
                self._release(tgt, conn)
            else:
                self._discard(conn)
            return status, headers, _decoded(headers, content)
        raise AssertionError("unreachable")

    async def _acquire(self, tgt: Target, deadline: float) -> _Connection:
        conn = self._take_idle(tgt)
        while conn is None and self._open >= self._limit:
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            handle = self.loop.call_at(deadline, _expire, waiter)
            try:
                await waiter
            finally:
                handle.cancel()
            conn = self._take_idle(tgt)
        if conn is not None:
            return conn
        self._open += 1
        try:
            return await self._connect(tgt, deadline)
        except BaseException:
            self._open -= 1
            self._wake()
            raise

    def _take_idle(self, tgt: Target) -> _Connection | None:
        """The most recently used live idle connection to ``tgt``; closed ones met on the way are dropped."""
        idle = self._idle.get(tgt.key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            self._open -= 1
            self._wake()
        return None

    async def _connect(self, tgt: Target, deadline: float) -> _Connection:
        use_tls = tgt.scheme == "https"
        context = (self._ssl or _default_context()) if use_tls else None
        timeout = max(0.001, min(self._connect_timeout, deadline - self.loop.time()))
        try:
            async with asyncio.timeout(timeout):
                _, conn = await self.loop.create_connection(
                    _Connection, tgt.host, tgt.port, ssl=context, server_hostname=tgt.host if use_tls else None)
        except TimeoutError:
            raise Timeout(f"connecting took longer than {timeout:g} s") from None
        except (OSError, ssl.SSLError, ssl.CertificateError) as err:  # refused, DNS, TLS
            raise ConnectFailed(_reason(err)) from None
        self.connections_made += 1
        return conn

    def _release(self, tgt: Target, conn: _Connection) -> None:
        idle = self._idle[tgt.key]
        if len(idle) >= _MAX_IDLE_PER_HOST:
            self._discard(conn)
            return
        idle.append(conn)
        self._wake()

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        self._open = 0


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(Timeout("no reply before the deadline"))


_CONTEXT: ssl.SSLContext | None = None


def _default_context() -> ssl.SSLContext:
    """The system's CAs with verification on (made on first HTTPS use: loading the store is slow)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = ssl.create_default_context()
    return _CONTEXT


def _decoded(headers: dict[str, str], content: bytes) -> bytes:
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity") or not content:
        return content
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(content, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(content)
            except zlib.error:  # raw deflate, as some servers send it
                return zlib.decompress(content, -zlib.MAX_WBITS)
    except zlib.error:
        raise Broken(f"reply body is not valid {encoding}") from None
    raise Broken(f"reply uses an unsupported Content-Encoding ({encoding[:40]})")


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[:200] if text else type(err).__name__
