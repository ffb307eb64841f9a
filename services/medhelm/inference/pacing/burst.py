"""``BurstSeen``: whether a gateway holds any burst, as a process alone learns it from which of its sends were
refused. ``learnt.LearntRate`` asks it how deep its request bucket may be; docs/pacing.md (a gateway without burst)
gives the design and its numbers.

A gateway without burst (nginx's ``limit_req`` without ``burst``, Traefik's default of one request) refuses any request
that comes sooner than its rate's spacing after the last one it let through. A learnt bucket that holds a second of
refill sends what a delay held back at once, right behind the late request; the gateway refuses those, and each
refusal cut the rate (0.56-0.68 of nginx's budget used). What tells such a gateway from a token bucket whose burst ran
dry: it refuses close sends whenever they come, a bucket only while it is empty. So when, of the sends kept over the
horizon (the last ``KEPT`` at most), those that came at least as close behind the one before as a refused one did
were refused at least ``SHARE`` of the time, in ``REFUSALS`` spells a second apart or more, and those spaced wider at
most 1 - ``SHARE`` of it, the gateway holds no burst: the request bucket holds one request (sends are spaced evenly),
and that refusal is answered by this, not by a cut.

Paced evenly, once per ``PROBE_S`` a request is let through right behind the one before (a probe). If the gateway lets
both through it holds a burst after all (a token bucket refused a starved client's catch-ups while it was empty), and
the bucket gets its burst back; a refused probe is this experiment's cost (one request in ``PROBE_S`` seconds) and
changes nothing else. A gateway that refuses every request for a while (a trickle: HAProxy's count over a window, a
window of the clock) is not one without burst: the caller ends even pacing there and never starts it after one.

Failure semantics: never raises; holds no clock of its own (every time is the caller's); a send or refusal it cannot
place (nothing sent before it) is no evidence."""

from __future__ import annotations

import collections
import math

from medhelm.inference.pacing.ledger import Ledger

SHARE = 0.8  # the part of the sends at least as close as a refused one that were refused ...
REFUSALS = 2  # ... in this many spells ...
APART_S = 1.0  # ... at least this many seconds apart (the sends a whole-second pause held back are one spell)
PROBE_S = 30.0  # paced evenly, a probe once per this many seconds
PROBE_CLOSE = 0.5  # a probe comes within this part of the rate's spacing behind the send before it
KEPT = 2048  # the sends looked over at a refusal: the horizon's, up to this many (above 34 a second the look spans
# less than a minute, and stays a few milliseconds of work at any rate)


class BurstSeen:
    """One process's evidence that its gateway holds no burst, and the probes that would show it does."""

    def __init__(self) -> None:
        self.none = False  # the gateway holds no burst: pace evenly
        self._gaps: collections.deque[tuple[float, float]] = collections.deque(maxlen=KEPT)  # (send, seconds after
        # the one before)
        self._probe_due = math.inf  # paced evenly: when the next probe may go
        self._probe: list[float] | None = None  # the probe in flight: the send before it, its own, answers still due

    def sent(self, now: float, previous: float | None, rate: float | None, horizon: float, *,
             watch: bool) -> None:
        """A request started at ``now``, ``previous`` the send before it; ``rate`` the learnt request rate;
        ``horizon`` the oldest time kept. ``watch``: its spacing is evidence (a process alone, estimated, never
        trickled)."""
        if previous is None:
            return
        if watch and not self.none:
            self._gaps.append((now, now - previous))
            while self._gaps and self._gaps[0][0] < horizon:
                self._gaps.popleft()
        if self.probe_open(now, previous, rate):
            self._probe = [previous, now, 2.0]

    def probe_open(self, now: float, last: float | None, rate: float | None) -> bool:
        """Paced evenly, a probe is due and a request may go now, right behind the send at ``last``."""
        return self.none and self._probe is None and now >= self._probe_due and last is not None \
            and bool(rate) and now - last < PROBE_CLOSE / rate

    def answered(self, started: float) -> bool:
        """The request sent at ``started`` was let through. True when that shows the gateway holds a burst (a probe
        and the send before it were both let through): even pacing ended."""
        probe = self._probe
        if probe is None or started not in (probe[0], probe[1]):
            return False
        probe[2] -= 1.0
        if probe[2] > 0.0:
            return False
        self.end()
        return True

    def refused(self, started: float, now: float, ledger: Ledger, probe_after: float, *, watch: bool) -> bool:
        """The request sent at ``started`` was refused (``ledger`` has recorded it). True when this answers it and the
        rate is not to be cut: a probe refused (the next one ``probe_after`` seconds on), or the refusal that shows
        the gateway holds no burst (even pacing begins). ``watch``: as ``sent``'s."""
        probe = self._probe
        if probe is not None and started in (probe[0], probe[1]):
            self._probe, self._probe_due = None, now + probe_after
            return True
        if not watch or self.none:
            return False
        gap = ledger.gap_before(started)
        if gap is None:
            return False
        close = [t for t, g in self._gaps if g <= gap]
        refused = [t for t in close if ledger.was_refused(t)]
        spells = sum(1 for a, b in zip([-math.inf, *refused], refused) if b - a > APART_S)
        if not close or spells < REFUSALS or len(refused) < SHARE * len(close):
            return False
        spaced = [t for t, g in self._gaps if g > gap]  # ... while the sends spaced wider were let through
        if not spaced or sum(1 for t in spaced if ledger.was_refused(t)) > (1.0 - SHARE) * len(spaced):
            return False
        self.none, self._probe_due = True, now + probe_after
        self._gaps.clear()
        return True

    def end(self) -> None:
        """The gateway holds a burst (a probe got through) or counts over a window (it refused every request for a
        while): no more even pacing."""
        self.none, self._probe, self._probe_due = False, None, math.inf
