"""The gate an attempt passes between the retries and the provider: ``PacedClient`` holds the deployment's pacer
slot (``pacing.Pacer``: a concurrency slot, fixed or adaptive, and its rate budgets) for one provider call, counts
and times the attempt, records it in the runs watching the deployment (``RequestWindow``), and feeds the pacer what
the provider returned: the reply's headers (its rate limits) and the attempt's ``outcome.Outcome``.

Failure semantics: the gate never fails a request; whatever the attempt's end (an answer, a ``Refusal``, any other
error, a cancellation) its slot is released exactly once, and the error is re-raised unchanged. A rate-limited
verdict halves an adaptive limit and pauses the deployment for the server's wait; only answers measure the server.
A server's answered-model name that is not a model name or quotes the prompt is not recorded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from medhelm.errors import InferenceError
from medhelm.inference.base import ModelClient
from medhelm.inference.outcome import Reply, Verdict, WireClient, outcome_of
from medhelm.inference.pacing import Pacer
from medhelm.specs import Completion, Deployment, GenerationRequest


@dataclass(frozen=True)
class ClientStats:
    requests: int = 0  # HTTP/model calls actually made, retries included (cache hits excluded)
    cache_hits: int = 0
    retries: int = 0
    errors: int = 0  # generate() calls that failed for good (after retries)


class RequestWindow:
    """What a run asked of one deployment (``ClientPool.watch``): when its first request was sent and when its
    last answer (or failure) came back, as wall-clock times in UTC, how many requests (attempts) were sent,
    and the models the server said answered (``Completion.model``, at most ``MAX_ANSWERED`` different ones).
    Cache hits are no requests: an answer taken from the cache was asked for before the window."""

    __slots__ = ("first", "last", "requests", "answered", "on_first")
    MAX_ANSWERED = 8

    def __init__(self, on_first: Callable[[float], None] | None = None) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.requests = 0
        self.answered: dict[str, int] = {}
        self.on_first = on_first  # called once, with the time, when the first request is sent

    def sent(self, at: float) -> None:
        if self.first is None:
            self.first = at
            if self.on_first is not None:
                self.on_first(at)
        self.requests += 1

    def done(self, at: float, model: str | None) -> None:
        if self.last is None or at > self.last:
            self.last = at
        if model is not None and (model in self.answered or len(self.answered) < self.MAX_ANSWERED):
            self.answered[model] = self.answered.get(model, 0) + 1

    def to_json(self) -> dict:
        return {"first_request": utc_iso(self.first), "last_request": utc_iso(self.last), "requests": self.requests,
                "answered_models": sorted(self.answered, key=lambda m: -self.answered[m])}


def utc_iso(at: float | None) -> str | None:
    """A wall-clock time as ISO 8601 in UTC with its zone (``2026-12-01T22:40:01.123+00:00``)."""
    return None if at is None else datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds")


class Counters:
    """One deployment's request counts (all roles), and the runs watching its requests (``ClientPool.watch``)."""

    __slots__ = ("requests", "cache_hits", "retries", "errors", "windows")

    def __init__(self) -> None:
        self.requests = self.cache_hits = self.retries = self.errors = 0
        self.windows: list[RequestWindow] = []

    def snapshot(self) -> ClientStats:
        return ClientStats(self.requests, self.cache_hits, self.retries, self.errors)


class PacedClient:
    """A provider's client behind the deployment's pacer (None: only counted), one attempt per ``generate``."""

    def __init__(self, inner: ModelClient, counters: Counters, pacer: Pacer | None, metrics) -> None:
        self._inner, self._counters, self._metrics, self._pacer = inner, counters, metrics, pacer
        # an HTTP provider returns its reply's headers with the answer; any other kind, the answer alone
        self._send: Callable[[GenerationRequest], Awaitable[Reply]] = (
            inner.attempt if isinstance(inner, WireClient) else self._bare)

    @property
    def deployment(self) -> Deployment:
        return self._inner.deployment

    async def _bare(self, request: GenerationRequest) -> Reply:
        return Reply(await self._inner.generate(request))

    async def generate(self, request: GenerationRequest) -> Completion:
        pacer = self._pacer
        if pacer is None:
            return (await self._attempt(request)).completion
        tokens = expected_tokens(request) if pacer.counts_tokens else 0.0
        started = pacer.try_acquire(tokens)  # a free slot: no coroutine to start and await
        if started is None:
            started = await pacer.acquire(tokens)
        try:
            reply = await self._attempt(request)
        except InferenceError as err:
            outcome = outcome_of(err)
            if outcome.rate is not None:
                pacer.observe_headers(outcome.rate)
            pacer.release(started, ok=False, overloaded=outcome.verdict is Verdict.RATE_LIMITED,
                          retry_after=outcome.retry_after, tokens_taken=tokens)
            raise
        except BaseException:
            pacer.release(started, ok=False, tokens_taken=tokens)
            raise
        if reply.rate is not None:
            pacer.observe_headers(reply.rate)
        usage = reply.completion.usage
        used = (usage.prompt_tokens or 0) + (usage.completion_tokens or 0) if usage.prompt_tokens is not None \
            else None
        pacer.release(started, ok=True, tokens_used=used, tokens_taken=tokens)
        return reply.completion

    async def _attempt(self, request: GenerationRequest) -> Reply:
        counters = self._counters
        counters.requests += 1
        windows = counters.windows
        if windows:
            now = time.time()
            for window in windows:
                window.sent(now)
        metrics = self._metrics
        metrics.attempt_started()
        started = time.perf_counter()
        try:
            reply = await self._send(request)
        except InferenceError as err:
            metrics.attempt_finished(time.perf_counter() - started, err)
            _answered(windows, None)
            raise
        except BaseException:
            metrics.attempt_cancelled()
            _answered(windows, None)
            raise
        metrics.attempt_finished(time.perf_counter() - started, None)
        _answered(windows, reply.completion.model, request)
        return reply

    async def aclose(self) -> None:
        await self._inner.aclose()


def _answered(windows: list[RequestWindow], model: str | None, request: GenerationRequest | None = None) -> None:
    if windows:
        now = time.time()
        if model is not None and request is not None and not all(model in w.answered for w in windows) \
                and not names_a_model(model, request):
            model = None  # a new name is checked once per window: never a server's echo of the prompt
        for window in windows:
            window.done(now, model)


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+ -]{0,239}")


def names_a_model(name: str, request: GenerationRequest, window: int = 12) -> bool:
    """Whether a server's answered-model field looks like a model name (letters, digits and ``._:/@+ -``)
    and quotes none of the prompt (no run of ``window`` characters of a message): a hostile or broken server
    cannot put patient text into a run's access record."""
    if not _MODEL_NAME.fullmatch(name):
        return False
    for message in request.messages:
        text = " ".join(message.content.split())
        for i in range(0, max(len(text) - window, 0) + 1, window // 2):
            chunk = text[i:i + window]
            if len(chunk) >= window and chunk in name:
                return False
    return True


def expected_tokens(request: GenerationRequest) -> float:
    """What a tokens-per-minute budget is charged up front (gateways count the prompt and ``max_tokens``);
    the real usage replaces it when the answer comes. ~4 characters a token is the usual estimate."""
    return len(request.messages_json()) / 4.0 + (request.max_tokens or 0)
