"""Jittered exponential backoff around any ``ModelClient``, deciding from the attempt's typed ``outcome.Outcome``.

Failure semantics: a ``FATAL`` outcome (a 400, a prompt longer than the context window, a refused key) fails at
once; ``RATE_LIMITED`` and ``TRANSIENT`` ones (429/503/529, other 5xx, timeouts, malformed bodies, unreachable
servers) are retried until ``max_attempts``, then the last error is raised unchanged. "Full jitter" (a uniform draw
in ``[0, backoff]``) keeps many workers that were throttled together from coming back together; a server's
``Retry-After`` is a floor for the next wait (within ``max_delay_s``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass

from medhelm.errors import InferenceError
from medhelm.inference.base import ModelClient
from medhelm.inference.outcome import Verdict, outcome_of
from medhelm.specs import Completion, Deployment, GenerationRequest


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # 1 try + 5 retries
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: str = "full"  # "full": uniform(0, backoff); "none": exactly the backoff (tests, debugging)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
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
        attempt = 1
        while True:
            try:
                completion = await self._inner.generate(request)
            except InferenceError as err:
                outcome = outcome_of(err)
                if outcome.verdict is Verdict.FATAL or attempt >= self._policy.max_attempts:
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
