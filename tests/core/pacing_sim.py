"""A discrete-event simulation of clients paced by ``AdaptiveLimit`` (inference/pacing/) against a simulated server.

Two servers. ``FifoServer``: ``capacity`` workers and a FIFO queue; a request's latency is its queueing time plus
a service time drawn around ``service_s`` (the mock capacity server). ``BatchingServer``: a continuous-batching
engine (vLLM), every request in its batch advancing together, the batch's throughput growing with its size but
less and less, calibrated on real vLLM on this machine (``VLLM_CPU``), and a machine whose load makes it slower
and faster by turns. Each client always has work (a full run's queue) and keeps ``limit`` requests in flight.
Time is simulated and every draw seeded: the result depends on the seed only, never on the machine.
Used by tests/core/test_pacing.py (bench/bench_pacing.py measures the same designs against real servers).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from medhelm.inference.pacing import DRAIN_EVERY_S, AdaptiveLimit, Limit
from medhelm.inference.retry import RetryPolicy


@dataclass
class Clock:
    t: float = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class ClientResult:
    completions: int = 0
    latencies: list[float] = field(default_factory=list)
    finished: float | None = None  # when its last instance was answered (a run of ``instances``)
    refused: int = 0  # requests the server refused (``refuse_over``), each sent again
    most_refused: int = 0  # the most times one instance was refused


class FifoServer:
    """``capacity`` workers, one request each, and a FIFO queue for the rest."""

    def __init__(self, capacity: int, service_s: float, jitter: float, rng: random.Random) -> None:
        self.capacity, self.service_s, self.jitter, self.rng = capacity, service_s, jitter, rng
        self._events: list[tuple[float, int, int, float]] = []  # (finish time, seq, client, sent time)
        self._queue: list[tuple[int, float]] = []
        self._seq = 0

    def _start(self, t: float, client: int, sent: float) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t + self.service_s * self.rng.lognormvariate(0.0, self.jitter), self._seq,
                                      client, sent))

    def arrive(self, t: float, client: int) -> None:
        if len(self._events) < self.capacity:
            self._start(t, client, t)
        else:
            self._queue.append((client, t))

    def held(self) -> int:
        """Requests at the server: served and queued."""
        return len(self._events) + len(self._queue)

    def next_time(self) -> float:
        return self._events[0][0] if self._events else math.inf

    def step(self, t: float) -> tuple[int, float] | None:
        _, _, client, sent = heapq.heappop(self._events)
        if self._queue:
            self._start(t, *self._queue.pop(0))
        return client, sent


@dataclass(frozen=True)
class BatchingProfile:
    """A continuous-batching engine: ``n`` requests in its batch finish ``peak x (1 - exp(-n / knee))`` a second
    between them (each gets its share), at most ``max_seqs`` at once (the rest wait in a FIFO queue). The machine's
    load scales the speed by a factor whose log follows an AR(1) walk (``noise`` its deviation, ``noise_s`` its
    step, ``noise_corr`` the correlation from one step to the next); ``jitter``: each request's work."""

    peak: float
    knee: float
    max_seqs: int
    jitter: float = 0.05
    noise: float = 0.15
    noise_s: float = 2.0
    noise_corr: float = 0.8


# vLLM CPU (scripts/engines.sh: SmolLM2-135M, --max-num-seqs 64, 16 tokens a request) measured on this machine
# (docs/benchmarks.md, "Adaptive concurrency"): 4 / 16 / 64 in flight -> 3.47 / 6.47 / 6.87 a second, p50 1.2 / 2.6
# / 8.7 s; this profile gives 3.47 / 6.45 / 6.87 a second, p50 1.1 / 2.4 / 8.9 s at a steady load. A round's
# length (one completion per request in flight) spread 33 / 28 / 19 / 17 % at 4 / 8 / 16 / 32 in flight on the
# real server (load ~9, 45 s each); the requests' work spread (``jitter``) and the load's walk give 26 / 21 / 16 /
# 13 %. Rates in the tests are compared between runs of one seed, whose load walks alike.
VLLM_CPU = BatchingProfile(peak=7.2, knee=5.7, max_seqs=64, jitter=0.3)
# The same server measured on a quiet machine (session 12, load 0-2: docs/benchmarks.md): 16 / 32 / 64 in flight ->
# 5.6-6.0 / 6.4-7.0 / 6.6-7.0 a second, p50 2.7-2.9 / 4.7-5.0 / 9.5-9.7 s. The gain from 32 to 64 (about 3 %, -5 % to
# +8 % run to run) is the size of the bar a doubling must clear there, so that trial is the hard one. This profile
# gives 5.6 / 6.6 / 6.8 a second; the load's walk (``noise``) is a third of the loaded one's, which gives the
# 32 -> 64 trial standard errors of 4-8 % per window pair, as the quiet runs showed.
VLLM_CPU_QUIET = BatchingProfile(peak=6.8, knee=9.1, max_seqs=64, jitter=0.3, noise=0.05)


