"""A discrete-event simulation of processes paced by the real ``Pacer`` (inference/pacing/, ``auto``) against a
simulated API gateway that refuses past a token bucket with 429 + ``Retry-After`` and states no budget in headers.

``Gateway``: a requests-per-minute and/or tokens-per-minute bucket holding ``burst_s`` seconds of refill (the mock's
``burst_s``), whose budget may change at given times, stating ``Retry-After`` to the millisecond as the mock does
or in whole seconds (``whole_seconds``: RFC 9110's delay-seconds, as API management gateways do), or not at all
(``silent``: AWS API Gateway's throttling and nginx's ``limit_req`` answer a bare 429); or (``window_s``) no bucket
but an exact count of every attempt over a sliding window, refused ones included, or (``freq_ctr_s``) that count as
HAProxy keeps it for ``http_req_rate`` (its freq_ctr: the period so far plus the last one, weighed), or
(``fixed_window_s``) a count per window of the clock (Kong, Envoy's rate limit service, a per-minute quota); a request
is charged on arrival (its prompt's words plus ``max_tokens``, as OpenAI counts), answered after a latency drawn around
``latency_s``, or refused at once with the seconds its cost needs to be back. Each process has ``workers``
instances in flight at most (the run's tasks), waits in the pacer's order (``try_acquire`` / ``blocked_for`` on the
simulated clock), and sends a refused instance again after the pool's ``RetryPolicy`` delay (at least
``Retry-After``); an instance fails when that policy gives up on it (``RetryPolicy.retries``: refused for a rate
limit, past ``max_attempts`` once its first refusal is ``rate_limit_wait_s`` old).
A process's event loop may stall (``stalls``: a client starved on a loaded machine).
Time is simulated and every draw seeded: the result depends on the seed only, never on the machine.
Used by tests/core/test_pacing_rates.py and bench/bench_pacing_rates.py (which also measures the real thing).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from medhelm.inference.pacing import PaceSettings, Pacer
from medhelm.inference.outcome import Outcome, Verdict
from medhelm.inference.retry import RetryPolicy, first_rate_limit
from tests.core.pacing_sim import Clock

TOKEN_ESTIMATE = 1.3  # the client's tokens per gateway token for a prompt (chars / 4 against words)


@dataclass
class Gateway:
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    burst_s: float = 1.0
    changes: tuple[tuple[float, float | None, float | None], ...] = ()  # (at, rpm, tpm): a new budget from then
    whole_seconds: bool = False  # Retry-After as RFC 9110 delay-seconds: the wait rounded up, at least 1
    silent: bool = False  # no Retry-After at all (AWS API Gateway's throttling, nginx's limit_req): a bare 429
    window_s: float | None = None  # instead of a bucket: every attempt counted over a sliding window this long, the
    # refused ones too, refused past requests_per_minute's part of it (HAProxy's http_req_rate read exactly)
    fixed_window_s: float | None = None  # instead of a bucket: requests_per_minute's part of this many seconds let
    # through per window of the clock, refused past it until the next (Kong's rate limiting, Envoy's global rate limit
    # service, a per-minute quota), the refused ones not counted; Retry-After the seconds to the next window
    freq_ctr_s: float | None = None  # instead of a bucket: HAProxy's own count (its freq_ctr, http_req_rate(period)):
    # the requests of the period so far plus the last period's, weighed by the part of this one still to go, every
    # attempt counted (track-sc before deny), refused past requests_per_minute's part of a period; periods follow one
    # another from the first request (two missed: the count starts over), in whole milliseconds and integer counts
    _levels: dict[str, list[float]] = field(default_factory=dict)
    _attempts: list[float] = field(default_factory=list)

    def budget(self, t: float) -> tuple[float | None, float | None]:
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        for at, r, k in self.changes:
            if t >= at:
                rpm, tpm = r, k
        return rpm, tpm

    def stated(self, wait: float) -> float:
        """The ``Retry-After`` the gateway states for a refusal whose cost is back in ``wait`` seconds."""
        return float(max(1, math.ceil(wait))) if self.whole_seconds else wait

    def arrive(self, t: float, tokens: float) -> float:
        """Charge a request: 0 when accepted, else the seconds until its cost is back (Retry-After)."""
        rpm, tpm = self.budget(t)
        if self.window_s is not None:
            self._attempts = [a for a in self._attempts if a > t - self.window_s] + [t]
            over = len(self._attempts) - rpm * self.window_s / 60.0
            return self.stated(self._attempts[math.ceil(over) - 1] + self.window_s - t) if over > 0 else 0.0
        if self.freq_ctr_s is not None:
            period, now = round(self.freq_ctr_s * 1000), math.floor(t * 1000)
            tick, curr, prev = self._levels.setdefault("freq_ctr", [now, 0, 0])
            if now - tick >= period:  # the period is over: it becomes the last one
                tick, curr, prev = (tick + period, 0, curr) if now - tick < 2 * period else (now, 0, 0)
            self._levels["freq_ctr"] = [tick, curr + 1, prev]
            count = curr + 1 + prev * (tick + period - now) // period
            return self.stated(1.0) if count > round(rpm * self.freq_ctr_s / 60.0) else 0.0
        if self.fixed_window_s is not None:
            window = math.floor(t / self.fixed_window_s)
            count = self._levels.setdefault("window", [window, 0.0])
            if count[0] != window:
                count[:] = [window, 0.0]
            if count[1] + 1.0 <= rpm * self.fixed_window_s / 60.0:
                count[1] += 1.0
                return 0.0
            return self.stated((window + 1) * self.fixed_window_s - t)
        wait, levels = 0.0, {}
        for what, per_minute, cost in (("requests", rpm, 1.0), ("tokens", tpm, tokens)):
            if not per_minute:
                continue
            cap = per_minute * self.burst_s / 60.0
            level, last = self._levels.setdefault(what, [cap, t])
            level = min(cap, level + (t - last) * per_minute / 60.0)
            self._levels[what] = [level, t]
            levels[what] = level - cost
            if level < cost:
                wait = max(wait, (cost - level) * 60.0 / per_minute)
        if wait == 0.0:
            for what, left in levels.items():
                self._levels[what][0] = left
        return self.stated(wait) if wait > 0.0 else 0.0

    def used(self, t0: float, t1: float, what: str) -> float:
        """The budget between ``t0`` and ``t1`` (requests or tokens)."""
        total, t = 0.0, t0
        edges = sorted({t0, t1, *(at for at, _, _ in self.changes if t0 < at < t1)})
        for a, b in zip(edges, edges[1:]):
            rpm, tpm = self.budget(a)
            per_minute = rpm if what == "requests" else tpm
            total += (per_minute or 0.0) * (b - a) / 60.0
            t = b
        return total


@dataclass
class Process:
    pacer: Pacer
    sent: list[float] = field(default_factory=list)  # send times of every attempt
    accepted: list[tuple[float, float]] = field(default_factory=list)  # (send time, gateway tokens)
    refused: list[float] = field(default_factory=list)  # send times of refused attempts
    failed: int = 0  # instances the retry policy gave up on
    most_refused: int = 0
    answered: int = 0


def simulate(gateway: Gateway, *, processes: int = 1, seconds: float = 180.0, latency_s: float = 0.02,
             jitter: float = 0.3, workers: int = 64, prompt_words: tuple[int, int] = (20, 60), max_tokens: int = 16,
             refuse_s: float = 0.002, seed: int = 0, stagger_s: float = 0.0, net_s: float = 0.0,
             stalls: tuple[float, float] = (0.0, 0.0), expected: int | None = None,
             retry_policy: RetryPolicy | None = None,
             configured: tuple[float | None, float | None] = (None, None),
             words_growth: float = 0.0) -> tuple[list[Process], Clock]:
    """``processes`` (a Job's shards when more than one: each takes ``share`` 1/n) each keep ``workers`` instances
    going; an instance's prompt has a uniform number of words in ``prompt_words``. ``stagger_s``: process i
    starts at i x stagger_s. ``net_s``: the mean of a delay drawn (exponential) for each way between the pacer and
    the gateway (HTTP and a busy event loop: requests arrive later than they start, and out of order). ``stalls``:
    (the share of the time, the mean seconds of one stall) a process's event loop gets no CPU (a client starved on
    a loaded machine): run and stall lengths drawn (exponential) from a generator of the process's own, every event
    of the process that falls in a stall (a start, an answer, a refusal, a wake) handled at its end, in order; the
    gateway runs on. ``expected``: the requests each process said it would send (a short run's pacer jumps).
    ``configured``: the budget the Job was told (``rate_limits``: requests and tokens a minute, the Job's whole).
    ``words_growth``: the prompts grow dearer, their words by this part a minute of the simulated clock (a dataset
    whose later notes are longer)."""
    rng = random.Random(seed)
    stalled, stall_mean = stalls
    stall_rngs = [random.Random(f"stalls {seed} {p}") for p in range(processes)]
    stall_at = [(math.inf, math.inf)] * processes  # each process's current or next stall: (start, end)
    if stalled > 0.0:
        run_mean = stall_mean * (1.0 - stalled) / stalled
        for p in range(processes):
            start = stall_rngs[p].expovariate(1.0 / run_mean)
            stall_at[p] = (start, start + stall_rngs[p].expovariate(1.0 / stall_mean))

    def stall_end(p: int, t: float) -> float:
        """The end of the stall process ``p`` is in at ``t`` (``t`` itself when it runs)."""
        start, end = stall_at[p]
        while t >= end:
            start = end + stall_rngs[p].expovariate(1.0 / run_mean)
            end = start + stall_rngs[p].expovariate(1.0 / stall_mean)
        stall_at[p] = (start, end)
        return end if t >= start else t

    retry_policy = retry_policy or RetryPolicy()
    clock = Clock()
    share = 1.0 / processes
    rpm, tpm = configured
    procs = [Process(Pacer(PaceSettings(adaptive=True, share=share, expected=expected, requests_per_minute=rpm,
                                        tokens_per_minute=tpm), clock=clock))
             for _ in range(processes)]
    events: list[tuple[float, int, str, tuple]] = []
    # waiting: (client tokens, words, attempt, when its first refusal came or None)
    queues: list[list[tuple[float, int, int, float | None]]] = [[] for _ in procs]
    wakes = [math.inf] * processes
    seq = 0

    def push(t: float, kind: str, *data) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, data))

    def new_instance(p: int) -> None:
        words = rng.randint(*prompt_words)
        if words_growth:
            words = round(words * (1.0 + words_growth * clock.t / 60.0))
        queues[p].append((TOKEN_ESTIMATE * words + max_tokens, words, 1, None))

    def pump(p: int) -> None:
        pacer, queue = procs[p].pacer, queues[p]
        while queue:
            tokens, words, attempt, since = queue[0]
            started = pacer.try_acquire(tokens)
            if started is None:
                wait = pacer.blocked_for(tokens)
                if math.isfinite(wait) and clock.t + wait < wakes[p]:
                    wakes[p] = clock.t + wait
                    push(clock.t + wait, "wake", p)
                return
            queue.pop(0)
            procs[p].sent.append(clock.t)
            if net_s > 0.0:
                push(clock.t + rng.expovariate(1.0 / net_s), "arrive", p, started, tokens, words, attempt, since)
            else:
                arrive(p, started, tokens, words, attempt, since)

    def arrive(p: int, started: float, tokens: float, words: int, attempt: int, since: float | None) -> None:
        cost = words + max_tokens
        retry_after = gateway.arrive(clock.t, cost)
        back = rng.expovariate(1.0 / net_s) if net_s > 0.0 else 0.0
        if retry_after > 0.0:
            stated = None if gateway.silent else retry_after
            push(clock.t + refuse_s + back, "refused", p, started, tokens, words, attempt, since, stated)
        else:
            latency = latency_s * rng.lognormvariate(0.0, jitter)
            push(clock.t + latency + back, "answered", p, started, tokens, cost)

    for p in range(processes):
        push(p * stagger_s, "start", p)
    while events and events[0][0] <= seconds:
        t, _, kind, data = heapq.heappop(events)
        p = data[0]
        if kind != "arrive" and stalled > 0.0:
            resume = stall_end(p, t)
            if resume > t:
                push(resume, kind, *data)
                continue
        clock.t = t
        proc = procs[p]
        if kind == "start":
            for _ in range(workers):
                new_instance(p)
        elif kind == "arrive":
            arrive(*data)
        elif kind == "wake":
            if wakes[p] <= t:
                wakes[p] = math.inf
        elif kind == "answered":
            _, started, tokens, cost = data
            proc.pacer.release(started, ok=True, tokens_used=cost, tokens_taken=tokens)
            proc.accepted.append((started, cost))
            proc.answered += 1
            new_instance(p)
        elif kind == "refused":
            _, started, tokens, words, attempt, since, retry_after = data
            proc.pacer.release(started, ok=False, overloaded=True, retry_after=retry_after, tokens_taken=tokens)
            proc.refused.append(started)
            proc.most_refused = max(proc.most_refused, attempt)
            outcome = Outcome(Verdict.RATE_LIMITED, retry_after)
            since = first_rate_limit(outcome, 429, since, t)
            if not retry_policy.retries(attempt, outcome, 429, t - since):
                proc.failed += 1
                new_instance(p)
            else:
                push(t + retry_policy.delay(attempt, rng, retry_after), "retry", p, tokens, words, attempt + 1, since)
        elif kind == "retry":
            _, tokens, words, attempt, since = data
            queues[p].append((tokens, words, attempt, since))
        pump(p)
    return procs, clock


@dataclass(frozen=True)
class Measured:
    refused_share: float  # refused attempts over attempts, after the first minute
    used: float  # accepted over the budget, after the first minute (the binding unit)
    shares: tuple[float, ...]  # each process's accepted over a fair share of the gateway's accepted
    failed: int


def measure(procs: list[Process], gateway: Gateway, *, t0: float, t1: float, what: str = "requests") -> Measured:
    sent = sum(sum(1 for t in p.sent if t0 <= t < t1) for p in procs)
    refused = sum(sum(1 for t in p.refused if t0 <= t < t1) for p in procs)
    each = [sum(1.0 if what == "requests" else cost for t, cost in p.accepted if t0 <= t < t1) for p in procs]
    fair = sum(each) / len(each) if each else 0.0
    return Measured(refused / sent if sent else 0.0, sum(each) / gateway.used(t0, t1, what),
                    tuple(e / fair if fair else 0.0 for e in each), sum(p.failed for p in procs))
