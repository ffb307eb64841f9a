"""``ShardLimit``: the limit of one of a Job's shards, which share a server without a coordinator.

Slow start doubles while a doubling pays 15 % and the median grows less than 1.6-fold; a cruise probes up by about
sqrt(limit) and down by a fifth (refused probes down back off up to ``PROBE_BACKOFF``); past ``latency_tolerance``
x the base latency every shard applies the same gradient, limit x (tolerance x base / latency) + 1, whose one fixed
point is an equal share. To agree on the base, shards *drain* at every multiple of ``DRAIN_EVERY_S`` on the wall
clock (the one clock all pods share): each divides its limit by ``DRAIN_DIVISOR`` until requests sent after the cut
come back, and on a shared standing queue (or at every ``RESYNC_DRAINS``-th period) all restart slow start from
``RESTART_LIMIT`` at the same instant. docs/pacing.md gives the reasons.

Failure semantics: never raises. A window in which no request waited changes nothing; every limit lies in
[1, ceiling]; a wall clock that jumps only moves the next drain."""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable

from medhelm.inference.pacing.limit import Limit
from medhelm.inference.pacing.window import Window

log = logging.getLogger("medhelm.pacing")  # drains and limits at DEBUG (numbers only, never a request)

RESTART_LIMIT = 8  # shards restart slow start here after a drain (a doubling above START_LIMIT)
DRAIN_EVERY_S = 10.0  # wall-clock period of the synchronised drains that measure the base latency
QUIET_DRAINS = 3  # after a drain that found no shared queue, the next is at a multiple of this many periods
RESYNC_DRAINS = 6  # the drain at every multiple of this many periods restarts slow start, queue or not (a minute)
PROBE_BACKOFF = 8  # after refused probes down, one probe down per this many refused probes up at most
RESTART_QUEUE = 1.4  # a median before the drain over this x the drained one: a standing queue, shared
DRAIN_DIVISOR = 2  # a drain divides the limit by this
PROBE_QUEUE_SHARE = 0.75  # a probe up that grows the median by more than this share of the gain only queued


