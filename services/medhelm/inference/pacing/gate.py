"""The gate a request passes before it is sent: ``Pacer``, one per deployment (``ClientPool`` gives candidate and
judge roles the same one), composing three optional limits — concurrency (a fixed hard cap, or ``auto``'s adaptive
limit under the run's ceiling), rate budgets (``budget.Bucket``: configured ``rate_limits``, or learnt from the
server's headers; under ``auto``, until a server states one, ``learnt.LearntRate`` from its 429s) and a pause (after
a 429/503/529, no request starts before ``Retry-After``). ``PacingPolicy`` and
``PaceSettings`` say how each deployment is paced; ``AdaptiveLimit`` picks its controller.

Failure semantics: pacing never fails a request, it only delays its start. A waiter that is cancelled leaves the
queue having taken nothing; a slot is released exactly once per acquire, whatever the attempt's outcome (the pool
releases in ``finally``); requests start first come, first served. Header values that do not parse are ignored."""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from medhelm.inference.pacing.budget import Bucket, RateHeaders
from medhelm.inference.pacing.learnt import LearntRate
from medhelm.inference.pacing.limit import START_LIMIT, Limit
from medhelm.inference.pacing.shards import DRAIN_EVERY_S, ShardLimit
from medhelm.inference.pacing.solo import SoloLimit

AUTO = "auto"
OVERLOAD_STATUS = frozenset({429, 503, 529})  # too many requests, unavailable, Anthropic's "overloaded"
AUTO_CEILING = 256  # requests in flight a run allows at most under ``--max-concurrency auto``
# A short run jumps: a process that will send a deployment at most SHORT_RUN requests, with no limit learnt by an
# earlier run, starts ``auto`` at SHORT_START and climbs from JUMP_LIMIT once its first answer is back or JUMP_AFTER_S
# passed since its first request with no refusal back (a refusal first: no jump), instead of climbing from
# START_LIMIT. SHORT_RUN is 32 rounds at JUMP_LIMIT; the climb from 4 and its trial at the knee take about a third of
# that. JUMP_AFTER_S is about what a gateway in the hospital's network takes to refuse, a fraction of a model's
# latency (docs/pacing.md).
SHORT_START = 16
JUMP_LIMIT = 64
JUMP_AFTER_S = 0.010
SHORT_RUN = 2048


def AdaptiveLimit(ceiling: int, *, start: int = START_LIMIT, cruise: int = 8,  # noqa: N802 (called as a class)
                  latency_tolerance: float = 3.0, clock: Callable[[], float] = time.monotonic,
                  wall: Callable[[], float] | None = None, drain_every: float = 0.0, climb: bool = True,
                  jump: int | None = None, jump_after: float | None = None) -> Limit:
    """``auto``'s controller: a ``ShardLimit`` that drains every ``drain_every`` seconds of the ``wall`` clock (one
    of a Job's shards), else a ``SoloLimit`` (a process alone on its server; ``climb``: its slow start judged by
    Little's law while latency stays flat; ``jump``: a short run's limit from its first answer, or ``jump_after``
    seconds after its first request with no refusal back)."""
    kw = dict(start=start, cruise=cruise, latency_tolerance=latency_tolerance, clock=clock)
    if drain_every > 0:
        return ShardLimit(ceiling, drain_every=drain_every, wall=wall, **kw)
    return SoloLimit(ceiling, climb=climb, jump=jump, jump_after=jump_after, **kw)


def short_run_limit(ceiling: int, **kw) -> Limit:
    """``auto`` for a short first run (``PaceSettings.jumps``): starts at ``SHORT_START``, jumps to ``JUMP_LIMIT``
    at its first answer or ``JUMP_AFTER_S`` after its first request with no refusal back (the simulations' door to
    what ``Pacer`` builds; the module's values are read at the call)."""
    return AdaptiveLimit(ceiling, start=SHORT_START, jump=JUMP_LIMIT, jump_after=JUMP_AFTER_S, **kw)


