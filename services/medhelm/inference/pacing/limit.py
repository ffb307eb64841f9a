"""The adaptive limit's template: ``Limit`` owns what every ``auto`` controller does alike — the limit read by the
gate, the window of completions it fills, the halving on an overload — and leaves one decision to its subclass:
``_update(window)`` when a window is full (``SoloLimit``: a process alone on its server; ``ShardLimit``: one of a
Job's shards), ``_cut(limit)`` on an overload. Netflix concurrency-limits' ``AbstractLimit.onSample`` → ``_update``
is the model; the design is in docs/pacing.md.

Failure semantics: the controller never raises once built (a ceiling under 1 is a ``ValueError`` at construction).
A window it cannot judge changes nothing; every limit it sets lies in [1, ceiling]. Time comes from an injected
clock, so a controller runs deterministically on a simulated one (tests/core/pacing_sim.py)."""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable

from medhelm.inference.pacing.window import Window

START_LIMIT = 4  # requests in flight before anything is measured


class Limit:
    """Requests in flight for one deployment under ``auto``; read ``limit``, report completions and overloads."""

    _drain_every = 0.0  # seconds between a Job's synchronised drains (0: this controller never drains)

    def __init__(self, ceiling: int, *, start: int = START_LIMIT, cruise: int = 8, latency_tolerance: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ceiling < 1:
            raise ValueError("ceiling must be >= 1")
        self.ceiling = ceiling
        self.limit = max(1, min(start, ceiling))
        self.plateau: int | None = None  # the limit the climb found (None while starting)
        self.proven: int | None = None  # the highest limit a doubling at a flat latency showed free (solo climb)
        self.phase = "startup"  # startup | cruise | probe_up | probe_down (| drain: shards)
        self._cruise = cruise  # windows at a limit before a probe of its neighbour
        self._tolerance = latency_tolerance
        self._clock = clock
        self._medians: collections.deque[float] = collections.deque(maxlen=64)  # each window's median latency
        self._base: float | None = None  # the lowest median seen, drifting up 0.2 % a window (a slow forgetting)
        self._last_cut = -math.inf
        self._cruising = 0  # windows measured at this limit since it was chosen or last probed
        self.drains = 0  # how many drains measured the base (tests, the summary)
        self.restarts = 0  # how many of them found a shared standing queue and restarted slow start
        self.changes = 0  # how often the limit changed (tests, metrics)
        self._window = self._first_window()

    # -- what the gate reports

    def sent(self) -> None:
        """A request went out (``SoloLimit``: the first one times a short run's jump)."""

    def jump_wait(self) -> float | None:
        """Seconds until a pending jump falls due, 0.0 when it was just taken (``SoloLimit``); None: none pending."""
        return None

    def note_waiting(self) -> None:
        """A request found every slot taken: the limit is what holds it back."""
        self._window.limited = True

    def completed(self, latency_s: float) -> None:
        """A request finished (any answer the server gave, an error other than overload included)."""
        self._tick()
        w = self._window
        now = self._clock()
        if w.skip > 0:
            w.skip -= 1
            w.anchor = now
            self._skipped(latency_s)
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
            self._update(w)

    def overloaded(self) -> None:
        """The server said too many (429, 503, overloaded): halve, at most once per median latency."""
        now = self._clock()
        recent = self._medians[-1] if self._medians else 0.0
        if now - self._last_cut < max(recent, 0.05):
            return
        self._last_cut = now
        if self.plateau is None:
            self.plateau = max(1, self.limit // 2)
        self._cut(max(1, self.limit // 2))

    @property
    def base_latency(self) -> float | None:
        return self._base

    def _observe_median(self, median: float) -> float | None:
        """Record a window's median; returns the base before it (None: the first window)."""
        base = self._base
        self._medians.append(median)
        self._base = median if base is None else min(base * 1.002, median)
        return base

    # -- what a controller decides

    def _first_window(self) -> Window:
        raise NotImplementedError

    def _tick(self) -> None:
        """Before a completion is counted (shards: a drain may fall due)."""

    def _skipped(self, latency_s: float) -> None:
        """A completion let pass before the window measures (shards: one in flight at a drain's cut)."""

    def _update(self, w: Window) -> None:
        """The window is full: decide the next limit and start the next window."""
        raise NotImplementedError

    def _cut(self, limit: int) -> None:
        """An overload: go to ``limit`` (half the current one) and cruise there."""
        raise NotImplementedError
