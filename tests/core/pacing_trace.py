"""Decision traces of ``AdaptiveLimit`` (inference/pacing/), to show that a change of the code changed no decision:
``sim_trace`` (a simulated run's decisions, tests/core/pacing_sim.py), ``replay`` (a random stream of events into two
controllers, their states compared after every event), and the digests of both for a few cases, which
tests/core/test_pacing_equivalence.py compares with the ones recorded in pacing_traces.json from the module the
package replaced (bench/bench_pacing_equivalence.py --record writes them, and compares many more cases)."""

from __future__ import annotations

import hashlib
import random

from tests.core.pacing_sim import SWITCH_COST, VLLM_CPU, VLLM_CPU_FAST, VLLM_CPU_QUIET, Clock, simulate


def sim_trace(kw: dict, make_limit) -> tuple[list[tuple], list[int]]:
    """A simulated run's decisions, and each client's completions, changes, drains and restarts."""
    trace: list[tuple] = []
    results, limits = simulate(make_limit=make_limit, trace=trace, **kw)
    return trace, [r.completions for r in results] + [lim.changes for lim in limits] \
        + [lim.drains for lim in limits] + [lim.restarts for lim in limits]


def digest(items) -> str:
    return hashlib.sha256(repr(list(items)).encode()).hexdigest()[:16]


def first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"decision {i}: old {x}, new {y}"
    return "" if len(a) == len(b) else f"old {len(a)} decisions, new {len(b)}"


def state(lim) -> tuple:
    return (lim.limit, lim.phase, lim.plateau, lim.changes, lim.drains, lim.restarts, lim.base_latency)


def replay(seed: int, make_old, make_new, events: int = 6000) -> tuple[bool, int, str, str]:
    """One random stream into an old and a new controller; (same, events, first difference, digest of states)."""
    rng = random.Random(seed)
    clock, wall = Clock(), Clock(1_000_000.0 + rng.uniform(0, 100))
    drain = rng.choice([0.0, 0.0, 10.0, 10.0, 1e9])
    kw = dict(ceiling=rng.choice([1, 8, 64, 256]), start=rng.choice([1, 4, 16, 32]),
              cruise=rng.choice([2, 8]), latency_tolerance=rng.choice([2.0, 3.0]), clock=clock, wall=wall,
              drain_every=drain)
    ceiling = kw.pop("ceiling")
    old, fresh = make_old(ceiling, **kw), make_new(ceiling, **kw)
    capacity, service = rng.choice([2, 8, 32, 128]), rng.choice([0.05, 0.2, 1.0])
    states = []
    for i in range(events):
        if rng.random() < 0.002:  # the server changes: someone else arrives, or leaves
            capacity = max(1, int(capacity * rng.choice([0.25, 0.5, 2.0, 4.0])))
        if rng.random() < 0.001:  # the wall clock jumps (NTP), or a long pause
            wall.t += rng.choice([-5.0, 30.0, 120.0])
        r = rng.random()
        if r < 0.004:
            for lim in (old, fresh):
                lim.overloaded()
        else:
            if r < 0.7:
                for lim in (old, fresh):
                    lim.note_waiting()
            limit = fresh.limit
            latency = service * max(1.0, limit / capacity) * rng.lognormvariate(0.0, 0.15)
            dt = latency / max(1, min(limit, capacity)) * rng.uniform(0.5, 1.5)
            clock.t += dt
            wall.t += dt
            for lim in (old, fresh):
                lim.completed(latency)
        a, b = state(old), state(fresh)
        if a != b:
            return False, i, f"event {i}: old {a}, new {b}", ""
        states.append(b)
    return True, events, "", digest(states)


RECORDED_SIM = [  # small and quick: what tests/core/test_pacing_equivalence.py re-runs
    ("solo fifo c=16", dict(capacity=16, seconds=60, seed=3)),
    ("solo fifo c=24 probe down", dict(capacity=24, seconds=180, measure_from=120, seed=1)),
    ("solo vllm quiet switch cost", dict(batching=VLLM_CPU_QUIET, seconds=420, measure_from=240, seed=2,
                                         **SWITCH_COST)),
    ("solo vllm fast", dict(batching=VLLM_CPU_FAST, seconds=420, measure_from=240, seed=5)),
    ("solo vllm loaded", dict(batching=VLLM_CPU, seconds=600, measure_from=240, seed=1)),
    ("solo fifo c=64 10 ms turnaround", dict(capacity=64, seconds=90, turnaround_s=0.01, seed=2)),
    ("shards fifo c=64 n=4", dict(capacity=64, clients=4, stagger_s=2.0, service_s=0.2, seconds=90,
                                  measure_from=60, seed=1)),
    ("shards fifo c=32 n=4 lockstep", dict(capacity=32, clients=4, stagger_s=1.0, service_s=0.2, jitter=0.01,
                                           seconds=90, measure_from=60, seed=7)),
    ("one shard-mode client c=8", dict(capacity=8, clients=1, drain_every=1e9, service_s=0.2, seconds=120,
                                       measure_from=60, jitter=0.05, seed=0)),
    ("shards vllm loaded", dict(batching=VLLM_CPU, clients=4, stagger_s=2.0, seconds=240, measure_from=120,
                                seed=4)),
]
RECORDED_REPLAYS = range(12)


def record(make_limit, source: str) -> dict:
    sims = {}
    for name, kw in RECORDED_SIM:
        trace, counts = sim_trace(kw, make_limit)
        sims[name] = {"decisions": len(trace), "counts": counts, "digest": digest(trace)}
    replays = {}
    for seed in RECORDED_REPLAYS:
        same, n, _, dig = replay(seed, make_limit, make_limit)
        replays[str(seed)] = {"events": n, "digest": dig}
    return {"source": source, "simulation": sims, "replay": replays}