@dataclass(frozen=True)
class PaceSettings:
    """How one deployment is paced: ``fixed`` in flight (a hard cap) or ``auto`` under ``ceiling``; budgets."""

    fixed: int | None = None
    ceiling: int = AUTO_CEILING
    adaptive: bool = False
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    share: float = 1.0  # this process's part of the configured budgets (a Job's shards split them evenly)
    start: int | None = None  # where ``auto`` starts: the limit the deployment's last run learnt (None: see ``jumps``)
    expected: int | None = None  # at most this many requests this process sends the deployment (None: not known)

    @property
    def remembered_as(self) -> str | None:
        """The setting under which the limit ``auto`` settles at is kept between runs (beside the request cache),
        None when nothing is kept: a fixed cap learns nothing, and a Job's shards restart their climb together
        every minute from ``RESTART_LIMIT`` (a start of their own would set them apart until then)."""
        return AUTO if self.adaptive and not self.fixed and self.share >= 1.0 else None

    @property
    def jumps(self) -> bool:
        """``auto`` starts at ``SHORT_START`` and jumps to ``JUMP_LIMIT`` (``short_run_limit``): no limit was learnt
        (``start``) and this process sends the deployment at most ``SHORT_RUN`` requests, too few to pay back a climb
        from 4 (a Job's shards never jump: they climb together from ``RESTART_LIMIT``)."""
        return (self.start is None and self.remembered_as is not None and self.expected is not None
                and self.expected <= SHORT_RUN)

    @property
    def first_limit(self) -> int:
        """Where ``auto`` starts: the learnt limit, else ``SHORT_START`` for a short run, else ``START_LIMIT``."""
        return self.start or (SHORT_START if self.jumps else START_LIMIT)


@dataclass(frozen=True)
class PacingPolicy:
    """A process's pacing rule for every deployment it reaches (``RunOptions`` -> ``ClientPool``).

    ``adaptive``: deployments without a fixed ``max_concurrency`` are paced by ``AdaptiveLimit`` (remote kinds
    only: an in-process model serialises its own work) under ``ceiling``; else they are capped by the workers
    alone, as a fixed ``--max-concurrency N`` run always was. ``share``: this process's part of configured
    rate budgets (a Job's shards running at once each take 1/n). ``starts``: where ``auto`` starts per deployment
    (the limit its last run learnt; the others start at ``START_LIMIT``, or ``SHORT_START`` when short).
    ``expected``: per deployment, at most how many requests this process will send it (``PaceSettings.jumps``)."""

    adaptive: bool = False
    ceiling: int = AUTO_CEILING
    share: float = 1.0
    starts: tuple[tuple[str, int], ...] = ()  # (deployment name, the limit its last run learnt): where auto starts
    expected: tuple[tuple[str, int], ...] = ()  # (deployment name, at most this many requests): a short run jumps

    def settings(self, *, fixed: int | None, rate_limits: Mapping[str, object], local: bool,
                 deployment: str = "") -> PaceSettings:
        rpm, tpm = rate_limits.get("requests_per_minute"), rate_limits.get("tokens_per_minute")
        return PaceSettings(fixed=fixed, ceiling=self.ceiling, adaptive=self.adaptive and not local and not fixed,
                            requests_per_minute=float(rpm) if rpm else None,
                            tokens_per_minute=float(tpm) if tpm else None, share=self.share,
                            start=dict(self.starts).get(deployment), expected=dict(self.expected).get(deployment))


class PacerObserver:
    """Telemetry hooks (``telemetry.PacingMetrics``); the default does nothing."""

    def limit_changed(self, limit: int, plateau: int | None) -> None: ...

    def rate_limited(self) -> None: ...

    def waited(self, seconds: float) -> None: ...

    def rate_learnt(self, requests_per_s: float, tokens_per_s: float | None) -> None: ...


