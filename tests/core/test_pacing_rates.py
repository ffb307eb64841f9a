"""A request and token rate learnt from 429s alone (inference/pacing/learnt.py), in the seeded simulation of a gateway
that states no budget (tests/core/rate_sim.py: simulated clock, never timed), and the gate's rules around it.

Every case asserts what issue 53 asks after the first minute (after a change of budget: the minute after it):
refusals <= 2 % of the requests sent, >= 95 % of the budget used, no instance failed for a 429, and shards that share
one gateway without a coordinator each >= 60 % of a fair share. Every case runs twice: the gateway states
``Retry-After`` to the millisecond (as the mock), and in whole seconds (RFC 9110's delay-seconds, as API management
gateways do: ``WHOLE``)."""

from __future__ import annotations

import math

import pytest

from medhelm.inference.pacing import PaceSettings, Pacer, PacerObserver
from medhelm.inference.pacing.ledger import Ledger
from medhelm.inference.retry import RetryPolicy
from tests.core.pacing_sim import Clock
from tests.core.rate_sim import TOKEN_ESTIMATE, Gateway, measure, simulate


WHOLE = pytest.mark.parametrize("whole", [False, True], ids=["ms", "whole-s"])


def _check(procs, gateway, *, t0, t1, what="requests", fair=0.6):
    m = measure(procs, gateway, t0=t0, t1=t1, what=what)
    assert m.failed == 0
    assert max(p.most_refused for p in procs) < 6  # no instance refused as often as max_attempts allows
    assert m.refused_share <= 0.02, m
    assert m.used >= 0.95, m
    assert min(m.shares) >= fair, m
    return m


# a seed whose smallest shard comes out just under 0.60 of a fair share (docs/pacing.md: the misses over 20 seeds)
NEAR_MISS = pytest.mark.xfail(strict=True, reason="0.58 of a fair share on this seed: a near miss (docs/pacing.md)")


