"""A fault-injecting HTTP proxy in front of an OpenAI-compatible server, logging the truth of every answer.

    with FaultProxy(upstream="http://127.0.0.1:8000", error_rate=0.05, rate_limit_rate=0.03,
                    bad_request_marker="FAULT400", unavailable_marker="FAULT503",
                    unparseable_marker="FAULTJUDGE", unparseable_models={"judge"}) as proxy:
        ...  # point deployments at proxy.base_url; afterwards proxy.truth() / proxy.log

Per ``POST /v1/chat/completions`` it answers, before forwarding anything:

* HTTP 400 when the body contains ``bad_request_marker`` (a request the server refuses for good);
* HTTP 503 when the body contains ``unavailable_marker`` (a server that stays down: retries run out),
  for every model or only those in ``unavailable_models``;
* HTTP 500 / HTTP 429 with ``Retry-After`` on a seeded draw of (seed, body, occurrence) — reproducible
  under any arrival order, and a retried request eventually passes;

else it forwards to the upstream and, for a model in ``unparseable_models`` whose body contains
``unparseable_marker``, replaces the answer's text with prose no judge parser can read (usage kept).
Each answer is logged as ``Answer(model, status, forwarded, prompt_tokens, completion_tokens,
unparseable)``: the truth that the client's counters must equal. Other paths are forwarded untouched.
Every chat completion body is kept as it arrived (``received``: the raw bytes, in arrival order), before any
fault is drawn: what the upstream server was sent, byte for byte (the differential against crfm-helm reads it).
A test and benchmark fixture (aiohttp in a thread of its own), never part of an evaluation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
from aiohttp import web

UNPARSEABLE_TEXT = "I would rather not give numbers for this one; it reads fine overall."


@dataclass(frozen=True)
class Answer:
    model: str
    status: int
    forwarded: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unparseable: bool = False


class FaultProxy:
    def __init__(self, upstream: str, *, error_rate: float = 0.0, rate_limit_rate: float = 0.0,
                 retry_after_s: float = 0.01, seed: int = 0, bad_request_marker: str | None = None,
                 unavailable_marker: str | None = None, unparseable_marker: str | None = None,
                 unparseable_models: Iterable[str] = (), unavailable_models: Iterable[str] | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        if self.upstream.endswith("/v1"):
            self.upstream = self.upstream[:-3]
        self.error_rate, self.rate_limit_rate, self.retry_after_s = error_rate, rate_limit_rate, retry_after_s
        self.seed = seed
        self.bad_request_marker, self.unavailable_marker = bad_request_marker, unavailable_marker
        self.unparseable_marker, self.unparseable_models = unparseable_marker, frozenset(unparseable_models)
        self.unavailable_models = None if unavailable_models is None else frozenset(unavailable_models)
        self.host, self.port = host, port
        self.enabled = True  # False: forward everything untouched (still logged)
        self.log: list[Answer] = []
        self.received: list[bytes] = []  # chat completion bodies as they arrived
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- the truth -----------------------------------------------------------------------------
    def truth(self, model: str) -> dict[str, int]:
        """Counts for one served model name: answers by status, forwarded, tokens of 200s, unparseable."""
        with self._lock:
            mine = [a for a in self.log if a.model == model]
        out: dict[str, int] = Counter(f"status_{a.status}" for a in mine)
        out["answers"] = len(mine)
        out["forwarded"] = sum(a.forwarded for a in mine)
        out["prompt_tokens"] = sum(a.prompt_tokens for a in mine if a.status == 200)
        out["completion_tokens"] = sum(a.completion_tokens for a in mine if a.status == 200)
        out["unparseable"] = sum(a.unparseable for a in mine)
        return dict(out)

    def reset(self) -> None:
        with self._lock:
            self.log.clear()
            self.received.clear()
            self._seen.clear()

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(120):  # bounded, generous: a loaded machine may start the thread late
            raise RuntimeError("the fault proxy did not start listening within 120 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(60)
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        try:
            await runner.setup()
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        except BaseException as err:  # noqa: BLE001 - reported by start()
            self._error = err
            self._ready.set()
            return
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            self._session = session
            self._ready.set()
            await self._stop.wait()
        await runner.cleanup()

    # -- one request ---------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            return await self._forward(request, raw)
        with self._lock:
            self.received.append(raw)
        try:
            body = json.loads(raw)
            model = str(body.get("model"))
        except (ValueError, AttributeError):
            return await self._forward(request, raw)
        text = raw.decode("utf-8", "replace")
        if self.enabled:
            if self.bad_request_marker and self.bad_request_marker in text:
                return self._fail(model, 400, "injected bad request")
            if self.unavailable_marker and self.unavailable_marker in text and (
                    self.unavailable_models is None or model in self.unavailable_models):
                return self._fail(model, 503, "injected unavailable")
            draw = self._draw(raw)
            if draw < self.error_rate:
                return self._fail(model, 500, "injected server error")
            if draw < self.error_rate + self.rate_limit_rate:
                return self._fail(model, 429, "injected rate limit", {"Retry-After": f"{self.retry_after_s:g}"})
        response = await self._forward(request, raw)
        if response.status != 200:
            self._record(Answer(model, response.status, True))
            return response
        data = json.loads(response.body)  # type: ignore[arg-type]
        usage = data.get("usage") or {}
        unparseable = bool(self.enabled and self.unparseable_marker and model in self.unparseable_models
                           and self.unparseable_marker in text)
        if unparseable:
            data["choices"][0]["message"]["content"] = UNPARSEABLE_TEXT
            response = web.json_response(data)
        self._record(Answer(model, 200, True, int(usage.get("prompt_tokens") or 0),
                            int(usage.get("completion_tokens") or 0), unparseable))
        return response

    def _fail(self, model: str, status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        self._record(Answer(model, status, False))
        return web.json_response({"error": {"message": message, "type": "injected"}}, status=status, headers=headers)

    def _record(self, answer: Answer) -> None:
        with self._lock:
            self.log.append(answer)

    async def _forward(self, request: web.Request, raw: bytes) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=raw,
                                         headers=headers) as up:
            content = await up.read()
            return web.Response(status=up.status, body=content,
                                content_type=up.content_type or "application/json")

    def _draw(self, raw: bytes) -> float:
        key = hashlib.sha256(raw).hexdigest()
        with self._lock:
            seen = self._seen[key]
            self._seen[key] = seen + 1
        digest = hashlib.sha256(f"{self.seed}:{key}:{seen}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64