# The same engine on session 18's machine (docs/benchmarks.md, 2026-11-29, load 0-3): 16 / 32 / 64 in flight ->
# 12.4-12.7 / 13.9-14.7 / 14.9-15.3 a second, p50 4.4 s at 64, about twice the rate of the machines above; 128 in
# flight gave 64's throughput at twice its p50 (the batch holds 64; the rest wait). This profile gives 12.3 / 14.6 /
# 15.1 a second, p50 2.1 / 4.1 s at 32 / 64. Its rounds are half as long, so a 600 s run reaches the trial above the batch (64 -> 128, a gain of
# nothing, only latency) that the slower profiles reach at the end of a run or not at all.
VLLM_CPU_FAST = BatchingProfile(peak=15.9, knee=9.6, max_seqs=64, jitter=0.3, noise=0.05)

# Real vLLM pays for a change of the number in flight beyond the requests in flight at the change: the A B A B of
# a pacing trial between 32 and 64 (8-round windows) got 6.17/s against 6.39 at fixed 32 and 6.60 at fixed 64, and its
# windows at 32, each after a round let pass, 5.96-6.30/s against fixed 32's 6.30-6.48 (docs/benchmarks.md, session
# 13); the runs that alternated got 0.929-0.944 x the best fixed setting. A quarter slower for two latencies after
# each change gives the quiet profile's alternating windows at 32 about 6.0/s against 6.5 fixed and the controller
# of those runs 0.94 x (34 seeds of 48 under 0.95 x): the size of the real cost, not its mechanism (a batch that
# drains or refills, a cohort of requests sent together), which was not measured apart.
SWITCH_COST = dict(switch_cost=0.25, switch_rounds=2.0)


class BatchingServer:
    """Processor sharing among the batch: every request in it advances at the batch's rate / its size."""

    def __init__(self, profile: BatchingProfile, rng: random.Random, load: random.Random) -> None:
        self.p, self.rng, self.load = profile, rng, load  # load: the machine's own draws (same for every client)
        self._batch: list[list] = []  # [work left, client, sent time]
        self._queue: list[tuple[int, float]] = []
        self._t = 0.0
        self._log_speed = 0.0
        self._next_tick = profile.noise_s
        self._slow_until = -1.0  # a switch's cost: the server runs slower until then ...
        self._slow = 0.0  # ... by this share

    def penalize(self, until: float, cost: float) -> None:
        """A client changed its limit: the batch drains or refills, and the server runs ``cost`` slower until
        ``until``."""
        if until > self._t:
            self._slow_until, self._slow = until, cost

    def _rate(self) -> float:
        """Work done per second on each request in the batch."""
        n = len(self._batch)
        slow = (1 - self._slow) if self._t < self._slow_until else 1.0
        return slow * math.exp(self._log_speed) * self.p.peak * (1 - math.exp(-n / self.p.knee)) / n if n else 0.0

    def _advance(self, t: float) -> None:
        done = (t - self._t) * self._rate()
        for r in self._batch:
            r[0] -= done
        self._t = t

    def arrive(self, t: float, client: int) -> None:
        self._advance(t)
        if len(self._batch) < self.p.max_seqs:
            self._batch.append([self.rng.lognormvariate(0.0, self.p.jitter), client, t])
        else:
            self._queue.append((client, t))

    def next_time(self) -> float:
        finish = self._t + min(r[0] for r in self._batch) / self._rate() if self._batch else math.inf
        return min(finish, self._next_tick, self._slow_until if self._slow_until > self._t else math.inf)

    def step(self, t: float) -> tuple[int, float] | None:
        self._advance(t)
        if self._slow_until == t:
            self._slow_until = -1.0
            return None
        if t >= self._next_tick:  # the machine's load moves
            p = self.p
            self._log_speed = p.noise_corr * self._log_speed + \
                p.noise * math.sqrt(1 - p.noise_corr ** 2) * self.load.gauss(0.0, 1.0)
            self._next_tick += p.noise_s
            return None
        i = min(range(len(self._batch)), key=lambda j: self._batch[j][0])
        _, client, sent = self._batch.pop(i)
        if self._queue:
            c, s = self._queue.pop(0)
            self._batch.append([self.rng.lognormvariate(0.0, self.p.jitter), c, s])
        return client, sent


