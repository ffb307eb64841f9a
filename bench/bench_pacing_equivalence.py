"""The pacing package (``inference/pacing/``) decides exactly as the module it replaced (``inference/pacing.py`` at
``521e40b``, read from git): the same limits, phases and plateaus at the same instants, for the same inputs, with
what was added since on purpose switched off (``climb=False``: slow start's climb while latency stays flat).

Three checks, each comparing the old module's ``AdaptiveLimit`` with the package's, fed the same events:

1. ``sim``: the seeded simulation (tests/core/pacing_sim.py) over many configurations and seeds — solo clients
   against FIFO servers of capacity 4-100 and the three vLLM profiles (with and without ``SWITCH_COST``), shards
   2-8 against 16-128 workers and against vLLM, one shard-mode client with no drains — each run's decision trace
   ``(time, client, limit, phase, plateau)`` and its completions must be equal;
2. ``replay``: random event streams (completions whose latency follows the limit, waits, overloads, a wall clock
   that jumps, a server whose capacity changes) into one old and one new controller, the whole state compared
   after every event (limit, phase, plateau, changes, drains, restarts, base latency) — it reaches the overload
   path the simulation never takes;
3. ``--live``: a real run through ``ClientPool`` against the mock server (``--vllm``: real vLLM, scripts/engines.sh):
   every call the pacer makes on its controller is recorded with the clock's value, then replayed into the old
   module: its decisions must be the ones the package took live.

``--record old`` writes the old module's digests of a small part of checks 1-2 to tests/core/pacing_traces.json,
which tests/core/test_pacing_equivalence.py compares the package against (no git needed there); a change meant to
move decisions re-records them from the package (``--record package``) in the same commit.

``python bench/bench_pacing_equivalence.py [--seeds 6] [--replays 40] [--live] [--vllm] [--record old|package]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import subprocess
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "services"), str(ROOT)]

from medhelm.inference import pacing  # noqa: E402
from tests.core.pacing_sim import SWITCH_COST, VLLM_CPU, VLLM_CPU_FAST, VLLM_CPU_QUIET, Clock  # noqa: E402
from tests.core.pacing_trace import first_difference, record, replay, sim_trace, state  # noqa: E402

OLD_REV = "521e40b"
OLD_PATH = "services/medhelm/inference/pacing.py"
TRACES = ROOT / "tests" / "core" / "pacing_traces.json"
NEW = functools.partial(pacing.AdaptiveLimit, climb=False)  # the package with the rules of 521e40b
PROFILES = {"quiet": VLLM_CPU_QUIET, "loaded": VLLM_CPU, "fast": VLLM_CPU_FAST}


def old_module(rev: str = OLD_REV) -> types.ModuleType:
    """The module as it was at ``rev``, imported under a name of its own (it imports only the standard library)."""
    name = f"_pacing_{rev}"
    if name in sys.modules:
        return sys.modules[name]
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{OLD_PATH}"], check=True, capture_output=True,
                            text=True).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    exec(compile(source, f"{rev}:{OLD_PATH}", "exec"), module.__dict__)
    return module


# -- 1. the simulation ----------------------------------------------------------------------------------------


def configurations(seeds: int) -> list[tuple[str, dict]]:
    """(name, ``simulate`` keywords): every shape the tests and bench_pacing_sim.py simulate, and more seeds."""
    out: list[tuple[str, dict]] = []
    for seed in range(seeds):
        for c in (4, 6, 16, 24, 64, 100):
            out.append((f"solo fifo c={c} seed={seed}", dict(capacity=c, seconds=180, measure_from=120, seed=seed)))
        out.append((f"solo fifo c=64 ceiling=10 seed={seed}", dict(capacity=64, ceiling=10, seed=seed)))
        out.append((f"solo fifo c=16 1s turnaround seed={seed}",
                    dict(capacity=16, service_s=1.0, seconds=420, measure_from=240, turnaround_s=0.01, seed=seed)))
        for prof in PROFILES:
            out.append((f"solo vllm {prof} seed={seed}", dict(batching=PROFILES[prof], seconds=600,
                                                               measure_from=240, seed=seed)))
            out.append((f"solo vllm {prof} switch cost seed={seed}",
                        dict(batching=PROFILES[prof], seconds=600, measure_from=240, seed=seed, **SWITCH_COST)))
        for c, n in ((16, 4), (32, 4), (64, 4), (128, 4), (32, 2), (32, 8), (64, 8)):
            for stagger in (1.0, 2.0, 4.0):
                for jitter in (0.1, 0.01):
                    out.append((f"shards fifo c={c} n={n} stagger={stagger:g} jitter={jitter:g} seed={seed}",
                                dict(capacity=c, clients=n, stagger_s=stagger, service_s=0.2, jitter=jitter,
                                     seconds=120, measure_from=60, seed=seed)))
        out.append((f"shards fifo c=32 n=4 no drains seed={seed}",
                    dict(capacity=32, clients=4, stagger_s=4.0, service_s=0.2, seconds=180, measure_from=120,
                         drain_every=0.0, seed=seed)))
        for c in (8, 32):
            out.append((f"one shard-mode client c={c} seed={seed}",
                        dict(capacity=c, clients=1, drain_every=1e9, service_s=0.2, seconds=180, measure_from=60,
                             jitter=0.05, seed=seed)))
        for prof in PROFILES:
            out.append((f"shards vllm {prof} seed={seed}", dict(batching=PROFILES[prof], clients=4, stagger_s=2.0,
                                                                 seconds=600, measure_from=240, seed=seed)))
    return out


def compare_sim(job: tuple[str, dict]) -> tuple[str, bool, int, str]:
    name, kw = job
    old_trace, old_counts = sim_trace(kw, old_module().AdaptiveLimit)
    new_trace, new_counts = sim_trace(kw, NEW)
    same = old_trace == new_trace and old_counts == new_counts
    detail = "" if same else first_difference(old_trace, new_trace) or f"counts {old_counts} != {new_counts}"
    return name, same, len(new_trace), detail


# -- 2. random event streams ----------------------------------------------------------------------------------


def compare_replay(seed: int) -> tuple[int, bool, int, str]:
    same, n, detail, _ = replay(seed, old_module().AdaptiveLimit, NEW)
    return seed, same, n, detail


# -- 3. a live run, recorded and replayed ---------------------------------------------------------------------


class Recorder:
    """Stands for the pacer's controller: forwards every call to the package's, on a clock frozen for the call,
    and records the call with the clock's value, so the same calls can be replayed into the old module."""

    def __init__(self, inner_factory, ceiling: int, drain_every: float) -> None:
        self._t = [time.monotonic()]
        self._w = [time.time()]
        self.events: list[tuple] = []
        self.ceiling, self.drain_every = ceiling, drain_every
        self.inner = inner_factory(ceiling, clock=lambda: self._t[0], wall=lambda: self._w[0],
                                   drain_every=drain_every)

    def _now(self) -> None:
        self._t[0], self._w[0] = time.monotonic(), time.time()

    def note_waiting(self) -> None:
        self._now()
        self.events.append(("wait", self._t[0], self._w[0], None, state(self.inner)))
        self.inner.note_waiting()

    def completed(self, latency_s: float) -> None:
        self._now()
        self.inner.completed(latency_s)
        self.events.append(("done", self._t[0], self._w[0], latency_s, state(self.inner)))

    def overloaded(self) -> None:
        self._now()
        self.inner.overloaded()
        self.events.append(("overload", self._t[0], self._w[0], None, state(self.inner)))

    def __getattr__(self, name):  # limit, plateau, phase, drains, restarts, ...
        return getattr(self.inner, name)


