"""The adaptive concurrency controller over many seeds of the simulation (tests/core/pacing_sim.py), against the
best fixed setting of the same seed: what docs/benchmarks.md's "Adaptive concurrency" tables of 48 seeds report.

For each batching profile (``quiet``, ``loaded``: vLLM CPU on the machines of sessions 9-13; ``fast``: session 18's,
twice the rate), with and without ``SWITCH_COST``, and each counting window (seconds ``from-to`` of a run as long as
``to``): auto's throughput over the best of fixed 16 / 32 / 64 (mean, seeds under 0.95 x, the lowest), auto's p50
latency over that setting's (mean, highest), and the limits auto ended on. Time is simulated: the numbers depend on
the seeds and the code only, never on the machine (no quiet machine needed, unlike bench/bench_pacing.py).

``python bench/bench_pacing_sim.py [--seeds 48] [--profiles fast quiet loaded] [--windows 240-600 240-1200]``
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "services"), str(ROOT)]

from tests.core.pacing_sim import (SWITCH_COST, VLLM_CPU, VLLM_CPU_FAST, VLLM_CPU_QUIET, p50,  # noqa: E402
                                   simulate)

PROFILES = {"quiet": VLLM_CPU_QUIET, "loaded": VLLM_CPU, "fast": VLLM_CPU_FAST}
FIXED = (16, 32, 64)


def one_seed(job: tuple[str, bool, int, tuple[tuple[int, int], ...]]) -> tuple[str, bool, dict]:
    profile, cost, seed, windows = job
    out = {}
    for start, end in windows:
        kw = dict(batching=PROFILES[profile], seconds=end, measure_from=start, seed=seed)
        fixed = {n: simulate(fixed=n, **kw)[0][0] for n in FIXED}
        best = max(fixed.values(), key=lambda r: r.completions)
        auto, limits = simulate(**kw, **(SWITCH_COST if cost else {}))
        out[(start, end)] = (auto[0].completions / best.completions, p50(auto[0].latencies) / p50(best.latencies),
                             limits[0].limit)
    return profile, cost, out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=48)
    p.add_argument("--profiles", nargs="+", default=["fast", "quiet", "loaded"], choices=sorted(PROFILES))
    p.add_argument("--windows", nargs="+", default=["240-600", "240-1200"], help="counted seconds: from-to")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    windows = tuple(tuple(int(x) for x in w.split("-")) for w in args.windows)
    jobs = [(prof, cost, seed, windows) for prof in args.profiles for cost in (False, True)
            for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.workers) as ex:
        results = list(ex.map(one_seed, jobs))
    print("| profile | switching cost | counted | throughput / best fixed: mean, seeds < 0.95, min "
          "| p50 / best fixed's: mean, max | ended at (seeds) |")
    print("|---|---|---|---|---|---|")
    for prof in args.profiles:
        for cost in (False, True):
            rows = [r for pr, c, r in results if pr == prof and c == cost]
            for win in windows:
                ratio = [r[win][0] for r in rows]
                lat = [r[win][1] for r in rows]
                ends = collections.Counter(r[win][2] for r in rows)
                print(f"| {prof} | {'SWITCH_COST' if cost else 'none'} | {win[0]}–{win[1]} s "
                      f"| {statistics.fmean(ratio):.3f}, {sum(x < 0.95 for x in ratio)} of {len(ratio)}, "
                      f"{min(ratio):.3f} | {statistics.fmean(lat):.2f}, {max(lat):.2f} "
                      f"| {', '.join(f'{k}: {v}' for k, v in sorted(ends.items()))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
