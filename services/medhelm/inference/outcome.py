"""What one attempt's reply means to the layers above the provider: decided once, by the provider, and handed up
typed — never read back from attributes or pushed through callbacks.

* ``Verdict``: ``RATE_LIMITED`` (the server asks us to slow down: retried, and the deployment's pacer halves its
  limit and pauses for the wait), ``TRANSIENT`` (retried with backoff; the pacer learns nothing of the server's
  load), ``FATAL`` (not retried: an error of that instance).
* ``Outcome``: a verdict, the server's requested wait (``retry_after``, seconds) and the reply's headers
  (``rate``: where a server states its rate limits; None when the kind has no HTTP reply).
* ``Refusal``: the ``InferenceError`` a provider raises with its ``Outcome``; ``Reply``: what a provider returns
  for an answer, the completion with the reply's headers; ``WireClient``: the base of the clients that answer over
  HTTP (``attempt`` returns a ``Reply``; ``generate`` is its completion).
* ``verdict_for``: the one rule from an HTTP status (and a provider's "slow down" code) to a verdict;
  ``outcome_of``: any error's outcome — a ``Refusal``'s own, else read from ``retryable`` and ``status`` (a
  transport timeout, an unreachable server, a malformed body, an engine's or gRPC server's refusal).
  ``retry.py`` and ``paced.py`` decide from ``outcome_of`` alone.

Failure semantics: none of its own; it only describes. ``Refusal.retryable`` is derived from the verdict, so
every reader of ``InferenceError`` (the pipeline, the gRPC doors, telemetry) sees the same decision.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from medhelm.errors import InferenceError
from medhelm.inference.pacing import OVERLOAD_STATUS
from medhelm.specs import Completion, GenerationRequest

TRANSIENT_STATUS = frozenset({408})  # request timeout; plus every 5xx not in OVERLOAD_STATUS


class Verdict(enum.Enum):
    RATE_LIMITED = "rate_limited"
    TRANSIENT = "transient"
    FATAL = "fatal"


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    retry_after: float | None = None  # seconds the server asked us to wait (a floor for the next try)
    rate: Mapping[str, str] | None = None  # the reply's headers (lower-case names): its rate-limit account


@dataclass(frozen=True)
class Reply:
    completion: Completion
    rate: Mapping[str, str] | None = None  # the reply's headers (lower-case names): its rate-limit account


class WireClient:
    """Base of the clients that answer over HTTP (``wire.py`` holds their shared helpers). A subclass implements
    ``attempt``; the pool's gate calls it and hands the reply's headers to the deployment's pacer."""

    async def attempt(self, request: GenerationRequest) -> Reply:
        raise NotImplementedError

    async def generate(self, request: GenerationRequest) -> Completion:
        return (await self.attempt(request)).completion


class Refusal(InferenceError):
    """A provider's refusal of one request, with its ``Outcome``."""

    def __init__(self, message: str, outcome: Outcome, *, status: int | None = None,
                 content_filter: bool = False) -> None:
        super().__init__(message, retryable=outcome.verdict is not Verdict.FATAL, status=status,
                         retry_after=outcome.retry_after, content_filter=content_filter)
        self.outcome = outcome

    def __reduce__(self):  # copies (``MedhelmError.with_context``) and pickles keep the outcome and every field
        return type(self), (self.args[0], self.outcome), dict(self.__dict__)


def verdict_for(status: int, *, throttled: bool = False, retry: bool = False) -> Verdict:
    """An HTTP error reply's verdict: ``throttled`` (a provider's "slow down" code, whatever status carries it)
    or 429/503/529 -> rate-limited; 408, any other 5xx, or ``retry`` (the provider knows one more try can
    succeed: a refreshed token) -> transient; anything else -> fatal."""
    if throttled or status in OVERLOAD_STATUS:
        return Verdict.RATE_LIMITED
    if retry or status in TRANSIENT_STATUS or status >= 500:
        return Verdict.TRANSIENT
    return Verdict.FATAL


def outcome_of(err: InferenceError) -> Outcome:
    """``err``'s outcome: a ``Refusal``'s own; else fatal unless ``retryable``, rate-limited for 429/503/529."""
    if isinstance(err, Refusal):
        return err.outcome
    if not err.retryable:
        return Outcome(Verdict.FATAL, err.retry_after)
    verdict = Verdict.RATE_LIMITED if err.status in OVERLOAD_STATUS else Verdict.TRANSIENT
    return Outcome(verdict, err.retry_after)
