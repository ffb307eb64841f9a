"""A discrete-event simulation of clients paced by ``AdaptiveLimit`` against a server of fixed capacity.

The server has ``capacity`` workers and a FIFO queue; a request's latency is its queueing time plus a service
time drawn around ``service_s`` (seeded). Each client always has work (a full run's queue) and keeps
``limit`` requests in flight. Time is simulated: the result depends on the seed only, never on the machine.
Used by tests/core/test_pacing.py (and bench/bench_pacing.py prints the same designs for comparison).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from medhelm.inference.pacing import DRAIN_EVERY_S, AdaptiveLimit


@dataclass
class Clock:
    t: float = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class ClientResult:
    completions: int = 0
    latencies: list[float] = field(default_factory=list)


def simulate(*, capacity: int, service_s: float = 0.1, clients: int = 1, seconds: float = 60.0,
             measure_from: float = 30.0, fixed: int | None = None, ceiling: int = 256, seed: int = 0,
             batching: float = 0.0, jitter: float = 0.1, stagger_s: float = 0.0, drain_every: float | None = None) -> tuple[list[ClientResult], list[AdaptiveLimit]]:
    """``stagger_s``: client i joins at i x stagger_s (processes never start together). ``batching`` > 0 models a continuous-batching server: each of ``capacity`` workers serves requests
    together and slows by ``batching`` per extra request it holds (vLLM-like); 0 = one request a worker."""
    rng = random.Random(seed)
    clock = Clock()
    drain = (DRAIN_EVERY_S if clients > 1 else 0.0) if drain_every is None else drain_every  # shards drain
    limits = [AdaptiveLimit(ceiling, clock=clock, drain_every=drain) for _ in range(clients)]
    in_flight = [0] * clients
    results = [ClientResult() for _ in range(clients)]
    events: list[tuple[float, int, int, float]] = []  # (finish time, seq, client, sent time)
    queue: list[tuple[int, float]] = []  # waiting at the server: (client, sent time)
    busy = 0
    seq = 0

    def service() -> float:
        return service_s * rng.lognormvariate(0.0, jitter)

    def start_service(client: int, sent: float) -> None:
        nonlocal busy, seq
        busy += 1
        slow = 1.0 + batching * max(0, busy - capacity) / capacity if batching else 1.0
        seq += 1
        heapq.heappush(events, (clock.t + service() * slow, seq, client, sent))

    def fill(client: int) -> None:
        limit = fixed if fixed is not None else limits[client].limit
        while in_flight[client] < limit:
            in_flight[client] += 1
            if batching or busy < capacity:
                start_service(client, clock.t)
            else:
                queue.append((client, clock.t))
        if fixed is None:
            limits[client].note_waiting()  # always more work than slots

    joined = [c * stagger_s <= 0 for c in range(clients)]
    for c in range(clients):
        if joined[c]:
            fill(c)
        else:
            seq += 1
            heapq.heappush(events, (c * stagger_s, seq, -1 - c, 0.0))  # a join event, not a completion
    while events:
        t, _, client, sent = heapq.heappop(events)
        if t > seconds:
            break
        clock.t = t
        if client < 0:
            joined[-1 - client] = True
            fill(-1 - client)
            continue
        busy -= 1
        in_flight[client] -= 1
        if t >= measure_from:
            results[client].completions += 1
            results[client].latencies.append(t - sent)
        if fixed is None:
            limits[client].completed(t - sent)
        if queue and busy < capacity:
            start_service(*queue.pop(0))
        for c in [client] + [c for c in range(clients) if c != client]:
            if joined[c]:
                fill(c)
    return results, limits


def p50(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else 0.0
