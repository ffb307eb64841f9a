"""A small OpenAI-compatible server for tests and benchmarks (stdlib asyncio, HTTP/1.1 keep-alive).

    with MockOpenAIServer(latency_s=0.05, rate_limit_rate=0.2, seed=1) as srv:
        ...  # point a deployment's base_url at srv.base_url; srv.request_count, srv.requests

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``GET /health``. Faults are injected per
request: latency, HTTP 500, HTTP 429 with ``Retry-After``, malformed (truncated) bodies. Which request
fails is decided by a hash of (seed, request body, how often that body was seen), so a run is
reproducible whatever order concurrent requests arrive in, and a retried request eventually passes.
It is a fixture for fault injection and throughput, not a model.

A reasoning model is imitated with ``reasoning="split"`` (a server with a reasoning parser: the thinking in
``message.reasoning_content``, its count in ``usage.completion_tokens_details.reasoning_tokens``, as vLLM
with ``--reasoning-parser`` and OpenAI's o-series answer) or ``reasoning="inline"`` (no parser: the
thinking inline as ``<think>...</think>`` before the answer, no count). The thinking is
``thinking_tokens`` words; ``completion_tokens`` counts thinking and answer (OpenAI's convention); a budget
(``max_tokens`` or ``max_completion_tokens``) too small for both cuts the output there, ``finish_reason``
``length``: the thinking ate the answer. ``POST /v1/completions`` (the legacy route) answers ``choices[0].text``.

Two server shapes for pacing (``bench/bench_pacing.py``): ``capacity=c`` serves at most c requests at once,
the rest wait in a FIFO queue (latency = queueing + ``latency_s``), as a GPU server with c slots does;
``requests_per_minute`` / ``tokens_per_minute`` make it a rate-limited gateway (a token bucket refilled
continuously, holding ``burst_s`` seconds of refill: 60 as OpenAI's, 1 as many API gateways'; past the budget a 429
with ``Retry-After`` the time the bucket needs, to the millisecond, or with ``whole_seconds`` as RFC 9110's
delay-seconds (rounded up, at least 1: what API management gateways state), or with ``silent`` a bare 429 without
``Retry-After`` (AWS API Gateway's throttling, nginx's ``limit_req``); tokens counted as prompt words + ``max_tokens``
on arrival, as OpenAI counts), sending ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` on every answer
when ``rate_headers`` is set; ``set_budget`` changes the budget mid-run. With ``fixed_window_s`` the budget is a
count per window of the wall clock instead of a bucket (Kong's rate limiting, Envoy's rate limit service: the
minute from :00 lets the budget's part of it through and refuses the rest of it, ``Retry-After`` the seconds to
the next window; refused requests are not counted).

A ``responder(body) -> str`` gives the answer text (an ``async def`` responder may wait, e.g. for a test's
signal, without holding the other requests); raising ``MockHTTPError(status, message)`` from it answers with
that HTTP error instead. For assertions: ``requests`` (bodies), ``request_meta`` (target and
headers), ``request_count``, ``max_in_flight``, ``connection_count``; ``reset()`` clears them.
``hold_until_in_flight=N`` holds every chat reply until N requests have been in flight at once (then answers
them all, and every later one at once; at most ``HOLD_LIMIT_S``): a test of a client's concurrency sees it
reach N however slowly a loaded machine sends them, instead of relying on a latency being long enough.

A prompt-keyed answer (``KeyedAnswers(table, seed)`` as the responder): the answer of a request is picked from
the candidates of the item its messages name (a key text of the table found in them, whitespace collapsed) by a
hash of (seed, key), so two clients that lay the same item's prompt out differently get the same answer, and the
same prompt always gets the same answer. A prompt naming no key is a 400 saying so. The faults above are drawn
before the responder runs, so they act the same in this mode. CLI: ``--answers table.json`` (``{key: [answers]}``).

``answered_model="gpt-4o-2024-08-06"`` answers every request with that ``model`` field (as OpenAI names the dated
version it served), instead of the model asked for.

``echo_credentials(n, status)`` answers the next ``n`` model requests with that status and an error whose
message quotes the credentials it received, as some gateways and proxies do (``credential_echo``: every
header value raw, URL-encoded and inside a base64 ``user:value``, the request target with its query, a
form body), and puts them in a ``WWW-Authenticate`` reply header too: the scrubbing of every output is
tested with it (``medhelm.scrub``).

CLI: ``python -m medhelm.devtools.mock_openai --port 8000 [--latency-ms 50] [--error-rate 0.1]
[--rate-limit-rate 0.1] [--malformed-rate 0.05] [--responder module:function] [--answers table.json]
[--requests-per-minute 600] [--tokens-per-minute 60000] [--burst-s 1 | --fixed-window-s 60]
[--whole-seconds | --silent]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import inspect
import json
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

Responder = Callable[[dict[str, Any]], "str | Awaitable[str]"]


class MockHTTPError(Exception):
    """Raise from a responder to answer with an HTTP error (e.g. a 400 with a message, a 429)."""

    def __init__(self, status: int, message: str = "mock error", *, retry_after: float | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after
        self.code, self.headers = code, dict(headers or {})  # OpenAI's error type and code; extra reply headers

HOLD_LIMIT_S = 120.0  # the longest a reply is held for hold_until_in_flight (a client that never gets there)

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}
_OPTION = re.compile(r"^\s*\(?([A-J])[.):]\s", re.MULTILINE)


# request headers that carry no credential (left out of an echo, which stays readable)
_PLAIN_HEADERS = frozenset({"host", "content-length", "content-type", "accept", "user-agent", "connection",
                            "accept-encoding", "anthropic-version", "x-amz-date", "x-amz-content-sha256"})


def credential_echo(target: str, headers: dict[str, str], body: bytes) -> str:
    """What an echoing gateway puts in its error: each credential-carrying header's value raw, URL-encoded
    and base64-wrapped as ``user:value``, the request target (a ``?key=`` with it) and a form body."""
    import base64
    import urllib.parse

    parts = []
    for name, value in headers.items():
        if name.lower() in _PLAIN_HEADERS:
            continue
        bare = value.split(" ", 1)[1] if value.lower().startswith(("bearer ", "basic ")) else value
        parts.append(f"{name}: {value} (key={urllib.parse.quote(bare, safe='')}, basic "
                     f"{base64.b64encode(('user:' + bare).encode()).decode()})")
    parts.append(f"target {target}")
    if body and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        parts.append(f"form {body.decode('utf-8', 'replace')}")
    return "invalid credentials received: " + "; ".join(parts)


def default_responder(body: dict[str, Any]) -> str:
    """Deterministic answers that make exact-match scores stable and non-trivial.

    Lettered options in the prompt -> one of those letters; a yes/no question -> "Yes" or "No";
    anything else -> the first words of the last user message (so overlap metrics are non-zero)."""
    messages = body.get("messages") or []
    text = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
    pick = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)
    letters = sorted(set(_OPTION.findall(text)))
    if len(letters) >= 2:
        return letters[pick % len(letters)]
    words = set(re.findall(r"[a-z]+", text.lower()))
    if {"yes", "no"} <= words:
        return ("Yes", "No")[pick % 2]
    return " ".join(text.split()[:12])


def collapse(text: str) -> str:
    """Whitespace collapsed to single spaces (how ``KeyedAnswers`` compares a key with a prompt)."""
    return " ".join(text.split())


class KeyedAnswers:
    """A responder answering by a hash of the item a prompt names (see the module's docstring).

    ``table`` maps a key text (a passage of the item that every layout of its prompt carries) to the candidate
    answers; ``judge(body, key)``, when given, answers the requests it recognises (e.g. a jury's rubric prompt)
    and returns None for the others. ``keys_of(body)`` says which keys a request names."""

    def __init__(self, table: dict[str, list[str]], seed: int = 0,
                 judge: Callable[[dict[str, Any], str], str | None] | None = None) -> None:
        self.table = {collapse(k): list(v) for k, v in table.items() if collapse(k) and v}
        self.seed, self.judge = seed, judge
        # longest keys first: a key inside another item's key never takes that item's request
        self._order = sorted(self.table, key=len, reverse=True)

    def keys_of(self, body: dict[str, Any]) -> list[str]:
        text = collapse("\n".join(str(m.get("content", "")) for m in body.get("messages") or []))
        return [k for k in self._order if k in text]

    def pick(self, key: str, salt: str = "") -> int:
        return int(hashlib.sha256(f"{self.seed}\x1f{salt}\x1f{key}".encode()).hexdigest()[:8], 16)

    def __call__(self, body: dict[str, Any]) -> str:
        keys = self.keys_of(body)
        if not keys:
            raise MockHTTPError(400, "the prompt names no item of the answer table")
        if self.judge is not None:
            verdict = self.judge(body, keys[0])
            if verdict is not None:
                return verdict
        answers = self.table[keys[0]]
        return answers[self.pick(keys[0]) % len(answers)]


class MockOpenAIServer:
    def __init__(self, responder: Responder | None = None, latency_s: float = 0.0, error_rate: float = 0.0,
                 rate_limit_rate: float = 0.0, malformed_rate: float = 0.0, seed: int = 0, *,
                 retry_after_s: float = 0.05, host: str = "127.0.0.1", port: int = 0,
                 reasoning: str | None = None, thinking_tokens: int = 8, capacity: int | None = None,
                 requests_per_minute: float | None = None, tokens_per_minute: float | None = None,
                 rate_headers: bool = False, burst_s: float = 60.0, whole_seconds: bool = False,
                 silent: bool = False, fixed_window_s: float | None = None,
                 hold_until_in_flight: int = 0, answered_model: str | None = None) -> None:
        if reasoning not in (None, "split", "inline"):
            raise ValueError("reasoning must be None, 'split' or 'inline'")
        if whole_seconds and silent:
            raise ValueError("a silent 429 states no Retry-After, in whole seconds or otherwise")
        if fixed_window_s is not None and (fixed_window_s <= 0 or rate_headers):
            raise ValueError("fixed_window_s must be positive, and states no x-ratelimit-* headers")
        self.reasoning, self.thinking_tokens = reasoning, thinking_tokens
        # the response's "model" (OpenAI answers a request for "gpt-4o" with "gpt-4o-2024-08-06"); None: as asked
        self.answered_model = answered_model
        self.responder = responder or default_responder
        self.capacity = capacity
        self._slots: asyncio.Semaphore | None = None  # made on the server's loop
        self.rpm, self.tpm, self.rate_headers = requests_per_minute, tokens_per_minute, rate_headers
        self.burst_s = burst_s  # seconds of refill a budget's bucket holds (60: a whole minute, as OpenAI's)
        self.whole_seconds = whole_seconds  # a budget's Retry-After in RFC 9110 delay-seconds (else milliseconds)
        self.silent = silent  # a budget's 429 states no Retry-After at all
        self._buckets: dict[str, list[float]] = {}  # "requests"/"tokens" -> [level, last refill time]
        self.fixed_window_s = fixed_window_s  # a count per window of the clock instead of the buckets
        self._window: tuple[int, dict[str, float]] = (-1, {})  # (window number, "requests"/"tokens" -> counted)
        self.rate_limited_count = 0  # 429s sent by the gateway budget (not the injected ones)
        self.latency_s, self.seed, self.retry_after_s = latency_s, seed, retry_after_s
        # cumulative thresholds on one uniform draw: [error | rate limit | malformed | ok]
        self._faults = (error_rate, error_rate + rate_limit_rate, error_rate + rate_limit_rate + malformed_rate)
        self.host, self.port = host, port
        self.requests: list[dict[str, Any]] = []  # chat completion bodies, in arrival order
        self.request_meta: list[dict[str, Any]] = []  # {"target": path?query, "headers": {...}} per body
        self.connection_count = 0  # TCP connections accepted (keep-alive reuses them)
        self.max_in_flight = 0  # most chat requests being served at once
        self.hold_until_in_flight = hold_until_in_flight
        self._in_flight = 0
        self._all_in: asyncio.Event | None = None  # set once hold_until_in_flight were in flight at once
        self._seen: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._echoes: list[int] = []  # statuses of the next replies that echo the credentials received

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def request_count(self) -> int:
        return len(self.requests)

    def echo_credentials(self, n: int, status: int = 401) -> None:
        """Answer the next ``n`` model requests with ``status`` and the credentials they carried echoed."""
        self._echoes.extend([status] * n)

    def reset(self) -> None:
        self.requests.clear()
        self.request_meta.clear()
        self._seen.clear()
        self.connection_count = self.max_in_flight = 0
        self.rate_limited_count = 0
        self._all_in = None  # made again on the server's loop by the next request

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> MockOpenAIServer:
        self._thread = threading.Thread(target=asyncio.run, args=(self.serve(),), name="mock-openai", daemon=True)
        self._thread.start()
        self._ready.wait(120)  # bounded, generous: a loaded machine may start the thread late
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)
        self._thread = self._loop = None

    def __enter__(self) -> MockOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def serve(self) -> None:
        """Serve until ``stop()`` (runs on the calling loop; ``start()`` gives it its own thread)."""
        self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
        self._slots = asyncio.Semaphore(self.capacity) if self.capacity else None
        connections: set[asyncio.Task[None]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            connections.add(task)
            self.connection_count += 1
            try:
                await self._connection(reader, writer)
            except asyncio.CancelledError:
                pass  # our own shutdown; a cancelled handler would make asyncio log a traceback
            finally:
                connections.discard(task)

        try:
            server = await asyncio.start_server(on_connect, self.host, self.port, backlog=1024)
        except OSError as err:
            self._startup_error = err
            self._ready.set()
            return
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()
            for task in list(connections):
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

    # -- HTTP ----------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = (request_line.split(" ") + ["", ""])[:3]
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                status, extra, payload = await self._route(method, path, headers, body)
                keep_alive = headers.get("connection", "").lower() != "close"
                writer.write(_response(status, payload, extra, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _route(self, method: str, target: str, headers: dict[str, str],
                     body: bytes) -> tuple[int, dict[str, str], bytes]:
        path = target.split("?", 1)[0]
        if method == "GET" and path == "/health":
            return 200, {}, b'{"status":"ok"}'
        if method == "GET" and path == "/v1/models":
            return 200, {}, _json({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions") and self._echoes:
            echo = credential_echo(target, headers, body)
            return self._echoes.pop(0), {"WWW-Authenticate": f'Bearer error="invalid_token", echo="{echo[:2000]}"'}, \
                _json({"error": {"message": echo, "type": "invalid_request_error", "code": "invalid_api_key"}})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            try:
                if self.hold_until_in_flight:
                    await self._hold()
                return await self._chat(body, {"target": target, "headers": headers})
            finally:
                self._in_flight -= 1
        return 404, {}, _json({"error": {"message": f"no route {method} {path}", "type": "not_found"}})

    async def _hold(self) -> None:
        if self._all_in is None:
            self._all_in = asyncio.Event()
        if self._in_flight >= self.hold_until_in_flight:
            self._all_in.set()
        try:
            await asyncio.wait_for(self._all_in.wait(), HOLD_LIMIT_S)
        except asyncio.TimeoutError:
            pass  # never got there: answer anyway, the test's assertion on max_in_flight says so

    async def _chat(self, raw: bytes, meta: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        chat = not meta["target"].split("?", 1)[0].endswith("/v1/completions")
        try:
            body = json.loads(raw)
            if chat:
                messages = body["messages"]
            else:  # the legacy route: one prompt text, answered as if it were the user's message
                messages = [{"role": "user", "content": str(body["prompt"])}]
                body = {**body, "messages": messages}
        except (ValueError, KeyError, TypeError):
            return 400, {}, _json({"error": {"message": "body must be JSON with 'messages' (chat) or 'prompt'",
                                             "type": "invalid"}})
        self.requests.append(body)
        self.request_meta.append(meta)
        draw = self._draw(raw)
        budget_headers: dict[str, str] = {}
        if self.rpm or self.tpm:
            cost = {"requests": 1.0, "tokens": sum(len(str(m.get("content", "")).split()) for m in messages)
                    + float(body.get("max_tokens") or 0)}
            wait, budget_headers = self._budget(cost)
            if wait > 0:
                self.rate_limited_count += 1
                stated = f"{max(1, math.ceil(wait))}" if self.whole_seconds else f"{max(wait, 0.001):.3f}"
                return 429, budget_headers if self.silent else {**budget_headers, "Retry-After": stated}, _json(
                    {"error": {"message": "rate limit reached for requests", "type": "requests",
                               "code": "rate_limit_exceeded"}})
        if self._slots is not None:
            async with self._slots:  # c at once; the rest queue (FIFO), as a server with c slots does
                if self.latency_s > 0:
                    await asyncio.sleep(self.latency_s)
        elif self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        if draw < self._faults[0]:
            return 500, {}, _json({"error": {"message": "injected server error", "type": "server_error"}})
        if draw < self._faults[1]:
            return 429, {"Retry-After": f"{self.retry_after_s:g}"}, _json(
                {"error": {"message": "injected rate limit", "type": "rate_limit"}})
        try:
            text = self.responder(body)
            if inspect.isawaitable(text):
                text = await text
        except MockHTTPError as err:
            extra = {"Retry-After": f"{err.retry_after:g}"} if err.retry_after is not None else {}
            error = {"message": err.message, "type": err.code or "mock", **({"code": err.code} if err.code else {})}
            return err.status, {**extra, **err.headers}, _json({"error": error})
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        message, usage, finish = self._answer(text, body)
        usage = {"prompt_tokens": prompt_tokens, **usage}
        usage["total_tokens"] = prompt_tokens + usage["completion_tokens"]
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": message["content"] or "", "finish_reason": finish}
        payload = _json({
            "id": f"chatcmpl-{self.request_count}", "object": "chat.completion" if chat else "text_completion",
            "model": self.answered_model or body.get("model"), "choices": [choice], "usage": usage,
        })
        if draw < self._faults[2]:
            return 200, budget_headers, payload[: len(payload) // 2]  # a body cut short, as by a failing proxy
        return 200, budget_headers, payload

    def set_budget(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None) -> None:
        """A new budget from now on (a gateway's operator changed it mid-run); the buckets keep their levels,
        capped at the new burst. Safe from another thread (one assignment each; the server reads them per request)."""
        self.rpm, self.tpm = requests_per_minute, tokens_per_minute

    def _budget(self, cost: dict[str, float]) -> tuple[float, dict[str, str]]:
        """Take ``cost`` from the gateway's buckets -> (seconds to wait when it does not fit, else 0; headers)."""
        if self.fixed_window_s is not None:
            return self._counted(cost, self.fixed_window_s), {}
        now = asyncio.get_running_loop().time()
        wait, headers = 0.0, {}
        levels = {}
        for what, per_minute in (("requests", self.rpm), ("tokens", self.tpm)):
            if not per_minute:
                continue
            cap = per_minute * self.burst_s / 60.0
            level, last = self._buckets.setdefault(what, [cap, now])
            level = min(cap, level + (now - last) * per_minute / 60.0)
            self._buckets[what] = [level, now]
            levels[what] = (level, per_minute)
            if level < cost[what]:
                wait = max(wait, (cost[what] - level) * 60.0 / per_minute)
        if wait == 0:
            for what, (level, per_minute) in levels.items():
                self._buckets[what][0] = level - cost[what]
        if self.rate_headers:
            for what, (_, per_minute) in levels.items():
                left = self._buckets[what][0]
                headers[f"x-ratelimit-limit-{what}"] = f"{per_minute:g}"
                headers[f"x-ratelimit-remaining-{what}"] = f"{max(0, int(left))}"
                cap = per_minute * self.burst_s / 60.0
                headers[f"x-ratelimit-reset-{what}"] = f"{max(0.0, (cap - left) * 60.0 / per_minute):.3f}s"
        return wait, headers

    def _counted(self, cost: dict[str, float], width: float) -> float:
        """Count ``cost`` in the window of the wall clock (``width`` seconds) it falls in -> seconds to the next
        window when the window's part of a budget has no room for it, else 0 (a refusal is not counted)."""
        now = time.time()
        number = math.floor(now / width)
        if self._window[0] != number:
            self._window = (number, {})
        counted = self._window[1]
        for what, per_minute in (("requests", self.rpm), ("tokens", self.tpm)):
            if per_minute and counted.get(what, 0.0) + cost[what] > per_minute * width / 60.0:
                return (number + 1) * width - now
        for what in ("requests", "tokens"):
            counted[what] = counted.get(what, 0.0) + cost[what]
        return 0.0

    def _answer(self, text: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int], str]:
        """(message fields, usage counts, finish_reason) for the answer ``text``, thinking first if asked."""
        words = text.split()
        if self.reasoning is None:
            return {"content": text}, {"completion_tokens": len(words)}, "stop"
        thinking = [f"step{i}" for i in range(self.thinking_tokens)]
        budget = body.get("max_completion_tokens", body.get("max_tokens"))
        budget = budget if isinstance(budget, int) and budget >= 0 else len(thinking) + len(words)
        kept_thinking, kept_words = thinking[:budget], words[:max(budget - len(thinking), 0)]
        finish = "stop" if len(kept_words) == len(words) else "length"
        used = len(kept_thinking) + len(kept_words)
        if self.reasoning == "inline":
            closed = len(kept_thinking) == len(thinking) and budget > len(thinking)
            content = "<think>" + " ".join(kept_thinking) + ("</think>\n\n" + " ".join(kept_words) if closed else "")
            return {"content": content}, {"completion_tokens": used}, finish
        answer = " ".join(kept_words) if kept_words or finish == "stop" else None  # vLLM: null when cut
        return ({"content": answer, "reasoning_content": " ".join(kept_thinking)},
                {"completion_tokens": used, "completion_tokens_details": {"reasoning_tokens": len(kept_thinking)}},
                finish)

    def _draw(self, raw: bytes) -> float:
        """A uniform number fixed by (seed, body, occurrence): reproducible under any arrival order."""
        raw_key = hashlib.sha256(raw).hexdigest()
        seen = self._seen[raw_key]
        self._seen[raw_key] = seen + 1
        digest = hashlib.sha256(f"{self.seed}:{raw_key}:{seen}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _response(status: int, payload: bytes, extra: dict[str, str], keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", "Content-Type: application/json",
             f"Content-Length: {len(payload)}", f"Connection: {'keep-alive' if keep_alive else 'close'}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


def _load_responder(spec: str) -> Responder:
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--responder must be module:function, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0.0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m medhelm.devtools.mock_openai", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--rate-limit-rate", type=float, default=0.0)
    parser.add_argument("--malformed-rate", type=float, default=0.0)
    parser.add_argument("--retry-after", type=float, default=0.05, help="seconds sent in Retry-After with a 429")
    parser.add_argument("--requests-per-minute", type=_positive, help="a gateway's requests budget (429 past it)")
    parser.add_argument("--tokens-per-minute", type=_positive, help="a gateway's tokens budget (429 past it)")
    parser.add_argument("--burst-s", type=_positive, default=60.0, help="seconds of refill a budget's bucket holds")
    parser.add_argument("--fixed-window-s", type=_positive,
                        help="a budget counted per window of the clock this long instead of a bucket (Kong, Envoy)")
    stated = parser.add_mutually_exclusive_group()
    stated.add_argument("--whole-seconds", action="store_true",
                        help="a budget's Retry-After in whole seconds (RFC 9110 delay-seconds), not milliseconds")
    stated.add_argument("--silent", action="store_true", help="a budget's 429 states no Retry-After at all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--responder", help="module:function returning the answer text for a request body")
    parser.add_argument("--answers", help="a JSON table {key text: [answers]}: answer by a hash of the item the "
                                          "prompt names (KeyedAnswers)")
    parser.add_argument("--reasoning", choices=("split", "inline"), help="imitate a reasoning model")
    parser.add_argument("--thinking-tokens", type=int, default=8)
    parser.add_argument("--answered-model", help="the response's model field (default: the model asked for)")
    args = parser.parse_args(argv)
    responder = _load_responder(args.responder) if args.responder else None
    if args.answers:
        with open(args.answers, encoding="utf-8") as fh:
            responder = KeyedAnswers(json.load(fh), seed=args.seed)
    server = MockOpenAIServer(responder,
                              latency_s=args.latency_ms / 1000, error_rate=args.error_rate,
                              rate_limit_rate=args.rate_limit_rate, malformed_rate=args.malformed_rate,
                              seed=args.seed, retry_after_s=args.retry_after, host=args.host, port=args.port,
                              reasoning=args.reasoning, thinking_tokens=args.thinking_tokens,
                              requests_per_minute=args.requests_per_minute, tokens_per_minute=args.tokens_per_minute,
                              burst_s=args.burst_s, whole_seconds=args.whole_seconds, silent=args.silent,
                              fixed_window_s=args.fixed_window_s, answered_model=args.answered_model)
    with server:
        print(f"mock OpenAI server listening on {server.base_url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