@WHOLE
@pytest.mark.parametrize("burst_s", [1.0, 60.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_requests_per_minute_bucket_is_learnt_from_refusals(burst_s, seed, whole):
    gateway = Gateway(requests_per_minute=600, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=180, seed=seed)
    _check(procs, gateway, t0=60, t1=180)
    learnt = procs[0].pacer.learnt
    assert learnt.first is not None and learnt.first[0] < 60  # converged within the first minute
    assert 8.0 < learnt.requests_per_s < 12.0


@WHOLE
@pytest.mark.parametrize("latency_s", [0.005, 0.5])
def test_latencies_from_5_to_500_ms(latency_s, whole):
    gateway = Gateway(requests_per_minute=600, burst_s=1.0, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=180, latency_s=latency_s)
    _check(procs, gateway, t0=60, t1=180)


@WHOLE
@pytest.mark.parametrize("burst_s", [1.0, 60.0])
def test_a_tokens_per_minute_bucket_binding_first(burst_s, whole):
    """Large prompts (100-300 words): the tokens run out at about 3 requests a second, the requests budget is
    ten times that. The client counts tokens its own way (characters / 4), the gateway counts words."""
    gateway = Gateway(requests_per_minute=6000, tokens_per_minute=60000, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=180, prompt_words=(100, 300))
    _check(procs, gateway, t0=60, t1=180, what="tokens")
    assert measure(procs, gateway, t0=60, t1=180).used < 0.1  # the requests budget was never what bound


@pytest.mark.parametrize("requests_per_minute,burst_s,whole", [
    (60, 1.0, False), (60, 1.0, True), (120, 1.0, False), (120, 1.0, True), (60, 60.0, False), (120, 60.0, False)])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_small_budget_is_not_hammered(requests_per_minute, burst_s, whole, seed):
    """1 and 2 requests a second. The climb and the spans measured in seconds were tuned at 10: a cycle of the climb
    (about 15 s) ends in about one refusal, 1 in 15 requests at 60 a minute (4-7 % refused after the first minute
    on these seeds, 2.2 % at 120). Under ``STEADY_REQUESTS_PER_S`` they are stretched to hold as many requests as
    there. What is not met at this scale (docs/pacing.md): >= 95 % of a budget with a second of burst on every seed
    (0.93-0.97 used at 60 a minute over seeds 0-7, the next test), and <= 2 % for a minute of burst under whole seconds
    on some seeds (the climb runs the saved minute dry far past the edge, and a whole-second refinement waits for 16
    requests accepted)."""
    gateway = Gateway(requests_per_minute=requests_per_minute, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=240, seed=seed)
    m = measure(procs, gateway, t0=60, t1=240)
    assert m.failed == 0 and max(p.most_refused for p in procs) < 6
    assert m.refused_share <= 0.02, m
    assert m.used >= (0.95 if burst_s > 1.0 else 0.93), m


@WHOLE
def test_a_budget_of_a_request_a_second_is_used_close_under_the_edge(whole):
    """60 requests a minute with a second of burst: the gateway's bucket holds one request, so the climb is refused as
    soon as it crosses the budget, and the cut (halfway between what a quiet span accepted and the rate refused, less
    5 %) fell to about 0.91 of it; the climb, stretched at this rate, took two minutes back. 0.89-0.94 of the budget
    was used on seeds 0-7 (mean 0.922, 0.912 under whole seconds). Alone, the climb now closes fast on 0.98 of the rate
    last refused and crawls from there (``edge.Edge``), and the token bucket holds four requests' mean cost: 0.93-0.97
    used, the mean 0.958 (0.947 under whole seconds), with fewer refusals than before."""
    used = _used_at_a_request_a_second(whole)
    assert min(used) >= 0.925 and sum(used) / len(used) >= 0.94, used


def _used_at_a_request_a_second(whole: bool, words_growth: float = 0.0) -> list[float]:
    """The budget used from 60 to 240 s at 60 requests a minute with a second of burst, seeds 0-7, each run asserted
    to fail no instance and be refused <= 2 %."""
    used = []
    for seed in range(8):
        gateway = Gateway(requests_per_minute=60, burst_s=1.0, whole_seconds=whole)
        procs, _ = simulate(gateway, seconds=240, seed=seed, words_growth=words_growth)
        m = measure(procs, gateway, t0=60, t1=240)
        assert m.failed == 0 and m.refused_share <= 0.02, m
        used.append(m.used)
    return used


@WHOLE
def test_prompts_growing_dearer_do_not_hold_a_requests_budget_back(whole):
    """60 requests a minute with a second of burst, the gateway counting requests alone, the prompts 5 % dearer each
    minute (a dataset whose later notes are longer; the bench's prompts grow as their numbers do). The token rate's
    floor read the mean cost of all sent, which lags what the prompts cost now, so the token bucket held the dear ones
    back: 0.917-0.972 of the budget used on seeds 0-7, the mean 0.941 (0.900-0.956, the mean 0.928, under whole
    seconds). The floor reads the mean cost of the last minute's sends: 0.944-0.972, the mean 0.956 (0.947)."""
    used = _used_at_a_request_a_second(whole, words_growth=0.05)
    assert min(used) >= 0.935 and sum(used) / len(used) >= (0.945 if whole else 0.95), used


def test_the_ledger_counts_the_recent_sends_or_all_when_they_are_few():
    """The floor's mean cost (``Ledger.sent_since``): the sends after a time, or all sent when those are too few."""
    ledger = Ledger()
    for i in range(20):
        ledger.send(float(i), 10.0 if i < 10 else 30.0, -math.inf)
    assert ledger.sent_since(9.5, 4) == (10.0, 300.0)
    assert ledger.sent_since(9.5, 16) == ledger.total == (20.0, 400.0)


@WHOLE
@pytest.mark.parametrize("seed", [0, 5])
def test_prompts_growing_dearer_do_not_overrun_a_tokens_budget(seed, whole):
    """The other side of the floor above: a gateway counting tokens (60,000 a minute, prompts of 100-300 words, 5 %
    more each minute), where a token rate raised with the prompts' cost would overrun it: 0.960-1.001 of it used on
    seeds 0-7, 1.1-1.5 % refused (0.956-1.003 and 0.9-1.2 % with the floor read from all sent)."""
    gateway = Gateway(requests_per_minute=6000, tokens_per_minute=60000, burst_s=1.0, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=240, seed=seed, prompt_words=(100, 300), words_growth=0.05)
    m = measure(procs, gateway, t0=60, t1=240, what="tokens")
    assert m.failed == 0 and m.refused_share <= 0.02, m
    assert m.used >= 0.95, m


@pytest.mark.parametrize("seed", [2, 5, 13, 15])
def test_a_token_rate_read_from_a_few_requests_does_not_hold_a_requests_budget_back(seed):
    """60 requests a minute with a second of burst, the gateway counting requests alone. The first estimate read 4-5
    accepted requests, and what they cost set the learnt token rate too: cheaper than the mean, they held the sends at
    0.75-0.80 of the learnt request rate for two minutes (0.78 and 0.81 of the budget used on seeds 2 and 5). A cut
    never sets the token rate under what the request rate needs at the mean cost of all sent (0.89, 0.91, 0.87, 0.84
    on these seeds; since, of the last minute's sends), and alone, the climb keeps it there as the mean drifts: 0.92,
    0.91, 0.90, 0.92."""
    gateway = Gateway(requests_per_minute=60, burst_s=1.0)
    procs, _ = simulate(gateway, seconds=240, seed=seed)
    m = measure(procs, gateway, t0=60, t1=240)
    assert m.failed == 0 and m.refused_share <= 0.02, m
    assert m.used >= 0.895, m


@WHOLE
@pytest.mark.parametrize("requests_per_minute", [6, 12])
def test_a_saved_burst_read_as_the_refill_is_undone(requests_per_minute, whole):
    """A minute of burst at 6 or 12 requests a minute: the first estimate spanned the burst the gateway had saved
    (5.2 requests/s read of 0.1), and once estimated, a refusal with no span holding 16 accepted requests changed
    nothing, so 86 % of the requests were refused for ever after and 35 instances failed (74 % at 12 a minute, before
    the climb was stretched). After 16 refusals since the last cut, what the gateway accepted since the oldest send
    kept is its refill. At 6 a minute the stretched climb is slow to come back: 0.82-0.88 of the budget used here.
    At 6 a minute with millisecond waits, each cycle of the climb still ends in a refusal about every 40 requests:
    2.4-2.5 % refused over 300-1800 s on seeds 0-9 (a known gap, docs/pacing.md), where ten minutes hold 60 requests
    and 2 % is one refusal."""
    gateway = Gateway(requests_per_minute=requests_per_minute, burst_s=60.0, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=900, seed=0)
    m = measure(procs, gateway, t0=300, t1=900)
    assert m.failed == 0 and max(p.most_refused for p in procs) < 6
    assert m.refused_share <= (0.04 if requests_per_minute == 6 and not whole else 0.02), m
    assert m.used >= 0.8, m


@WHOLE
def test_a_budget_raised_and_then_cut_mid_run_is_followed_within_a_minute(whole):
    gateway = Gateway(requests_per_minute=600, burst_s=1.0, changes=((120.0, 1200.0, None), (240.0, 300.0, None)),
                      whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=360)
    for t0, t1 in ((60, 120), (180, 240), (300, 360)):
        _check(procs, gateway, t0=t0, t1=t1)


@pytest.mark.parametrize("seed,whole", [(0, False), (1, False), (2, False), (46, False), (50, False), (0, True),
                                        (34, True), (1, True), (2, True)])
def test_a_raised_budget_found_after_more_than_a_minute_without_refusals(seed, whole):
    """The bench's timeline (600 -> 1200 rpm at 80 s, -> 300 at 160 s) with requests arriving 50 ms (mean, each
    way) after they start, as over HTTP from a busy event loop: the climb reaches the new budget's edge more than a
    minute after the last refusal, so no earlier refusal is left to estimate from. Every 20 s from the first minute
    to the cut refuses <= 2 % (the edge is crossed in there), and the raised budget is used within the minute.
    Seed 46: a refusal a quarter of a second after the quiet cut (20.1 requests/s of 20) reached back across the quiet
    span and cut halfway once more, to 16.3; 0.82 of the raised budget was used. Seed 50: one 0.8 s after it, whose
    estimate was above the quiet cut's level (20.2 of 20), cut it by 5 % all the same; 0.93 was used. Seed 34 under
    whole seconds: the quiet span's floor counted every request since the process began as sent within its last
    minute (25.1 requests/s read of 12.8), the cut came down from 27.5 only to 26.3, and 3.5 % were refused in the
    20 s windows after it."""
    gateway = Gateway(requests_per_minute=600, burst_s=1.0, changes=((80.0, 1200.0, None), (160.0, 300.0, None)),
                      whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=240, seed=seed, net_s=0.05)
    for t0 in range(60, 141, 5):
        assert measure(procs, gateway, t0=t0, t1=t0 + 20).refused_share <= 0.02, t0
    _check(procs, gateway, t0=140, t1=160)
    _check(procs, gateway, t0=180, t1=240)


@pytest.mark.parametrize("latency_s,seed", [(0.02, 0), (0.02, 3), (0.02, 6), (0.005, 7)])
def test_a_far_gateway_stating_whole_seconds_is_read_over_a_full_span_from_the_first_estimate(latency_s, seed):
    """A gateway 10 ms away each way, a minute of burst, whole-second ``Retry-After``: the first refusal after the
    first pause came in the burst that collects the pause's refill, and an estimate half a second back from it read
    4.7 requests/s of 10; the 60 s bucket saved up while the rate climbed back, ran dry under the climb, and 2.2-4.1 %
    were refused after the first minute on these seeds. The first estimate spans 2 s under whole seconds now."""
    gateway = Gateway(requests_per_minute=600, burst_s=60.0, whole_seconds=True)
    procs, _ = simulate(gateway, seconds=180, latency_s=latency_s, net_s=0.01, seed=seed)
    learnt = procs[0].pacer.learnt
    assert learnt.first is not None and learnt.first[0] < 10.0
    _check(procs, gateway, t0=60, t1=180)


@pytest.mark.parametrize("processes,burst_s,seed,whole", [
    pytest.param(n, burst, seed, whole, marks=NEAR_MISS if (n, burst, seed, whole) == (2, 60.0, 1, True) else (),
                 id=f"{n}-{burst}-{seed}-{'whole-s' if whole else 'ms'}")
    for whole in (False, True) for seed in range(20) for n, burst in ((2, 1.0), (3, 1.0), (2, 60.0), (3, 60.0))])
def test_shards_share_one_budget_without_a_coordinator(processes, burst_s, seed, whole):
    """Every seed: a split set by chance in the first seconds (whichever shard is refused first halves first) is
    undone by the climb's unit the shards share, so no shard is left under 0.60 of a fair share. Under whole-second
    Retry-After there is no shared unit; a shard's cuts are spaced instead (``WHOLE_CUT_SPACING_S``: the slow shards,
    refused as often as the fast ones, no longer shrink most), and the split holds 0.60 on all these seeds but one (2
    shards, a minute of burst, seed 1: 0.58)."""
    gateway = Gateway(requests_per_minute=300 * processes, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate(gateway, processes=processes, seconds=240, seed=seed)
    _check(procs, gateway, t0=60, t1=240)


@pytest.mark.parametrize("burst_s", [1.0, 60.0])
@pytest.mark.parametrize("latency_s", [0.02, 0.2])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_gateway_that_states_no_wait_at_all_is_learnt_by_a_process_alone(burst_s, latency_s, seed):
    """AWS API Gateway's throttling and nginx's ``limit_req`` answer a bare 429, without ``Retry-After``: nothing is
    paused, nothing read of a fair part; the refusals alone set the rate (seeds 0-9: 0.5 % refused, 0.98-1.00 of the
    budget used)."""
    gateway = Gateway(requests_per_minute=600, burst_s=burst_s, silent=True)
    procs, _ = simulate(gateway, seconds=180, latency_s=latency_s, net_s=0.01, seed=seed)
    _check(procs, gateway, t0=60, t1=180)
    assert 8.0 < procs[0].pacer.learnt.requests_per_s < 12.0


@pytest.mark.parametrize("processes,seed", [
    (2, 0), (2, 1), (2, 2), (2, 3), (3, 1),
    pytest.param(3, 0, marks=pytest.mark.xfail(strict=True, reason="no shared unit without a stated wait: a known "
                                                                   "gap (docs/pacing.md)"))])
def test_shards_share_a_gateway_that_states_no_wait(processes, seed):
    """A bare 429 states no wait, so the shards have no fair part to share a climb's unit by, and no whole second's
    pause spaces their cuts: their refusals stay under 2 %, but the split set by chance in the first seconds is undone
    only slowly. Two shards hold 0.72 of a fair share over seeds 0-9; three fall as low as 0.49 (seed 0; seeds 0 and 3
    under 0.60): a Job of shards behind such a gateway should be told its budget (``rate_limits``)."""
    gateway = Gateway(requests_per_minute=300 * processes, burst_s=1.0, silent=True)
    procs, _ = simulate(gateway, processes=processes, seconds=240, seed=seed)
    _check(procs, gateway, t0=60, t1=240)


@pytest.mark.parametrize("processes,burst_s,seed", [(2, 1.0, 3), (3, 60.0, 4)])
def test_a_shard_starved_by_the_others_paced_sends_stops_halving(processes, burst_s, seed):
    """A bare 429 at 60 requests a minute a shard: no fair part stops a shard's halvings, and the others' paced sends
    keep the gateway at its edge, so the shard halved first found it empty at each send and halved again, never
    collecting the accepted requests an estimate needs (0.25 and 0.37 of its part on these seeds). After 8 refusals
    what the gateway accepted from it since its oldest send kept is its first estimate: 0.96 and 0.91. The refusals
    at this budget stay a known gap (3-8 %, docs/pacing.md), so they are not asserted here."""
    gateway = Gateway(requests_per_minute=60 * processes, burst_s=burst_s, silent=True)
    procs, _ = simulate(gateway, processes=processes, seconds=240, seed=seed)
    m = measure(procs, gateway, t0=60, t1=240)
    assert m.failed == 0 and min(m.shares) >= 0.6, m


def test_shards_told_their_budget_share_a_gateway_that_states_no_wait_evenly():
    """The case above that misses (3 shards, seed 1: one at 0.37 of a fair share) told its budget: each shard paces by
    its part of it, and each shard's summary, learning from bare 429s, said to tell it."""
    gateway = Gateway(requests_per_minute=900, burst_s=1.0, silent=True)
    untold, _ = simulate(gateway, processes=3, seconds=240, seed=1)
    assert all("tell the Job its budget (rate_limits)" in p.pacer.summary() for p in untold)
    gateway = Gateway(requests_per_minute=900, burst_s=1.0, silent=True)
    procs, _ = simulate(gateway, processes=3, seconds=240, seed=1, configured=(900.0, None))
    m = _check(procs, gateway, t0=60, t1=240, fair=0.95)
    assert m.refused_share == 0.0, m


@WHOLE
@pytest.mark.parametrize("latency_s", [0.02, 0.5])
def test_a_starved_client_does_not_read_its_own_stalls_as_a_smaller_budget(latency_s, whole):
    """The client's event loop gets no CPU 30 % of the time (stalls of 0.5 s on average, as a bench on a loaded
    machine): what the gateway's one second of burst cannot keep of a stall is lost to any client (a client told the
    budget uses as little as 0.83 of it, by the seed's draw of stalls), but the rate learnt stays at the budget, so
    >= 95 % of what the told client uses is used (seeds 0-59: 0.944 x at worst, 0.99-1.00 x in the median)."""
    gateway = Gateway(requests_per_minute=600, burst_s=1.0, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=240, latency_s=latency_s, net_s=0.05, stalls=(0.3, 0.5))
    m = measure(procs, gateway, t0=60, t1=240)
    told_gateway = Gateway(requests_per_minute=600, burst_s=1.0, whole_seconds=whole)
    told, _ = simulate(told_gateway, seconds=240, latency_s=latency_s, net_s=0.05, stalls=(0.3, 0.5),
                       configured=(600.0, None))
    ceiling = measure(told, told_gateway, t0=60, t1=240)
    assert ceiling.refused_share <= 0.02 and ceiling.used >= 0.8, ceiling
    assert m.failed == 0 and m.refused_share <= 0.02, m
    assert m.used >= 0.95 * ceiling.used, (m, ceiling)
    assert procs[0].pacer.learnt.requests_per_s >= 9.0


@pytest.mark.parametrize("net_s, least", [(0.0, 0.9), (0.005, 0.76)], ids=["near", "5ms-away"])
def test_a_gateway_without_burst_is_paced_evenly(net_s, least):
    """nginx's bare ``limit_req`` (no ``burst``) refuses any request sooner than its rate's spacing after the last one
    it let through. A learnt bucket of a second's refill sent what a delay held back right behind the late request,
    and each refusal of those cut the rate: 0.81-0.84 of the budget used with the gateway near, 0.72-0.74 with 5 ms
    of network between (seeds 0-3). Close sends refused while spaced ones are let through show it holds no burst: the
    sends are spaced evenly, and a refusal cuts from the rate itself: 0.92-0.96 and 0.76-0.81 used. (The edge: a
    client paced evenly at the best fixed part of the budget, told it, gets 1.0 and 0.84 with <= 2 % refused.) With
    5 ms between, the network's jitter refuses some spaced sends too: on seed 2 the evidence stays under ``SHARE``
    (2 of the 3 closest sends refused) for the whole run, and 0.71 is used."""
    used, even = [], 0
    for seed in range(4):
        gateway = Gateway(requests_per_minute=600, burst_s=0.1, silent=True)
        procs, _ = simulate(gateway, seconds=240, net_s=net_s, seed=seed)
        m = measure(procs, gateway, t0=60, t1=240)
        assert m.failed == 0 and m.refused_share <= 0.02, m
        even += "spaced evenly (the gateway lets no burst through)" in procs[0].pacer.summary()
        used.append(m.used)
    assert even >= (4 if net_s == 0.0 else 3), used
    assert sum(used) / len(used) >= least, used


@pytest.mark.parametrize("seed", [0, 1])
def test_a_gateway_that_lets_a_burst_through_after_all_gets_it_back(seed):
    """Paced evenly, once per ``burst.PROBE_S`` a request goes right behind the one before; if both are let through,
    the gateway holds a burst after all. Its configuration changed at 120 s, from no burst to a second of it: a client
    whose event loop stalls a fifth of the time catches up on what a stall held back again, 0.99-1.00 of the budget
    used from 180 s with 0.5 % refused (without the probe, spaced evenly for good: 0.94-0.96 and 1.0-1.4 %)."""
    class Widened(Gateway):
        def arrive(self, t: float, tokens: float) -> float:
            if t >= 120.0:
                self.burst_s = 1.0
            return super().arrive(t, tokens)

    before, _ = simulate(Widened(requests_per_minute=600, burst_s=0.1, silent=True), seconds=110, net_s=0.005,
                         stalls=(0.2, 0.2), seed=seed)
    assert "spaced evenly" in before[0].pacer.summary()
    gateway = Widened(requests_per_minute=600, burst_s=0.1, silent=True)
    procs, _ = simulate(gateway, seconds=300, net_s=0.005, stalls=(0.2, 0.2), seed=seed)
    m = measure(procs, gateway, t0=180, t1=300)
    assert "spaced evenly" not in procs[0].pacer.summary()
    assert m.failed == 0 and m.refused_share <= 0.01 and m.used >= 0.98, m


@pytest.mark.parametrize("stalls", [(0.0, 0.0), (0.3, 0.1)], ids=["running", "starved"])
def test_a_configured_budget_is_used_whole_after_a_refusal(stalls):
    """A Job told its budget (``rate_limits: 600 requests/min``) under ``auto``, refused once at the start: the
    learnt rate halved and climbed back to the budget, where it is the budget. It paces with the budget's one second
    of burst (without one, a client whose event loop stalls for 0.1 s now and then never caught up on what a stall
    left unsent: 0.82 of the budget used), and the token rate, which never binds, stays near what is sent (climbed on
    the requests' account it grew e^t a second and stalled the simulated clock at 10^12 tokens/s)."""
    gateway = Gateway(requests_per_minute=600, burst_s=1.0)
    procs, _ = simulate(gateway, seconds=600, net_s=0.05, stalls=stalls, configured=(600.0, None), seed=3)
    m = measure(procs, gateway, t0=60, t1=600)
    assert m.failed == 0 and m.refused_share <= 0.02, m
    assert m.used >= 0.97, m
    learnt, sent = procs[0].pacer.learnt, procs[0].accepted[-600:]
    assert learnt.requests_per_s == pytest.approx(10.0)
    sent_tokens_per_s = sum(cost for _, cost in sent) / (sent[-1][0] - sent[0][0])
    assert learnt.tokens_per_s is None or learnt.tokens_per_s < 3 * TOKEN_ESTIMATE * sent_tokens_per_s


def test_a_halved_rate_under_one_a_second_climbs_back_while_it_holds_requests_back():
    """A refusal halves the guess to half a request a second. A client that always has a request waiting is held
    back by it for two seconds at a time, longer than the second the climb looked back for a held request: it read as
    idle, and the rate stayed at 0.5 for 40 s. It climbs (before an estimate, fast) to the budget it was told."""
    clock = Clock()
    pacer = Pacer(PaceSettings(adaptive=True, requests_per_minute=60), clock=clock)
    pacer.release(pacer.try_acquire(), ok=True)
    clock.t += 1.0
    started = pacer.try_acquire()
    clock.t += 0.02
    pacer.release(started, ok=False, overloaded=True, retry_after=0.01)  # arrived early by the network's jitter
    assert pacer.learnt.requests_per_s == pytest.approx(0.5, rel=0.1)
    end = clock.t + 40.0
    while clock.t < end:
        clock.t += pacer.blocked_for()
        pacer.release(pacer.try_acquire(), ok=True)
    assert pacer.learnt.requests_per_s >= 0.95


@pytest.mark.parametrize("requests_per_s", [0.5, 1.0, 10.0])
def test_a_learnt_token_rate_that_binds_with_the_request_rate_paces_at_both(requests_per_s, monkeypatch):
    """A gateway that limits requests only: the refusal that sets the request rate sets a token rate too, at the
    tokens the same span carried, so both bind about equally. Prompts cost 42-94 tokens. A token bucket of a second's
    refill (68 tokens at one request a second) holds less than the dearer requests: each waited for a full bucket while
    the request bucket sat full and lost its refill, and a client always waiting was paced at 0.94 of the rate (0.91 at
    half a request a second). The token bucket now holds two requests' mean cost at least."""
    import random

    from medhelm.inference.pacing import learnt as learnt_module
    monkeypatch.setattr(learnt_module, "CLIMB", 0.0)  # the rates as set: this measures the pacing, not the climb
    clock, rng = Clock(), random.Random(0)
    pacer = Pacer(PaceSettings(adaptive=True), clock=clock)
    mean = TOKEN_ESTIMATE * 40 + 16
    pacer.learnt._estimated = True
    pacer.learnt._set(requests_per_s, requests_per_s * mean, clock.t)
    sent, seconds = 0, 600.0
    while clock.t < seconds:
        tokens = TOKEN_ESTIMATE * rng.randint(20, 60) + 16
        while (started := pacer.try_acquire(tokens)) is None:
            clock.t += max(pacer.blocked_for(tokens), 1e-6)
        pacer.release(started, ok=True, tokens_used=tokens, tokens_taken=tokens)
        sent += 1
    assert sent / seconds >= 0.97 * requests_per_s, sent / seconds


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_budget_of_one_request_a_second_told_is_used_after_a_refusal_of_jitter(seed):
    """A Job told its budget, 60 requests a minute, by a gateway that holds one request (a second of burst) 10 ms
    away: a request that arrives early by the network's jitter is refused, and the learnt rate takes over under the
    budget. It climbs back: 0.78-0.84 of the budget used with 0.7 % refused (0.60 before the climb counted a request
    held back for longer than a second). Not 0.95: at one request of burst a client paced at 0.97 of the budget is
    refused about 2 % of its requests by 10 ms of jitter (docs/pacing.md)."""
    gateway = Gateway(requests_per_minute=60, burst_s=1.0)
    procs, _ = simulate(gateway, seconds=240, net_s=0.01, configured=(60.0, None), seed=seed)
    m = measure(procs, gateway, t0=60, t1=240)
    assert m.failed == 0 and m.refused_share <= 0.02, m
    assert m.used >= 0.75, m


@WHOLE
@pytest.mark.parametrize("latency_s", [0.02, 0.5])
def test_before_its_first_estimate_the_rate_sends_no_burst(latency_s, whole):
    """Before the first estimate the learnt rate is a guess (half of what was sent, however fast), so it paces
    without a burst: the end of a pause no longer sends all that waited into a gateway whose minute of burst just
    ran dry. In the first minute of a 60 s bucket a process alone was refused 96-150 times on average over 20 seeds
    (up to 162); now 4-21."""
    gateway = Gateway(requests_per_minute=600, burst_s=60.0, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=60, latency_s=latency_s)
    assert len(procs[0].refused) <= 40, len(procs[0].refused)
    assert procs[0].failed == 0 and procs[0].most_refused <= 2


@WHOLE
@pytest.mark.parametrize("burst_s,latency_s", [(1.0, 0.005), (1.0, 0.5), (60.0, 0.02), (60.0, 0.5)])
def test_a_short_run_that_jumps_is_no_harder_on_a_gateway(burst_s, latency_s, whole):
    """A run told it sends at most 1,000 requests starts at 16 and jumps to 64 at its first answer, or 10 ms after
    its first request with nothing back. At a gateway in the network with a second of burst the first thing back is a
    refusal (2 ms), so it does not jump; a minute of burst answers the first requests, so it does (at 5 ms the
    answer comes first, else the 10 ms). Either way the learnt rate paces it as it paces a run from 4: refused at
    most 45 times in the first minute, none more than twice, and the issue's targets after it."""
    gateway = Gateway(requests_per_minute=600, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=180, latency_s=latency_s, expected=1000)
    assert procs[0].pacer.start == 16 and bool(procs[0].pacer.adaptive.jumped) == (burst_s > 1.0)
    assert sum(1 for t in procs[0].refused if t < 60) <= 45
    assert procs[0].most_refused <= 2
    _check(procs, gateway, t0=60, t1=180)


@WHOLE
@pytest.mark.parametrize("burst_s", [1.0, 60.0])
def test_a_short_run_jumps_before_a_far_gateways_refusals_and_keeps_to_its_budget(burst_s, whole):
    """A gateway 10 ms away each way (on average): nothing is back 10 ms after the first request, so a short run
    jumps to 64 before the refusals of a second's burst arrive. That is the cost of not waiting a model's latency
    to jump: the first minute's refusals are those of a start at 64 (67-94 over 8 seeds: at most 90 here), still none
    refused more than twice and the issue's targets after the first minute."""
    gateway = Gateway(requests_per_minute=600, burst_s=burst_s, whole_seconds=whole)
    procs, _ = simulate(gateway, seconds=180, latency_s=0.02, net_s=0.01, expected=1000)
    assert procs[0].pacer.adaptive.jumped == "after 10 ms with no refusal"
    assert sum(1 for t in procs[0].refused if t < 60) <= 90
    assert procs[0].most_refused <= 2
    _check(procs, gateway, t0=60, t1=180)


@WHOLE
def test_a_shard_that_starts_later_gets_its_part(whole):
    gateway = Gateway(requests_per_minute=600, burst_s=1.0, whole_seconds=whole)
    procs, _ = simulate(gateway, processes=2, seconds=300, stagger_s=20.0)
    _check(procs, gateway, t0=120, t1=300)


# -- the gate's rules around the learnt rate ----------------------------------------------------------------------


class _Seen(PacerObserver):
    def __init__(self) -> None:
        self.rates: list[tuple[float, float | None]] = []

    def rate_learnt(self, requests_per_s, tokens_per_s):
        self.rates.append((requests_per_s, tokens_per_s))


def _refuse_at_ten_a_second(pacer, clock, *, seconds=20.0):
    """A client that sends whenever its pacer lets it (every 5 ms at most), each answer at once, into a gateway
    that accepts 10 requests a second (a burst of one second's worth) and refuses the rest."""
    gateway = Gateway(requests_per_minute=600, burst_s=1.0)
    end = clock.t + seconds
    while clock.t < end:
        started = pacer.try_acquire()
        if started is not None:
            retry_after = gateway.arrive(clock.t, 1.0)
            pacer.release(started, ok=not retry_after, overloaded=bool(retry_after), retry_after=retry_after)
        clock.t += 0.005


def test_the_rate_learnt_is_a_metric_and_the_summary_line_says_it():
    clock, seen = Clock(), _Seen()
    pacer = Pacer(PaceSettings(adaptive=True), clock=clock, observer=seen)
    _refuse_at_ten_a_second(pacer, clock)
    assert pacer.learnt.paces and seen.rates
    assert seen.rates[-1][0] == pytest.approx(pacer.learnt.requests_per_s, rel=0.01)
    assert 9.0 < pacer.learnt.requests_per_s < 11.0
    line = pacer.summary()
    assert "paced to " in line and " requests/s after " in line and " refusals in the first " in line, line


def test_stated_rate_headers_win_over_a_learnt_rate():
    clock = Clock()
    pacer = Pacer(PaceSettings(adaptive=True), clock=clock)
    _refuse_at_ten_a_second(pacer, clock)
    assert pacer.learnt is not None and pacer.learnt.paces
    pacer.observe_headers({"x-ratelimit-limit-requests": "6000", "x-ratelimit-remaining-requests": "6000"})
    assert pacer.learnt is None  # the server's own account paces from now on
    assert "6000 requests/min" in pacer.summary() and "paced to" not in pacer.summary()


def test_a_configured_budget_caps_the_learnt_rate():
    clock = Clock()
    pacer = Pacer(PaceSettings(adaptive=True, requests_per_minute=120), clock=clock)  # 2 a second
    pacer.learnt._set(50.0, None, clock.t)
    assert pacer.learnt.requests_per_s == pytest.approx(2.0)


def test_fixed_concurrency_learns_nothing():
    pacer = Pacer(PaceSettings(fixed=8))
    assert pacer.learnt is None
    pacer.release(pacer.try_acquire(), ok=False, overloaded=True, retry_after=0.0)
    assert pacer.rate_limited == 1 and pacer.limit == 8


def test_an_outage_does_not_collapse_a_learnt_rate_but_is_not_hammered():
    """Every request refused for a while (a gateway restarting): nothing was accepted between the refusals, so
    there is nothing to estimate, and the rate stays what it was; but after 16 refusals in a row the process sends
    one request per 2 s until one is answered (about 200 were sent in those 20 s before), then the rate again."""
    clock = Clock()
    pacer = Pacer(PaceSettings(adaptive=True), clock=clock)
    _refuse_at_ten_a_second(pacer, clock)
    rate = pacer.learnt.requests_per_s
    end, sent = clock.t + 20.0, 0
    while clock.t < end:
        started = pacer.try_acquire()
        if started is not None:
            sent += 1
            pacer.release(started, ok=False, overloaded=True, retry_after=0.0)
        clock.t += 0.005
    assert pacer.learnt.requests_per_s >= 0.9 * rate
    assert 16 <= sent <= 16 + 20 / 2 + 2, sent
    assert "held to one request per 2 s 1 times" in pacer.summary()
    clock.t += 2.0  # the trickle's next send
    started = pacer.try_acquire()
    assert started is not None
    pacer.release(started, ok=True)  # the gateway is back
    clock.t += 0.2
    sent = 0
    for _ in range(40):  # 0.2 s
        started = pacer.try_acquire()
        if started is not None:
            sent += 1
            pacer.release(started, ok=True)
        clock.t += 0.005
    assert sent >= 1.0 * rate * 0.2 * 0.5, sent  # at the rate again, not one per 2 s


@pytest.mark.parametrize("window_s,seed", [(60.0, 0), (10.0, 0), (10.0, 1)])
def test_a_gateway_that_counts_refused_requests_is_not_hammered(window_s, seed):
    """HAProxy's ``http_req_rate`` with ``track-sc`` before ``deny``: every attempt counts over a sliding window, the
    refused ones too, so a client sending at its learnt rate while refused keeps the window full for ever. It did:
    after the first window 100 % refused, about 50 requests a second at a budget of 10, 2,000 instances failed in
    4 minutes (HAProxy 2.6 itself, 60 s window: 100 % refused, 1,673 failed). Held to one request per 2 s after 16
    refusals in a row, until one is answered, no instance failed; but a 60 s window let its whole minute through at
    once, then refused for a minute, and the rate stayed at 33-40 a second of 10: 13-18 % refused after the fourth
    minute (seeds 0-3). Read over the window's ends (``_run_ended``), the rate is the budget: 1.9-2.9 % refused and
    0.92-0.95 used from 240 s. The first minutes cost more than before (120-360 s: 0.74 used, was 0.87; 9.9 %
    refused, was 15 %): the rate is read only once two runs ended after the first estimate."""
    gateway = Gateway(requests_per_minute=600, window_s=window_s, silent=True)
    procs, _ = simulate(gateway, seconds=600, seed=seed)
    first = measure(procs, gateway, t0=120, t1=360)
    sent = sum(1 for t in procs[0].sent if 120 <= t < 600) / 480
    assert first.failed == 0 and first.used >= 0.7, first
    assert first.refused_share <= (0.2 if window_s > 30 else 0.05), first
    assert sent <= 1.1 * 10.0, sent
    m = measure(procs, gateway, t0=240, t1=600)
    assert m.failed == 0 and m.refused_share <= 0.03 and m.used >= 0.85, m
    assert "held to one request per 2 s" in procs[0].pacer.summary()


@pytest.mark.parametrize("shards", [1, 2])
def test_haproxys_own_count_does_not_collapse_a_rate_after_a_trickle(shards):
    """HAProxy's ``http_req_rate`` as HAProxy counts it (``Gateway(freq_ctr_s)``: its freq_ctr, the period so far plus
    the last one weighed by the part still to go, every attempt counted; 600 in 60 s, no wait stated). A refusal of
    a request sent right after a trickle read what the gateway accepted since the oldest send kept, over seconds that
    were mostly the trickle's (one request per 2 s, our own pause): alone 10 requests a second learnt as 0.07, a
    shard's 5 as 0.06-0.16, and the climb from there took longer than the run. Seeds 0-3, 240-600 s: alone, 0.007
    of the budget used on one seed, 9.3 % refused on another; for 2 shards, one shard at 0.01-0.02 of its part on
    two seeds, both at 0.02 of the budget on a third. Read over the seconds outside trickles, and climbing at most
    4 x faster once a process trickled twice: alone 1.2-3.3 % refused, 0.62-0.96 used; 2 shards 1.7-3.0 %, 0.96-0.97
    used, the smallest shard at 0.08-0.98 of its part (three seeds under 0.12). With the rate set from the window a
    trickle's end reads (``_trickle_ended``) and a quiet cut read over the last such window: alone 0.3-0.6 % refused,
    0.99 used; 2 shards 0.8-2.3 %, 0.93-0.98 used, the smallest shard at 0.65-0.99 of its part."""
    for seed in range(4):
        gateway = Gateway(requests_per_minute=600, freq_ctr_s=60.0, silent=True)
        procs, _ = simulate(gateway, processes=shards, seconds=600, seed=seed, net_s=0.005)
        m = measure(procs, gateway, t0=240, t1=600)
        assert m.failed == 0 and m.used >= (0.95 if shards == 1 else 0.9), (seed, m)
        assert m.refused_share <= (0.01 if shards == 1 else 0.03) and min(m.shares) >= 0.6, (seed, m)
        assert all(p.pacer.learnt.requests_per_s >= 0.05 * 10.0 / shards for p in procs), seed


def test_the_minutes_after_the_first_behind_haproxys_minute_count_read_its_window():
    """A process alone behind HAProxy's count of every attempt over 60 s (600 a minute, no wait stated), from the end
    of the first minute: its first estimate read the tail of the minute's burst (or halvings left it at half the
    budget), the trickle then drained the count, and the climb from there overshot a count that remembers a minute,
    each refusal cutting halfway to the rate just refused. Seeds 0-3, 60-240 s: 4.9-9.4 % refused, 0.77-0.94 used.
    A trickle's end now sets the rate from what the gateway accepted since the last one (a whole window), and a
    refusal after a quiet span, once a process trickled, cuts to what was accepted over the last window as long as
    its longest trickle: 1.7-3.8 % refused, 0.86-0.97 used. Still over the 2 % the issue asks (docs/pacing.md)."""
    for seed in range(4):
        gateway = Gateway(requests_per_minute=600, freq_ctr_s=60.0, silent=True)
        procs, _ = simulate(gateway, seconds=240, seed=seed, net_s=0.005)
        m = measure(procs, gateway, t0=60, t1=240)
        assert m.failed == 0 and m.refused_share <= 0.04 and m.used >= 0.8, (seed, m)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_first_burst_that_spends_haproxys_minute_is_waited_out_with_a_trickle(seed):
    """HAProxy's count over a minute with the gateway near (no network between to interleave the answers, as on one
    host): the first burst spends the minute's 600 in half a second, and every request is refused for the rest of it.
    Nothing was accepted after the first refusal, so no estimate formed and each refusal halved the rate: 0.08 a
    second by 60 s, then the climb before an estimate reached 250 a second while the count let requests through, and
    19-39 % of the requests were refused from 60 s (0.50-0.53 of the budget used, the first estimate at 113-120 s).
    After 5 s with nothing accepted the process trickles, and the trickle's end reads the window: the first estimate
    at 66-67 s, 0.86-0.99 of the budget used, 0.5-4.4 % refused."""
    gateway = Gateway(requests_per_minute=600, freq_ctr_s=60.0, silent=True)
    procs, _ = simulate(gateway, seconds=240, seed=seed, net_s=0.0)
    m = measure(procs, gateway, t0=60, t1=240)
    assert procs[0].pacer.learnt.first[0] < 70.0
    assert m.failed == 0 and m.refused_share <= 0.05 and m.used >= 0.85, m


@pytest.mark.parametrize("shards", [1, 2])
def test_a_trickles_end_after_an_outage_does_not_read_the_outage_as_the_budget(shards):
    """A token bucket (600 a minute, a second of burst, no wait stated) that refuses every request for a minute (120 to
    180 s: a gateway restarting) and then is back: the processes trickle through the outage, and its end is a
    trickle's end. Read as a window (``_trickle_ended``), what was accepted since the last trickle, outage included,
    would set the rate far under the budget; refusals do not come all along in a bucket (a quiet span between them),
    so it is not read so, and the rate is the budget again within the 20 s after (seeds 0-2: 0.90-1.03 of it used,
    0.97-1.00 in the 40 s after, as before the rule; shards refused 0.7-0.8 % after where they were 1.2-1.5 %)."""
    for seed in range(3):
        gateway = Gateway(requests_per_minute=600, burst_s=1.0, silent=True,
                          changes=((120.0, 0.01, None), (180.0, 600.0, None)))
        procs, _ = simulate(gateway, processes=shards, seconds=240, seed=seed, net_s=0.005)
        assert all(p.pacer.learnt.trickles >= 1 for p in procs), seed  # the outage was trickled through
        m = measure(procs, gateway, t0=200, t1=240)
        assert m.failed == 0 and m.refused_share <= 0.02 and m.used >= 0.95, (seed, m)
        assert min(m.shares) >= 0.6, (seed, m)


@pytest.mark.parametrize("seed", [4])
def test_shards_behind_haproxy_lose_no_instance_while_they_learn_its_budget(seed):
    """Two shards behind HAProxy's count of every attempt over 60 s (600 a minute, no wait stated). Learning the
    budget, a shard sends over it for a while, and HAProxy counts those refused requests too, so it keeps refusing.
    With ``max_attempts`` only (``rate_limit_wait_s=0``, the pool's rule before), instances refused six times in
    the first two minutes failed: 59 on seed 4, 87 on seed 12 (and 11, 12, 3 on seeds 5, 8, 10 of 16). Seed 12's
    failures were new instances' first refusals, so 24 % of requests were refused from 240 s on. Waiting out a rate
    limit for ``rate_limit_wait_s`` (ten minutes) loses none on any of the 16 seeds; seed 12 is at 9.4 % refused.
    Since a trickle's end reads the window (``_trickle_ended``), only seed 4 of 16 still loses instances without the
    wait (26), and from 240 s every seed is refused 0.7-2.3 %."""
    runs = {}
    for wait in (0.0, RetryPolicy().rate_limit_wait_s):
        gateway = Gateway(requests_per_minute=600, freq_ctr_s=60.0, silent=True)
        procs, _ = simulate(gateway, processes=2, seconds=600, seed=seed, net_s=0.005,
                            retry_policy=RetryPolicy(rate_limit_wait_s=wait))
        runs[wait] = (measure(procs, gateway, t0=0, t1=600), measure(procs, gateway, t0=240, t1=600))
    (before, _), (whole, late) = runs.values()
    assert before.failed > 0, before  # the seed shows the loss it is here for
    assert whole.failed == 0 and late.used >= 0.9 and late.refused_share <= 0.03, (whole, late)


@pytest.mark.parametrize("shards,fixed_window_s,window_s", [(1, 60.0, None), (2, 60.0, None), (3, 60.0, None),
                                                          (2, None, 60.0)],
                         ids=["alone-per-minute", "2-shards-per-minute", "3-shards-per-minute", "2-shards-sliding"])
def test_a_gateway_that_counts_per_window_is_paced_to_its_budget(shards, fixed_window_s, window_s):
    """A count per window of the clock (Kong's rate limiting, Envoy's rate limit service: 600 a minute, refused for
    the rest of the minute once spent, no wait stated), alone and for a Job's shards (600 a minute for 2, 900 for 3),
    and HAProxy's sliding count of every attempt for 2 shards. Seeds 0-3, 240-600 s:

    * shards kept sending at their rate while refused: 91 % of their requests refused and 22,381-33,627 instances
      failed (HAProxy's 60 s window: 100 % refused, nothing used). Once a shard too held to one request per 2 s after
      16 / its share refusals in a row: 17-21 % refused, none failed (HAProxy: 18 %, 0.90 used);
    * the rate learnt read a window's whole count over the seconds it took to send it (a process alone: 7 % refused,
      44-92 requests a second learnt of 10). Read from the end of one refused run to the end of the next, trickling
      after 4 refusals and climbing at most 4 x faster once it was: alone 1.3-1.4 % refused, 2 shards 2.4-2.5 %, 3
      shards 2.5 % (the smallest at 0.62-0.79 of its part), all the budget used; HAProxy's window with 2 shards
      6.6-7.3 % refused, 0.86-0.90 used;
    * each shard was refused four times a window before it trickled. Trickling at the first refusal with nothing
      accepted since the last cut, once a rate was read over windows: alone 0.83-0.88 % refused, 2 shards 1.5-1.6 %,
      3 shards 1.5-1.6 % (the smallest at 0.58-0.82), HAProxy's window with 2 shards 2.7-5.4 %, 0.88-0.96 used;
    * a trickle's end sets the rate from the window it read (``_trickle_ended``): 3 shards per minute, the smallest
      at 0.85-0.93 of its part (2 shards 0.93-0.99, was 0.82-0.99); HAProxy's window with 2 shards 1.5-3.9 %."""
    rpm = 300.0 * shards if shards > 1 else 600.0
    gateway = Gateway(requests_per_minute=rpm, silent=True, fixed_window_s=fixed_window_s, window_s=window_s)
    procs, _ = simulate(gateway, processes=shards, seconds=600)
    m = measure(procs, gateway, t0=240, t1=600)
    assert m.failed == 0, m
    assert m.refused_share <= (0.02 if fixed_window_s else 0.1), m
    assert m.used >= (0.95 if fixed_window_s else 0.85), m
    assert min(m.shares) >= (0.8 if fixed_window_s else 0.6), m
    if fixed_window_s:
        assert "read over the gateway's windows" in procs[0].pacer.summary()


def test_the_learnt_rates_refusals_and_waiting_are_prometheus_series_per_deployment():
    from medhelm.telemetry import PacingMetrics, Telemetry

    t = Telemetry("test")
    clock = Clock()
    pacer = Pacer(PaceSettings(adaptive=True), clock=clock, observer=PacingMetrics(t, "gw/a"))
    _refuse_at_ten_a_second(pacer, clock)
    pacer.observer.waited(1.5)

    def value(name):
        return t.registry.get_sample_value(name, {"deployment": "gw/a"})

    assert value("medhelm_pacing_learnt_requests_per_second") == pytest.approx(pacer.learnt.requests_per_s, rel=0.01)
    assert value("medhelm_pacing_learnt_tokens_per_second") is None  # no request counted tokens
    assert value("medhelm_rate_limited_total") == pacer.rate_limited > 0
    assert value("medhelm_pacing_wait_seconds_total") == 1.5


def test_a_shards_fair_part_is_read_from_fractional_retry_after_only():
    """Shards climb by a unit they share, share / one request's refill time, read from the longest of the last
    waits the gateway stated; a gateway that states whole seconds, or a process alone, gives none."""
    from medhelm.inference.pacing.learnt import LearntRate

    def learnt(share, waits):
        clock = Clock()
        rate = LearntRate(clock, share=share)
        for i, wait in enumerate(waits):
            clock.t = 0.1 * (i + 1)
            rate.sent(clock.t, 0.0)
            rate.refused(clock.t, 0.0, wait)
        return rate

    assert learnt(0.5, [0.05, 0.1, 0.08])._fair() == pytest.approx(0.5 * 3 / 4 / 0.1)
    assert learnt(0.5, [0.05, 0.1])._fair() is None  # too few waits yet
    assert learnt(0.5, [1.0, 2.0, 1.0])._fair() is None  # whole seconds: no part to read
    assert learnt(1.0, [0.05, 0.1, 0.08])._fair() is None  # a process alone climbs by its own rate


def test_the_mock_states_retry_after_in_whole_seconds_when_asked():
    """RFC 9110's delay-seconds: the wait rounded up, at least 1; otherwise to the millisecond; or, silent, not at
    all (a bare 429)."""
    import json
    import urllib.error
    import urllib.request

    from medhelm.devtools.mock_openai import MockOpenAIServer, main
    from medhelm.inference.pacing import retry_after_seconds

    def refused_wait(whole, silent=False):
        with MockOpenAIServer(requests_per_minute=6, burst_s=10.0, whole_seconds=whole, silent=silent) as srv:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
            for _ in range(3):  # the bucket holds one request: the second or third is refused
                req = urllib.request.Request(f"{srv.base_url}/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(req, timeout=10).read()
                except urllib.error.HTTPError as err:
                    assert err.code == 429
                    return err.headers["Retry-After"]
        raise AssertionError("never refused")

    whole, fraction = refused_wait(True), refused_wait(False)
    assert whole.isdigit() and 1 <= int(whole) <= 10, whole  # 6 a minute: about 10 s to wait
    assert retry_after_seconds({"retry-after": whole}) == float(whole)
    assert "." in fraction and 0.0 < float(fraction) <= 10.0, fraction
    assert refused_wait(False, silent=True) is None
    with pytest.raises(SystemExit) as bad:
        main(["--requests-per-minute", "600", "--whole-seconds", "--silent"])
    assert bad.value.code == 2
    with pytest.raises(SystemExit) as bad:
        main(["--requests-per-minute", "600", "--burst-s", "-1"])
    assert bad.value.code == 2


def test_the_mock_counts_per_window_of_the_clock_when_asked(monkeypatch):
    """``fixed_window_s``: a window's part of the budget let through, the rest of the window refused with the seconds
    to the next window, the refused ones not counted, and the count starting again at the next window (the clock
    is the test's: no boundary falls by chance)."""
    import json
    import urllib.error
    import urllib.request

    from medhelm.devtools import mock_openai
    from medhelm.devtools.mock_openai import MockOpenAIServer

    now = [1_000_040.0]  # 20 s into a minute of the clock (1,000,020 is a multiple of 60)
    monkeypatch.setattr(mock_openai.time, "time", lambda: now[0])
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

    def send(srv) -> str | None:
        req = urllib.request.Request(f"{srv.base_url}/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10).read()
            return None
        except urllib.error.HTTPError as err:
            assert err.code == 429
            return err.headers["Retry-After"]

    with MockOpenAIServer(requests_per_minute=3, fixed_window_s=60.0) as srv:
        assert [send(srv) for _ in range(3)] == [None, None, None]
        assert float(send(srv)) == pytest.approx(40.0)  # the rest of the minute
        now[0] += 39.0
        assert float(send(srv)) == pytest.approx(1.0)  # refusals were not counted, nor let through
        now[0] += 1.5  # half a second into the next minute: its count starts again
        assert [send(srv) for _ in range(3)] == [None, None, None]
        assert float(send(srv)) == pytest.approx(59.5)
    with MockOpenAIServer(requests_per_minute=3, fixed_window_s=60.0, whole_seconds=True) as srv:
        assert [send(srv) for _ in range(3)] == [None, None, None]
        assert send(srv) == "60"  # 59.5 s to the next minute, rounded up
    with pytest.raises(ValueError):
        MockOpenAIServer(requests_per_minute=3, fixed_window_s=60.0, rate_headers=True)
