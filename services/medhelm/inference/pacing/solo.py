"""``SoloLimit``: the limit of a process alone on its server, every change of it a statistical *trial*.

A trial measures two limits in rounds until more in flight is shown to pay (its gain clears a bar per doubling and
``Z`` standard errors over nothing), shown not to (the gain's upper bound falls short of the bar), or neither after
``MAX_ROUNDS`` a side (the better estimate wins). Slow start doubles from ``START_LIMIT``, a round a side while
latency stays flat (the *climb*: Little's law), then by trials; a cruise tries a neighbouring limit every ``cruise``
windows; a median latency ``latency_tolerance`` x the one measured at the limit (someone else queueing) shrinks the
limit by Little's law and climbs again. The bar tells a pure queue (a knee:
``KNEE_GAIN``) from a batching server (gains that shrink: ``MIN_GAIN``); docs/pacing.md gives the reasons.

Failure semantics: never raises. A window in which no request waited changes nothing; a trial that cannot tell
ends on a limit it measured; every limit lies in [1, ceiling]."""

from __future__ import annotations

import collections
import logging
import math

from medhelm.inference.pacing.limit import Limit
from medhelm.inference.pacing.window import Sample, Window

log = logging.getLogger("medhelm.pacing")  # the trials at DEBUG (numbers only, never a request)

MIN_GAIN = 0.03  # more in flight must pay at least this much more throughput per doubling of the limit ...
KNEE_GAIN = 0.15  # ... or this much right after a doubling that paid in proportion (a knee: see ``_need``)
PROPORTIONAL = 0.8  # a doubling that raised throughput by this much or more: the server had free slots
Z = 2.0  # standard errors a gain must clear to be believed (and a shortfall to be believed)
MIN_ROUNDS = 8  # rounds (``limit`` completions each) a window measures, at least 16 completions
MAX_ROUNDS = 32  # rounds a trial measures at either limit before it takes its better estimate
ALTERNATE_ROUNDS = 32  # rounds a window measures once a trial alternates (each switch costs a batching server)
LATENCY_BOUND = 16.0  # no more in flight once the median is this many times the lowest median seen
FLAT_LATENCY = 1.2  # a doubling whose median latency grew less than this: the server had free slots
CLIMB_COMPLETIONS = 8  # the climb's window: one round, at least this many completions


