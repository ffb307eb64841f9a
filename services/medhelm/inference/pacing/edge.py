"""``Edge``: the rate a process alone was last refused at, and how its climb comes back to it. ``learnt.LearntRate``
tells it each cut and asks it how far each step of the climb may go; docs/pacing.md (the climb back to the edge) gives
the design and its numbers.

A refusal says the rate had passed what the gateway lets through. When the cut that answered it read the budget close
under the rate refused (``NEAR`` of it at least: the refusal came as the rate crossed the budget, as at a gateway that
holds a request or two of burst), that rate is the edge. The climb after the cut closes the gap to ``BAND`` of the edge
fast (a part 1 / ``CATCH_UP_S`` of the gap a second), crawls through the band at ``CRAWL`` a second (a part of the
climb's unit), and past the edge climbs as it would have (a raised budget is found as fast as before). Each cycle of
the climb ends in about one refusal, so the time a cycle spends close under the edge is what uses the budget, and how
slowly it crosses the band is how seldom it is refused. A cut read far under the rate refused (a long bucket's saved
burst let the climb run far past the budget before the gateway refused) sets no edge: a climb back to that rate would
be refused all the way down, so the climb from such a cut is the plain one. So too for a Job's shards (they share the
gateway by the climb's unit, ``learnt.SHARD_CLIMB``), and once a process trickled or read a gateway's windows (its
rate is read over the window, not at a crossing).

Failure semantics: never raises; holds no clock of its own (the caller's seconds, stretched as its climb's are); with
no edge (``rate`` infinite) the climb is the caller's."""

from __future__ import annotations

import math

NEAR = 0.9  # a cut to under this part of the rate refused sets no edge
BAND = 0.98  # the climb crawls from this part of the edge up to the edge ...
CRAWL = 0.0008  # ... at this part of the climb's unit a second
CATCH_UP_S = 5.0  # under the band, the climb closes the gap to it by a part 1 / this of it a second


class Edge:
    """The rate a process alone was last refused at, close above its budget (infinite: none known)."""

    def __init__(self) -> None:
        self.rate = math.inf

    def cut(self, refused: float | None, read: float) -> None:
        """A cut read the budget as ``read`` a second where ``refused`` a second was refused (None: a cut that sets no
        edge, see the module's docstring)."""
        self.rate = refused if refused is not None and read >= NEAR * refused else math.inf

    def step(self, rate: float, boost: float, seconds: float, unit: float) -> float:
        """The climb's step from ``rate`` over ``seconds`` (stretched), as a part of the climb's ``unit``, where the
        plain climb's is ``boost``."""
        band = BAND * self.rate
        if band <= rate < self.rate:
            return min(boost, CRAWL * seconds)
        if rate < band < math.inf and unit > 0.0:
            return max(boost, min(1.0, seconds / CATCH_UP_S) * (band - rate) / unit)
        return boost
