"""The measurements a controller decides on: a ``Window`` of completions at one limit, and a ``Sample`` of
rounds pooled over windows with its throughput's standard error.

A *round* is ``limit`` completions, about one latency of a closed loop. A batching server answers a round
together, so a rate counted over whole rounds from the completion before them is not biased by where a window
cuts a batch, and the rounds' spread (batch means) is the rate's honest uncertainty, whatever made it.

Failure semantics: nothing here raises. A window too short to measure has a throughput of 0, a sample of fewer
than three rounds an infinite standard error: the controllers read both as "cannot tell yet"."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

SE_FLOOR = 0.002  # the smallest relative standard error believed (a perfectly regular server)


@dataclass
class Window:
    """Completions measured at one limit, after ``skip`` let pass (the queue settles after a change)."""

    limit: int
    skip: int  # completions to let pass before measuring
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
        return _median(self.latencies)

    def full(self) -> bool:
        return len(self.durations) >= self.rounds if self.rounds else self.count >= self.target


@dataclass
class Sample:
    """Rounds measured at one limit, pooled over windows: its throughput and that throughput's standard error."""

    limit: int
    durations: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    windows: int = 0
    last: list[float] = field(default_factory=list)  # the rounds of the last window added

    def add(self, w: Window) -> None:
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
        return _median(self.latencies)


def _median(values: list[float]) -> float:
    """The upper median (no interpolation: a latency that was measured)."""
    s = sorted(values)
    return s[len(s) // 2] if s else 0.0