class Pacer:
    """The per-deployment gate: ``async with pacer.slot(tokens):`` around one attempt; report its outcome."""

    def __init__(self, settings: PaceSettings, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = asyncio.sleep, observer: PacerObserver | None = None,
                 on_settled: Callable[[int], None] | None = None) -> None:
        """``on_settled(limit)``: called each time what ``auto`` learnt changes (``settled``: where it cruises — a
        trial chose it, or an overload cut to it — or, before it first cruises, the highest limit its climb
        showed free); the pool keeps the last one for the deployment's next run."""
        self.settings = settings
        self._clock, self._sleep = clock, sleep
        self.observer = observer or PacerObserver()
        self.adaptive: Limit | None = None
        if settings.jumps:  # a short run: the controller the simulations build too (one owner of its start and jump)
            self.adaptive = short_run_limit(settings.ceiling, clock=clock)
        elif settings.adaptive and not settings.fixed:
            # A Job's shards (share < 1) know they share the server: they drain together to stay fair (ShardLimit)
            self.adaptive = AdaptiveLimit(settings.ceiling, start=settings.first_limit, clock=clock,
                                          drain_every=DRAIN_EVERY_S if settings.share < 1.0 else 0.0)
        now = clock()
        self._requests = Bucket(settings.requests_per_minute * settings.share, now) \
            if settings.requests_per_minute else None
        self._tokens = Bucket(settings.tokens_per_minute * settings.share, now,
                              burst=max(1.0, settings.tokens_per_minute * settings.share / 60.0)) \
            if settings.tokens_per_minute else None
        self._learnt_requests = self._requests is None  # buckets made from headers follow the headers' limit
        self._learnt_tokens = self._tokens is None
        # auto also paces by a rate learnt from refusals, until the server states its budget in headers
        self.learnt = LearntRate(clock, cap_requests=self._requests.per_minute / 60.0 if self._requests else None,
                                 cap_tokens=self._tokens.per_minute / 60.0 if self._tokens else None,
                                 share=settings.share) \
            if self.adaptive is not None else None
        self._reported_rate: tuple[float, float | None] | None = None
        self.in_flight = 0
        self._tokens_out = 0.0  # tokens charged for requests in flight
        self.paused_until = 0.0
        self.rate_limited = 0
        self.waited_s = 0.0
        self._waiters: collections.deque[tuple[asyncio.Future[float], float]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._reported = (None, None)
        self.start = self.adaptive.limit if self.adaptive is not None else None  # where auto started
        # What auto has learnt so far, kept for the deployment's next run: the last limit it cruised at, or before it
        # first cruises (a short run can end during the climb) the highest limit the climb showed free. A short run
        # that jumped learnt nothing while it stays at its jump (it never measured below it): that is not kept.
        self.settled: int | None = None
        self._jump_to = self.adaptive.jump if isinstance(self.adaptive, SoloLimit) else None  # a short run's jump
        self._jumped = self._jump_to is not None
        self._cruised = False
        self._on_settled = on_settled

    @property
    def limit(self) -> int | None:
        if self.settings.fixed:
            return self.settings.fixed
        if self.adaptive is not None:
            learnt = self.learnt
            if learnt is not None and learnt.paces:  # the rate paces: never fewer in flight than it needs
                return max(self.adaptive.limit, min(self.settings.ceiling, learnt.in_flight_needed()))
            return self.adaptive.limit
        return None

    def _blocked_for(self, tokens: float) -> float:
        """0 when a request may start now, else seconds to wait (inf: until a slot frees)."""
        now = self._clock()
        wait = max(0.0, self.paused_until - now)
        limit, jump = self.limit, None
        if limit is not None and self.in_flight >= limit:
            jump = self.adaptive.jump_wait() if self.adaptive is not None else None
            if jump == 0.0:  # a short run's jump fell due with nothing back: the limit just rose
                self._report()
                limit = self.limit
        if limit is not None and self.in_flight >= limit:
            if self.adaptive is not None:
                self.adaptive.note_waiting()
            return max(wait, jump) if jump else math.inf  # a jump pending: wait for it to fall due
        if self._requests is not None:
            wait = max(wait, self._requests.wait_for(1, now))
        if self._tokens is not None and tokens:
            wait = max(wait, self._tokens.wait_for(tokens, now))
        if self.learnt is not None:
            wait = max(wait, self.learnt.wait_for(tokens, now))
        return wait

    def blocked_for(self, tokens: float = 0.0) -> float:
        """0 when a request costing ``tokens`` may start now, else seconds to wait (inf: until a slot frees)."""
        return self._blocked_for(tokens)

    def try_acquire(self, tokens: float = 0.0) -> float | None:
        """``acquire`` without waiting: the time the request started (pass it to ``release``), or None when it
        may not start now (a simulation on its own clock waits ``blocked_for`` and asks again)."""
        if self._waiters or self._blocked_for(tokens) > 0.0:
            return None
        return self._take(tokens)

    async def acquire(self, tokens: float = 0.0) -> float:
        """Wait until a request may start (first come, first served); returns the time it started (pass it to
        ``release``). ``tokens``: what the request is expected to use of a tokens-per-minute budget. A waiter is
        handed its slot by ``_grant`` (the one place that takes slots for waiters), so the order is kept."""
        if not self._waiters and self._blocked_for(tokens) == 0.0:
            return self._take(tokens)
        started_wait = self._clock()
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        entry = (fut, tokens)
        self._waiters.append(entry)
        self._grant()
        try:
            started = await fut
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif fut.done() and not fut.cancelled():  # granted, then cancelled before it ran: give it back
                self.in_flight -= 1
                self._tokens_out -= tokens
                self._grant()
            raise
        waited = self._clock() - started_wait
        self.waited_s += waited
        self.observer.waited(waited)
        return started

    def _take(self, tokens: float) -> float:
        now = self._clock()
        self.in_flight += 1
        self._tokens_out += tokens
        if self._requests is not None:
            self._requests.take(1, now)
        if self._tokens is not None and tokens:
            self._tokens.take(tokens, now)
        if self.learnt is not None:
            self.learnt.sent(now, tokens)
        if self.adaptive is not None:
            self.adaptive.sent()
        return now

    def _grant(self) -> None:
        """Hand slots to the waiters at the head of the queue while they fit; arm a timer for a budget wait."""
        while self._waiters:
            fut, tokens = self._waiters[0]
            if fut.done():  # cancelled while queued
                self._waiters.popleft()
                continue
            wait = self._blocked_for(tokens)
            if wait > 0.0:
                if math.isfinite(wait):
                    self._arm(wait)
                return
            self._waiters.popleft()
            fut.set_result(self._take(tokens))

    @property
    def counts_tokens(self) -> bool:
        return self._tokens is not None or self._learnt_tokens or self.learnt is not None

    def observe_headers(self, headers: Mapping[str, str]) -> None:
        """A reply's headers (any status): the server's own account of its rate limits, when it sends one."""
        self._from_headers(headers, self._clock())

    def release(self, started: float, *, ok: bool, overloaded: bool = False, retry_after: float | None = None,
                tokens_used: float | None = None, tokens_taken: float = 0.0) -> None:
        """One acquire's end: ``ok`` (an answer), ``overloaded`` (429/503/529: halve, pause ``retry_after``)."""
        now = self._clock()
        self.in_flight -= 1
        self._tokens_out -= tokens_taken
        if self._tokens is not None and tokens_used is not None and tokens_taken:
            self._tokens.level += tokens_taken - tokens_used  # charge what the request really used
        if overloaded:
            self.rate_limited += 1
            self.observer.rate_limited()
            if retry_after:
                self.paused_until = max(self.paused_until, now + retry_after)
            if self.learnt is not None:  # auto: a refusal is answered by the learnt rate, not by fewer in flight
                self.learnt.refused(started, tokens_taken, retry_after)
                if isinstance(self.adaptive, SoloLimit):
                    self.adaptive.cancel_jump()  # refused before its first answer: a short run does not jump
            elif self.adaptive is not None:
                self.adaptive.overloaded()
        elif ok and self.adaptive is not None:  # only answers measure the server (a quick 500 says nothing)
            self.adaptive.completed(now - started)
            if self.learnt is not None:
                self.learnt.answered(now - started, started)
        self._report()
        self._grant()

    def summary(self) -> str:
        """One line for the run's summary: the limit now and its plateau, throttling, time waited to start."""
        parts = []
        if self.adaptive is not None:
            plateau = f", plateau {self.adaptive.plateau}" if self.adaptive.plateau is not None else ""
            drains = f", {self.adaptive.drains} drains ({self.adaptive.restarts} restarts)" \
                if self.adaptive.drains else ""
            if self.settings.start:
                learnt = f", started at {self.start} (learnt by the last run)"
            elif self._jumped:
                how = f"jumped to {self._jump_to} {self.adaptive.jumped}" if self.adaptive.jumped \
                    else "no jump: refused before its first answer" if self.adaptive.jump is None else "no answer yet"
                learnt = f", started at {self.start} (a short run: at most {self.settings.expected} requests; {how})"
            else:
                learnt = ""
            parts.append(f"auto: {self.limit} in flight{plateau}{drains}{learnt}")
        elif self.settings.fixed:
            parts.append(f"fixed: {self.settings.fixed} in flight")
        budgets = [f"{b.per_minute:g} {what}/min" for b, what in ((self._requests, "requests"),
                                                                   (self._tokens, "tokens")) if b is not None]
        if budgets:
            parts.append("budget " + ", ".join(budgets))
        if self.learnt is not None and self.learnt.paces:
            parts.append(self.learnt.summary())
        parts.append(f"{self.rate_limited} throttled (429/503/529)")
        parts.append(f"{self.waited_s:.1f} s waiting to start")
        return "; ".join(parts)

    def _from_headers(self, headers: Mapping[str, str], now: float) -> None:
        """Budgets the configuration does not set follow the server's stated limit (per minute, its whole
        burst); every bucket is set to what the server says is left, less what this process has in flight
        beyond the request that brought the reply (already counted there, not yet here)."""
        rate = RateHeaders.parse(headers)
        if rate is None:
            return
        if self.learnt is not None:  # the server states its budget: that wins over one learnt from refusals
            self.learnt = None
        share = self.settings.share
        if rate.limit_requests and self._learnt_requests:
            per_minute = rate.limit_requests * share
            if self._requests is None or self._requests.per_minute != per_minute:
                self._requests = Bucket(per_minute, now, burst=max(1.0, per_minute))
        if rate.limit_tokens and self._learnt_tokens:
            per_minute = rate.limit_tokens * share
            if self._tokens is None or self._tokens.per_minute != per_minute:
                self._tokens = Bucket(per_minute, now, burst=max(1.0, per_minute))
        others = max(0, self.in_flight - 1)
        if rate.remaining_requests is not None and self._requests is not None:
            self._set_level(self._requests, rate.remaining_requests * share - others, now, self._learnt_requests)
        if rate.remaining_tokens is not None and self._tokens is not None:
            self._set_level(self._tokens, rate.remaining_tokens * share - self._tokens_out, now, self._learnt_tokens)

    @staticmethod
    def _set_level(bucket: Bucket, remaining: float, now: float, learnt: bool) -> None:
        if learnt:  # the server's account is the truth (it may have refilled more than our estimate)
            bucket.refill(now)
            bucket.level = min(bucket.burst, remaining)
        else:  # a configured budget: never believe we have more than the server says
            bucket.cap(remaining, now)

    def _report(self) -> None:
        learnt = self.learnt
        if learnt is not None and learnt.requests_per_s is not None:
            rate = (float(f"{learnt.requests_per_s:.3g}"),
                    float(f"{learnt.tokens_per_s:.3g}") if learnt.tokens_per_s else None)
            if rate != self._reported_rate:
                self._reported_rate = rate
                self.observer.rate_learnt(*rate)
        adaptive = self.adaptive
        if adaptive is not None:
            state = (adaptive.limit, adaptive.plateau)
            if state != self._reported:
                self._reported = state
                self.observer.limit_changed(*state)
            if adaptive.phase == "cruise":
                self._cruised = True
                learnt = adaptive.limit
            else:  # before it first cruises, the highest limit its climb showed the server serves at once
                learnt = None if self._cruised else adaptive.proven
            if self._jumped and learnt in (self.start, self._jump_to) and self.settled is None:
                learnt = None  # still where a short run was put, not where it measured: nothing to keep yet
            if learnt is not None and learnt != self.settled:
                self.settled = learnt
                if self._on_settled is not None:
                    self._on_settled(learnt)

    def _arm(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            if self._timer.when() <= loop.time() + delay:
                return
            self._timer.cancel()
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._grant()
