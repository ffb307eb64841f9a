"""Pacing: how many requests a deployment has in flight, and how fast new ones may start.

``ClientPool`` gives every deployment one ``Pacer`` (candidate and judge roles share it, so judges and candidates
on one deployment share its concurrency and its rate budget). A pacer composes three limits, each optional:

* **concurrency** — fixed (the deployment's ``max_concurrency: N`` or the run's ``--max-concurrency N``: a hard
  ceiling, never exceeded), or adaptive (``auto``, the default for remote kinds): ``AdaptiveLimit`` below, always
  under the run's ceiling;
* **rate budget** — requests and tokens per minute (``RateBudget``, token buckets), from the deployment's
  ``rate_limits`` and corrected by what the server says it has left (``x-ratelimit-remaining-*``,
  ``anthropic-ratelimit-*-remaining``); a bucket the configuration does not set is learnt from the server's
  ``*-limit-*`` headers;
* **pause** — after a 429/503 or a provider's overload code, no request of the deployment starts before the
  server's ``Retry-After`` (``retry-after-ms``) has passed, and an adaptive limit halves.

``AdaptiveLimit``, for a process alone on its server (the usual case), judges every change of limit by the
throughput's statistics. It measures in *rounds*: ``limit`` completions, about one latency of a closed loop; a
batching server answers a round together, so a rate counted over whole rounds is not biased by where a window cuts a
batch, and the rounds' spread, widened by their autocorrelation (the machine's load drifts), is the rate's standard
error. A window is 8 rounds (at least 16 completions), after one round let pass for the queue to settle. A *trial*
compares two limits: more in flight must raise throughput by a bar per doubling (with a standard error to spare) and
by two standard errors more than nothing; it is shown not to when the gain's upper bound falls short of the bar;
between the two, the trial measures the limits again in turn (A B A B: a drift of the load cancels) up to 32 rounds
each, in windows of 32 rounds from then on: each switch costs a batching server throughput beyond the round let
pass (its batch drains or refills), so an undecided trial switches three times, not eight. The bar tells a pure
queue from a batching server. A *pure queue* has a knee: every doubling pays in
proportion up to its capacity, the next one nothing but the few per cent a queue at the server wins by hiding the
client's own hiccups, for double the latency. A *batching server* (vLLM) trades latency for throughput all along:
its gains shrink before they end. So the first doubling, and one right after a doubling that paid 80 % or more, must
bring ``KNEE_GAIN`` (15 %); one after a smaller gain, ``MIN_GAIN`` (3 %). Slow start doubles from 4 while a doubling
pays (taken on one window), and stops where one is shown not to (on two windows at the higher limit, the lower
between) or at ``LATENCY_BOUND`` (16) x the lowest median seen; if it cannot tell after 32 rounds a side, it takes
its better estimate. Past the knee (the last doubling paid under ``KNEE_GAIN``), where the next doubling surely
doubles the latency and likely pays less than the last, it stops as soon as a long window at the lower limit leaves
the gain's estimate under the bar (against that window, or against the mean of it and the lower limit's window just
before the higher's: A B A, a drift cancels), and climbs only on a first pair that clears the bar by two standard
errors or on the two limits measured in turn. So a pure queue stops at its capacity, and a batching server is
climbed while the gains are real: latency is not a reason to stop below the bound, throughput is the target, but a
doubling above the server's batch (which gains nothing) is left early. Then it cruises, and every ``cruise`` (8)
windows tries a neighbouring limit, up by about sqrt(limit) and down by a fifth in turn, as a trial (with the bar
slow start ended on) whose incumbent is the windows just measured; a shown verdict moves the limit only on the
candidate measured twice, and a probe that cannot tell after 32 rounds a side takes its better estimate too (so a
pure queue whose capacity lies between powers of two, where slow start overshot to the next one, comes down to it: a
nil gain is never shown to fall short of a bar of ~1 %). A cruise window whose median is over ``latency_tolerance``
(3) x the median measured when the limit was chosen means someone else is queueing at the server: the limit shrinks
in proportion (the latency it had, by Little's law) and slow start runs again from there. A window in which no
request had to wait for a slot teaches nothing about the limit and changes nothing. From one client, a server that
batches better with
more in flight looks like a queue shared with other clients whose share it takes by queueing more (more throughput,
latency up by Little's law, in both): processes that share a server without knowing it are bounded by
``LATENCY_BOUND`` only, not made fair; a Job's shards are made fair as below.

A Job's shards (``PaceSettings.share`` < 1) keep the controller that shares: it measures ``max(16, 2 x limit)``
completions a window; slow start doubles while a doubling raises throughput by at least 15 % and the median latency
grows less than 1.6-fold; then it cruises, and every ``cruise`` windows probes up by about sqrt(limit) (kept if
throughput rose by at least a quarter of the proportional gain while the median latency grew by less than three
quarters of it) or down by a fifth (kept if throughput fell by at most a quarter of the proportional loss). A refused
probe up is followed by the probe down every time at first; each refused probe down doubles how many refused probes
up it takes to try one again, up to ``PROBE_BACKOFF`` (8), and a new limit or a restart of slow start ends the
backoff. At a server the shards fill, every probe down leaves a fifth of their slots empty for a window, all at once
(shards that restarted together probe together), while a probe up costs only latency, and is how a shard below its
share takes some back; so probes up keep their pace. Simulated, one shard-mode client at a server it filled kept
96.6 % of its throughput probing down every time, 99.6 % with the backoff; four shards gained about half a point. A
cruise whose median is over 1.3 x the base tries that step down after two windows instead (once per limit). When a
window's median latency is over ``latency_tolerance`` (3) x the lowest median seen (the base, a minimum that forgets
0.2 % a window), the server is queueing for everyone: the limit follows limit x (tolerance x base / latency) + 1 each
window until the median is back under 1.5 x the base. Every shard sees the same latency and applies the same rule, so
they back off together and settle on shares of the server without a coordinator.

That rule is fair only if every client knows the same base latency, and a shard that joins a server already queueing
takes the queue for the base (pods of one Job start seconds apart; simulated, the shard that came first then got under 3
% of the requests). So a Job's shards (``PaceSettings.share`` < 1: the chart and ``k8s submit`` set
``MEDHELM_SHARD_PARALLELISM``) *drain* at every multiple of ``DRAIN_EVERY_S`` on the wall clock — the one clock all pods
share (NTP), so clients that never talk drain at the same instant: each halves its limit until requests sent after the
cut come back, and takes their median as its base (never raising it). If the latency of the requests in flight at the
cut (sent by every shard in the same seconds, to the same queue), or the last window's median, was over
``RESTART_QUEUE`` (1.4) x that base, the queue was a shared, standing one (a client alone never keeps one: its probes
refuse to just queue), and every shard restarts slow start from ``RESTART_LIMIT`` (8, a doubling above ``START_LIMIT``:
at a batching server every drain restarts, and each doubling costs a window) at the same moment: they double in step and
stop together, at equal limits. After any cut (a drain, a restart, a probe down, an overload) a window first lets pass
the requests in flight at the old limit: counted, they made a restart's first window look 4-6 x its rate, the next
doubling "did not pay", and that shard stayed at 8 while the others doubled on (simulated, at a server of 128 workers
one shard of four got under 60 % of a fair share in 21-24 runs of 24, at 64 in 9-14; now in none, nor at 16 workers or
with 2 or 8 shards). Every shard drains, however few it has in flight: one that sat out would not restart with the
others. A drain that finds no queue makes the next one wait for the next multiple of ``QUIET_DRAINS`` periods (on the
wall clock: shards that restarted at different drains meet again), and the drain at every multiple of ``RESYNC_DRAINS``
periods (a minute) restarts slow start whatever it found: between restarts shards drift apart where the server is full
but not queueing, with nothing to restart on. A drain halves the limit rather than quartering it: half the load drains a
standing queue of up to the server's capacity, and at a batching server a quarter of the load is half its rate (vLLM on
CPU, 16 against 64 in flight). Simulated (four shards 1, 2 or 4 s apart, counted 60–120, 120–180 or 180–300 s, 240 runs
each), the smallest shard got under 15 % in none of the runs at a server whose service times vary by 10 %, and in 1.7 %
at one that serves in lockstep (1 %, as the benchmark's mock), against 5.2 % and 10.8 % when each shard judged its own
last window, sat the drains out at 4 in flight or under and restarted only on a queue; the total is 0.984–0.990 x one
process at its best (0.975–0.978 restarting at 4 without the skip). The coordinator is the server's latency plus the
wall clock; nothing of ours runs between the shards. A process that is not one of several shards never drains (its solo
behaviour is above). Against a batching server (vLLM) a latency that grows with what the server holds looks like a
shared queue at every drain, so shards restart every 10 s, in step: fair, and what a restart costs is what they lose.
Restarting at 4 and counting the returning requests, four shards got 0.91–0.95 x one process at fixed 64 on real vLLM
(CPU; smallest share 18–20 %, 3 runs), 0.73–0.83 x simulated; restarting at 8 with the skip, 1.018 and 0.994 x (smallest
21.2 and 19.8 %, 2 runs), 0.88–0.93 x simulated. Letting slow start run through the drains instead got 1.006 x on real
vLLM but a shard at 10.5 % (each shard's drained base differed, 0.3–1.0 s, so they restarted at different drains): not
done.

Failure semantics: pacing never fails a request; it only delays its start. The controller never raises: a window it
cannot judge (no request waited, no rate) changes nothing, a trial that cannot tell ends on a limit it measured, and
the user's fixed number (or the run's ceiling) bounds every limit it tries. A waiter that is cancelled leaves the
queue having taken nothing; a slot is released exactly once per acquire, whatever the attempt's outcome (the pool
releases in ``finally``). Header values that do not parse are ignored (a server's odd header never stops a run).
Time comes from an injected clock, so the controller runs deterministically on a simulated one in tests."""

