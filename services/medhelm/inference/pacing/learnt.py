"""``LearntRate``: a deployment's request and token rate learnt from refusals alone, for a gateway that answers 429
without stating its budget (no ``x-ratelimit-*`` / ``anthropic-ratelimit-*`` headers). The gate (``gate.Pacer``) feeds
it every send and refusal and paces by its two buckets; docs/pacing.md gives the design and its reasons.

A gateway's token bucket is (nearly) empty whenever it refuses, so what it accepted between two refusals is its refill
over that time: the estimate is what was sent and not refused between an earlier refusal and this one, per second (over
the seconds this process was busy: while its own buckets sat full it sent under its rate, and the gateway may have lost
refill it cannot count). A refusal of a request sent after the last cut sets the rate to ``BACKOFF`` x that estimate
(before any estimate, it halves what was sent); while the rate holds requests back it climbs additively, faster the
longer no refusal comes, so a raised budget is found again. A Job's shards climb by a unit they share (their fair part,
read from the gateway's fractional ``Retry-After``), so the smaller gain on the larger as AIMD flows do. A gateway that
states whole seconds (RFC 9110) pauses every refused process for a second: a process alone then refines a cut only over
a full span, and a shard resumes at its rate, without a burst and takes at most one whole cut per
``WHOLE_CUT_SPACING_S`` (the slow shards are refused as often as the fast ones); a first estimate under whole seconds
spans a full ``MIN_SPAN_S`` too (half a second back reaches across the pause). A refusal that refines a quiet cut (to
the millisecond) never reaches back across the quiet span that cut answered, and leaves the cut when it reads at or
above it. A learnt rate at a configured budget is that budget: it paces with the budget's burst, and does not make the
other rate climb. The climb and every span counted in seconds are tuned at 10 requests a second; under
``STEADY_REQUESTS_PER_S`` (1 or 2 a second) they are stretched to hold as many requests (a cycle of the climb ends in
about one refusal), and a quiet span is one with no refusal for that long within it, not merely a long one. A cut never
sets the token rate under what the request rate needs at the recent mean cost (``_floored``; alone, the climb keeps
it there); its bucket holds four requests' mean cost at least, a shard's two (under that the two buckets bind in turn,
each losing refill: at the rate the mean cost needs, the token bucket's level walks without drift). Alone, the climb
closes fast on the rate last refused and crawls under it (``edge.Edge``). A gateway that counts per window of the clock
(Kong's, Envoy's rate limit service) refuses the rest of a window once its count is spent: a run of refusals that long
ends where the window resets, and the rate is read from one such end to the next (``_run_ended``); the climb then
doubles less, and the trickle starts sooner. A trickle's end (the gateway accepts again) reads a window too: what was
accepted since the last one, per second, over a span as long as the longest trickle at least, sets the rate
(``_trickle_ended``), and once a process trickled, a refusal after a quiet span cuts to what was accepted over the last
such window (a count that remembers a minute is overshot by a climb long before it refuses). A gateway that states no
wait at all (a bare 429) gives shards no fair part: their summary says to tell the Job its budget. A shard with no fair
part still halving after ``STARVED_REFUSALS`` refusals takes what was accepted since its oldest send kept as its first
estimate. A process alone behind a gateway that refuses close sends and not spaced ones (no burst: ``burst.BurstSeen``)
spaces its sends evenly, and a refusal then cuts the rate from itself.

Failure semantics: never raises. A refusal of a request sent before the last cut changes nothing; one with nothing to
estimate from, once a rate was estimated, changes nothing (an outage does not collapse the rate) until ``MIN_ACCEPTED``
refusals came since the last cut with some accepted between (a budget far under the rate: what was accepted since the
oldest send kept, over the seconds outside trickles, is then the refill), and a cut never raises a rate once estimated
(a trickle's end may: it reads a whole window, if refusals came all along; else it changes nothing); after
``MIN_ACCEPTED`` refusals in a row with none accepted (a shard: ``MIN_ACCEPTED`` / its share; ``WINDOW_TRICKLE`` once a
rate was read over windows; before an estimate, ``WINDOW_RUN_S`` with none accepted after a first burst was), it sends
one request per ``TRICKLE_S`` until one is answered (a gateway that counts refused requests, HAProxy's
``http_req_rate``, is not kept full by them, nor is one that counts per window of the clock refused for the rest of each
window); a learnt rate lies in [``MIN_RATE``, the configured cap]. Time comes from an injected clock."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

from medhelm.inference.pacing.budget import Bucket
from medhelm.inference.pacing.burst import PROBE_S, BurstSeen
from medhelm.inference.pacing.edge import Edge
from medhelm.inference.pacing.ledger import Ledger

BACKOFF = 0.95  # the rate after a refusal, as a part of what the gateway was seen to accept
MIN_SPAN_S = 2.0  # an estimate spans at least this many seconds between two refusals' sends ...
MIN_ACCEPTED = 16  # ... and at least this many accepted requests (a refusal leaves up to one request's cost)
FIRST_SPAN_S = 0.5  # the first estimate may be coarser (the next refusal refines it) ...
FIRST_ACCEPTED = 4  # ... so that a client at a gateway's door stops being refused within seconds
QUIET_S = 10.0  # an estimate over a longer span than this (no refusal between) may hide our own under-use
HORIZON_S = 60.0  # sends and refusals older than this are forgotten
CLIMB = 0.002  # the climb per second, as a part of the highest rate learnt, right after a cut ...
CLIMB_DOUBLING_S = 12.0  # ... doubling for every this many seconds without a refusal ...
CLIMB_MAX = 64.0  # ... up to this many times
FIRST_CLIMB = 8.0  # ... and this many times faster before the first estimate
PEAK_HALF_LIFE_S = 600.0  # the highest rate learnt (the climb's unit) forgets half of itself in this time ...
PEAK_OVER = 2.0  # ... and is never over this many times the last estimate
TRICKLE_S = 2.0  # every request refused, MIN_ACCEPTED in a row since the last cut: one send per this many seconds
# until one is answered (HAProxy's http_req_rate counts the refused ones: sent at the rate, all were refused for ever)
WAITS_KEPT = 8  # a shard's fair part is read from the longest of this many refusals' Retry-After ...
WAITS_NEEDED = 3  # ... once it has this many
SHARD_CLIMB = 0.6  # a shard climbs by this part of its fair part (its cut takes off its own part only)
STARVED_REFUSALS = 8  # a shard with no fair part, refused this often before an estimate, estimates from all it kept
FAIR_FLOOR = 0.5  # a shard's halvings stop at this part of its fair part, and its first estimate is within it
WHOLE_CUT_SPACING_S = 10.0  # under whole seconds a shard's cut is scaled by the seconds since its last over this
BURST_S = 1.0  # the learnt buckets hold this many seconds of refill (at least one request's cost) ...
TOKEN_BURST_REQUESTS = (4.0, 2.0)  # ... the token bucket at least this many requests' mean cost (alone, a shard)
WINDOW_RUN_S = 5.0  # a run of refusals, none accepted, this long (stretched) ends where a gateway's window resets ...
WINDOW_TRICKLE = 1  # ... once a rate was read over windows, a trickle starts after this many refusals in a row ...
WINDOW_CLIMB_MAX = 4.0  # ... and the climb doubles at most this many times (a window refuses only once it is spent;
# so too once a process trickled twice: HAProxy's count lets a fast climb through until a minute of it is counted)
FLOOR_S = 60.0  # alone, the token floor reads the mean cost over this many seconds (prompts drift); a shard's, of all
MIN_RATE = 0.01  # requests (or tokens) a second: the slowest pace a refusal can set
STEADY_REQUESTS_PER_S = 4.0  # under this many requests a second, the climb and the spans above in seconds are
# stretched to hold as many requests as at this rate (``LearntRate._stretch``)


class LearntRate:
    """Requests and tokens a second one deployment may send, learnt from the gateway's refusals."""

    def __init__(self, clock: Callable[[], float], *, cap_requests: float | None = None,
                 cap_tokens: float | None = None, share: float = 1.0) -> None:
        """``cap_*``: per second, a configured budget the learnt rate never exceeds (the configured buckets pace
        by it already). ``share``: under 1, this process is one of a Job's shards, each taking that part of the
        gateway (an estimate over a short span reads its part with more noise than a process alone's whole: they
        refine only over full spans; they climb by a unit they share, see ``_fair``)."""
        self._clock = clock
        self._share = share
        self._alone = share >= 1.0
        self._waits: collections.deque[float] = collections.deque(maxlen=WAITS_KEPT)  # refusals' Retry-After
        self._caps = (cap_requests, cap_tokens)
        self.born = clock()
        self.requests_per_s: float | None = None  # None until learnt
        self.tokens_per_s: float | None = None  # None until learnt, or when no request counted tokens
        self.buckets: tuple[Bucket | None, Bucket | None] = (None, None)
        self._ledger = Ledger()  # what was sent and refused: the counts the estimates read
        self._run: list[float] | None = None  # the open run of refusals: first and last send, accepted up to the last
        self._window_end: tuple[float, float, float] | None = None  # the latest long run's last send, accepted up to it
        self._bare = 0  # refusals that stated no wait at all (a bare 429)
        self.first: tuple[float, int] | None = None  # (seconds since born, refusals then) when first learnt
        self.cuts = 0
        self._cut_at = -math.inf  # a refusal of a request sent before this is already answered
        self._estimated = False  # a rate was estimated (before: each refusal halves a provisional one)
        self._fresh = -math.inf  # the send time of the refusal that made the last cut after a quiet span
        self._ticks = 0.0  # the climb's clock: seconds, stretched at a low rate (``_stretch``)
        self._quiet_since = 0.0  # the last cut, on the climb's clock
        self._peak = (0.0, 0.0, 0.0)  # (requests/s, tokens/s, when on the climb's clock): the climb's unit
        self._edge = Edge()  # alone, the rate last refused as it crossed the budget: the climb crawls under it
        self._advanced = self.born
        self._bound_at = -math.inf  # the last time the learnt rate held a request back
        self._latency: float | None = None  # a moving average of answers' latency
        self._idle_seen = self.born  # idle spells are accounted up to this time
        self._trickling: float | None = None  # since when every request was refused: one send per TRICKLE_S
        self.trickles = 0  # how often the rate was held to a trickle
        self._longest_trickle = 0.0  # seconds: about the window of a gateway that counts over one (``_trickle_ended``)
        self._trickle_mark = (self.born, 0.0, 0.0)  # the last trickle's end (or birth), and the accepted up to it
        self._refusal_gap = 0.0  # the longest time between two refusals' sends since then
        self._last_refused = self.born  # the latest refusal's send time
        self.window_cuts = 0  # how often a rate was read over a gateway's window (``_run_ended``)
        self._burst = BurstSeen()  # whether the gateway holds a burst (none: the request bucket holds one request)

    @property
    def paces(self) -> bool:
        return self.requests_per_s is not None

    # -- what the gate reports

    def sent(self, now: float, tokens: float) -> None:
        """A request started, expected to cost ``tokens`` of a tokens budget (0: tokens not counted)."""
        self._advance(now)
        for bucket, amount in zip(self.buckets, (1.0, tokens)):
            if bucket is not None and amount:
                bucket.take(amount, now)
        previous, horizon = self._ledger.last_sent, now - HORIZON_S * self._stretch()
        self._ledger.send(now, tokens, horizon)
        self._burst.sent(now, previous, self.requests_per_s, horizon, watch=self._watching())

    def answered(self, latency_s: float, started: float) -> None:
        """A request sent at ``started`` was answered after ``latency_s``."""
        now = self._clock()
        if self._trickling is not None:  # the gateway accepts again (a request sent before the trickle: at once)
            self._ledger.paused.append((self._trickling, max(started, self._trickling)))
            self._longest_trickle = max(self._longest_trickle, started - self._trickling)
            self._trickling = None
            self._trickle_ended(started, now)
        self._latency = latency_s if self._latency is None else 0.9 * self._latency + 0.1 * latency_s
        if self._burst.answered(started) and self.requests_per_s is not None:  # a probe: the gateway holds a burst
            self._set(self.requests_per_s, self.tokens_per_s, now)
        self._run_ended(started, now)

    def _trickle_ended(self, started: float, now: float) -> None:
        """A trickle ended: the gateway, which refused every request for a while, accepts the one sent at
        ``started``. It counts over a window and let a whole window's count through since the last trickle ended (or
        the process began): what it accepted since then, per second, is its budget, if this process was at its edge
        all that time (no span without a refusal longer than a quiet one), over a window at least (the longest
        trickle: two trickles close together span mostly trickle). It sets the rate as a cut does, up or down."""
        accepted = self._ledger.accepted_up_to()
        mark, self._trickle_mark = self._trickle_mark, (started, *accepted)
        gap, self._refusal_gap = self._refusal_gap, 0.0
        span, requests, tokens = started - mark[0], accepted[0] - mark[1], accepted[1] - mark[2]
        if gap > self._quiet_s() or span < max(MIN_SPAN_S, self._longest_trickle) or requests < MIN_ACCEPTED \
                or self.requests_per_s is None:
            return
        self._cut(requests / span, tokens / span, now, estimated=True)

    def _run_ended(self, started: float, now: float) -> None:
        """An answer to a request sent at ``started`` ends the open run of refusals sent before it. One that lasted
        ``WINDOW_RUN_S`` with none accepted ended where a gateway that counts per window reset its count: from one
        such end to the next it accepted one window's count over one window. That rate, from the second end after the
        first estimate, cuts as an estimate does (docs/pacing.md, a gateway that counts per window)."""
        run = self._run
        if run is None or started <= run[0]:
            return
        if started < run[1]:  # a request sent within the run was let through: the run starts again after it
            run[0] = started
            return
        self._run = None
        first, end = run[0], run[1]
        if started - first < WINDOW_RUN_S * self._stretch() or not self._estimated:
            return
        mark = (end, run[2], run[3])
        previous, self._window_end = self._window_end, mark
        if previous is None or self.requests_per_s is None:
            return
        span = end - previous[0]
        requests, tokens = mark[1] - previous[1], mark[2] - previous[2]
        if requests < MIN_ACCEPTED or span < MIN_SPAN_S or span > 2.0 * HORIZON_S * self._stretch():
            return
        requests, tokens = requests / span, tokens / span
        if BACKOFF * requests >= self.requests_per_s:
            return  # a cut never raises the rate
        self.window_cuts += 1
        self._cut(requests, min(tokens, self.tokens_per_s) if self.tokens_per_s else tokens, now, estimated=True)

    def refused(self, started: float, tokens: float, retry_after: float | None = None) -> bool:
        """A request sent at ``started`` (costing ``tokens``) was refused as too many, the gateway saying to wait
        ``retry_after`` seconds. True when the rate was cut."""
        now = self._clock()
        cut = self._refused_at(now, started, tokens, retry_after)
        if retry_after and not self._alone and self._whole():
            # a shard does not burst when a whole second's pause ends: the others took the refill meanwhile, and
            # shards whose pauses end together burst into an empty bucket, the last one refused whole again and again
            for bucket in self.buckets:
                if bucket is not None:
                    bucket.refill(now)
                    bucket.level = min(bucket.level, -retry_after * bucket.per_minute / 60.0)
        return cut

    def _refused_at(self, now: float, started: float, tokens: float, retry_after: float | None) -> bool:
        """``refused``'s decision: the estimate, the cut or the halving."""
        self._advance(now)
        ledger = self._ledger
        ledger.refuse(started, tokens)
        self._refusal_gap = max(self._refusal_gap, started - self._last_refused)
        self._last_refused = max(self._last_refused, started)
        if self._run is None or started >= self._run[1]:  # the open run of refusals goes on to this one
            accepted = ledger.accepted_up_to(started)
            self._run = [started, started, *accepted] if self._run is None else [self._run[0], started, *accepted]
        if retry_after and retry_after > 0.0:
            self._waits.append(retry_after)
        elif retry_after is None:
            self._bare += 1
        if self._burst.refused(started, now, ledger, PROBE_S * self._stretch(), watch=self._watching()):
            self._set(self.requests_per_s, self.tokens_per_s, now)  # a probe refused, or even pacing begins
            return False
        if started < self._cut_at:
            return False
        if self._estimated and ledger.accepted(self._cut_at, started)[0] < 1.0:
            # nothing accepted since the last cut: an outage (or others' turn), not a smaller budget; but no sending at
            # the rate either once MIN_ACCEPTED in a row were refused (HAProxy's http_req_rate counts refused requests,
            # Kong's window refuses to its end). A shard waits for MIN_ACCEPTED / share, or WINDOW_TRICKLE once windows
            if self._trickling is None and \
                    ledger.refused_since(self._cut_at) >= \
                    (WINDOW_TRICKLE if self.window_cuts else MIN_ACCEPTED / self._share):
                self._trickling = now
                self.trickles += 1
                if self._burst.none:  # it refuses every request for a while: a count over a window, not no burst
                    self._burst.end()
                    self._set(self.requests_per_s, self.tokens_per_s, now)
            return False
        estimate = self._estimate(started)
        if estimate is not None:
            requests, used, span = estimate
            idle = Ledger.within(self._ledger.idle, started - span, started)
            if idle > 0.0 and self.requests_per_s is not None and self._estimated:
                # we sent under our own rate for a while (a starved event loop): the gateway's bucket may have lost
                # refill too, so read the accepted count over the time we were busy, never over the rate just refused
                busy = span / max(span - idle, 1e-9)
                requests = max(requests, min(requests * busy, self.requests_per_s))
                used = max(used, min(used * busy, self.tokens_per_s or 0.0))
            quiet = self._quiet(started, span) and self.requests_per_s is not None
            if quiet and self.trickles:
                # a gateway that refused every request for a while counts over a window that long: what it accepted
                # over the last one is its budget (cut halfway, read over a minute, the climb refused 7 % from 60 s)
                window = min(span, max(MIN_SPAN_S, self._longest_trickle))
                requests, used = (x / window for x in ledger.accepted(started - window, started))
            elif quiet:
                # no refusal for a while: the gateway's bucket may have sat full for part of the span, so what it
                # accepted is a floor; the rate just refused a ceiling (a fast climb may have taken it far past)
                if self._alone:  # start halfway: the next refusal is estimated from this one (gateway empty at both)
                    requests = max(requests, (requests + self.requests_per_s) / 2)
                    used = max(used, (used + (self.tokens_per_s or 0.0)) / 2)
                    self._fresh = started
                else:  # a shard's next refusal refines only over a full span: cut from the ceiling
                    requests = max(requests, self.requests_per_s)
                    used = max(used, self.tokens_per_s or 0.0)
            fair = None if self._estimated else self._fair()
            if fair is not None and requests > 0.0:
                # a shard's first estimate, over a short span, is noisy (who was refused first): kept in [half, twice]
                part = min(max(requests, FAIR_FLOOR * fair), fair / FAIR_FLOOR) / requests
                requests, used = requests * part, used * part
            if self._estimated and self.requests_per_s is not None:
                if requests >= self.requests_per_s and self._refining(started):
                    # the quiet cut's level holds: a refusal this soon after it is the climb's last requests, arriving
                    return False
                # a cut never raises the rate (a long bucket's saved burst reads as more than its refill till dry)
                requests = min(requests, self.requests_per_s)
                used = min(used, self.tokens_per_s) if self.tokens_per_s else used
                if self._burst.none:  # paced evenly, a refusal says the spacing was too close: cut from it
                    requests, used = self.requests_per_s, self.tokens_per_s or used
            self._cut(requests, used, now, estimated=True)
        elif not self._estimated:
            if self._starved(started, now):
                return True
            if self._spent(started, now):
                return False
            # nothing to estimate from yet: halve the rate (at first, what was sent over the last second)
            if self.requests_per_s is None:
                if ledger.first_kept is None:
                    return False
                seconds = min(1.0, max(0.05, now - ledger.first_kept))
                requests, used = (x / seconds for x in ledger.sent_between(now - seconds, now))
            else:
                requests, used = self.requests_per_s, self.tokens_per_s or 0.0
            if requests <= 0.0:  # nothing was sent to halve
                return False
            self._cut(requests, used, now, estimated=False)
            # halve; a shard stops at a part of its fair part (the first refused would halve far under the others)
            part = min(1.0, max(0.5, FAIR_FLOOR * (self._fair() or 0.0) / requests))
            self._set(requests * part, used * part if self.tokens_per_s else None, now)
        elif not self._far_under(started, now):
            return False
        return True

    def _starved(self, b: float, now: float) -> bool:
        """A shard with no fair part to stop its halvings (its gateway states whole seconds or no wait), refused
        ``STARVED_REFUSALS`` times and not yet estimated: the others' paced sends keep the gateway at its edge, its own
        find it empty, and each refusal would halve it again. What the gateway accepted from it since the oldest send
        kept is its part of the refill: the first estimate. True when the rate was cut."""
        if self._alone or self._ledger.refusals < STARVED_REFUSALS or self._fair() is not None:
            return False
        return self._cut_to_since_oldest(b, now, least=2.0)

    def _spent(self, b: float, now: float) -> bool:
        """Not yet estimated, a gateway that let a first burst through and then refused every request for
        ``WINDOW_RUN_S`` counts over a window the burst spent (HAProxy's minute, 600 let through in half a second):
        the process trickles, not halving down to a hundredth of the budget, and the trickle's end reads the window."""
        ledger, run = self._ledger, WINDOW_RUN_S * self._stretch()
        if self._trickling is not None:
            return True
        if ledger.first_kept is None or ledger.first_kept > b - run or ledger.accepted_up_to(b)[0] < MIN_ACCEPTED \
                or ledger.accepted(b - run, b)[0] >= 1.0:
            return False
        self._trickling = now
        self.trickles += 1
        return True

    def _far_under(self, b: float, now: float) -> bool:
        """Once estimated, a refusal sent at ``b`` with no span holding the accepted requests an estimate needs: after
        ``MIN_ACCEPTED`` refusals since the last cut, the budget is far under the rate, and what the gateway accepted
        since the oldest send kept is its refill (a long bucket's saved burst read as its refill by a first estimate:
        5.2 requests/s of 0.1, and 86 % of the requests refused for ever after). True when the rate was cut."""
        if self._ledger.refused_since(self._cut_at) < MIN_ACCEPTED or self.requests_per_s is None:
            return False
        return self._cut_to_since_oldest(b, now, least=1.0)

    def _cut_to_since_oldest(self, b: float, now: float, *, least: float) -> bool:
        """``_far_under``'s and ``_starved``'s cut: to what the gateway accepted from the oldest send kept up to
        ``b``, per second, when that spans ``MIN_SPAN_S`` and holds ``least`` accepted requests (never over a rate
        estimated before: a cut never raises one). True when the rate was cut."""
        since = self._ledger.since_oldest(b)
        if since is None or since[2] < MIN_SPAN_S or since[0] < least:
            return False
        requests, used, span = since
        span -= Ledger.within(self._ledger.paused, b - span, b)  # a trickle is our own pause, not the gateway's
        if span < MIN_SPAN_S:  # refill read over a trickle's pause would be a hundredth of HAProxy's count, for good
            return False
        requests, used = requests / span, used / span
        if self._estimated and self.requests_per_s is not None:
            requests = min(requests, self.requests_per_s)
            used = min(used, self.tokens_per_s) if self.tokens_per_s else used
        self._cut(requests, used, now, estimated=True)
        return True

    def wait_for(self, tokens: float, now: float) -> float:
        """Seconds until a request costing ``tokens`` fits the learnt rate (0: it does, or nothing is learnt)."""
        self._advance(now)
        wait = 0.0
        probe = self._burst.probe_open(now, self._ledger.last_sent, self.requests_per_s)  # right behind the last
        for bucket, amount, rate, cap in zip(self.buckets, (1.0, tokens), (self.requests_per_s, self.tokens_per_s),
                                             self._caps):
            if bucket is not None and amount:
                held = 0.0 if probe and bucket is self.buckets[0] else bucket.wait_for(amount, now)
                wait = max(wait, held)
                if held > 0.0 and not self._at_cap(rate, cap):
                    # the climb probes from here; a rate at its configured budget has nothing to probe (the other
                    # would climb on its account without bound, never refused)
                    self._bound_at = now
        if self._trickling is not None and self._ledger.last_sent is not None:
            wait = max(wait, self._ledger.last_sent + TRICKLE_S - now)
        return wait

    def in_flight_needed(self) -> int:
        """Requests in flight the learnt request rate needs at the answers' latency (Little's law, twice over)."""
        if self.requests_per_s is None or self._latency is None:
            return 1
        return math.ceil(2.0 * self.requests_per_s * self._latency) + 1

    def summary(self) -> str:
        if self.requests_per_s is None:
            return ""
        refusals = self._ledger.refusals
        bare = ", the gateway states no wait: tell the Job its budget (rate_limits) for its shards to share it " \
               "evenly" if not self._alone and self._bare == refusals > 0 and self._caps == (None, None) else ""
        if self.first is None:
            return f"paced to {self.requests_per_s:.3g} requests/s after {refusals} refusals (halved: " \
                   f"nothing to estimate the gateway's budget from yet){bare}"
        tokens = f" and {self.tokens_per_s:.3g} tokens/s" if self.tokens_per_s else ""
        trickle = f", held to one request per {TRICKLE_S:.0f} s {self.trickles} times (every request refused)" \
            if self.trickles else ""
        windows = f", read over the gateway's windows {self.window_cuts} times (it counts per window)" \
            if self.window_cuts else ""
        even = ", spaced evenly (the gateway lets no burst through)" if self._burst.none else ""
        seconds, refusals = self.first
        return f"paced to {self.requests_per_s:.3g} requests/s{tokens} after {refusals} refusals in the first " \
               f"{seconds:.0f} s{even}{windows}{trickle}{bare}"

    # -- what it decides

    def _stretch(self) -> float:
        """How many seconds count as one for the climb and for the spans above measured in seconds: 1 at
        ``STEADY_REQUESTS_PER_S`` or more, more at a lower request rate (the token rate's, when it binds first), so
        that each holds as many requests as there and a cycle of the climb ends in about one refusal. A shard goes by
        a rate the shards share, so that they climb alike: its fair part, else the Job's whole as it sees it."""
        requests = self.requests_per_s
        if requests is None or not self._estimated:
            # a halving's guess is no rate to stretch by: a client starved at its first refusal (1 request sent in
            # the last second) climbed back from 0.5 requests a second ten times slower, 0.26 of the budget used
            return 1.0
        sent = self._ledger.total
        if self.tokens_per_s and sent[1] > 0.0:
            requests = min(requests, self.tokens_per_s * sent[0] / sent[1])
        fair = self._fair()
        if fair is not None:  # a shard's fair part, the same for every shard (``_fair``): they climb alike
            requests = fair
        else:
            requests /= self._share
        return max(1.0, STEADY_REQUESTS_PER_S / max(requests, MIN_RATE))

    def _watching(self) -> bool:  # its sends' spacing tells a gateway without burst (shards' find the others')
        return self._alone and self._estimated and not self.trickles and not self.window_cuts

    def _fair(self) -> float | None:
        """A shard's fair part of the gateway's request rate, None when unknown (a process alone, or a gateway that
        states its wait in whole seconds). A request bucket that refuses lacks less than one request, so the
        longest of the last waits it states is about one request's refill time, the same for every shard: share /
        that wait is a part the shards agree on without a coordinator."""
        if self._alone or len(self._waits) < WAITS_NEEDED or all(w == int(w) for w in self._waits):
            return None
        n = len(self._waits)  # the longest of n waits drawn evenly below one request's refill: n / (n + 1) of it
        return self._share * n / (n + 1) / max(self._waits)

    def _whole(self) -> bool:
        """The gateway states its waits in whole seconds (RFC 9110's delay-seconds)."""
        return bool(self._waits) and all(w == int(w) for w in self._waits)

    def _quiet(self, b: float, span: float) -> bool:
        """An estimate spanning ``span`` seconds up to the refusal sent at ``b`` holds a quiet span: no refusal for a
        while within it. (Not a long span alone: at a low rate the accepted requests an estimate needs take long even
        while refusals come every few seconds; read as quiet, shards of 1 request a second each were cut from their
        ceiling at each and 21 % of their requests were refused.)"""
        quiet = self._quiet_s()
        if span <= quiet:
            return False
        times = [b - span, *self._ledger.refusals_between(b - span, b), b]
        return any(later - earlier > quiet for earlier, later in zip(times, times[1:]))

    def _refining(self, b: float) -> bool:
        """A refusal sent at ``b`` refines the last quiet cut, loosely (to the millisecond, within ``QUIET_S``)."""
        return self._estimated and b - self._fresh <= self._quiet_s() and not self._whole()

    def _quiet_s(self) -> float:
        """Seconds without a refusal that make a span quiet: ``QUIET_S``, stretched at a low rate."""
        return QUIET_S * self._stretch()

    def _estimate(self, b: float) -> tuple[float, float, float] | None:
        """The gateway's refill as seen by this process: accepted between the latest earlier refusal far enough
        back and the refusal sent at ``b``, per second, and the seconds that spans."""
        # a first estimate, or right after a quiet cut; not after a whole second's pause, whose burst ends the next
        # span at once: over a span that short a refusal's leftover is a large part of what was accepted
        loose = not self._estimated or self._refining(b)
        span, accepted = (FIRST_SPAN_S, FIRST_ACCEPTED) if loose else (MIN_SPAN_S, MIN_ACCEPTED)
        if not self._estimated and self._whole():
            # the first estimate too spans a full 2 s under whole seconds: half a second back from the first refusal
            # after the first pause spans all pause and the burst that collects its refill (a gateway 10 ms away:
            # 4.7 requests/s read of 10, and a 60 s bucket saved up while the rate climbed back)
            span = MIN_SPAN_S
        oldest = True  # no refusal kept sent that far back
        for a in self._ledger.refusals_back_from(b - span):
            oldest = False
            if a < self._fresh and self._refining(b):
                # back across the quiet span a quiet cut just answered: halfway down again from a cut that may have
                # been right (not under whole seconds, whose refinement over a full span brings a far overshoot down)
                return None
            requests, tokens = self._ledger.accepted(a, b)
            if requests >= accepted:
                return requests / (b - a), tokens / (b - a), b - a
        since = self._ledger.since_oldest(b) if oldest and self._estimated else None
        if since is not None and since[2] > self._quiet_s() and since[0] >= accepted:
            # no refusal within the horizon: what was sent since its start, all accepted, is a floor (a quiet span)
            requests, tokens, span = since
            return requests / span, tokens / span, span
        return None

    def _cut(self, requests: float, tokens: float, now: float, *, estimated: bool) -> None:
        self.cuts += 1
        tokens = self._floored(requests, tokens, now) if estimated else tokens  # an estimate samples the cost too
        pr, pt, when = self._peak
        fade = 0.5 ** ((self._ticks - when) / PEAK_HALF_LIFE_S)
        if estimated and not self._estimated:  # the first estimate replaces what the provisional rates guessed
            pr = pt = 0.0
        # a budget that fell far is a new unit: the old peak would climb into it too fast
        self._peak = (max(requests, min(pr * fade, PEAK_OVER * requests)),
                      max(tokens, min(pt * fade, PEAK_OVER * tokens)), self._ticks)
        if estimated:  # alone, a rate estimated and refused may be the edge the climb comes back to (``edge.Edge``)
            crossed = self._estimated and self._alone and not (self.trickles or self.window_cuts)
            self._edge.cut(self.requests_per_s if crossed else None, requests)
        requests, tokens = BACKOFF * requests, BACKOFF * tokens
        if estimated and self._estimated and self.requests_per_s is not None and not self._alone and self._whole():
            # a shard's refusals per second hardly depend on its rate under whole seconds (a slow one is refused as
            # often, after its pause): a full cut at each shrinks the slow most, so a cut soon after the last is partial
            part = min(1.0, (self._ticks - self._quiet_since) / WHOLE_CUT_SPACING_S)
            requests = self.requests_per_s - (self.requests_per_s - requests) * part \
                if requests < self.requests_per_s else requests
            if 0.0 < tokens < (self.tokens_per_s or 0.0):
                tokens = self.tokens_per_s - (self.tokens_per_s - tokens) * part
        if estimated:
            self._estimated = True
            if self.first is None:
                self.first = (now - self.born, self._ledger.refusals)
        self._set(requests, tokens if tokens > 0 else None, now)
        for bucket in self.buckets:
            if bucket is not None:  # the gateway's bucket is empty: no burst of ours into it
                bucket.level = min(bucket.level, 0.0)
        self._cut_at, self._quiet_since = now, self._ticks

    def _set(self, requests: float, tokens: float | None, now: float) -> None:
        cap_r, cap_t = self._caps
        requests = max(MIN_RATE, min(requests, cap_r or math.inf))
        tokens = max(MIN_RATE, min(tokens, cap_t or math.inf)) if tokens else None
        self.requests_per_s, self.tokens_per_s = requests, tokens
        old_r, old_t = self.buckets
        # before the first estimate the rate is a guess: no burst at it (the end of a whole second's pause would send
        # all that waited into a gateway that refills far slower), unless it climbed to a configured budget, which
        # paces with its burst as the configured bucket does (a stalled client catches up), and so the other rate
        burst_s = BURST_S if self._estimated or self._at_cap(requests, cap_r) or self._at_cap(tokens, cap_t) else 0.0
        # the token bucket holds a few requests' mean cost at least (under that, the buckets bind in turn)
        sent = self._ledger.total
        least = TOKEN_BURST_REQUESTS[0 if self._alone else 1] * sent[1] / sent[0] if burst_s and sent[0] else 1.0
        self.buckets = (self._bucket(old_r, requests, 1.0, now, 0.0 if self._burst.none else burst_s),
                        self._bucket(old_t, tokens, max(1.0, least), now, burst_s) if tokens else None)

    def _floored(self, requests: float, tokens: float, now: float) -> float:
        """``tokens`` a second, never under what ``requests`` a second need at the recent mean cost (a shard's: all)."""
        sent = self._ledger.sent_since(now - FLOOR_S, MIN_ACCEPTED if self._alone else math.inf)  # FLOOR_S
        return max(tokens, requests * sent[1] / sent[0]) if tokens and sent[0] >= FIRST_ACCEPTED else tokens

    @staticmethod
    def _at_cap(rate: float | None, cap: float | None) -> bool:
        """A learnt rate at its configured budget: what it holds back, the configured budget holds back."""
        return rate is not None and cap is not None and rate >= cap

    @staticmethod
    def _bucket(bucket: Bucket | None, per_s: float, least: float, now: float, burst_s: float = BURST_S) -> Bucket:
        burst = max(least, per_s * burst_s)
        if bucket is None:
            return Bucket(per_s * 60.0, now, burst=burst)
        bucket.refill(now)
        bucket.per_minute, bucket.burst = per_s * 60.0, burst
        bucket.level = min(bucket.level, burst)
        return bucket

    def _advance(self, now: float) -> None:
        """The climb: while the learnt rate held requests back (within the last second, stretched, or the last two
        of its requests' spacing when that is longer), it grows additively."""
        buckets = [bucket for bucket in self.buckets if bucket is not None]
        if buckets and now > self._idle_seen:
            start = max(self._idle_seen, *(bucket.full_at() for bucket in buckets))
            if start < now:
                self._ledger.idle.append((start, now))
            self._idle_seen = now
        dt = now - self._advanced
        if dt <= 0.0:
            return
        self._advanced = now
        stretch = self._stretch()
        self._ticks += dt / stretch
        # a request held back at a rate under one a second is held back all that time: not idle, the climb goes on
        if self.requests_per_s is None or now - self._bound_at > max(stretch, 2.0 / self.requests_per_s):
            return
        pr, pt, _ = self._peak  # the climb's unit: the highest rate estimated (or the rate itself, before one)
        pr, pt = max(pr, self.requests_per_s), max(pt, self.tokens_per_s or 0.0)
        fair = self._fair()
        if fair is not None:  # shards climb by one unit they share, so the smaller ones gain on the larger (AIMD)
            unit = SHARD_CLIMB * fair
            pr, pt = unit, unit * (self.tokens_per_s or 0.0) / self.requests_per_s
        most = WINDOW_CLIMB_MAX if self.window_cuts or self.trickles > 1 else CLIMB_MAX
        boost = min(most, 2.0 ** ((self._ticks - self._quiet_since) / CLIMB_DOUBLING_S)) * CLIMB * dt / stretch
        if self._estimated:  # alone, close under the rate last refused: slower (``edge.Edge``)
            boost = self._edge.step(self.requests_per_s, boost, dt / stretch, pr)
        else:  # a halving guessed: find the budget's edge again soon, to estimate it there
            boost *= FIRST_CLIMB
        requests = self.requests_per_s + boost * pr
        tokens = self.tokens_per_s + boost * pt if self.tokens_per_s else None
        if tokens and self._alone and self._estimated:  # the floor follows the mean as it drifts
            tokens = self._floored(requests, tokens, now)
        self._set(requests, tokens, now)
