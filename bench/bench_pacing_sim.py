"""The adaptive concurrency controller over many seeds of the simulation (tests/core/pacing_sim.py), against the
best fixed setting of the same seed: what docs/benchmarks.md's "Adaptive concurrency" tables of 48 seeds report.

For each batching profile (``quiet``, ``loaded``: vLLM CPU on the machines of sessions 9-13; ``fast``: session 18's,
twice the rate), with and without ``SWITCH_COST``, and each counting window (seconds ``from-to`` of a run as long as
``to``): auto's throughput over the best of fixed 16 / 32 / 64 (mean, seeds under 0.95 x, the lowest), auto's p50
latency over that setting's (mean, highest), and the limits auto ended on. Time is simulated: the numbers depend on
the seeds and the code only, never on the machine (no quiet machine needed, unlike bench/bench_pacing.py).

``--shards``: a Job's shards instead (``ShardLimit``, drains on the simulated wall clock), three tables: the
benchmark's case (four shards 1, 2 or 4 s apart against 32 workers serving in 0.2 s, service times spread 10 % or
1 %: the mock serves in lockstep), servers of 16-128 workers with 2-8 shards, and four shards against the vLLM
profiles; each against one process at its best (fixed ``capacity``; the best of fixed 16 / 32 / 64 for vLLM).

``--short``: runs of 1,000 instances against servers of 4-128 workers at 50 ms and the vLLM profiles (issue 53 item
4): the time ``auto`` takes to finish over the best of fixed c and 2c (vLLM: of fixed 16 / 32 / 64), as a short run
(``SHORT_START``, jumping to ``JUMP_LIMIT`` at its first answer or ``JUMP_AFTER_S`` in: a run told its size), from 4
(with slow start's climb, and without it: ``climb=False``), and started at c (``start=c``: where a run starts from
the limit the deployment's last run learnt; 64 for vLLM).

``--short-gateway``: the other side of where a short run starts (``SHORT_START``) and when it jumps
(``JUMP_AFTER_S``): a first run told it sends 1,000 requests against a gateway of 600 requests a minute
(tests/core/rate_sim.py; 1 s and 60 s of burst, 5 / 20 / 500 ms, millisecond and whole-second waits; in the network
or 10 ms away each way), started at 16 jumping at its first answer or 10 ms in (as shipped), at 16 jumping at its
first answer only, at 32 and at 64: refusals in its first minute, the most any one request was refused, and the
runs that missed the issue's targets after the first minute (refused over 2 %, or under 95 % of the budget) or
failed an instance.

``python bench/bench_pacing_sim.py [--seeds 48] [--profiles fast quiet loaded] [--windows 240-600 240-1200]
[--no-climb]`` (``--no-climb``: slow start without its climb while latency stays flat, ``climb=False``)
``python bench/bench_pacing_sim.py --shards [--seeds 48]``
``python bench/bench_pacing_sim.py --short [--seeds 48]``
``python bench/bench_pacing_sim.py --short-gateway [--seeds 8]``
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "services"), str(ROOT)]

from medhelm.inference.pacing import SHORT_START, AdaptiveLimit, short_run_limit  # noqa: E402
from tests.core.pacing_sim import (SWITCH_COST, VLLM_CPU, VLLM_CPU_FAST, VLLM_CPU_QUIET, p50,  # noqa: E402
                                   simulate)

PROFILES = {"quiet": VLLM_CPU_QUIET, "loaded": VLLM_CPU, "fast": VLLM_CPU_FAST}
FIXED = (16, 32, 64)


def one_seed(job: tuple[str, bool, int, tuple[tuple[int, int], ...], bool]) -> tuple[str, bool, dict]:
    profile, cost, seed, windows, climb = job
    out = {}
    for start, end in windows:
        kw = dict(batching=PROFILES[profile], seconds=end, measure_from=start, seed=seed)
        fixed = {n: simulate(fixed=n, **kw)[0][0] for n in FIXED}
        best = max(fixed.values(), key=lambda r: r.completions)
        auto, limits = simulate(**kw, **(SWITCH_COST if cost else {}),
                                make_limit=functools.partial(AdaptiveLimit, climb=climb))
        out[(start, end)] = (auto[0].completions / best.completions, p50(auto[0].latencies) / p50(best.latencies),
                             limits[0].limit)
    return profile, cost, out


def one_shard_run(job: tuple) -> tuple:
    """(key, smallest share of the requests, smallest over a fair share, total over one process at its best)."""
    key, kw, best_kw = job
    shards, _ = simulate(**kw)
    counts = [r.completions for r in shards]
    total = sum(counts)
    if "batching" in best_kw:
        best = max(simulate(fixed=n, **best_kw)[0][0].completions for n in FIXED)
    else:
        best = simulate(**best_kw)[0][0].completions
    return key, min(counts) / total, min(counts) / (total / len(counts)), total / best


def shards_main(args) -> int:
    seeds = range(args.seeds)
    bench_case = [((stagger, spread, win), dict(capacity=32, clients=4, stagger_s=stagger, service_s=0.2,
                                                jitter=spread, seconds=win[1], measure_from=win[0], seed=seed),
                   dict(capacity=32, fixed=32, service_s=0.2, jitter=spread, seconds=win[1], measure_from=win[0],
                        seed=seed))
                  for stagger in (1.0, 2.0, 4.0) for spread in (0.1, 0.01)
                  for win in ((60, 120), (120, 180), (180, 300)) for seed in seeds]
    grid = [((c, n, spread), dict(capacity=c, clients=n, stagger_s=2.0, service_s=0.2, jitter=spread, seconds=120,
                                  measure_from=60, seed=seed),
             dict(capacity=c, fixed=c, service_s=0.2, jitter=spread, seconds=120, measure_from=60, seed=seed))
            for c, n in ((16, 4), (32, 4), (64, 4), (128, 4), (32, 2), (32, 8), (64, 8)) for spread in (0.1, 0.01)
            for seed in range(min(24, args.seeds))]
    vllm = [((prof,), dict(batching=PROFILES[prof], clients=4, stagger_s=2.0, seconds=600, measure_from=240,
                           seed=seed),
             dict(batching=PROFILES[prof], seconds=600, measure_from=240))
            for prof in args.profiles for seed in range(min(8, args.seeds))]
    with ProcessPoolExecutor(args.workers) as ex:
        runs = {name: list(ex.map(one_shard_run, jobs)) for name, jobs in
                (("bench", bench_case), ("grid", grid), ("vllm", vllm))}

    def rows(name):
        by = collections.defaultdict(list)
        for key, share, fair, total in runs[name]:
            by[key].append((share, fair, total))
        return by

    print("| shards 1, 2, 4 s apart, 32 workers | counted | runs | runs with a shard under 15 % | smallest share "
          "| total / one process at fixed 32: mean, min |")
    print("|---|---|---|---|---|---|")
    bench = rows("bench")
    for spread in (0.1, 0.01):
        for win in ((60, 120), (120, 180), (180, 300)):
            got = [r for (st, sp, w), v in bench.items() if sp == spread and w == win for r in v]
            print(f"| service times spread {spread:.0%} | {win[0]}–{win[1]} s | {len(got)} "
                  f"| {sum(s < 0.15 for s, _, _ in got)} | {min(s for s, _, _ in got):.1%} "
                  f"| {statistics.fmean(t for _, _, t in got):.3f}, {min(t for _, _, t in got):.3f} |")
    print()
    print("| workers, shards (2 s apart, counted 60–120 s) | service spread | runs | runs with a shard under 0.6 of "
          "a fair share | total / one process at fixed capacity: mean, min |")
    print("|---|---|---|---|---|")
    for (c, n, spread), got in rows("grid").items():
        print(f"| {c}, {n} | {spread:.0%} | {len(got)} | {sum(f < 0.6 for _, f, _ in got)} "
              f"| {statistics.fmean(t for _, _, t in got):.3f}, {min(t for _, _, t in got):.3f} |")
    print()
    print("| four shards 2 s apart against vLLM (counted 240–600 s) | runs | total / one process at the best of "
          "fixed 16 / 32 / 64: mean, min | smallest share |")
    print("|---|---|---|---|")
    for (prof,), got in rows("vllm").items():
        print(f"| {prof} | {len(got)} | {statistics.fmean(t for _, _, t in got):.3f}, {min(t for _, _, t in got):.3f} "
              f"| {min(s for s, _, _ in got):.1%} |")
    return 0


def one_short_run(job: tuple[object, int]) -> tuple[object, float, float, int, float, float, int]:
    server, seed = job
    if isinstance(server, str):  # a vLLM profile: the best of fixed 16 / 32 / 64
        kw, fixed = dict(batching=PROFILES[server], instances=1000, seconds=3600, seed=seed), FIXED
    else:
        kw, fixed = dict(capacity=server, service_s=0.05, instances=1000, seconds=600, seed=seed), (server, 2 * server)
    best = min(simulate(fixed=n, **kw)[0][0].finished for n in fixed)
    climb, limits = simulate(**kw)
    trials, _ = simulate(make_limit=functools.partial(AdaptiveLimit, climb=False), **kw)
    learnt, _ = simulate(make_limit=functools.partial(AdaptiveLimit, start=server if isinstance(server, int)
                                                      else 64), **kw)
    jump, jumped = simulate(make_limit=short_run_limit, **kw)
    return (server, climb[0].finished / best, trials[0].finished / best, limits[0].limit, learnt[0].finished / best,
            jump[0].finished / best, jumped[0].limit)


def short_main(args) -> int:
    servers = (4, 6, 8, 16, 24, 32, 64, 128, "quiet", "loaded", "fast")
    with ProcessPoolExecutor(args.workers) as ex:
        runs = list(ex.map(one_short_run, [(c, seed) for c in servers for seed in range(args.seeds)]))
    print("| server | fixed c: time for 1,000 instances | a short run (`SHORT_START`, jumps to `JUMP_LIMIT`): mean, "
          "max; ended at | from 4 (the run's size not known): mean, max; ended at | without the climb: mean, max "
          "| started at c (the last run's limit): max |")
    print("|---|---|---|---|---|---|")
    for c in servers:
        got = [r for r in runs if r[0] == c]
        if isinstance(c, str):
            name, best = f"vLLM `{c}` (fixed 16 / 32 / 64)", "—"
        else:
            name = f"{c} workers (50 ms)"
            best = f"{simulate(capacity=c, service_s=0.05, instances=1000, seconds=600, fixed=c)[0][0].finished:.2f} s"

        def ends(i: int) -> str:
            return ", ".join(f"{k}: {v}" for k, v in sorted(collections.Counter(r[i] for r in got).items()))

        print(f"| {name} | {best} | {statistics.fmean(r[5] for r in got):.3f}, **{max(r[5] for r in got):.3f}**; "
              f"{ends(6)} | {statistics.fmean(r[1] for r in got):.3f}, {max(r[1] for r in got):.3f}; {ends(3)} "
              f"| {statistics.fmean(r[2] for r in got):.3f}, {max(r[2] for r in got):.3f} "
              f"| {max(r[4] for r in got):.3f} |")
    return 0


def one_gateway_run(job: tuple) -> tuple:
    from medhelm.inference.pacing import gate
    from tests.core.rate_sim import Gateway, measure
    from tests.core.rate_sim import simulate as simulate_rates

    (start, jump_after, net_s, burst_s, latency_s, whole), seed = job[:6], job[6]
    gate.SHORT_START, gate.JUMP_AFTER_S = start, jump_after  # this worker process's own copy of the module
    gateway = Gateway(requests_per_minute=600, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate_rates(gateway, seconds=180, latency_s=latency_s, net_s=net_s, expected=1000, seed=seed)
    m = measure(procs, gateway, t0=60, t1=180)
    return (job[:6], sum(1 for t in procs[0].refused if t < 60), procs[0].most_refused,
            m.failed > 0 or m.refused_share > 0.02 or m.used < 0.95)


def short_gateway_main(args) -> int:
    from medhelm.inference.pacing import JUMP_AFTER_S

    starts = [(SHORT_START, JUMP_AFTER_S), (SHORT_START, None), (32, None), (64, None)]
    cases = [(start, after, net, burst, latency, whole) for net in (0.0, 0.01) for burst in (1.0, 60.0)
             for latency in (0.005, 0.02, 0.5) for whole in (False, True) for start, after in starts]
    with ProcessPoolExecutor(args.workers) as ex:
        runs = list(ex.map(one_gateway_run, [(*case, seed) for case in cases for seed in range(args.seeds)]))
    print("| gateway (600 requests/min) | away (each way) | latency | waits | short run started at | refused in the "
          "first minute: mean, max | most refused (one request) | runs missing a target after it |")
    print("|---|---|---|---|---|---|---|---|")
    for case in cases:
        got = [r for r in runs if r[0] == case]
        start, after, net, burst, latency, whole = case
        how = f"{start}, jump at its first answer" + (f" or after {after * 1000:g} ms (shipped)" if after else "") \
            if start < 64 else f"{start}"
        print(f"| {burst:g} s of burst | {net * 1000:g} ms | {latency * 1000:g} ms | {'whole s' if whole else 'ms'} "
              f"| {how} | {statistics.fmean(r[1] for r in got):.1f}, {max(r[1] for r in got)} "
              f"| {max(r[2] for r in got)} | {sum(r[3] for r in got)} of {len(got)} |")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=48)
    p.add_argument("--profiles", nargs="+", default=["fast", "quiet", "loaded"], choices=sorted(PROFILES))
    p.add_argument("--windows", nargs="+", default=["240-600", "240-1200"], help="counted seconds: from-to")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--shards", action="store_true", help="a Job's shards instead of one process")
    p.add_argument("--short", action="store_true", help="runs of 1,000 instances, with and without the climb")
    p.add_argument("--short-gateway", action="store_true",
                   help="a first short run started at 16, 32 or 64 against a gateway: its first minute's refusals")
    p.add_argument("--no-climb", action="store_true", help="slow start without its climb (climb=False)")
    args = p.parse_args()
    if args.shards:
        return shards_main(args)
    if args.short:
        return short_main(args)
    if args.short_gateway:
        return short_gateway_main(args)
    windows = tuple(tuple(int(x) for x in w.split("-")) for w in args.windows)
    jobs = [(prof, cost, seed, windows, not args.no_climb) for prof in args.profiles for cost in (False, True)
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