from __future__ import annotations

import asyncio
import collections
import email.utils
import logging
import math
import re
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("medhelm.pacing")  # the controller's trials at DEBUG (numbers only, never a request)

AUTO = "auto"
OVERLOAD_STATUS = frozenset({429, 503, 529})  # too many requests, unavailable, Anthropic's "overloaded"
AUTO_CEILING = 256
_CONGESTED_WINDOWS = 64  # requests in flight a run allows at most under ``--max-concurrency auto``
START_LIMIT = 4
RESTART_LIMIT = 8  # shards restart slow start here after a drain (see the module docstring: one doubling saved)
DRAIN_EVERY_S = 10.0  # wall-clock period of the synchronised drains that measure the base latency
QUIET_DRAINS = 3  # after a drain that found no shared queue, the next is at a multiple of this many periods
RESYNC_DRAINS = 6  # the drain at every multiple of this many periods restarts slow start, queue or not (a minute)
PROBE_BACKOFF = 8  # shards: after refused probes down, one probe down per this many refused probes up at most
RESTART_QUEUE = 1.4  # a median before the drain over this x the drained one: a standing queue, shared
DRAIN_DIVISOR = 2  # a drain divides the limit by this (halves: a quarter cost a batching server half its rate)
PROBE_QUEUE_SHARE = 0.75  # a probe up that grows the median by more than this share of the gain only queued
# a process alone on its server (no drains) judges each change of limit by the throughput's statistics:
MIN_GAIN = 0.03  # more in flight must pay at least this much more throughput per doubling of the limit ...
KNEE_GAIN = 0.15  # ... or this much right after a doubling that paid in proportion (a knee: see ``_need``)
PROPORTIONAL = 0.8  # a doubling that raised throughput by this much or more: the server had free slots
Z = 2.0  # standard errors a gain must clear to be believed (and a shortfall to be believed)
MIN_ROUNDS = 8  # rounds (``limit`` completions each) a window measures, at least 16 completions
MAX_ROUNDS = 32  # rounds a trial measures at either limit before it takes its better estimate
ALTERNATE_ROUNDS = 32  # rounds a window measures once a trial alternates (see ``_solo_window``)
SE_FLOOR = 0.002  # the smallest relative standard error believed (a perfectly regular server)
LATENCY_BOUND = 16.0  # no more in flight once the median is this many times the lowest median seen
# (16, not 10: vLLM on CPU answers its full batch of 64 in 9.0-9.7 s against 0.9-1.2 s at 4 in flight, so a
# bound of 10 stopped the climb one doubling short of the server's own batch size, where throughput was 3-9 % higher)


