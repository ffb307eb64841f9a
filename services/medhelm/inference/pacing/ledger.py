"""``Ledger``: what one process sent a deployment over the last horizon, which of those sends the gateway refused,
and the spells it held itself back — the counts a rate learnt from 429s reads (``learnt.LearntRate`` decides; this
module only keeps and counts).

Sends are kept as running totals (requests and tokens sent up to and including each), so any span's count is two
lookups. Refusals are kept by the send time of the refused request: an answer comes later than its send, and a span
counts what was *sent* in it. Everything older than the horizon the caller passes is forgotten, except the running
totals up to the oldest send kept, so a count reaching back past the horizon is what was sent since that send (a
count from 0 read every request since the process began as sent within the last minute).

Failure semantics: never raises; holds no clock of its own (every time is the caller's); a count over an empty span
is 0, and one reaching back past the horizon counts from the oldest send kept (never from 0)."""

from __future__ import annotations

import bisect
import collections
import collections.abc
import math

Spell = tuple[float, float]  # (from, to)


class Ledger:
    """One process's sends and refusals to one deployment, over a horizon."""

    def __init__(self) -> None:
        self._sends: collections.deque[tuple[float, float, float]] = collections.deque()  # (t, requests, tokens)
        self.total = (0.0, 0.0)  # requests and tokens sent so far
        self._forgotten = (0.0, 0.0)  # requests and tokens sent up to the oldest send kept (not counting it)
        self._refused: list[tuple[float, float]] = []  # (send time, tokens) of each refusal kept, by send time
        self.refusals = 0  # every refusal recorded
        self.refused_tokens = 0.0  # the tokens of every refusal recorded
        self.idle: list[Spell] = []  # spells every learnt bucket sat full (we sent under our own rate), by time
        self.paused: list[Spell] = []  # spells we held ourselves to a trickle, by time

    def send(self, now: float, tokens: float, horizon: float) -> None:
        """A request costing ``tokens`` started at ``now``; what is older than ``horizon`` (a time) is forgotten."""
        requests, used = self.total[0] + 1.0, self.total[1] + tokens
        self.total = (requests, used)
        self._sends.append((now, requests, used))
        while self._sends and self._sends[0][0] < horizon:
            self._forgotten = self._sends.popleft()[1:]
        if self._refused and self._refused[0][0] < horizon:
            del self._refused[:bisect.bisect_left(self._refused, (horizon, -math.inf))]
        for spells in (s for s in (self.idle, self.paused) if s and s[0][1] < horizon):  # most sends: none
            del spells[:bisect.bisect_left(spells, horizon, key=lambda spell: spell[1])]

    def refuse(self, started: float, tokens: float) -> None:
        """The request sent at ``started`` (costing ``tokens``) was refused."""
        self.refusals += 1
        self.refused_tokens += tokens
        bisect.insort(self._refused, (started, tokens))

    @property
    def first_kept(self) -> float | None:
        """The oldest send kept (None: nothing kept)."""
        return self._sends[0][0] if self._sends else None

    @property
    def last_sent(self) -> float | None:
        return self._sends[-1][0] if self._sends else None

    def gap_before(self, t: float) -> float | None:
        """Seconds from the send before the (latest) one at ``t`` to it (None: no send kept before it)."""
        i = bisect.bisect_right(self._sends, t, key=lambda s: s[0])
        return t - self._sends[i - 2][0] if i >= 2 else None

    def was_refused(self, t: float) -> bool:
        """A refusal kept was of a request sent at ``t``."""
        i = bisect.bisect_left(self._refused, (t, -math.inf))
        return i < len(self._refused) and self._refused[i][0] == t

    def accepted_up_to(self, t: float = math.inf) -> tuple[float, float]:
        """Requests and tokens sent up to ``t`` (by default: so far) less every refusal recorded (those in flight
        count as accepted)."""
        requests, tokens = self.cum_at(t)
        return requests - self.refusals, tokens - self.refused_tokens

    def cum_at(self, t: float) -> tuple[float, float]:
        """Requests and tokens sent up to ``t`` since the process began (before the oldest send kept: what was sent
        up to it)."""
        i = bisect.bisect_right(self._sends, t, key=lambda s: s[0])
        return (self._sends[i - 1][1], self._sends[i - 1][2]) if i else self._forgotten

    def sent_between(self, a: float, b: float) -> tuple[float, float]:
        """Requests and tokens sent after ``a`` up to ``b``."""
        (ra, ta), (rb, tb) = self.cum_at(a), self.cum_at(b)
        return rb - ra, tb - ta

    def sent_since(self, a: float, least: float) -> tuple[float, float]:
        """Requests and tokens sent after ``a``, or all sent so far when that is under ``least`` requests."""
        recent = self.sent_between(a, math.inf)
        return recent if recent[0] >= least else self.total

    def accepted(self, a: float, b: float) -> tuple[float, float]:
        """Requests and tokens sent after ``a`` up to ``b`` and not refused."""
        requests, tokens = self.sent_between(a, b)
        lo = bisect.bisect_right(self._refused, (a, math.inf))
        hi = bisect.bisect_right(self._refused, (b, math.inf))
        refused = self._refused[lo:hi]
        return requests - len(refused), tokens - sum(t for _, t in refused)

    def since_oldest(self, b: float) -> tuple[float, float, float] | None:
        """Requests and tokens accepted from the oldest send kept up to ``b``, and the seconds that spans (None when
        nothing is kept)."""
        if not self._sends:
            return None
        a = self._sends[0][0]
        return (*self.accepted(a - 1e-9, b), b - a)

    def refused_since(self, t: float) -> int:
        """Refusals kept of requests sent at ``t`` or later."""
        return len(self._refused) - bisect.bisect_left(self._refused, (t, -math.inf))

    def refusals_between(self, a: float, b: float) -> list[float]:
        """The send times of the refusals kept sent at ``a`` or later and before ``b``, in order."""
        lo = bisect.bisect_left(self._refused, (a, -math.inf))
        hi = bisect.bisect_left(self._refused, (b, -math.inf))
        return [t for t, _ in self._refused[lo:hi]]

    def refusals_back_from(self, b: float) -> collections.abc.Iterator[float]:
        """The send times of the refusals kept sent at ``b`` or earlier, latest first."""
        i = bisect.bisect_right(self._refused, (b, math.inf))
        while i > 0:
            i -= 1
            yield self._refused[i][0]

    @staticmethod
    def within(spells: list[Spell], a: float, b: float) -> float:
        """Seconds between ``a`` and ``b`` within ``spells`` (ordered, not overlapping)."""
        i = bisect.bisect_right(spells, a, key=lambda spell: spell[1])
        total = 0.0
        for start, end in spells[i:]:
            if start >= b:
                break
            total += min(end, b) - max(start, a)
        return total