def simulate(*, capacity: int = 0, service_s: float = 0.1, clients: int = 1, seconds: float = 60.0,
             measure_from: float = 30.0, fixed: int | None = None, ceiling: int = 256, seed: int = 0,
             batching: BatchingProfile | None = None, jitter: float = 0.1, stagger_s: float = 0.0,
             drain_every: float | None = None,
             turnaround_s: float = 0.0, switch_cost: float = 0.0, switch_rounds: float = 1.0,
             make_limit: Callable[..., Limit] = AdaptiveLimit, trace: list[tuple] | None = None,
             instances: int | None = None, refuse_over: int | None = None, refuse_s: float = 0.005,
             retry_policy: RetryPolicy | None = None) -> tuple[list[ClientResult], list[Limit]]:
    """Clients against a ``FifoServer`` of ``capacity`` workers, or the ``batching`` server when given.
    ``stagger_s``: client i joins at i x stagger_s (processes never start together). ``turnaround_s``: a client
    sends a request that long (on average, exponential) after its slot freed (a loaded client's own delay; a
    server with a queue hides it, one without idles meanwhile). ``switch_cost``: each time a client's limit
    changes, the batching server runs that share slower for ``switch_rounds`` x the latency of the request that
    ended the window (see ``SWITCH_COST``). ``make_limit``: the controllers' constructor (``AdaptiveLimit``'s
    signature; bench/bench_pacing_equivalence.py passes an older module's). ``trace``: a list to which every
    decision is appended, ``(time, client, limit, phase, plateau)`` each time one of the three changes.
    ``instances``: each client has that many requests to send (a run of that size) instead of always more; the
    simulation ends when all are answered or at ``seconds``. ``refuse_over``: the ``FifoServer`` refuses a request
    that finds that many at the server (served and queued), as a server with a bounded queue answers 429; the
    refusal comes back after ``refuse_s``, the client's controller is told (``overloaded``) and the instance is
    sent again after the pool's backoff (``retry_policy``'s delay, the real ``RetryPolicy`` by default; no
    ``Retry-After`` pause: the pacer's would only delay it more), when a slot is free. A short run's controller
    (``short_run_limit``) is told of each send (``Limit.sent``) and its jump is taken when it falls due with nothing
    back (``jump_wait``), as the gate's timer does."""
    rng = random.Random(seed)
    clock = Clock()
    server = BatchingServer(batching, rng, random.Random(seed + 1)) if batching \
        else FifoServer(capacity, service_s, jitter, rng)
    drain = (DRAIN_EVERY_S if clients > 1 else 0.0) if drain_every is None else drain_every  # shards drain
    limits = [make_limit(ceiling, clock=clock, drain_every=drain) for _ in range(clients)]
    state = [(lim.limit, lim.phase, lim.plateau) for lim in limits]
    in_flight = [0] * clients
    results = [ClientResult() for _ in range(clients)]
    joins = sorted((c * stagger_s, c) for c in range(clients))
    joined = [False] * clients
    sends: list[tuple[float, int]] = []  # requests on their way: (arrival at the server, client)
    client_rng = random.Random(seed + 2)
    left = [math.inf if instances is None else instances] * clients
    again: list[list[int]] = [[] for _ in range(clients)]  # refusals so far of each refused instance to send again
    refusals: list[tuple[float, int, int, int]] = []  # (when the refusal comes back, seq, client, refusals so far)
    backoffs: list[tuple[float, int, int, int]] = []  # (when a refused instance may be sent again, seq, client, ...)
    retry_policy = retry_policy or RetryPolicy()
    retry_rng = random.Random(seed + 3)
    seq = 0

    def arrive(t: float, client: int, refused: int) -> None:
        nonlocal seq
        if refuse_over is not None and server.held() >= refuse_over:
            seq += 1
            heapq.heappush(refusals, (t + refuse_s, seq, client, refused + 1))
        else:
            server.arrive(t, client)

    def fill(client: int) -> None:
        limit = fixed if fixed is not None else limits[client].limit
        while in_flight[client] < limit and (left[client] > 0 or again[client]):
            in_flight[client] += 1
            if again[client]:
                refused = again[client].pop(0)
            else:
                left[client] -= 1
                refused = 0
            if turnaround_s:
                heapq.heappush(sends, (clock.t + client_rng.expovariate(1 / turnaround_s), client))
            else:
                arrive(clock.t, client, refused)
            if fixed is None and hasattr(limits[client], "sent"):  # an older module's controller has no hook
                limits[client].sent()
        if fixed is None and (left[client] > 0 or again[client]):
            limits[client].note_waiting()  # more work than slots

    def jump_due() -> tuple[float, int]:
        """When the first short run's pending jump falls due with nothing back, and whose (inf: none)."""
        due = [(lim.jump_due, c) for c, lim in enumerate(limits)
               if getattr(lim, "jump", None) is not None and getattr(lim, "jump_due", None) is not None]
        return min(due, default=(math.inf, -1))

    while True:
        due, jumper = jump_due() if fixed is None else (math.inf, -1)
        t = min(server.next_time(), joins[0][0] if joins else math.inf, sends[0][0] if sends else math.inf,
                refusals[0][0] if refusals else math.inf, backoffs[0][0] if backoffs else math.inf, due)
        if t > seconds:
            break
        clock.t = t
        if due <= t:  # the pacer's timer: the jump is taken, the client sends up to its new limit
            limits[jumper].jump_wait()
            now = (limits[jumper].limit, limits[jumper].phase, limits[jumper].plateau)
            if trace is not None and now != state[jumper]:
                trace.append((t, jumper, *now))
            state[jumper] = now
            fill(jumper)
            continue
        if backoffs and backoffs[0][0] <= t:
            _, _, client, refused = heapq.heappop(backoffs)
            again[client].append(refused)
            fill(client)
            continue
        if refusals and refusals[0][0] <= t:
            _, _, client, refused = heapq.heappop(refusals)
            in_flight[client] -= 1
            seq += 1
            heapq.heappush(backoffs, (t + retry_policy.delay(refused, retry_rng), seq, client, refused))
            results[client].refused += 1
            results[client].most_refused = max(results[client].most_refused, refused)
            if fixed is None:
                limits[client].overloaded()
                now = (limits[client].limit, limits[client].phase, limits[client].plateau)
                if trace is not None and now != state[client]:
                    trace.append((t, client, *now))
                state[client] = now
            for c in range(clients):
                if joined[c]:
                    fill(c)
            continue
        if joins and joins[0][0] <= t:
            c = joins.pop(0)[1]
            joined[c] = True
            fill(c)
            continue
        if sends and sends[0][0] <= t:
            arrive(t, heapq.heappop(sends)[1], 0)
            continue
        done = server.step(t)
        if done is None:
            continue
        client, sent = done
        in_flight[client] -= 1
        if t >= measure_from:
            results[client].completions += 1
            results[client].latencies.append(t - sent)
        if left[client] == 0 and in_flight[client] == 0 and not again[client] and \
                not any(c == client for _, _, c, _ in backoffs):
            results[client].finished = t
        if fixed is None:
            before = limits[client].limit
            limits[client].completed(t - sent)
            now = (limits[client].limit, limits[client].phase, limits[client].plateau)
            if trace is not None and now != state[client]:
                trace.append((t, client, *now))
            state[client] = now
            if switch_cost and limits[client].limit != before and hasattr(server, "penalize"):
                server.penalize(t + switch_rounds * (t - sent), switch_cost)
        for c in [client] + [c for c in range(clients) if c != client]:
            if joined[c]:
                fill(c)
    return results, limits


def p50(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else 0.0