# --------------------------------------------------------------------------------------------
# the adaptive concurrency controller (pure: no asyncio, an injected clock)


@dataclass
class _Window:
    limit: int
    skip: int  # completions to let pass before measuring (the queue settles after a change)
    target: int  # completions to measure (``rounds`` > 0: rounds to measure instead)
    rounds: int = 0
    first_t: float | None = None
    last_t: float = 0.0
    count: int = 0
    latencies: list[float] = field(default_factory=list)
    limited: bool = False  # some request waited for a slot during the window: the limit was binding
    anchor: float | None = None  # when counting began (the completion that ended the skip)
    durations: list[float] = field(default_factory=list)  # seconds each round of ``limit`` completions took

    def throughput(self) -> float:
        if self.first_t is None or self.count < 2 or self.last_t <= self.first_t:
            return 0.0
        return (self.count - 1) / (self.last_t - self.first_t)

    def median(self) -> float:
        s = sorted(self.latencies)
        return s[len(s) // 2] if s else 0.0

    def full(self) -> bool:
        return len(self.durations) >= self.rounds if self.rounds else self.count >= self.target


@dataclass
class _Sample:
    """Rounds measured at one limit, pooled over windows: its throughput and that throughput's standard error.

    A round is ``limit`` completions, about one latency of a closed loop: a batching server answers a round
    together, so a rate counted over whole rounds from the completion before them is not biased by where a window
    cuts a batch, and the rounds' spread (batch means) is the throughput's honest uncertainty, whatever made it
    (counting, the server's batching, a loaded machine within the window)."""

    limit: int
    durations: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    windows: int = 0

    last: list[float] = field(default_factory=list)  # the rounds of the last window added

    def add(self, w: _Window) -> None:
        self.durations += w.durations
        self.latencies += w.latencies
        self.windows += 1
        self.last = list(w.durations)

    def rate(self) -> float:
        total = sum(self.durations)
        return self.limit * len(self.durations) / total if total > 0 else 0.0

    def rel_se(self) -> float:
        """The rate's relative standard error: the rounds' spread over sqrt(their number), widened by their lag-1
        autocorrelation (a slow drift of the machine's load makes neighbouring rounds alike: fewer independent
        ones than rounds)."""
        d = self.durations
        k = len(d)
        if k < 3:
            return math.inf
        mean, var = statistics.fmean(d), statistics.pvariance(d)
        if mean <= 0:
            return math.inf
        rho = sum((a - mean) * (b - mean) for a, b in zip(d, d[1:])) / ((k - 1) * var) if var > 0 else 0.0
        rho = min(0.9, max(0.0, rho))
        return max(SE_FLOOR, math.sqrt(var * k / (k - 1) * (1 + rho) / (1 - rho) / k) / mean)

    def median(self) -> float:
        s = sorted(self.latencies)
        return s[len(s) // 2] if s else 0.0


class AdaptiveLimit:
    """Requests in flight for one deployment under ``auto``; read ``limit``, report completions and overloads."""

    def __init__(self, ceiling: int, *, start: int = START_LIMIT, cruise: int = 8, latency_tolerance: float = 3.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] | None = None,
                 drain_every: float = 0.0) -> None:
        if ceiling < 1:
            raise ValueError("ceiling must be >= 1")
        self.ceiling = ceiling
        self.limit = max(1, min(start, ceiling))
        self.plateau: int | None = None  # the limit slow start found (None while starting)
        self.phase = "startup"  # startup | cruise | probe_up | probe_down
        self._cruise = cruise
        self._tolerance = latency_tolerance
        self._clock = clock
        self._window = self._new_window()
        self._prev: tuple[int, float, float] | None = None  # startup: (limit, throughput, median) of the last window
        self._ref: collections.deque[float] = collections.deque(maxlen=4)  # cruise throughputs at this limit
        self._ref_med: collections.deque[float] = collections.deque(maxlen=4)  # and their median latencies
        self._ref_limit = self.limit
        self._cruising = 0
        self._medians: collections.deque[float] = collections.deque(maxlen=64)
        self._base: float | None = None  # the lowest median seen, drifting up 0.2 % a window (a slow forgetting)
        self._last_cut = -math.inf
        self._congested = 0  # windows left of additive-only growth after the latency guard fired
        self._down_refused: int | None = None  # the limit at which the last probe down lost throughput
        self._probe_from = self.limit  # the limit a probe started from (it returns there when refused)
        self._backoff = 1  # a refused probe up is followed by a probe down once in this many (PROBE_BACKOFF)
        self._ups_refused = 0  # refused probes up since the last probe down
        # Drains happen at multiples of ``drain_every`` seconds of the wall clock, the one clock every process of a
        # cluster shares (NTP): all clients of a server drain together (see the module docstring).
        self._wall = wall or (time.time if clock is time.monotonic else clock)
        self._drain_every = drain_every
        self._drain_epoch = self._epoch()
        self._drain_from = self.limit
        self._at_cut: list[float] = []  # latencies of the requests in flight at a drain's cut
        # Alone on its server (no drains), a process judges each change of limit by statistics: a trial measures
        # two limits, alternating, until more in flight is shown to pay or shown not to (``_pays``).
        self._solo = drain_every <= 0
        self._trial: str | None = "startup" if self._solo else None  # startup | up | down (the probe's direction)
        self._lo = _Sample(self.limit)
        self._hi = _Sample(min(2 * self.limit, ceiling))
        self._expect: float | None = None  # the median latency measured at the limit when it was chosen
        self._held: collections.deque[_Window] = collections.deque(maxlen=4)  # cruise windows at this limit
        self._next_probe = "up"
        self._alternating = False  # the trial measures its two limits in turn
        self._before = _Sample(self.limit)  # the incumbent's window right before the candidate's first
        # The gain a doubling must bring. A pure queue has a knee: each doubling pays in proportion up to its
        # capacity, the next one nothing but a few per cent from the client's own hiccups (a queue at the server
        # hides them) for double the latency. A batching server's gains shrink before they end: latency is traded
        # for throughput all along. So the first doubling, and one right after a doubling that paid in proportion,
        # must bring KNEE_GAIN; one after a doubling that paid less (the server trades), MIN_GAIN. Probes keep the
        # bar of the doubling that ended slow start.
        self._need = KNEE_GAIN
        self._flat = False  # the last doubling paid under KNEE_GAIN: slow start is past the knee (``_trial_window``)
        if self._solo:
            self._window = self._solo_window(skip=self.limit)
        self.drains = 0  # how many drains measured the base (tests, the summary)
        self.restarts = 0  # how many of them found a shared standing queue and restarted slow start
        self.changes = 0  # how often the limit changed (tests, metrics)

    # -- what the gate reports

    def note_waiting(self) -> None:
        """A request found every slot taken: the limit is what holds it back."""
        self._window.limited = True

    def completed(self, latency_s: float) -> None:
        """A request finished (any answer the server gave, an error other than overload included)."""
        if self.phase != "drain" and self._drain_every > 0:
            epoch = self._epoch()
            if epoch > self._drain_epoch:
                self._drain_epoch = epoch
                self._drain()
        w = self._window
        now = self._clock()
        if w.skip > 0:
            w.skip -= 1
            w.anchor = now
            if self.phase == "drain":  # a request in flight at the cut: the queue every shard saw then
                self._at_cut.append(latency_s)
            return
        if w.anchor is None:
            w.anchor = now
        if w.first_t is None:
            w.first_t = now
        w.last_t = now
        w.count += 1
        w.latencies.append(latency_s)
        if w.rounds and w.count % w.limit == 0:  # a round ends: its length, from the end of the last one
            w.durations.append(now - w.anchor)
            w.anchor = now
        if w.full():
            self._decide(w) if not self._solo else self._decide_solo(w)

    def overloaded(self) -> None:
        """The server said too many (429, 503, overloaded): halve, at most once per median latency."""
        now = self._clock()
        recent = self._medians[-1] if self._medians else 0.0
        if now - self._last_cut < max(recent, 0.05):
            return
        self._last_cut = now
        if self.plateau is None:
            self.plateau = max(1, self.limit // 2)
        if self._solo:
            self._trial, self._expect = None, None
            self._held.clear()
            self._cruising = 0
            self._go(max(1, self.limit // 2), "cruise")
        else:
            self._set(max(1, self.limit // 2), "cruise")

    @property
    def base_latency(self) -> float | None:
        return self._base

    def _epoch(self) -> int:
        return math.floor(self._wall() / self._drain_every) if self._drain_every > 0 else 0

    def _drain(self) -> None:
        """Halve the limit until requests sent after the cut have come back (their latency is the server's
        with a short queue); ``_decide`` then returns to the limit we left, or restarts slow start."""
        self._drain_from = self.limit
        self._at_cut = []
        low = max(1, self.limit // DRAIN_DIVISOR)
        self.changes += 1
        self.limit, self.phase = low, "drain"
        # the requests in flight at the cut (up to the old limit) come back first; measure the ones after them
        self._window = _Window(low, skip=self._drain_from, target=max(2, low))

    # -- decisions, one per measured window

    def _new_window(self, skip: int | None = None) -> _Window:
        return _Window(self.limit, skip=self.limit if skip is None else skip, target=max(16, 2 * self.limit))

    def _set(self, limit: int, phase: str) -> None:
        limit = max(1, min(self.ceiling, limit))
        if limit != self.limit:
            self.changes += 1
        if log.isEnabledFor(logging.DEBUG) and (limit, phase) != (self.limit, self.phase):
            log.debug("pacing shard: %d in flight (%s) -> %d (%s); last median %.3g s, base %.3g s", self.limit,
                      self.phase, limit, phase, self._medians[-1] if self._medians else 0.0, self._base or 0.0)
        if phase == "cruise" and (limit != self._ref_limit or self.phase != "cruise"):
            if limit != self._ref_limit:
                self._ref.clear()
                self._ref_med.clear()
                self._end_backoff()
            self._ref_limit = limit
            self._cruising = 0
        # after a cut the requests in flight at the old limit come back first (the module docstring: counted, they
        # split the shards' slow starts); the window measures the ones sent after them, as ``_go`` does alone
        old, self.limit, self.phase = self.limit, limit, phase
        self._window = self._new_window(skip=max(old, limit))

    def _decide(self, w: _Window) -> None:
        x, median = w.throughput(), w.median()
        if self.phase == "drain":  # the latency with the queue drained: a base no older measurement can hide
            self.drains += 1
            # The queue before the drain is judged on the requests that were in flight at the cut (every shard's
            # were sent in the same seconds to the same queue) and on the last window, whichever shows more: each
            # shard's last window ended at its own moment, and a server that serves in lockstep lets one shard's
            # whole round through a queue the others wait in. Judged on the last window alone, shards near the bar
            # split, some restarted and some not, and the ones that restarted alone doubled past the others.
            cut = sorted(self._at_cut)
            before = max(cut[len(cut) // 2] if cut else 0.0, self._medians[-1] if self._medians else 0.0) or median
            resync = self._drain_epoch % RESYNC_DRAINS == 0  # every shard drains then (a multiple of QUIET_DRAINS)
            self._base = median if self._base is None else min(self._base, median)
            restart = resync or before > RESTART_QUEUE * self._base
            log.debug("pacing shard drain: %d in flight at the cut, median %.3g s; drained %.3g s, base %.3g s: %s",
                      self._drain_from, before, median, self._base, "restart" if restart else "quiet")
            if restart:
                # A standing queue the drain revealed: shared, since a client alone never keeps one (its probes
                # refuse to just queue). Every client of the server drained at this same instant and saw the same;
                # all restart slow start from the same limit, double in step and stop together: equal shares.
                # And once a minute whatever the drain found: between restarts shards drift apart where the server
                # is full but not queueing (on the real mock one shard sat at 4 in flight and three at 11-12, a
                # total of 38 at a capacity of 32 and a median 1.1 x the base: nothing to restart on).
                self.restarts += 1
                self._prev = None
                self._end_backoff()
                self._set(RESTART_LIMIT, "startup")
            else:
                # No shared queue: the next look is at the next multiple of QUIET_DRAINS periods of the wall
                # clock (a drain costs a little throughput); a multiple, not QUIET_DRAINS periods from this one,
                # so shards that last restarted at different drains still drain together.
                self._drain_epoch = (self._drain_epoch // QUIET_DRAINS + 1) * QUIET_DRAINS - 1
                self._set(self._drain_from, "cruise")
            return
        base = self._base
        self._medians.append(median)
        self._base = median if base is None else min(base * 1.002, median)
        slow = base is not None and median > self._tolerance * base
        if not w.limited:  # demand, not the limit, held throughput: nothing learnt about the limit
            self._window = self._new_window()
            return
        if self.phase == "startup":
            if self._prev is not None and (x < 1.15 * self._prev[1] or median > 1.6 * self._prev[2]):
                # doubling did not pay (or only queued: the latency nearly doubled): the last limit that did
                self.plateau = self._prev[0]
                self._set(self._prev[0], "cruise")
            elif slow or self.limit >= self.ceiling:
                self.plateau = self.limit
                self._set(self.limit, "cruise")
            else:
                self._prev = (self.limit, x, median)
                self._set(self.limit * 2, "startup")
            return
        if self.phase == "cruise":
            if slow or self._congested:
                # Shared and queueing (or a batching server past its knee): every client of the server sees the
                # same latency, so every client applies the same gradient. limit x (tolerance x base / latency)
                # + 1 has one fixed point for all of them alike: equal shares, without a coordinator. Probing
                # resumes once the queue has drained (the median back under 1.5 x the base).
                self._congested = 1 if median > 1.5 * (base or median) else 0
                gradient = min(1.0, self._tolerance * (base or median) / median) if median > 0 else 1.0
                self._set(max(1, math.floor(self.limit * gradient) + 1), "cruise")
                return
            self._ref.append(x)
            self._ref_med.append(median)
            self._cruising += 1
            # a queue of our own (median well over the base): try a smaller limit soon, not after a full cruise
            queued = base is not None and median > 1.3 * base and self._cruising >= 2 \
                and self._down_refused != self.limit
            if queued:
                self._probe_down()
            elif self._cruising >= self._cruise:
                up = min(self.ceiling, self.limit + max(1, math.ceil(math.sqrt(self.limit))))
                if up > self.limit:
                    self._probe_from = self.limit
                    self._set(up, "probe_up")
                else:
                    self._probe_down()
            else:
                self._window = self._new_window()
            return
        ref = sum(self._ref) / len(self._ref) if self._ref else x
        start = self._probe_from
        ref_med = sorted(self._ref_med)[len(self._ref_med) // 2] if self._ref_med else median
        if self.phase == "probe_up":
            gain = self.limit / start - 1
            # More in flight must pay in throughput, and must not just queue: at a saturated server the median
            # latency grows in proportion to the limit (Little's law), whatever a noisy throughput says.
            if x >= ref * (1 + 0.25 * gain) and median <= ref_med * (1 + PROBE_QUEUE_SHARE * gain) and not slow:
                self.plateau = self.limit
                self._set(self.limit, "cruise")
            else:
                self._set(start, "cruise")
                self._ups_refused += 1
                if self._ups_refused >= self._backoff:
                    self._ups_refused = 0
                    self._probe_down()
            return
        # probe_down
        loss = 1 - self.limit / start
        if x >= ref * (1 - 0.25 * loss):
            self.plateau = self.limit
            self._set(self.limit, "cruise")
        else:
            self._set(start, "cruise")
            self._cruising = 0
            self._backoff = min(PROBE_BACKOFF, 2 * self._backoff)
            self._down_refused = start  # no early probe down again at this limit (it costs throughput each time)

    # -- a process alone on its server: every change of limit is a trial, judged by the throughput's statistics

    def _solo_window(self, skip: int) -> _Window:
        # A trial that one window a side could not decide measures the two limits in turn in long windows. On real
        # vLLM (CPU) an A B A B of 8-round windows between 32 and 64 got less than either limit alone (6.17/s
        # against 6.39 and 6.60; its windows at 32 5-7 % under fixed 32's): each switch drains or refills the
        # batch. The simulation with that cost (tests/core/pacing_sim.py, ``switch_cost``) calibrated to it gave
        # 34 of 48 seeds under 0.95 x the best fixed setting with 8-round windows, 3 with 32; without the cost,
        # 32-round windows are no worse on the quiet profile and better on the loaded one (0 of 48 under 0.95,
        # against 5), where fewer, longer windows average the load's walk better.
        rounds = ALTERNATE_ROUNDS if self._trial is not None and self._alternating else MIN_ROUNDS
        return _Window(self.limit, skip=skip, target=0, rounds=max(rounds, math.ceil(16 / self.limit)))

    def _go(self, limit: int, phase: str) -> None:
        """Measure at ``limit`` next. After a change, the first ``max(old, new)`` completions are let pass: the
        requests that were in flight at the change come back, the queue settles."""
        limit = max(1, min(self.ceiling, limit))
        old = self.limit
        if limit != old:
            self.changes += 1
        self.limit, self.phase = limit, phase
        self._window = self._solo_window(skip=max(old, limit) if limit != old else 0)
        if limit == old:
            self._window.anchor = self._clock()  # the next round runs from the completion that ended this window

    def _decide_solo(self, w: _Window) -> None:
        median = w.median()
        self._medians.append(median)
        self._base = median if self._base is None else min(self._base * 1.002, median)
        if not w.limited:  # demand, not the limit, held throughput: nothing learnt about the limit
            self._go(self.limit, self.phase)
            return
        if self._trial is not None:
            self._trial_window(w)
            return
        if self._expect is None:
            self._expect = median
        if median > self._tolerance * self._expect:
            # The server is slower at this limit than when we chose it, and not because of us: someone else is
            # queueing there too. Keep our latency what it was (Little's law: fewer in flight in proportion), then
            # find the plateau again from there.
            self._need, self._flat = KNEE_GAIN, False
            self._start_trial("startup", _Sample(max(1, math.floor(self.limit * self._expect / median))))
            return
        self._held.append(w)
        self._cruising += 1
        if self._cruising >= self._cruise:
            self._probe()
        else:
            self._go(self.limit, "cruise")

    def _probe(self) -> None:
        """Every ``cruise`` windows, a trial of a neighbouring limit: up by about sqrt(limit), or down by a fifth,
        in turn. The windows just measured at the limit are the incumbent's side of the trial."""
        held = _Sample(self.limit)
        for w in self._held:
            held.add(w)
        self._cruising = 0
        up = self._next_probe == "up"
        self._next_probe = "down" if up else "up"
        other = min(self.ceiling, self.limit + math.ceil(math.sqrt(self.limit))) if up \
            else max(1, min(self.limit - 1, math.floor(self.limit * 0.8)))
        if other == self.limit:
            self._go(self.limit, "cruise")
        elif other > self.limit:
            self._start_trial("up", held, _Sample(other))
        else:
            self._start_trial("down", _Sample(other), held)

    def _start_trial(self, kind: str, lo: _Sample, hi: _Sample | None = None) -> None:
        self._trial, self._lo, self._alternating = kind, lo, False
        self._hi = hi if hi is not None else _Sample(min(2 * lo.limit, self.ceiling))
        first = self._hi if self._lo.durations else self._lo  # the side with no rounds yet is measured first
        self._go(first.limit, "startup" if kind == "startup" else f"probe_{kind}")

    def _trial_window(self, w: _Window) -> None:
        lo, hi = self._lo, self._hi
        (lo if w.limit == lo.limit else hi).add(w)
        if lo.limit >= hi.limit:  # nothing above to try (the ceiling)
            self._settle(lo)
            return
        if not lo.durations or not hi.durations:
            self._go((hi if lo.durations else lo).limit, self.phase)
            return
        need = self._need * math.log2(hi.limit / lo.limit)
        verdict = self._pays(lo, hi, need)
        moves = verdict is not None and verdict == (self._trial == "up")  # a probe's limit moves, slow start stops
        past_knee = self._trial == "startup" and self._flat
        gain, se = self._gain(lo, hi)
        if past_knee and self._alternating and verdict is not True and w.limit == lo.limit \
                and min(gain, self._gain_aba(lo, hi)) < need:
            # Past the knee (the last doubling paid under KNEE_GAIN: a batching server's gains shrink from there),
            # the next doubling's cost is certain, twice the latency for everything the run sends, and its gain
            # likely under the last one's. So slow start stops once a long window at the lower limit leaves the gain
            # under the bar, shown or not: measuring the higher limit again would cost a long window at twice the
            # latency (on vLLM at 64 -> 128, 32 rounds of ~16 s, for a gain of nothing: the batch holds 64).
            # The gain is also taken against the mean of the lower limit's windows before and after the higher's
            # (A B A: a linear drift cancels; real vLLM slowed 9 % over 20 minutes, and a long window at 64 measured
            # after the one at 128 made it look +4.4 % +- 1.8 %, against -2.8 % beside it).
            # Before the knee (8 -> 16 after +51 %) a load's drift between the windows can fake a loss, and
            # stopping there costs more than a bar: the A B A B below stays.
            verdict = False
        elif past_knee and verdict and (hi.windows < 2 if self._alternating else gain - Z * se < need):
            # ... and a doubling past the knee must clear the bar itself by Z standard errors on its first pair (real
            # vLLM's 32 -> 64 at +16.4 % +- 3.6 % after 16 -> 32 paid +7 %: taken at once), and once the trial
            # alternates, it is taken only on the two limits measured in turn (A B A B): one window at the higher
            # limit against a long one at the lower, minutes apart, showed the load's drift as a gain (64 -> 128 at
            # +5.7 % +- 2.1 % in the simulation, where 128 gains nothing, then 128 -> 256).
            verdict = None
        elif moves and (lo if self._trial == "down" else hi).windows < 2:
            # The machine's load drifts over minutes, more than the rounds' spread shows: slow start's doubling is
            # taken on one window (it must clear the gain by Z standard errors), and so is keeping a limit; a verdict
            # that stops slow start or moves a probe's limit waits for the candidate measured twice, the incumbent
            # between (A B A B).
            verdict = None
        if self._base is not None and hi.median() > LATENCY_BOUND * self._base:
            # From one client, a server that batches better with more in flight looks the same as a queue shared
            # with other clients, whose share it takes by queueing more (both: more throughput, latency up by
            # Little's law). They all see the same latency: a bound on it stops them all, however many they are.
            verdict = False
        if log.isEnabledFor(logging.DEBUG):
            log.debug("pacing trial %s: %d in flight %.3g/s (%d rounds), %d: %.3g/s (%d rounds, median %.3g s): "
                      "gain %+.1f %% +- %.1f %%: %s", self._trial, lo.limit, lo.rate(), len(lo.durations), hi.limit,
                      hi.rate(), len(hi.durations), hi.median(), 100 * gain, 100 * se,
                      {True: "pays", False: "does not pay", None: "not yet known"}[verdict])
        if verdict is None:
            if len(lo.durations) + len(hi.durations) < 2 * MAX_ROUNDS:
                incumbent = hi if self._trial == "down" else lo
                if incumbent.windows and not self._alternating:
                    # the incumbent's windows were measured before the trial, at another load: from now on both
                    # limits are measured in turn, and only those windows are compared (a drift cancels)
                    self._alternating = True
                    self._before = _Sample(incumbent.limit, durations=incumbent.last)
                    if incumbent is lo:
                        self._lo = lo = _Sample(lo.limit)
                    else:
                        self._hi = hi = _Sample(hi.limit)
                self._go(lo.limit if w.limit == hi.limit else hi.limit, self.phase)
                return
            # not shown either way: the trial takes the better estimate (the higher limit when its gain reaches the
            # bar). A probe down used to keep the limit it had, so a pure queue whose capacity lies between two
            # powers of two kept the next one and a third more latency for nothing (the gain is nil there, and a
            # nil gain is never *shown* to fall short of a bar of about 1 %)
            verdict = self._gain(lo, hi)[0] >= need
        if verdict and self._trial == "startup" and hi.limit < self.ceiling:
            # slow start goes on doubling; the bar for the next doubling depends on what this one paid (``_need``)
            paid = self._gain(lo, hi)[0]
            self._need = KNEE_GAIN if paid >= PROPORTIONAL else MIN_GAIN
            self._flat = self._flat or paid < KNEE_GAIN  # gains shrink from the knee on: it stays passed
            self._start_trial("startup", hi)
            return
        self._settle(hi if verdict else lo)

    def _settle(self, chosen: _Sample) -> None:
        self._trial = None
        self.plateau = chosen.limit
        self._expect = chosen.median() or None
        self._held.clear()
        self._cruising = 0
        self._go(chosen.limit, "cruise")

    @staticmethod
    def _gain(lo: _Sample, hi: _Sample) -> tuple[float, float]:
        """The higher limit's throughput over the lower's, less one, and its standard error."""
        x0, x1 = lo.rate(), hi.rate()
        if x0 <= 0:
            return (math.inf if x1 > 0 else 0.0), math.inf
        gain = x1 / x0 - 1
        return gain, (1 + gain) * math.hypot(lo.rel_se(), hi.rel_se())

    def _gain_aba(self, lo: _Sample, hi: _Sample) -> float:
        """The higher limit's throughput over the mean of the lower's window right before it and the lower's
        windows since (A B A), less one; the plain gain when there is no window before."""
        before = self._before
        if before.limit != lo.limit or len(before.durations) < 3 or lo.rate() <= 0:
            return self._gain(lo, hi)[0]
        return hi.rate() / ((before.rate() + lo.rate()) / 2) - 1

    @staticmethod
    def _pays(lo: _Sample, hi: _Sample, need: float) -> bool | None:
        """Does the higher limit pay for its extra requests in flight? It must raise throughput by ``Z`` standard
        errors more than nothing, and by ``need`` with one standard error to spare (True); False once the gain is
        shown (``Z`` standard errors) to fall short of ``need`` (at a server past its capacity the gain is nil: a
        pure queue); None while the rounds cannot tell. A batching server (vLLM) keeps paying, less with each
        doubling: the climb goes on while the gain is real."""
        gain, se = AdaptiveLimit._gain(lo, hi)
        if gain - Z * se >= 0 and gain - se >= need:
            return True
        if gain + Z * se < need:
            return False
        return None

    def _end_backoff(self) -> None:
        """A new limit, or slow start again: the next refused probe up is followed by a probe down."""
        self._backoff, self._ups_refused = 1, 0

    def _probe_down(self) -> None:
        down = max(1, min(self.limit - 1, math.floor(self.limit * 0.8)))
        if down < self.limit:
            self._probe_from = self.limit
            self._set(down, "probe_down")
        else:
            self._cruising = 0
            self._window = self._new_window()


# --------------------------------------------------------------------------------------------
# rate budgets (token buckets) and the servers' rate-limit headers


class Bucket:
    """A token bucket: ``per_minute`` refilled continuously, holding at most ``burst`` (default: 1 s of refill,
    at least one request's worth) so a paced client never sends a minute's budget at once."""

    def __init__(self, per_minute: float, now: float, burst: float | None = None) -> None:
        self.per_minute = float(per_minute)
        self.burst = burst if burst is not None else max(1.0, self.per_minute / 60.0)
        self.level = self.burst
        self._t = now

    def refill(self, now: float) -> None:
        if now > self._t:
            self.level = min(self.burst, self.level + (now - self._t) * self.per_minute / 60.0)
            self._t = now

    def wait_for(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` is available (0: it is); an amount over the burst waits for a full bucket."""
        self.refill(now)
        need = min(amount, self.burst) - self.level
        return 0.0 if need <= 0 else need * 60.0 / self.per_minute

    def take(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level -= amount

    def cap(self, remaining: float, now: float) -> None:
        """The server says this much is left: never believe we have more."""
        self.refill(now)
        self.level = min(self.level, remaining)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_reset(value: str | None, now_epoch: float | None = None) -> float | None:
    """Seconds until a rate-limit window resets: ``"1s"``, ``"6m0s"``, ``"20ms"`` (OpenAI), a number of seconds,
    or an RFC 3339 / HTTP date (Anthropic). None when it does not parse."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value.replace(" ", ""):
        return sum(float(n) * _UNITS[u] for n, u in parts)
    now_epoch = time.time() if now_epoch is None else now_epoch
    try:
        from datetime import datetime

        return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - now_epoch)
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - now_epoch) if parsed is not None else None


def _number(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class RateHeaders:
    """What a server's reply says of its rate limits (each field None when not sent)."""

    limit_requests: float | None = None
    remaining_requests: float | None = None
    limit_tokens: float | None = None
    remaining_tokens: float | None = None

    @classmethod
    def parse(cls, headers: Mapping[str, str]) -> RateHeaders | None:
        """OpenAI/Azure (``x-ratelimit-{limit,remaining}-{requests,tokens}``) and Anthropic
        (``anthropic-ratelimit-{requests,tokens}-{limit,remaining}``); lower-case keys expected."""
        got = cls(
            _number(headers, "x-ratelimit-limit-requests") or _number(headers, "anthropic-ratelimit-requests-limit"),
            _first(_number(headers, "x-ratelimit-remaining-requests"),
                   _number(headers, "anthropic-ratelimit-requests-remaining")),
            _number(headers, "x-ratelimit-limit-tokens") or _number(headers, "anthropic-ratelimit-tokens-limit"),
            _first(_number(headers, "x-ratelimit-remaining-tokens"),
                   _number(headers, "anthropic-ratelimit-tokens-remaining")),
        )
        return None if got == cls() else got


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` (OpenAI/Azure, milliseconds) before ``retry-after`` (seconds or an HTTP date)."""
    ms = _number(headers, "retry-after-ms")
    if ms is not None:
        return ms / 1000.0
    return parse_reset(headers.get("retry-after"))


# --------------------------------------------------------------------------------------------
# the gate a request passes before it is sent


@dataclass(frozen=True)
class PaceSettings:
    """How one deployment is paced: ``fixed`` in flight (a hard cap) or ``auto`` under ``ceiling``; budgets."""

    fixed: int | None = None
    ceiling: int = AUTO_CEILING
    adaptive: bool = False
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    share: float = 1.0  # this process's part of the configured budgets (a Job's shards split them evenly)


@dataclass(frozen=True)
class PacingPolicy:
    """A process's pacing rule for every deployment it reaches (``RunOptions`` -> ``ClientPool``).

    ``adaptive``: deployments without a fixed ``max_concurrency`` are paced by ``AdaptiveLimit`` (remote kinds
    only: an in-process model serialises its own work) under ``ceiling``; else they are capped by the workers
    alone, as a fixed ``--max-concurrency N`` run always was. ``share``: this process's part of configured
    rate budgets (a Job's shards running at once each take 1/n)."""

    adaptive: bool = False
    ceiling: int = AUTO_CEILING
    share: float = 1.0

    def settings(self, *, fixed: int | None, rate_limits: Mapping[str, object], local: bool) -> PaceSettings:
        rpm, tpm = rate_limits.get("requests_per_minute"), rate_limits.get("tokens_per_minute")
        return PaceSettings(fixed=fixed, ceiling=self.ceiling, adaptive=self.adaptive and not local and not fixed,
                            requests_per_minute=float(rpm) if rpm else None,
                            tokens_per_minute=float(tpm) if tpm else None, share=self.share)


class PacerObserver:
    """Telemetry hooks (``telemetry.PacingMetrics``); the default does nothing."""

    def limit_changed(self, limit: int, plateau: int | None) -> None: ...

    def rate_limited(self) -> None: ...

    def waited(self, seconds: float) -> None: ...


class Pacer:
    """The per-deployment gate: ``async with pacer.slot(tokens):`` around one attempt; report its outcome."""

    def __init__(self, settings: PaceSettings, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = asyncio.sleep, observer: PacerObserver | None = None) -> None:
        self.settings = settings
        self._clock, self._sleep = clock, sleep
        self.observer = observer or PacerObserver()
        # A Job's shards (share < 1) know they share the server: they drain together to stay fair (AdaptiveLimit)
        self.adaptive = AdaptiveLimit(settings.ceiling, clock=clock,
                                      drain_every=DRAIN_EVERY_S if settings.share < 1.0 else 0.0) \
            if settings.adaptive and not settings.fixed else None
        now = clock()
        self._requests = Bucket(settings.requests_per_minute * settings.share, now) \
            if settings.requests_per_minute else None
        self._tokens = Bucket(settings.tokens_per_minute * settings.share, now,
                              burst=max(1.0, settings.tokens_per_minute * settings.share / 60.0)) \
            if settings.tokens_per_minute else None
        self._learnt_requests = self._requests is None  # buckets made from headers follow the headers' limit
        self._learnt_tokens = self._tokens is None
        self.in_flight = 0
        self._tokens_out = 0.0  # tokens charged for requests in flight
        self.paused_until = 0.0
        self.rate_limited = 0
        self.waited_s = 0.0
        self._waiters: collections.deque[tuple[asyncio.Future[float], float]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._reported = (None, None)

    @property
    def limit(self) -> int | None:
        if self.settings.fixed:
            return self.settings.fixed
        if self.adaptive is not None:
            return self.adaptive.limit
        return None

    def _blocked_for(self, tokens: float) -> float:
        """0 when a request may start now, else seconds to wait (inf: until a slot frees)."""
        now = self._clock()
        wait = max(0.0, self.paused_until - now)
        limit = self.limit
        if limit is not None and self.in_flight >= limit:
            if self.adaptive is not None:
                self.adaptive.note_waiting()
            return math.inf
        if self._requests is not None:
            wait = max(wait, self._requests.wait_for(1, now))
        if self._tokens is not None and tokens:
            wait = max(wait, self._tokens.wait_for(tokens, now))
        return wait

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
        return self._tokens is not None or self._learnt_tokens

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
            if self.adaptive is not None:
                self.adaptive.overloaded()
        elif ok and self.adaptive is not None:  # only answers measure the server (a quick 500 says nothing)
            self.adaptive.completed(now - started)
        self._report()
        self._grant()

    def summary(self) -> str:
        """One line for the run's summary: the limit now and its plateau, throttling, time waited to start."""
        parts = []
        if self.adaptive is not None:
            plateau = f", plateau {self.adaptive.plateau}" if self.adaptive.plateau is not None else ""
            drains = f", {self.adaptive.drains} drains ({self.adaptive.restarts} restarts)" \
                if self.adaptive.drains else ""
            parts.append(f"auto: {self.adaptive.limit} in flight{plateau}{drains}")
        elif self.settings.fixed:
            parts.append(f"fixed: {self.settings.fixed} in flight")
        budgets = [f"{b.per_minute:g} {what}/min" for b, what in ((self._requests, "requests"),
                                                                   (self._tokens, "tokens")) if b is not None]
        if budgets:
            parts.append("budget " + ", ".join(budgets))
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
        if self.adaptive is not None:
            state = (self.adaptive.limit, self.adaptive.plateau)
            if state != self._reported:
                self._reported = state
                self.observer.limit_changed(*state)

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
