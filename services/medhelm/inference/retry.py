"""Jittered exponential backoff around any ``ModelClient``, deciding from the attempt's typed ``outcome.Outcome``.

Failure semantics: a ``FATAL`` outcome (a 400, a prompt longer than the context window, a refused key) fails at
once; ``RATE_LIMITED`` and ``TRANSIENT`` ones (429/503/529, other 5xx, timeouts, malformed bodies, unreachable
servers) are retried until ``max_attempts``, then the last error is raised unchanged. A request refused for a rate
limit (a 429, a provider's throttling code, or a 503/529 that states ``Retry-After``) is the gateway saying "later",
not "broken": past ``max_attempts`` it is retried while its first such refusal is less than ``rate_limit_wait_s``
ago, so no instance of a run fails because its deployment's pacer was still learning a budget (issue 53); a server
that asks for a longer wait than that, or a bare 503/529 (a server down or overloaded, no wait stated), gets
``max_attempts`` only; a 429 that says the account's quota is spent is ``FATAL`` (``wire.SPENT``). "Full jitter"
(a uniform draw in ``[0, backoff]``) keeps many workers that were throttled together from coming back together; a
server's ``Retry-After`` is a floor for the next wait (within ``max_delay_s``). ``RetryPolicy.retries`` is the one
place that decides; the seeded simulations ask it too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from medhelm.errors import InferenceError
from medhelm.inference.base import ModelClient
from medhelm.inference.outcome import Outcome, Verdict, outcome_of
from medhelm.specs import Completion, Deployment, GenerationRequest


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # 1 try + 5 retries
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: str = "full"  # "full": uniform(0, backoff); "none": exactly the backoff (tests, debugging)
    # A request refused for a rate limit is retried past max_attempts while its first such refusal is less than
    # this long ago (0: max_attempts only, as for any other failure).
    rate_limit_wait_s: float = 600.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if not self.rate_limit_wait_s >= 0.0:
            raise ValueError("RetryPolicy.rate_limit_wait_s must be >= 0")
        if self.jitter not in ("full", "none"):
            raise ValueError("RetryPolicy.jitter must be 'full' or 'none'")

    def backoff(self, retry: int) -> float:
        """The upper bound of the wait before retry number ``retry`` (1-based)."""
        return min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))

    def delay(self, retry: int, rng: random.Random, retry_after: float | None = None) -> float:
        cap = self.backoff(retry)
        wait = rng.uniform(0.0, cap) if self.jitter == "full" else cap
        if retry_after is not None:  # the server knows best, within our own ceiling
            wait = max(wait, min(retry_after, self.max_delay_s))
        return wait

    def retries(self, attempt: int, outcome: Outcome, status: int | None, refused_for_s: float | None) -> bool:
        """Whether a request whose attempt number ``attempt`` failed with ``outcome`` (HTTP ``status``) is tried
        again. ``refused_for_s``: seconds since the request's first rate-limit refusal (None: it had none)."""
        if outcome.verdict is Verdict.FATAL:
            return False
        if attempt < self.max_attempts:
            return True
        return (refused_for_s is not None and refused_for_s < self.rate_limit_wait_s
                and _waits_for_a_rate_limit(outcome, status)
                and (outcome.retry_after or 0.0) <= self.rate_limit_wait_s - refused_for_s)


def _waits_for_a_rate_limit(outcome: Outcome, status: int | None) -> bool:
    """A refusal that asks for a later try: rate-limited, unless a bare 503/529 (down or overloaded, no wait)."""
    return outcome.verdict is Verdict.RATE_LIMITED and (status not in (503, 529) or outcome.retry_after is not None)


def first_rate_limit(outcome: Outcome, status: int | None, first: float | None, now: float) -> float | None:
    """When the request's rate-limit refusals began: ``first`` if they had, ``now`` if this one is the first."""
    if first is not None or not _waits_for_a_rate_limit(outcome, status):
        return first
    return now


# Called once per attempt that failed and will be retried: (error, retry number, wait in seconds).
RetryHook = Callable[[InferenceError, int, float], None]


class RetryingClient:
    """Applies a ``RetryPolicy`` to an inner client; the returned usage says how many attempts it took."""

    def __init__(self, inner: ModelClient, policy: RetryPolicy, *, on_retry: RetryHook | None = None,
                 rng: random.Random | None = None) -> None:
        self._inner, self._policy, self._on_retry = inner, policy, on_retry
        self._rng = rng or random.Random()

    @property
    def deployment(self) -> Deployment:
        return self._inner.deployment

    async def generate(self, request: GenerationRequest) -> Completion:
        attempt, refused_since = 1, None
        while True:
            try:
                completion = await self._inner.generate(request)
            except InferenceError as err:
                outcome = outcome_of(err)
                now = time.monotonic()
                refused_since = first_rate_limit(outcome, err.status, refused_since, now)
                refused_for = None if refused_since is None else now - refused_since
                if not self._policy.retries(attempt, outcome, err.status, refused_for):
                    raise
                wait = self._policy.delay(attempt, self._rng, outcome.retry_after)
                if self._on_retry is not None:
                    self._on_retry(err, attempt, wait)
                await asyncio.sleep(wait)
                attempt += 1
                continue
            if attempt == 1:
                return completion
            return dataclasses.replace(completion, usage=dataclasses.replace(completion.usage, attempts=attempt))

    async def aclose(self) -> None:
        await self._inner.aclose()
