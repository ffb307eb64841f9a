"""Pacing (inference/pacing/): the adaptive controller on a simulated clock and server, rate budgets and the
servers' headers, the gate's guarantees, and the pool/CLI wiring against the real mock server.

The controller's quality is checked in simulation (deterministic: seeded, simulated time), never by timing a
real server; bench/bench_pacing.py measures the same designs against real servers."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import subprocess
import sys
import textwrap

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.errors import ConfigError
from medhelm.inference import ClientPool, PacingPolicy, RequestCache, RetryPolicy, pacing
from medhelm.inference.pacing import (QUIET_DRAINS, RESYNC_DRAINS, AdaptiveLimit, Bucket, PaceSettings, Pacer,
                                      RateHeaders, parse_reset, retry_after_seconds)
from medhelm.inference.pacing import Sample as _Sample, SoloLimit
from medhelm.specs import Deployment, GenerationRequest, Message
from tests.core.pacing_sim import SWITCH_COST, VLLM_CPU, VLLM_CPU_FAST, VLLM_CPU_QUIET, Clock, p50, simulate


# -- the controller, simulated --------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [4, 16, 64])
def test_auto_reaches_the_plateau_of_a_fixed_capacity_server(capacity):
    """>= 95 % of the best fixed concurrency's throughput, p50 <= 1.3 x its p50, measured from 30 s on."""
    best = None
    for n in sorted({1, 2, capacity // 2 or 1, capacity - 1 or 1, capacity, capacity + 1, capacity * 2, 256}):
        res, _ = simulate(capacity=capacity, fixed=n)
        x, lat = res[0].completions, p50(res[0].latencies)
        if best is None or x > best[0] * 1.01:
            best = (x, lat, n)
    auto, limits = simulate(capacity=capacity)
    assert best[2] == capacity  # the sweep's best fixed setting is the server's capacity, as it must be
    assert auto[0].completions >= 0.95 * best[0]
    assert p50(auto[0].latencies) <= 1.3 * best[1]
    assert limits[0].plateau is not None and capacity <= limits[0].plateau <= 2 * capacity


@pytest.mark.parametrize("capacity", [6, 24, 48, 100])
def test_a_capacity_between_powers_of_two_is_found_by_the_probe_down(capacity):
    """Slow start doubles past such a capacity (6 -> 8, 24 -> 32): the same throughput for a third more latency.
    The probe down by a fifth cannot *show* that the larger limit adds less than its ~1 % bar (the gain is nil, its
    standard error ~2 %); an undecided trial takes the better estimate, so the limit comes down near the capacity.
    Counted from 120 s to 180 s (a probe comes every 8 windows)."""
    kw = dict(capacity=capacity, seconds=180, measure_from=120)
    for seed in range(2):
        best, _ = simulate(fixed=capacity, seed=seed, **kw)
        auto, limits = simulate(seed=seed, **kw)
        assert auto[0].completions >= 0.95 * best[0].completions, (capacity, seed)
        assert p50(auto[0].latencies) <= 1.25 * p50(best[0].latencies), (capacity, seed)


def test_auto_never_exceeds_its_ceiling():
    res, limits = simulate(capacity=64, ceiling=10)
    assert limits[0].limit <= 10
    fixed, _ = simulate(capacity=64, fixed=10)
    assert res[0].completions >= 0.95 * fixed[0].completions


def test_four_shards_share_one_server_without_a_coordinator():
    """Four independent controllers against one server of capacity 32: the total matches one process at its
    best, and no shard starves (each >= 15 % of the requests)."""
    for seed in range(3):
        shards, _ = simulate(capacity=32, clients=4, seed=seed)
        one, _ = simulate(capacity=32, fixed=32, seed=seed)
        total = sum(s.completions for s in shards)
        assert total >= 0.95 * one[0].completions
        assert min(s.completions for s in shards) >= 0.15 * total


def test_shards_that_start_apart_converge_to_fair_shares():
    """Pods of a Job start seconds apart: a shard that joins a server already queueing takes that queue for its
    base latency and, without the synchronised drains, starves the shards that came first (measured below: under
    10 % for one of them, of a fair 25 %). With them, every shard gets >= 15 % over the third minute and the total
    stays >= 95 % of one process at its best."""
    one, _ = simulate(capacity=32, fixed=32, service_s=0.2, seconds=180, measure_from=120)
    for stagger in (1.0, 2.0, 4.0):
        for seed in range(2):
            shards, limits = simulate(capacity=32, clients=4, seed=seed, stagger_s=stagger, service_s=0.2,
                                      seconds=180, measure_from=120)
            total = sum(s.completions for s in shards)
            assert total >= 0.95 * one[0].completions, (stagger, seed)
            assert min(s.completions for s in shards) >= 0.15 * total, (stagger, seed)
            assert all(lim.drains >= 3 for lim in limits)
    starved, _ = simulate(capacity=32, clients=4, seed=0, stagger_s=4.0, service_s=0.2, seconds=180,
                          measure_from=120, drain_every=0.0)
    assert min(s.completions for s in starved) < 0.10 * sum(s.completions for s in starved)


def test_shards_judge_the_same_queue_at_a_drain_and_all_take_part():
    """The drains keep shards fair only if they restart together. Each shard judging its own last window (ended at
    its own moment) and shards at 4 in flight or under sitting the drains out split them: some restarted and
    doubled past the others (48 seeds x 3 staggers, counted over the second minute: 10 runs with a shard under 15 %,
    the worst at 2 %). Judged on the requests in flight at the cut as well as the last window, every shard
    draining, and quiet drains on the wall clock's multiples of QUIET_DRAINS periods: none under 15 %."""
    worst, under = 1.0, 0
    for stagger in (1.0, 2.0, 4.0):
        for seed in range(48):
            shards, _ = simulate(capacity=32, clients=4, seed=seed, stagger_s=stagger, service_s=0.2, seconds=120,
                                 measure_from=60)
            share = min(s.completions for s in shards) / sum(s.completions for s in shards)
            worst, under = min(worst, share), under + (share < 0.15)
    assert under <= 2 and worst >= 0.12, (under, worst)


@pytest.mark.parametrize("capacity,clients", [(16, 4), (64, 4), (128, 4), (32, 2), (32, 8)])
def test_shards_stay_fair_at_servers_smaller_and_larger_than_the_benchmarks(capacity, clients):
    """The benchmark's server holds 32 and its Job has 4 shards; a hospital's predictor holds 16 or 256 and its Job
    has 2 or 8. After a restart (or any cut) the requests in flight at the old limit still come back: a window that
    skipped only the new limit's worth counted them, measured 4-6x the true rate at 8 in flight, and the next
    doubling "did not pay", so that shard stopped at 8 while the others doubled on. At 128 workers one shard of four
    then got under 60 % of a fair share in 21-24 runs of 24 (at 64, 9-14). Skipping the old limit's requests, and
    restarting at 8: every shard >= 60 % of a fair share, and the total >= 95 % of one process at its best."""
    one, _ = simulate(capacity=capacity, fixed=capacity, service_s=0.2, seconds=120, measure_from=60)
    for seed in range(3):
        shards, _ = simulate(capacity=capacity, clients=clients, seed=seed, stagger_s=2.0, service_s=0.2,
                             seconds=120, measure_from=60)
        total = sum(s.completions for s in shards)
        assert min(s.completions for s in shards) >= 0.6 * total / clients, (seed, [s.completions for s in shards])
        assert total >= 0.95 * one[0].completions, seed


def test_a_quiet_drain_waits_for_the_next_multiple_of_the_quiet_periods():
    """After a drain that finds no shared queue, the next is at the next multiple of QUIET_DRAINS periods of the
    wall clock, whatever drain this one was (shards that restarted at different drains drain together again), and
    the drain at a multiple of RESYNC_DRAINS periods restarts slow start though it found no queue."""
    clock = Clock(t=0.0)
    wall = Clock(t=1_000_093.0)  # in period 100_009: the first drain is at 100_010, not a multiple of 3
    limit = AdaptiveLimit(64, start=16, clock=clock, wall=wall, drain_every=10.0)
    limit.phase = "cruise"
    drained_at, restarted_at = [], []
    for period in range(100_010, 100_015):
        wall.t = period * 10.0 + 0.5
        before, restarts = limit.drains, limit.restarts
        for _ in range(16 + 8):  # the requests in flight at the cut, then the measured ones: no queue
            clock.t += 0.01
            limit.completed(0.1)
        if limit.drains > before:
            drained_at.append(period)
        if limit.restarts > restarts:
            restarted_at.append(period)
    assert QUIET_DRAINS == 3 and RESYNC_DRAINS == 6
    assert drained_at == [100_010, 100_011, 100_014]  # 3 periods on from the first would be 100_013
    assert restarted_at == [100_014] and limit.phase == "startup"  # 100_014 = 6 x 16_669: in step, queue or not


@pytest.mark.parametrize("capacity", [8, 32])
def test_refused_probes_down_back_off(capacity, monkeypatch):
    """A shard at a server it fills probes up and then down every ``cruise`` windows; each probe down is refused and
    leaves a fifth of its slots empty for a window. After each refused probe down, a refused probe up is followed by
    one only every 2nd, 4th, ... 8th time (PROBE_BACKOFF): one shard-mode client at a server it fills (no drains,
    counted 60-180 s) keeps >= 99 % of fixed capacity's throughput (99.6 % and 99.8 % at 8 and 32); probing down
    every time kept 96.6 % and 98.3 %."""
    def run() -> float:
        res, _ = simulate(capacity=capacity, clients=1, drain_every=1e9, service_s=0.2, seconds=180,
                          measure_from=60, jitter=0.05)
        return res[0].completions / one[0].completions

    one, _ = simulate(capacity=capacity, fixed=capacity, service_s=0.2, seconds=180, measure_from=60, jitter=0.05)
    share = run()
    monkeypatch.setattr(pacing.shards, "PROBE_BACKOFF", 1)  # the constant lives with its controller
    every_time = run()
    assert share >= 0.99 and every_time <= share - 0.01, (share, every_time)


def test_a_kept_probe_ends_the_backoff():
    """Backed off at a limit, a probe up that is kept (the server had room) starts afresh at the new limit."""
    clock = Clock()
    limit = AdaptiveLimit(64, start=8, clock=clock, drain_every=1e9, cruise=2)
    limit.phase, limit._backoff = "cruise", 8
    limit._probe_from = 8
    limit._ref.extend([40.0])
    limit._ref_med.extend([0.2])
    limit._set(11, "probe_up")
    for _ in range(11 + 22):  # the skip, then a window: 11 in flight answered in 0.2 s, 55/s against 40/s
        clock.t += 0.2 / 11
        limit.note_waiting()
        limit.completed(0.2)
    assert limit.limit == 11 and limit.phase == "cruise" and limit._backoff == 1


def test_drains_fall_on_the_shared_wall_clock_and_only_for_shards():
    """Drains start at multiples of the period on the wall clock (every process of a cluster shares it), so
    clients that never talk drain together; a process that is not one of several shards never drains."""
    clock = Clock(t=0.0)
    wall = Clock(t=1_000_003.0)  # 3 s into a 10 s period
    limit = AdaptiveLimit(64, start=32, clock=clock, wall=wall, drain_every=10.0)
    limit.phase = "cruise"
    for _ in range(20):
        clock.t += 0.01
        limit.completed(0.2)
    assert limit.phase == "cruise" and limit.drains == 0  # still inside the first period
    wall.t = 1_000_010.0  # the next multiple of 10 s
    limit.completed(0.2)
    assert limit.phase == "drain" and limit.limit == 16  # half of 32
    for _ in range(32 + 16):  # those in flight at the cut, then the measured ones
        clock.t += 0.01
        limit.completed(0.1)
    assert limit.drains == 1 and limit.base_latency == 0.1 and limit.limit == 32
    solo = Pacer(PaceSettings(adaptive=True, share=1.0))
    shard = Pacer(PaceSettings(adaptive=True, share=0.25))
    assert solo.adaptive._drain_every == 0 and shard.adaptive._drain_every > 0


@pytest.mark.parametrize("profile,floor", [(VLLM_CPU, 0.88), (VLLM_CPU_QUIET, 0.85), (VLLM_CPU_FAST, 0.90)],
                         ids=["loaded", "quiet", "fast"])
def test_shards_against_a_batching_server_stay_fair_and_keep_more_of_it(profile, floor):
    """Four shards 2 s apart against one vLLM (the simulation's three CPU profiles), counted 240-600 s, against one
    process at the best of fixed 16 / 32 / 64. Every drain there finds the latency before it well over the drained
    one (a batching server's latency grows with what it holds), so every shard restarts at every drain, in step:
    fair (the smallest share 24 %), and what a drain costs is what they lose. Quartering the limits at a drain
    left a quarter of the load, half of vLLM's rate: 0.76 / 0.61 / 0.77 x (8 seeds each); halving: 0.83 / 0.73 /
    0.81 x; and restarting at 8 with the old limit's requests skipped: 0.91 / 0.88 / 0.93 x. (Letting slow start
    run through the drains got 0.91-0.93 x here but a shard 10.5 % on real vLLM: the shards' drained bases diverged
    and they restarted at different drains.)"""
    best = max(simulate(batching=profile, fixed=k, seconds=600, measure_from=240)[0][0].completions
               for k in (16, 32, 64))
    totals, shares = [], []
    for seed in range(8):
        shards, _ = simulate(batching=profile, clients=4, seed=seed, stagger_s=2.0, seconds=600, measure_from=240)
        total = sum(s.completions for s in shards)
        totals.append(total / best)
        shares.append(min(s.completions for s in shards) / total)
    assert sum(totals) / len(totals) >= floor, totals
    assert min(shares) >= 0.22, shares


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("profile", [VLLM_CPU, VLLM_CPU_QUIET], ids=["loaded", "quiet"])
def test_auto_reaches_095_of_the_best_fixed_setting_on_a_batching_server(profile, seed):
    """vLLM on CPU (the simulation's ``VLLM_CPU``, calibrated on the real server at load ~9: the machine's load moves
    its speed by ~15 %; throughput grows with the batch up to 64 but less with each doubling, +87 % from 4 to 16,
    +6 % from 16 to 64; and ``VLLM_CPU_QUIET``, the same server on a quiet machine: +21 % from 16 to 64, of which
    only ~3 % from 32 to 64, the bar there). Counted from 240 s to 420 s (the first part of what bench/bench_pacing.py
    --vllm counts on the real one), auto gets >= 95 % of the best fixed setting: it climbed while the gains were
    real (to 16 in flight at least)."""
    kw = dict(batching=profile, seconds=420, measure_from=240, seed=seed)
    fixed = {n: simulate(fixed=n, **kw)[0][0].completions for n in (4, 16, 32, 64)}
    assert fixed[16] > 1.7 * fixed[4] and fixed[64] > 1.04 * fixed[16]  # the calibrated curve: a batching server
    auto, limits = simulate(**kw)
    assert auto[0].completions >= 0.95 * max(fixed.values()), (seed, fixed, auto[0].completions)
    assert limits[0].limit >= 16


def test_an_undecided_trial_switches_seldom_where_switching_costs():
    """On the quiet profile the trial between 32 and 64 rarely decides (a ~3 % gain, the bar), and on the real
    server each change of the number in flight costs throughput (``SWITCH_COST``). Counted from 240 s to 600 s (what
    bench/bench_pacing.py --vllm counts), over 12 seeds auto gets 0.96 x the best fixed setting on average and under
    0.95 x at one seed at most (its 32-round windows while a trial alternates: 0.970 and 1, 0.948); an A B A B of
    8-round windows got 0.944 on average and 7 seeds under 0.95 here, as the real runs that alternated did."""
    ratios, changes = [], []
    for seed in range(12):
        kw = dict(batching=VLLM_CPU_QUIET, seconds=600, measure_from=240, seed=seed)
        best = max(simulate(fixed=n, **kw)[0][0].completions for n in (16, 32, 64))
        auto, limits = simulate(**kw, **SWITCH_COST)
        ratios.append(auto[0].completions / best)
        changes.append(limits[0].changes)
    assert sum(ratios) / len(ratios) >= 0.96 and sum(r < 0.95 for r in ratios) <= 1, [round(r, 3) for r in ratios]
    assert max(changes) <= 10, changes  # slow start's doublings and a trial's few long windows


def test_a_doubling_above_the_servers_batch_is_left_early():
    """vLLM as session 18's machine served it (``VLLM_CPU_FAST``: 15/s at 64 in flight, rounds half as long, so a
    600 s run reaches 64 -> 128, where the batch holds 64 and a doubling gains nothing but twice the latency). Past the
    knee slow start stops once a long window at the lower limit leaves the gain under the bar, and climbs only on
    the two limits measured in turn. Over 12 seeds counted 240-600 s: auto's p50 is 0.84 x the best fixed setting's
    on average (the rule before: 1.23 x, ending at 128 on 7 seeds; a single window at 128 against a pooled one at
    64 even "paid" +5.7 % +- 2.1 %), and its throughput 0.988 x (before: 0.991 x), every seed over 0.95 x."""
    ratios, latency, ends = [], [], []
    for seed in range(12):
        kw = dict(batching=VLLM_CPU_FAST, seconds=600, measure_from=240, seed=seed)
        fixed = {n: simulate(fixed=n, **kw)[0][0] for n in (16, 32, 64)}
        best = max(fixed.values(), key=lambda r: r.completions)
        auto, limits = simulate(**kw)
        ratios.append(auto[0].completions / best.completions)
        latency.append(p50(auto[0].latencies) / p50(best.latencies))
        ends.append(limits[0].limit)
    assert min(ratios) >= 0.95 and sum(ratios) / len(ratios) >= 0.98, [round(r, 3) for r in ratios]
    assert sum(latency) / len(latency) <= 1.0, ([round(x, 2) for x in latency], ends)
    assert sum(limit > 64 for limit in ends) <= 2, ends

def test_a_pure_queue_with_the_same_latency_stops_at_its_capacity():
    """The same latencies as the batching server (a second a request) from a server of 16 workers and a queue:
    past 16, more in flight only queues. Auto stops at 16 and keeps the latency of 16 in flight."""
    kw = dict(capacity=16, service_s=1.0, seconds=420, measure_from=240)
    best, _ = simulate(fixed=16, **kw)
    auto, limits = simulate(**kw)
    assert limits[0].plateau == 16 and limits[0].limit <= 20
    assert auto[0].completions >= 0.95 * best[0].completions
    assert p50(auto[0].latencies) <= 1.3 * p50(best[0].latencies)


@pytest.mark.parametrize("capacity", [4, 16, 64])
def test_a_queue_that_hides_the_clients_hiccups_is_no_reason_to_double(capacity):
    """A loaded client sends its next request ~10 ms after a slot frees: at the server's capacity a worker idles
    meanwhile, with a queue it does not, so twice the capacity in flight wins ~5 % for twice the latency (the real
    mock of capacity 64 showed it on a loaded machine). That is a pure queue's knee, not a batching server: slow
    start stops at the capacity (a probe up by sqrt(capacity) may pay), within 5 % of the best fixed throughput,
    at the capacity's latency."""
    kw = dict(capacity=capacity, service_s=0.2, turnaround_s=0.01)
    at_capacity, _ = simulate(fixed=capacity, **kw)
    queued, _ = simulate(fixed=2 * capacity, **kw)
    assert queued[0].completions > 1.03 * at_capacity[0].completions  # the few per cent a queue wins
    auto, limits = simulate(**kw)
    assert capacity <= limits[0].plateau <= capacity + capacity ** 0.5  # slow start stopped; a probe may add sqrt
    assert auto[0].completions >= 0.95 * queued[0].completions
    assert p50(auto[0].latencies) <= 1.3 * p50(at_capacity[0].latencies)


def test_a_ceiling_holds_on_a_batching_server():
    auto, limits = simulate(batching=VLLM_CPU, seconds=420, measure_from=240, ceiling=24)
    assert limits[0].limit <= 24 and max(limits[0]._lo.limit, limits[0]._hi.limit) <= 24


@pytest.mark.parametrize("capacity", [4, 8, 16])
def test_a_short_run_does_not_pay_for_the_climb(capacity):
    """1,000 instances against a server of 4-16 workers at 50 ms (issue 53 item 4): a few seconds, most of which the
    trials' windows of 8 rounds spent climbing (at 16 workers 1.19 x the best fixed setting's time). Slow start
    judged by Little's law while latency stays flat (a round a side) ends within 1.05 x of the best fixed
    setting, at every seed; without the climb (``climb=False``) the same runs take longer. The knee is left to
    the trial, as before: a doubling whose latency grew ends the climb."""
    for seed in range(3):
        kw = dict(capacity=capacity, service_s=0.05, instances=1000, seconds=120, seed=seed)
        best = min(simulate(fixed=n, **kw)[0][0].finished for n in (capacity, 2 * capacity))
        auto, limits = simulate(**kw)
        slow, _ = simulate(make_limit=functools.partial(AdaptiveLimit, climb=False), **kw)
        assert auto[0].finished <= 1.05 * best, (seed, auto[0].finished / best)
        assert auto[0].finished < slow[0].finished or capacity == 4, seed
        assert capacity <= limits[0].limit <= 2 * capacity


@pytest.mark.parametrize("capacity", [32, 64])
def test_the_climb_halves_what_a_short_run_pays_at_larger_servers(capacity):
    """At 32-64 workers a 1,000-instance run is over in 16-31 latencies, fewer than a climb from 4 and the trial at
    the knee take: within 1.05 x needs a start from what the last run learnt, or a short run's jump (tests below).
    The climb still cuts what a run not told its size pays (1.63 -> 1.14 x at 32, 2.76 -> 1.38 x at 64)."""
    kw = dict(capacity=capacity, service_s=0.05, instances=1000, seconds=120, seed=0)
    best = min(simulate(fixed=n, **kw)[0][0].finished for n in (capacity, 2 * capacity))
    auto, limits = simulate(**kw)
    slow, _ = simulate(make_limit=functools.partial(AdaptiveLimit, climb=False), **kw)
    assert auto[0].finished <= 1.45 * best and auto[0].finished <= 0.75 * slow[0].finished
    assert capacity <= limits[0].limit <= 2 * capacity


@pytest.mark.parametrize("capacity", [4, 16, 24, 32, 64])
def test_a_run_that_starts_where_the_last_one_ended_pays_nothing(capacity):
    """The other half of issue 53 item 4: started at the limit the deployment's last run learnt (its capacity), a
    1,000-instance run is within 1.02 x of the best fixed setting at every server size, the climb going at most one
    doubling past it (a pure queue's latency doubles there: the trial takes over)."""
    for seed in range(2):
        kw = dict(capacity=capacity, service_s=0.05, instances=1000, seconds=120, seed=seed)
        best = min(simulate(fixed=n, **kw)[0][0].finished for n in (capacity, 2 * capacity))
        auto, limits = simulate(make_limit=functools.partial(AdaptiveLimit, start=capacity), **kw)
        assert auto[0].finished <= 1.02 * best, (seed, auto[0].finished / best)
        assert capacity <= limits[0].limit <= 2 * capacity


@pytest.mark.parametrize("capacity", [4, 8, 16, 24, 32, 64])
def test_a_short_first_run_jumps_and_pays_at_most_5_percent(capacity):
    """Issue 53 item 4 for a deployment's first run: a process that sends it at most ``SHORT_RUN`` requests starts at
    ``SHORT_START`` (16) and climbs from ``JUMP_LIMIT`` (64) once its first answer is back. A 1,000-instance run is
    within 1.05 x of the best fixed setting at 4-64 workers (from 4 it paid up to 1.38 x at 64)."""
    for seed in range(2):
        kw = dict(capacity=capacity, service_s=0.05, instances=1000, seconds=120, seed=seed)
        best = min(simulate(fixed=n, **kw)[0][0].finished for n in (capacity, 2 * capacity))
        short, limits = simulate(make_limit=pacing.short_run_limit, **kw)
        assert short[0].finished <= 1.05 * best, (seed, short[0].finished / best)
        assert limits[0].jumped


@pytest.mark.parametrize("profile", [VLLM_CPU_QUIET, VLLM_CPU, VLLM_CPU_FAST], ids=["quiet", "loaded", "fast"])
def test_a_short_run_that_jumps_pays_nothing_on_a_batching_server(profile):
    """The simulated vLLM CPU profiles: a 1,000-request run that jumps is within 1.01 x of the best of fixed 16 / 32
    / 64 (from 4 it paid 1.13-1.35 x: vLLM's latency grows from its first doublings, so the climb ends early and
    the trials take the rest of such a run)."""
    for seed in range(2):
        kw = dict(batching=profile, instances=1000, seconds=3600, seed=seed)
        best = min(simulate(fixed=n, **kw)[0][0].finished for n in (16, 32, 64))
        short, _ = simulate(make_limit=pacing.short_run_limit, **kw)
        assert short[0].finished <= 1.01 * best, (seed, short[0].finished / best)


def test_a_short_run_jumps_at_its_first_answer_or_10_ms_in_unless_refused_first_and_a_long_one_climbs_from_4():
    policy = PacingPolicy(adaptive=True, ceiling=256, expected=(("gw/short", 1000), ("gw/long", 5000),
                                                                ("gw/learnt", 10)), starts=(("gw/learnt", 24),))

    def pacer(name, **kw):
        return Pacer(dataclasses.replace(policy, **kw).settings(fixed=None, rate_limits={}, local=False,
                                                                 deployment=name), clock=Clock())

    short = pacer("gw/short")
    assert (short.start, short.limit, short.adaptive.jump) == (pacing.SHORT_START, 16, 64)
    short.release(short.try_acquire(), ok=True)  # the first answer
    assert short.limit == 64 and "started at 16 (a short run: at most 1000 requests; jumped to 64 at its first " \
        "answer)" in short.summary()
    timed = pacer("gw/short")  # nothing back 10 ms after its first request: it jumps then
    sent = [timed.try_acquire() for _ in range(16)]
    assert timed.try_acquire() is None and timed.blocked_for() == pytest.approx(pacing.JUMP_AFTER_S)
    timed._clock.t += pacing.JUMP_AFTER_S / 2
    assert timed.blocked_for() == pytest.approx(pacing.JUMP_AFTER_S / 2) and timed.limit == 16
    timed._clock.t += pacing.JUMP_AFTER_S / 2
    assert timed.blocked_for() == 0.0 and timed.limit == 64 and timed.try_acquire() is not None
    assert "jumped to 64 after 10 ms with no refusal)" in timed.summary()
    for started in sent:  # the 16 sent before the jump are let pass, as after any doubling
        timed.release(started, ok=True)
    assert timed.limit == 64 and timed.adaptive._window.count == 0
    late = pacer("gw/short")  # a refusal inside the 10 ms: no jump, then or later
    sent = [late.try_acquire() for _ in range(16)]
    late._clock.t += pacing.JUMP_AFTER_S / 2
    late.release(sent.pop(), ok=False, overloaded=True, retry_after=0.0)
    late._clock.t += 10.0
    assert late.adaptive.limit == 16 and late.adaptive.jump_wait() is None and not late.adaptive.jumped
    refused = pacer("gw/short")
    refused.release(refused.try_acquire(), ok=False, overloaded=True, retry_after=0.0)  # a 429 before any answer
    refused._clock.t += 10.0  # the learnt rate's wait
    refused.release(refused.try_acquire(), ok=True)
    assert refused.adaptive.limit == 16 and "no jump: refused before its first answer" in refused.summary()
    assert (pacer("gw/long").start, pacer("gw/other").start) == (4, 4)  # over SHORT_RUN, or not known: the climb
    assert pacer("gw/learnt").start == 24 and pacer("gw/learnt").adaptive.jump is None  # what was learnt wins
    assert pacer("gw/short", share=0.5).start == 4  # a Job's shard climbs with the others
    assert pacer("gw/short", ceiling=8).limit == 8 and pacer("gw/short", ceiling=8).adaptive.jump is None
    fixed = Pacer(policy.settings(fixed=3, rate_limits={}, local=False, deployment="gw/short"))
    assert fixed.start is None and fixed.limit == 3


def test_a_short_run_keeps_no_limit_it_did_not_measure():
    """Where a short run was put (16, then 64) is not what it learnt: nothing is kept while it stays there; a limit
    its trials moved it to is."""
    kept = []
    pacer = Pacer(PaceSettings(adaptive=True, expected=100), clock=Clock(), on_settled=kept.append)
    pacer.release(pacer.try_acquire(), ok=True)  # jumps to 64
    pacer.adaptive._cut(64)  # cruising at the jump
    pacer._report()
    assert pacer.settled is None and kept == []
    pacer.adaptive._cut(32)  # an overload halved it: measured
    pacer._report()
    assert pacer.settled == 32 and kept == [32]
    long = Pacer(PaceSettings(adaptive=True, expected=100_000), clock=Clock(), on_settled=kept.append)
    long.adaptive._cut(4)
    long._report()
    assert kept == [32, 4]  # a run that climbed from 4 keeps where it cruises, as before


def test_the_policy_starts_a_deployment_where_its_last_run_ended():
    policy = PacingPolicy(adaptive=True, ceiling=64, starts=(("gw/a", 24), ("gw/b", 500)))
    a = Pacer(policy.settings(fixed=None, rate_limits={}, local=False, deployment="gw/a"))
    b = Pacer(policy.settings(fixed=None, rate_limits={}, local=False, deployment="gw/b"))
    c = Pacer(policy.settings(fixed=None, rate_limits={}, local=False, deployment="gw/c"))
    fixed = Pacer(policy.settings(fixed=3, rate_limits={}, local=False, deployment="gw/a"))
    assert (a.limit, b.limit, c.limit, fixed.limit) == (24, 64, 4, 3)  # b: never over the ceiling


@pytest.mark.parametrize("capacity", [8, 24, 64])
def test_a_short_first_run_teaches_its_second_to_pay_nothing(capacity):
    """A 1,000-instance run at 24-64 workers ends before ``auto`` first cruises; what it learnt is then the highest
    limit its climb showed free (``Limit.proven``: a doubling at a flat latency), as the pacer keeps it
    (``Pacer.settled``). The second run, started there, is within 1.01 x of the best fixed setting."""
    for seed in range(2):
        kw = dict(capacity=capacity, service_s=0.05, instances=1000, seconds=120, seed=seed)
        best = min(simulate(fixed=n, **kw)[0][0].finished for n in (capacity, 2 * capacity))
        trace = []
        _, limits = simulate(trace=trace, **kw)
        cruised = [limit for _, _, limit, phase, _ in trace if phase == "cruise"]
        learnt = cruised[-1] if cruised else limits[0].proven
        assert capacity <= learnt <= 2 * capacity, (seed, learnt)
        second, _ = simulate(make_limit=functools.partial(AdaptiveLimit, start=learnt), **kw)
        assert second[0].finished <= 1.01 * best, (seed, second[0].finished / best)


def test_a_remembered_limit_over_a_server_that_is_now_smaller_comes_down_and_no_instance_fails():
    """Issue 53 item 4: the last run learnt 64, the server now has 8 workers and a queue of 8 and refuses (429) a
    request past them. The controller's cut rule (halve on an overload) brings the limit down within the first
    latencies; every instance is answered, none refused as often as the pool's retries allow (it would fail), and
    the run takes no longer than at the best fixed setting."""
    attempts = RetryPolicy().max_attempts
    for seed in range(3):
        kw = dict(capacity=8, service_s=0.05, instances=1000, seconds=120, seed=seed, refuse_over=16, measure_from=0)
        best = min(simulate(fixed=n, **kw)[0][0].finished for n in (8, 16))
        trace = []
        res, limits = simulate(make_limit=functools.partial(AdaptiveLimit, start=64), trace=trace, **kw)
        run = res[0]
        assert run.finished is not None and run.completions == 1000, seed  # every instance answered
        assert 0 < run.refused and run.most_refused < attempts, (seed, run.most_refused)
        assert limits[0].limit <= 16, seed
        first_low = next(t for t, _, limit, *_ in trace if limit <= 16)
        assert first_low < 10 * 0.05, (seed, first_low)  # within ten service times
        assert run.finished <= 1.05 * best, (seed, run.finished / best)


def test_the_pool_keeps_auto_s_limit_beside_the_cache_per_deployment_endpoint_and_setting(tmp_path):
    """The pool reads the remembered limit when it makes the deployment's pacer and writes each limit it settles
    at; a fixed cap, a Job's shard and a pool without a cache (``--disable-cache``) neither read nor write it."""
    path = tmp_path / "cache" / "requests.sqlite"
    url = "http://127.0.0.1:9/v1"
    cache = RequestCache(path)
    cache.remember_limit(("gw/a", url, "auto"), 24)
    cache.remember_limit(("gw/a", "http://elsewhere/v1", "auto"), 48)
    cache.close()

    def pacer(cache, policy, **kw):
        pool = ClientPool(cache=cache, pacing=policy)
        dep = Deployment(name="gw/a", model_name="gw/a", kind="openai", base_url=url, served_model_name="m", **kw)
        return pool.pacer(pool.get(dep)._raw)

    auto = PacingPolicy(adaptive=True, ceiling=256)
    assert pacer(RequestCache(path), auto).start == 24  # this endpoint's, not the other's
    assert pacer(RequestCache(path), PacingPolicy(adaptive=True, ceiling=16)).start == 16  # never over the ceiling
    assert pacer(None, auto).start == 4  # no cache: the default start
    assert pacer(RequestCache(path), PacingPolicy(adaptive=True, ceiling=256, share=0.25)).start == 4  # a shard
    fixed = pacer(RequestCache(path), auto, max_concurrency=3)
    assert fixed.start is None and fixed.limit == 3 and fixed._on_settled is None  # a fixed cap learns nothing
    secret = RequestCache(path)
    pool = ClientPool(cache=secret, pacing=auto)
    keyed = pool.pacer(pool.get(Deployment(name="gw/k", model_name="gw/k", kind="openai", served_model_name="m",
                                           base_url="https://user:s3cret@gw.example/v1?key=s3cret#x"))._raw)
    keyed._on_settled(8)
    secret.flush()
    rows = secret._reader.execute("SELECT * FROM pacing_limits").fetchall()
    assert ("gw/k", "https://gw.example/v1", "auto", 8) in [r[:4] for r in rows]
    assert "s3cret" not in repr(rows)  # a credential in the URL is never written to the cache file
    forget = RequestCache(path)
    forget._reader.execute("DELETE FROM pacing_limits")  # how docs/pacing.md says to forget them
    assert pacer(forget, auto).start == 4


def test_an_older_cache_file_gets_the_limits_table_and_keeps_its_completions(tmp_path):
    import sqlite3

    path = tmp_path / "requests.sqlite"
    with sqlite3.connect(path) as conn:  # a cache file written before the table existed
        conn.execute("CREATE TABLE completions (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)")
        conn.execute("INSERT INTO completions VALUES ('k', '{}', 0)")
    cache = RequestCache(path)
    assert cache.learnt_limit(("d", "u", "auto")) is None
    cache.remember_limit(("d", "u", "auto"), 12)
    assert cache.learnt_limit(("d", "u", "auto")) == 12  # queued: already visible
    cache.close()
    again = RequestCache(path)
    assert again.learnt_limit(("d", "u", "auto")) == 12 and again.learnt_limit(("d", "u", "fixed")) is None
    assert again._reader.execute("SELECT key FROM completions").fetchall() == [("k",)]


def _rounds(limit, rate, spread, n=16, seed=0):
    """A sample of ``n`` rounds at ``limit`` whose throughput is ``rate`` a second, each round's length drawn with
    a relative spread."""
    import random

    rng = random.Random(seed)
    sample = _Sample(limit)
    sample.durations = [limit / rate * (1 + spread * rng.gauss(0, 1)) for _ in range(n)]
    sample.latencies = [limit / rate] * n
    return sample


def test_more_in_flight_pays_only_when_the_gain_is_shown():
    """The verdict on a doubling that must bring 3 %: a gain shown (beyond two standard errors, and at least 3 %)
    pays; a gain shown to fall short of 3 % (a pure queue: none) does not; rounds too noisy to tell ask for more."""
    assert SoloLimit._pays(_rounds(16, 6.0, 0.02), _rounds(32, 6.6, 0.02, seed=1), 0.03) is True  # +10 %
    assert SoloLimit._pays(_rounds(16, 6.0, 0.02), _rounds(32, 6.0, 0.02, seed=1), 0.03) is False  # +0 %
    assert SoloLimit._pays(_rounds(16, 6.0, 0.2), _rounds(32, 6.6, 0.2, seed=1), 0.03) is None  # se ~7 %
    assert SoloLimit._pays(_rounds(16, 6.0, 0.2, n=400), _rounds(32, 6.6, 0.2, n=400, seed=1), 0.03) is True
    # right after a doubling that paid in proportion the bar is 15 %: +10 %, however sure, does not pay
    assert SoloLimit._pays(_rounds(64, 300, 0.02), _rounds(128, 330, 0.02, seed=1), 0.15) is False


def test_a_drift_within_a_window_widens_its_uncertainty():
    """Rounds that drift (the machine's load changing slowly) are fewer independent measurements than rounds:
    the same spread in order gives a wider standard error than shuffled."""
    drifting = _Sample(8)
    drifting.durations = [1.0 + 0.01 * i for i in range(32)]
    shuffled = _Sample(8)
    shuffled.durations = [1.0 + 0.01 * ((i * 13) % 32) for i in range(32)]
    assert drifting.rel_se() > 2 * shuffled.rel_se()


def test_overload_halves_once_per_latency():
    clock = Clock()
    limit = AdaptiveLimit(64, start=32, clock=clock)
    limit.overloaded()
    assert limit.limit == 16
    limit.overloaded()  # the same burst of 429s: not halved again at once
    assert limit.limit == 16
    clock.t += 1.0
    limit.overloaded()
    assert limit.limit == 8
    assert limit.phase == "cruise"


def test_a_window_without_waiting_changes_nothing():
    """Demand below the limit teaches nothing about the limit: it stays."""
    clock = Clock()
    limit = AdaptiveLimit(64, clock=clock)
    for i in range(200):
        clock.t += 0.01
        limit.completed(0.1)
    assert limit.limit == 4 and limit.changes == 0


# -- budgets and headers ----------------------------------------------------------------------------------------


def test_bucket_refills_continuously_and_caps_at_its_burst():
    b = Bucket(60, now=0.0)  # 1 a second, a burst of 1
    assert b.wait_for(1, 0.0) == 0.0
    b.take(1, 0.0)
    assert b.wait_for(1, 0.0) == pytest.approx(1.0)
    assert b.wait_for(1, 0.5) == pytest.approx(0.5)
    assert b.wait_for(1, 10.0) == 0.0 and b.level == 1.0  # never more than the burst
    b.cap(0.25, 10.0)
    assert b.level == 0.25


@pytest.mark.parametrize("value,seconds", [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5),
                                           ("7", 7.0), ("0.5", 0.5), ("nonsense", None), ("", None)])
def test_reset_durations_as_providers_spell_them(value, seconds):
    assert parse_reset(value) == (pytest.approx(seconds) if seconds is not None else None)


def test_reset_as_a_timestamp():
    assert parse_reset("2026-01-01T00:00:30Z", now_epoch=1767225600.0) == pytest.approx(30.0)
    assert parse_reset("Thu, 01 Jan 2026 00:01:00 GMT", now_epoch=1767225600.0) == pytest.approx(60.0)


def test_rate_headers_of_openai_and_anthropic():
    openai = RateHeaders.parse({"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "599",
                                "x-ratelimit-limit-tokens": "150000", "x-ratelimit-remaining-tokens": "149000"})
    assert openai == RateHeaders(600, 599, 150000, 149000)
    anthropic = RateHeaders.parse({"anthropic-ratelimit-requests-limit": "50",
                                   "anthropic-ratelimit-requests-remaining": "0",
                                   "anthropic-ratelimit-tokens-limit": "40000",
                                   "anthropic-ratelimit-tokens-remaining": "39000"})
    assert anthropic == RateHeaders(50, 0, 40000, 39000)
    assert RateHeaders.parse({"x-ratelimit-remaining-requests": "-3", "server": "x"}) is None  # odd: ignored
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == pytest.approx(0.25)
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None


# -- the gate ---------------------------------------------------------------------------------------------------


def test_a_fixed_number_is_a_hard_ceiling_and_first_come_first_served():
    async def main():
        pacer = Pacer(PaceSettings(fixed=3))
        peak, order = 0, []

        async def one(i):
            nonlocal peak
            started = await pacer.acquire()
            order.append(i)
            peak = max(peak, pacer.in_flight)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            pacer.release(started, ok=True)

        await asyncio.gather(*(one(i) for i in range(20)))
        return peak, order, pacer.in_flight

    peak, order, left = asyncio.run(main())
    assert peak == 3 and left == 0
    assert order == list(range(20))


def test_a_cancelled_waiter_takes_nothing():
    async def main():
        pacer = Pacer(PaceSettings(fixed=1))
        held = await pacer.acquire()
        waiter = asyncio.ensure_future(pacer.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        pacer.release(held, ok=True)
        again = await asyncio.wait_for(pacer.acquire(), timeout=30)  # the slot came back: no leak
        pacer.release(again, ok=True)
        return pacer.in_flight

    assert asyncio.run(main()) == 0


def test_overload_pauses_the_deployment_for_retry_after():
    clock = Clock()
    pacer = Pacer(PaceSettings(adaptive=True, ceiling=64), clock=clock)
    pacer.in_flight = 1
    pacer.release(0.0, ok=False, overloaded=True, retry_after=2.0)
    assert pacer.rate_limited == 1
    assert pacer._blocked_for(0) == pytest.approx(2.0)
    clock.t = 2.5
    assert pacer._blocked_for(0) == 0.0


def test_header_budget_is_learnt_and_followed():
    clock = Clock()
    pacer = Pacer(PaceSettings(), clock=clock)
    pacer.in_flight = 1
    pacer.observe_headers({"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "0"})
    pacer.release(0.0, ok=True)
    assert pacer._blocked_for(0) == pytest.approx(0.5)  # nothing left: the next request at 2 a second
    clock.t = 0.5
    assert pacer._blocked_for(0) == 0.0


def test_configured_budget_split_among_shards():
    clock = Clock()
    pacer = Pacer(PaceSettings(requests_per_minute=600, share=0.25), clock=clock)
    assert "150 requests/min" in pacer.summary()


# -- the pool and the CLI against the real mock server ----------------------------------------------------------


def _deployment(url, **kw):
    return Deployment(name="mock/paced", model_name="mock/model", kind="openai", base_url=url,
                      served_model_name="mock-model", **kw)


def test_judge_and_candidate_share_one_pacer_and_its_limit():
    with MockOpenAIServer(latency_s=0.01, capacity=2) as srv:
        async def main():
            pool = ClientPool(connections=64, pacing=PacingPolicy(adaptive=False, ceiling=64))
            dep = _deployment(srv.base_url, max_concurrency=2)
            cand, judge = pool.get(dep), pool.get(dep, role="judge")
            reqs = [GenerationRequest(messages=(Message("user", f"q {i}"),), max_tokens=4) for i in range(24)]
            await asyncio.gather(*(c.generate(r) for c, r in zip([cand, judge] * 12, reqs)))
            pacers = pool.pacers()
            await pool.aclose()
            return pacers

        pacers = asyncio.run(main())
        assert list(pacers) == ["mock/paced"]  # one pacer for both roles
        assert srv.max_in_flight <= 2


def test_gateway_429s_are_paced_and_no_instance_fails():
    """A gateway that allows 600 requests a minute and says so in its headers: a burst of 60 through the pool
    all succeed (429s, if any, are retried after Retry-After) and the pacer learnt the budget."""
    with MockOpenAIServer(requests_per_minute=600, rate_headers=True) as srv:
        async def main():
            pool = ClientPool(connections=32, pacing=PacingPolicy(adaptive=True, ceiling=32))
            client = pool.get(_deployment(srv.base_url))
            reqs = [GenerationRequest(messages=(Message("user", f"r {i}"),), max_tokens=4) for i in range(60)]
            done = await asyncio.gather(*(client.generate(r) for r in reqs))
            pacer = pool.pacers()["mock/paced"]
            await pool.aclose()
            return done, pacer

        done, pacer = asyncio.run(main())
        assert len(done) == 60 and all(d.text for d in done)
        assert "600 requests/min" in pacer.summary()


def test_deployment_file_takes_auto_and_rate_limits(tmp_path):
    from medhelm.deployments import DeploymentRegistry

    (tmp_path / "model_deployments.yaml").write_text(textwrap.dedent("""\
        model_deployments:
          - name: gw/a
            model_name: gw/a
            kind: openai
            base_url: http://127.0.0.1:1/v1
            max_concurrency: auto
            rate_limits: {requests_per_minute: 500, tokens_per_minute: 90000}
          - name: gw/b
            model_name: gw/b
            kind: openai
            base_url: http://127.0.0.1:1/v1
            max_concurrency: 12
        """))
    reg = DeploymentRegistry.load(tmp_path)
    a, b = reg.get("gw/a"), reg.get("gw/b")
    assert a.max_concurrency is None and dict(a.rate_limits) == {"requests_per_minute": 500,
                                                                  "tokens_per_minute": 90000}
    assert b.max_concurrency == 12 and not b.rate_limits
    assert "rate_limits" not in b.to_json()  # unchanged run_spec.json for deployments without budgets
    assert Deployment.from_json(a.to_json()) == a


@pytest.mark.parametrize("bad,field", [("max_concurrency: sometimes", "max_concurrency"),
                                       ("rate_limits: {requests_per_hour: 5}", "rate_limits"),
                                       ("rate_limits: {requests_per_minute: -1}", "rate_limits")])
def test_bad_pacing_settings_are_one_line_errors(tmp_path, bad, field):
    from medhelm.deployments import DeploymentRegistry

    (tmp_path / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: gw/a\n    model_name: gw/a\n    kind: openai\n"
        f"    base_url: http://127.0.0.1:1/v1\n    {bad}\n")
    with pytest.raises(ConfigError) as err:
        DeploymentRegistry.load(tmp_path)
    message = str(err.value)
    assert "model_deployments.yaml" in message and field in message and "\n" not in message


def test_cli_auto_is_the_default_and_prints_the_pacing_line(tmp_path):
    with MockOpenAIServer(latency_s=0.005, capacity=4) as srv:
        env = tmp_path / "env"
        env.mkdir()
        (env / "model_deployments.yaml").write_text(
            "model_deployments:\n  - name: mock/paced\n    model_name: mock/model\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: mock-model\n")
        bench = tmp_path / "b"
        bench.mkdir()
        (bench / "p.txt").write_text("Answer: {question}\n")
        (bench / "d.csv").write_text("question,correct_answer\n" + "".join(f"q{i},a{i}\n" for i in range(40)))
        (bench / "b.yaml").write_text("name: paced_demo\ndescription: d\nprompt_file: p.txt\ndataset_file: d.csv\n"
                                      "max_tokens: 4\nmetrics:\n  - name: exact_match\n")
        cmd = [sys.executable, "-m", "medhelm", "run", "-r",
               f"medhelm_configurable_benchmark:model=mock/model,config_path={bench / 'b.yaml'}",
               "--suite", "s", "-o", str(tmp_path / "out"), "--local-path", str(env), "-q"]
        # at most 30 requests (--max-eval-instances): a short run, which starts at 16 and jumps at its first answer
        # (first: a limit a run learnt would win over the jump)
        short = subprocess.run([c if c != "s" else "short" for c in cmd] + ["--max-eval-instances", "30"],
                               capture_output=True, text=True, timeout=600)
        assert short.returncode == 0, short.stderr
        assert re.search(r"started at 16 \(a short run: at most 30 requests; jumped to 64 (at its first answer|after "
                         r"10 ms with no refusal)\)", short.stdout), short.stdout  # whichever came first
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert "pacing mock/paced: auto:" in done.stdout
        assert "a short run" not in done.stdout  # no --max-eval-instances: the whole dataset, not known ahead
        assert srv.max_in_flight <= 256
        bad = subprocess.run(cmd[:-1] + ["--max-concurrency", "0"], capture_output=True, text=True, timeout=600)
        assert bad.returncode == 2 and "max-concurrency" in bad.stderr


def test_a_second_run_starts_where_the_first_one_settled(tmp_path):
    """Two runs in a row against the real mock, each its own pool over the same cache file (as two `medhelm run`s
    of one local path): the second run's pacer starts at the limit the first one's settled at, read from the
    cache's table. The first run's ceiling of 6 makes it settle within a few rounds (4 -> 6, or a trial between
    them), whatever the machine's load; the second's ceiling is 64."""
    path = tmp_path / "cache" / "requests.sqlite"
    with MockOpenAIServer(latency_s=0.02) as srv:
        async def run(ceiling, tag):
            pool = ClientPool(cache=RequestCache(path), connections=ceiling,
                              pacing=PacingPolicy(adaptive=True, ceiling=ceiling))
            client = pool.get(_deployment(srv.base_url))
            left = [GenerationRequest(messages=(Message("user", f"{tag} {i}"),), max_tokens=4) for i in range(600)]

            async def worker():  # until the pacer settles (at least 100 requests, at most 600)
                while left and (pool.pacer(client._raw).settled is None or len(left) > 500):
                    await client.generate(left.pop())

            # more workers than the ceiling: a window in which no request waited for a slot decides nothing
            await asyncio.gather(*(worker() for _ in range(ceiling + 4)))
            pacer = pool.pacer(client._raw)
            await pool.aclose()
            return pacer

        first = asyncio.run(run(6, "first"))
        kept = RequestCache(path).learnt_limit(("mock/paced", srv.base_url, "auto"))
        second = asyncio.run(run(64, "second"))
    assert first.start == 4 and first.settled in (4, 6)
    assert kept == first.settled  # committed when the first run's pool closed
    assert second.start == first.settled  # where the first run settled, not the default start
    assert f"started at {first.settled} (learnt by the last run)" in second.summary()


def test_a_limit_is_committed_while_the_run_goes_on(tmp_path):
    """A run that is killed still teaches: the flusher commits a remembered limit with its next batch, without the
    pool closing (read here from a second connection, as the next run would)."""
    path = tmp_path / "requests.sqlite"

    async def main():
        cache = RequestCache(path, commit_interval_s=0.01)
        cache.remember_limit(("d", "u", "auto"), 32)
        await asyncio.wait_for(cache._flusher, 60)  # the flusher ends once nothing is queued
        return cache

    asyncio.run(main())  # never closed, never flushed by hand
    assert RequestCache(path).learnt_limit(("d", "u", "auto")) == 32