class ShardLimit(Limit):
    """``auto`` for one of a Job's shards: the shared rule, and the drains on the wall clock."""

    def __init__(self, ceiling: int, *, drain_every: float = DRAIN_EVERY_S,
                 wall: Callable[[], float] | None = None, **kw) -> None:
        super().__init__(ceiling, **kw)
        self._prev: tuple[int, float, float] | None = None  # startup: (limit, throughput, median) of the last window
        self._ref: collections.deque[float] = collections.deque(maxlen=4)  # cruise throughputs at this limit
        self._ref_med: collections.deque[float] = collections.deque(maxlen=4)  # and their median latencies
        self._ref_limit = self.limit
        self._congested = 0  # 1 while a queue the gradient shrank has not drained back under 1.5 x the base
        self._down_refused: int | None = None  # the limit at which the last probe down lost throughput
        self._probe_from = self.limit  # the limit a probe started from (it returns there when refused)
        self._backoff = 1  # a refused probe up is followed by a probe down once in this many (PROBE_BACKOFF)
        self._ups_refused = 0  # refused probes up since the last probe down
        clock = kw.get("clock", time.monotonic)
        self._wall = wall or (time.time if clock is time.monotonic else clock)
        self._drain_every = drain_every
        self._drain_epoch = self._epoch()
        self._drain_from = self.limit
        self._at_cut: list[float] = []  # latencies of the requests in flight at a drain's cut

    def _first_window(self) -> Window:
        return self._new_window()

    def _new_window(self, skip: int | None = None) -> Window:
        return Window(self.limit, skip=self.limit if skip is None else skip, target=max(16, 2 * self.limit))

    # -- the drains

    def _epoch(self) -> int:
        return math.floor(self._wall() / self._drain_every) if self._drain_every > 0 else 0

    def _tick(self) -> None:
        if self.phase != "drain" and self._drain_every > 0:
            epoch = self._epoch()
            if epoch > self._drain_epoch:
                self._drain_epoch = epoch
                self._drain()

    def _skipped(self, latency_s: float) -> None:
        if self.phase == "drain":  # a request in flight at the cut: the queue every shard saw then
            self._at_cut.append(latency_s)

    def _drain(self) -> None:
        """Cut the limit until requests sent after the cut have come back (their latency is the server's with a
        short queue); ``_update`` then returns to the limit we left, or restarts slow start."""
        self._drain_from = self.limit
        self._at_cut = []
        low = max(1, self.limit // DRAIN_DIVISOR)
        self.changes += 1
        self.limit, self.phase = low, "drain"
        # the requests in flight at the cut (up to the old limit) come back first; measure the ones after them
        self._window = Window(low, skip=self._drain_from, target=max(2, low))

    def _drained(self, median: float) -> None:
        """A drain's window is measured: the latency with the queue drained, a base no older measurement hides."""
        self.drains += 1
        # The queue before the drain is judged on the requests in flight at the cut (every shard's were sent in the
        # same seconds to the same queue) and on the last window, whichever shows more: each shard's last window
        # ended at its own moment, and a server that serves in lockstep lets one shard's round through a queue the
        # others wait in; judged on it alone, shards near the bar split.
        cut = sorted(self._at_cut)
        before = max(cut[len(cut) // 2] if cut else 0.0, self._medians[-1] if self._medians else 0.0) or median
        resync = self._drain_epoch % RESYNC_DRAINS == 0  # every shard drains then (a multiple of QUIET_DRAINS)
        self._base = median if self._base is None else min(self._base, median)
        restart = resync or before > RESTART_QUEUE * self._base
        log.debug("pacing shard drain: %d in flight at the cut, median %.3g s; drained %.3g s, base %.3g s: %s",
                  self._drain_from, before, median, self._base, "restart" if restart else "quiet")
        if restart:
            # A standing queue the drain revealed is shared (a client alone never keeps one: its probes refuse to
            # just queue). Every shard drained at this instant and saw the same: all restart slow start from the
            # same limit, double in step and stop together, at equal shares. And once a minute whatever the drain
            # found: between restarts shards drift apart where the server is full but not queueing.
            self.restarts += 1
            self._prev = None
            self._end_backoff()
            self._set(RESTART_LIMIT, "startup")
        else:
            # No shared queue: the next look is at the next multiple of QUIET_DRAINS periods of the wall clock (a
            # multiple, not QUIET_DRAINS periods from this one, so shards that restarted apart drain together).
            self._drain_epoch = (self._drain_epoch // QUIET_DRAINS + 1) * QUIET_DRAINS - 1
            self._set(self._drain_from, "cruise")

    # -- decisions, one per measured window

    def _cut(self, limit: int) -> None:
        self._set(limit, "cruise")

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
        # after a cut the requests in flight at the old limit come back first: the window measures the ones sent
        # after them (counted, they made a restart's first window look several times its rate)
        old, self.limit, self.phase = self.limit, limit, phase
        self._window = self._new_window(skip=max(old, limit))

    def _update(self, w: Window) -> None:
        x, median = w.throughput(), w.median()
        if self.phase == "drain":
            self._drained(median)
            return
        base = self._observe_median(median)
        slow = base is not None and median > self._tolerance * base
        if not w.limited:  # demand, not the limit, held throughput: nothing learnt about the limit
            self._window = self._new_window()
            return
        if self.phase == "startup":
            self._startup(x, median, slow)
        elif self.phase == "cruise":
            self._cruise_window(x, median, base, slow)
        elif self.phase == "probe_up":
            self._probe_up_window(x, median, slow)
        else:
            self._probe_down_window(x)

    def _startup(self, x: float, median: float, slow: bool) -> None:
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

    def _cruise_window(self, x: float, median: float, base: float | None, slow: bool) -> None:
        if slow or self._congested:
            # Shared and queueing: every shard sees the same latency and applies the same gradient, whose one fixed
            # point is an equal share. Probing resumes once the queue has drained (the median under 1.5 x the base).
            self._congested = 1 if median > 1.5 * (base or median) else 0
            gradient = min(1.0, self._tolerance * (base or median) / median) if median > 0 else 1.0
            self._set(max(1, math.floor(self.limit * gradient) + 1), "cruise")
            return
        self._ref.append(x)
        self._ref_med.append(median)
        self._cruising += 1
        # a queue of our own (median well over the base): try a smaller limit soon, not after a full cruise
        queued = base is not None and median > 1.3 * base and self._cruising >= 2 and self._down_refused != self.limit
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

    def _reference(self, x: float, median: float) -> tuple[float, float]:
        """The cruise's throughput (mean) and median latency (median of medians) a probe is judged against."""
        ref = sum(self._ref) / len(self._ref) if self._ref else x
        ref_med = sorted(self._ref_med)[len(self._ref_med) // 2] if self._ref_med else median
        return ref, ref_med

    def _probe_up_window(self, x: float, median: float, slow: bool) -> None:
        ref, ref_med = self._reference(x, median)
        start = self._probe_from
        gain = self.limit / start - 1
        # More in flight must pay in throughput, and must not just queue: at a saturated server the median latency
        # grows in proportion to the limit (Little's law), whatever a noisy throughput says.
        if x >= ref * (1 + 0.25 * gain) and median <= ref_med * (1 + PROBE_QUEUE_SHARE * gain) and not slow:
            self.plateau = self.limit
            self._set(self.limit, "cruise")
        else:
            self._set(start, "cruise")
            self._ups_refused += 1
            if self._ups_refused >= self._backoff:
                self._ups_refused = 0
                self._probe_down()

    def _probe_down_window(self, x: float) -> None:
        ref, _ = self._reference(x, 0.0)
        start = self._probe_from
        loss = 1 - self.limit / start
        if x >= ref * (1 - 0.25 * loss):
            self.plateau = self.limit
            self._set(self.limit, "cruise")
        else:
            self._set(start, "cruise")
            self._cruising = 0
            self._backoff = min(PROBE_BACKOFF, 2 * self._backoff)
            self._down_refused = start  # no early probe down again at this limit (it costs throughput each time)

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