def replay_recorded(rec: Recorder, make_old) -> tuple[bool, int, str]:
    t, w = Clock(rec.events[0][1] if rec.events else 0.0), Clock(rec.events[0][2] if rec.events else 0.0)
    old = make_old(rec.ceiling, clock=t, wall=w, drain_every=rec.drain_every)
    decisions = 0
    for i, (kind, mono, wall, latency, after) in enumerate(rec.events):
        t.t, w.t = mono, wall
        if kind == "wait":
            if state(old) != after:
                return False, decisions, f"before wait {i}: old {state(old)}, live {after}"
            old.note_waiting()
            continue
        before = state(old)
        old.completed(latency) if kind == "done" else old.overloaded()
        if state(old) != after:
            return False, decisions, f"event {i} ({kind}): old {state(old)}, live {after}"
        decisions += before[:3] != after[:3]
    return True, decisions, ""


def live(args) -> list[str]:
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_pacing

    from medhelm.inference.pacing import gate

    recorders: list[Recorder] = []

    def recording(ceiling, *, clock=time.monotonic, drain_every=0.0, **kw):
        recorders.append(Recorder(NEW, ceiling, drain_every))
        return recorders[-1]

    gate.AdaptiveLimit = recording  # the pacer's controller, recorded (this process only)
    rows = []
    cases = [("vLLM CPU, auto", dict(served="smollm2-135m", max_tokens=16), 1.0, None)] if args.vllm else \
        [(f"mock capacity {c}, auto", {}, 1.0, c) for c in (4, 16, 64)] + \
        [("mock capacity 32, a shard (share 1/4: drains)", {}, 0.25, 32)]
    for label, served, share, capacity in cases:
        recorders.clear()
        if args.vllm:
            with bench_pacing.real_vllm() as url:
                r = asyncio.run(bench_pacing.drive(url, seconds=args.live_s, warmup=5, fixed=None, **served))
        else:
            srv = bench_pacing.Server(latency_s=0.2, capacity=capacity)
            try:
                r = asyncio.run(bench_pacing.drive(srv.url, seconds=args.live_s, warmup=5, fixed=None,
                                                   share=share))
            finally:
                srv.close()
        for rec in recorders:
            same, decisions, detail = replay_recorded(rec, old_module().AdaptiveLimit)
            rows.append(f"| {label}, {args.live_s:g} s | {len(rec.events)} calls, {decisions} decisions, ended at "
                        f"{rec.inner.limit} in flight ({r['pacing']}) | **{'same' if same else 'DIFFERENT'}** "
                        f"{detail} |")
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=6, help="seeds per simulated configuration")
    p.add_argument("--replays", type=int, default=40, help="random event streams")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--live", action="store_true", help="also a real run against the mock server, replayed")
    p.add_argument("--vllm", action="store_true", help="the live run against real vLLM (scripts/engines.sh)")
    p.add_argument("--live-s", type=float, default=90.0)
    p.add_argument("--record", choices=("old", "package"), help="write the digests of the old module (or, after a "
                   "change meant to move decisions, of the package as it is) to " + str(TRACES))
    args = p.parse_args()
    if args.record:
        data = record(old_module().AdaptiveLimit, f"{OLD_REV}:{OLD_PATH}") if args.record == "old" \
            else record(NEW, "inference/pacing/ at the commit that re-recorded this file")
        TRACES.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {TRACES.relative_to(ROOT)}")
        return 0
    started = time.perf_counter()
    jobs = configurations(args.seeds)
    with ProcessPoolExecutor(args.workers) as ex:
        sims = list(ex.map(compare_sim, jobs))
        replays = list(ex.map(compare_replay, range(args.replays)))
    bad = [s for s in sims if not s[1]] + [r for r in replays if not r[1]]
    print(f"| check | runs | decisions or events compared | identical |")
    print("|---|---|---|---|")
    print(f"| simulation, {len(jobs) // args.seeds} configurations x {args.seeds} seeds | {len(sims)} | "
          f"{sum(s[2] for s in sims):,} decisions | **{sum(s[1] for s in sims)} of {len(sims)}** |")
    print(f"| random event streams (states after every event) | {len(replays)} | "
          f"{sum(r[2] for r in replays):,} events | **{sum(r[1] for r in replays)} of {len(replays)}** |")
    for b in bad:
        print(f"DIFFERENT: {b[0]}: {b[3]}")
    if args.live or args.vllm:
        print("| live run | calls recorded | replayed into the old module |\n|---|---|---|")
        rows = live(args)
        print("\n".join(rows))
        bad += [r for r in rows if "DIFFERENT" in r]
    print(f"({time.perf_counter() - started:.0f} s; old module {OLD_REV}:{OLD_PATH})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
