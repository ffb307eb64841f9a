"""Rate budgets and what servers say of them: ``Bucket`` (a token bucket of requests or tokens per minute),
``RateHeaders`` (OpenAI/Azure ``x-ratelimit-*`` and Anthropic ``anthropic-ratelimit-*``), ``parse_reset`` and
``retry_after_seconds`` (``retry-after-ms`` before ``retry-after``). The gate (``gate.Pacer``) owns the buckets of
a deployment; this module only keeps their arithmetic and reads headers.

Failure semantics: nothing here raises on a server's input. A header value that does not parse (not a number,
negative, infinite, an unknown duration or date) reads as absent, so a server's odd header never stops a run."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


class Bucket:
    """A token bucket: ``per_minute`` refilled continuously, holding at most ``burst`` (default: 1 s of refill,
    at least one request's worth) so a paced client never sends a minute's budget at once."""

    def __init__(self, per_minute: float, now: float, burst: float | None = None) -> None:
        self.per_minute = float(per_minute)
        self.burst = burst if burst is not None else max(1.0, self.per_minute / 60.0)
        self.level = self.burst
        self._t = now

    def refill(self, now: float) -> None:
        if now > self._t:
            self.level = min(self.burst, self.level + (now - self._t) * self.per_minute / 60.0)
            self._t = now

    def wait_for(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` is available (0: it is); an amount over the burst waits for a full bucket."""
        self.refill(now)
        need = min(amount, self.burst) - self.level
        wait = need * 60.0 / self.per_minute
        # rounding is no wait, in the level or in time (at a huge rate a rounding's wait is under a clock's
        # resolution: a simulated clock would never move past it)
        return 0.0 if need <= 1e-9 * max(1.0, amount) or wait < 1e-6 else wait

    def full_at(self) -> float:
        """When the bucket is (or was) full at its refill rate, if nothing is taken from it meanwhile."""
        return self._t + max(0.0, self.burst - self.level) * 60.0 / self.per_minute

    def take(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level -= amount

    def cap(self, remaining: float, now: float) -> None:
        """The server says this much is left: never believe we have more."""
        self.refill(now)
        self.level = min(self.level, remaining)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_reset(value: str | None, now_epoch: float | None = None) -> float | None:
    """Seconds until a rate-limit window resets: ``"1s"``, ``"6m0s"``, ``"20ms"`` (OpenAI), a number of seconds,
    or an RFC 3339 / HTTP date (Anthropic). None when it does not parse."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value.replace(" ", ""):
        return sum(float(n) * _UNITS[u] for n, u in parts)
    now_epoch = time.time() if now_epoch is None else now_epoch
    try:
        return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - now_epoch)
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - now_epoch) if parsed is not None else None


def _number(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class RateHeaders:
    """What a server's reply says of its rate limits (each field None when not sent)."""

    limit_requests: float | None = None
    remaining_requests: float | None = None
    limit_tokens: float | None = None
    remaining_tokens: float | None = None

    @classmethod
    def parse(cls, headers: Mapping[str, str]) -> RateHeaders | None:
        """OpenAI/Azure (``x-ratelimit-{limit,remaining}-{requests,tokens}``) and Anthropic
        (``anthropic-ratelimit-{requests,tokens}-{limit,remaining}``); lower-case keys expected."""
        if _RATE_HEADERS.isdisjoint(headers):  # most replies state none: one pass over their few names
            return None

        def limit(what: str) -> float | None:
            openai, anthropic = (_number(headers, name) for name in _header_names("limit", what))
            return openai or anthropic

        def remaining(what: str) -> float | None:
            return _first(*(_number(headers, name) for name in _header_names("remaining", what)))

        got = cls(limit("requests"), remaining("requests"), limit("tokens"), remaining("tokens"))
        return None if got == cls() else got


def _header_names(kind: str, what: str) -> tuple[str, str]:
    """OpenAI/Azure's and Anthropic's name of a rate limit header (``kind``: limit | remaining, ``what``: requests |
    tokens): the one place they are spelled."""
    return f"x-ratelimit-{kind}-{what}", f"anthropic-ratelimit-{what}-{kind}"


_RATE_HEADERS = frozenset(name for kind in ("limit", "remaining") for what in ("requests", "tokens")
                          for name in _header_names(kind, what))


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` (OpenAI/Azure, milliseconds) before ``retry-after`` (seconds or an HTTP date)."""
    ms = _number(headers, "retry-after-ms")
    if ms is not None:
        return ms / 1000.0
    return parse_reset(headers.get("retry-after"))