class SoloLimit(Limit):
    """``auto`` for a process alone on its server (the usual case): every change of limit is a trial."""

    def __init__(self, ceiling: int, *, climb: bool = True, jump: int | None = None,
                 jump_after: float | None = None, **kw) -> None:
        """``jump``: a short run's limit once its first answer is back, or ``jump_after`` seconds after its first
        request went out with no refusal back (``_jump_now``), unless a refusal came first (``cancel_jump``, or an
        overload)."""
        self._trial: str | None = "startup"  # startup | up | down (a probe's direction); None while cruising
        self._alternating = False  # the trial measures its two limits in turn
        # The climb: slow start's doublings judged by Little's law while latency stays flat (``_climb``), one
        # round each, until the first doubling whose latency grew; then the trials take over.
        self._climbing = climb
        super().__init__(ceiling, **kw)
        self._lo = Sample(self.limit)
        self._hi = Sample(min(2 * self.limit, self.ceiling))
        self._expect: float | None = None  # the median latency measured at the limit when it was chosen
        self._held: collections.deque[Window] = collections.deque(maxlen=4)  # cruise windows at this limit
        self._next_probe = "up"
        self._before = Sample(self.limit)  # the incumbent's window right before the candidate's first
        # The gain a doubling must bring: KNEE_GAIN for the first doubling and right after one that paid in
        # proportion, MIN_GAIN after one that paid less (the server trades latency for throughput). Probes keep
        # the bar of the doubling that ended slow start.
        self._need = KNEE_GAIN
        self._flat = False  # the last doubling paid under KNEE_GAIN: slow start is past the knee
        jump = min(jump, self.ceiling) if jump is not None else None
        self.jump = jump if jump is not None and jump > self.limit and climb else None  # pending until an answer
        self.jumped: str | None = None  # how the jump was taken (the run's summary says so); None: not taken
        self._jump_after = jump_after
        self.jump_due: float | None = None  # when the pending jump is taken with nothing back (the first send + after)

    def completed(self, latency_s: float) -> None:
        super().completed(latency_s)
        if self.jump is not None:
            self._jump_now()

    def overloaded(self) -> None:
        self.cancel_jump()
        super().overloaded()

    def cancel_jump(self) -> None:
        """A refusal came back before any answer: the server (or a gateway before it) is smaller than the jump."""
        self.jump = self.jump_due = None

    def sent(self) -> None:
        """A request went out: the first one sets when a pending jump falls due with nothing back."""
        if self.jump is not None and self.jump_due is None and self._jump_after is not None:
            self.jump_due = self._clock() + self._jump_after

    def jump_wait(self) -> float | None:
        """Seconds until the pending jump falls due (None: no jump pending, or none with a time); at 0 it is taken:
        no refusal came back in ``jump_after`` seconds, the time a gateway in the network takes to refuse, so the
        run does not wait a whole model latency to find the server free."""
        if self.jump is None or self.jump_due is None:
            return None
        wait = self.jump_due - self._clock()
        if wait > 0.0:
            return wait
        self._jump_now(f"after {1000 * self._jump_after:g} ms with no refusal")
        return 0.0

    def _jump_now(self, how: str = "at its first answer") -> None:
        """A short run's climb starts at ``jump`` (after its first answer, that answer was counted in the start's
        window; either way the requests sent before are let pass, as after any doubling)."""
        limit, self.jump, self.jump_due, self.jumped = self.jump, None, None, how
        self._lo, self._hi = Sample(limit), Sample(min(2 * limit, self.ceiling))
        self._go(limit, "startup")

    def _first_window(self) -> Window:
        return self._window_at(skip=0 if self._climbing else self.limit)  # nothing was in flight before

    def _window_at(self, skip: int) -> Window:
        if self._climbing:
            return Window(self.limit, skip=skip, target=0, rounds=max(1, math.ceil(CLIMB_COMPLETIONS / self.limit)))
        # An undecided trial measures its two limits in turn in long windows: few switches, each costing a
        # batching server (its batch drains or refills).
        rounds = ALTERNATE_ROUNDS if self._trial is not None and self._alternating else MIN_ROUNDS
        return Window(self.limit, skip=skip, target=0, rounds=max(rounds, math.ceil(16 / self.limit)))

    def _go(self, limit: int, phase: str) -> None:
        """Measure at ``limit`` next. After a change, the first ``max(old, new)`` completions are let pass: the
        requests that were in flight at the change come back, the queue settles."""
        limit = max(1, min(self.ceiling, limit))
        old = self.limit
        if limit != old:
            self.changes += 1
        self.limit, self.phase = limit, phase
        # climbing, the requests sent before a doubling are let pass, and a round of those sent after measured
        skip = old if self._climbing and limit > old else max(old, limit) if limit != old else 0
        self._window = self._window_at(skip=skip)
        if limit == old:
            self._window.anchor = self._clock()  # the next round runs from the completion that ended this window

    def _cut(self, limit: int) -> None:
        self._climbing = False
        self._trial, self._expect = None, None
        self._held.clear()
        self._cruising = 0
        self._go(limit, "cruise")

    def _update(self, w: Window) -> None:
        median = w.median()
        self._observe_median(median)
        if not w.limited:  # demand, not the limit, held throughput: nothing learnt about the limit
            self._go(self.limit, self.phase)
            return
        if self._climbing:
            self._climb(w)
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
            self._start_trial("startup", Sample(max(1, math.floor(self.limit * self._expect / median))))
            return
        self._held.append(w)
        self._cruising += 1
        if self._cruising >= self._cruise:
            self._probe()
        else:
            self._go(self.limit, "cruise")

    def _climb(self, w: Window) -> None:
        """Slow start while latency stays flat. In a closed loop throughput is the requests in flight over their
        latency (Little's law): a doubling at a flat latency doubled it, which a round a side shows without the
        trials' statistics. At the first doubling whose latency grew, the climb ends and a trial between the two
        limits decides, from a full window at the lower one (a pure queue's knee, a batching server's gains)."""
        lo, hi = self._lo, self._hi
        (lo if w.limit == lo.limit else hi).add(w)
        if lo.limit >= hi.limit:  # nothing above to try (the ceiling)
            self._climbing = False
            self._settle(lo)
            return
        if not lo.windows or not hi.windows:
            self._go((hi if lo.windows else lo).limit, self.phase)
            return
        if lo.median() > 0 and hi.median() <= FLAT_LATENCY * lo.median():
            self.proven = max(hi.limit, self.proven or 0)
            self._start_trial("startup", hi)
            return
        self._climbing = False
        self._start_trial("startup", Sample(lo.limit))

    def _probe(self) -> None:
        """Every ``cruise`` windows, a trial of a neighbouring limit: up by about sqrt(limit), or down by a fifth,
        in turn. The windows just measured at the limit are the incumbent's side of the trial."""
        held = Sample(self.limit)
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
            self._start_trial("up", held, Sample(other))
        else:
            self._start_trial("down", Sample(other), held)

    def _start_trial(self, kind: str, lo: Sample, hi: Sample | None = None) -> None:
        self._trial, self._lo, self._alternating = kind, lo, False
        self._hi = hi if hi is not None else Sample(min(2 * lo.limit, self.ceiling))
        first = self._hi if self._lo.durations else self._lo  # the side with no rounds yet is measured first
        self._go(first.limit, "startup" if kind == "startup" else f"probe_{kind}")

    def _trial_window(self, w: Window) -> None:
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
            # Past the knee the next doubling surely doubles the latency and likely pays less than the last: slow
            # start stops once a long window at the lower limit leaves the gain under the bar, shown or not, against
            # that window or against the mean of it and the lower limit's window before the higher's (A B A: a
            # linear drift of the load cancels). Before the knee a drift can fake a loss: the A B A B stays.
            verdict = False
        elif past_knee and verdict and (hi.windows < 2 if self._alternating else gain - Z * se < need):
            # ... and a doubling past the knee must clear the bar itself by Z standard errors on its first pair;
            # once the trial alternates it is taken only on both limits measured in turn (A B A B): one window
            # against a long one minutes apart shows the load's drift as a gain.
            verdict = None
        elif moves and (lo if self._trial == "down" else hi).windows < 2:
            # The load drifts over minutes, more than the rounds' spread shows: a doubling of slow start is taken on
            # one window, and so is keeping a limit; a verdict that stops slow start or moves a probe's limit waits
            # for the candidate measured twice, the incumbent between (A B A B).
            verdict = None
        if self._base is not None and hi.median() > LATENCY_BOUND * self._base:
            # From one client, a server that batches better with more in flight looks the same as a queue shared
            # with other clients, whose share it takes by queueing more. They all see the same latency: a bound on
            # it stops them all, however many they are.
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
                    self._before = Sample(incumbent.limit, durations=incumbent.last)
                    if incumbent is lo:
                        self._lo = lo = Sample(lo.limit)
                    else:
                        self._hi = hi = Sample(hi.limit)
                self._go(lo.limit if w.limit == hi.limit else hi.limit, self.phase)
                return
            # Not shown either way: the better estimate (the higher limit when its gain reaches the bar). A nil
            # gain is never *shown* to fall short of a bar of about 1 %: this is how a pure queue whose capacity
            # lies between two powers of two comes down from the next one.
            verdict = self._gain(lo, hi)[0] >= need
        if verdict and self._trial == "startup" and hi.limit < self.ceiling:
            # slow start goes on doubling; the bar for the next doubling depends on what this one paid (``_need``)
            paid = self._gain(lo, hi)[0]
            self._need = KNEE_GAIN if paid >= PROPORTIONAL else MIN_GAIN
            self._flat = self._flat or paid < KNEE_GAIN  # gains shrink from the knee on: it stays passed
            self._start_trial("startup", hi)
            return
        self._settle(hi if verdict else lo)

    def _settle(self, chosen: Sample) -> None:
        self._trial = None
        self.plateau = chosen.limit
        self._expect = chosen.median() or None
        self._held.clear()
        self._cruising = 0
        self._go(chosen.limit, "cruise")

    def _gain_aba(self, lo: Sample, hi: Sample) -> float:
        """The higher limit's throughput over the mean of the lower's window right before it and the lower's
        windows since (A B A), less one; the plain gain when there is no window before."""
        before = self._before
        if before.limit != lo.limit or len(before.durations) < 3 or lo.rate() <= 0:
            return self._gain(lo, hi)[0]
        return hi.rate() / ((before.rate() + lo.rate()) / 2) - 1

    @staticmethod
    def _gain(lo: Sample, hi: Sample) -> tuple[float, float]:
        """The higher limit's throughput over the lower's, less one, and its standard error."""
        x0, x1 = lo.rate(), hi.rate()
        if x0 <= 0:
            return (math.inf if x1 > 0 else 0.0), math.inf
        gain = x1 / x0 - 1
        return gain, (1 + gain) * math.hypot(lo.rel_se(), hi.rel_se())

    @staticmethod
    def _pays(lo: Sample, hi: Sample, need: float) -> bool | None:
        """Does the higher limit pay for its extra requests in flight? It must raise throughput by ``Z`` standard
        errors more than nothing, and by ``need`` with one standard error to spare (True); False once the gain is
        shown (``Z`` standard errors) to fall short of ``need`` (a pure queue past its capacity gains nothing); None
        while the rounds cannot tell."""
        gain, se = SoloLimit._gain(lo, hi)
        if gain - Z * se >= 0 and gain - se >= need:
            return True
        if gain + Z * se < need:
            return False
        return None
