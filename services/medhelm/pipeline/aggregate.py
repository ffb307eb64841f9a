"""Aggregation: a run's records -> ``stats.json`` (per stat and split) and ``run.json``'s counts.

``Aggregator`` sums exactly (the result does not depend on the order rows come in); ``StatusCounts`` counts
records; ``RecordTally`` is both, folded record by record by a writer's ledger (``medhelm.rundir.writer``) or
by finishing. Pure computation: nothing here reads or writes files, and nothing raises on a well-formed record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from medhelm.rundir import compat_digest
from medhelm.records import InstanceResult, Stat
from medhelm.specs import RunSpec


class RecordTally:
    """The stats and counts of the records a ledger saw (``Ledger.tally``), as finishing would compute them."""

    __slots__ = ("agg", "counts")

    def __init__(self) -> None:
        self.agg = Aggregator()
        self.counts = StatusCounts()

    def add(self, d: Mapping) -> None:
        self.agg.add(scored_row_json(d))
        self.counts.add(d)


def instance_stats(record: InstanceResult) -> dict[str, float | None]:
    """Metric stats plus efficiency stats of one record."""
    out: dict[str, float | None] = dict(record.stats)
    if record.completion is not None:
        u = record.completion.usage
        out["num_prompt_tokens"] = u.prompt_tokens
        out["num_completion_tokens"] = u.completion_tokens
        if u.reasoning_tokens is not None:  # a reasoning model's thinking, of num_completion_tokens
            out["num_reasoning_tokens"] = u.reasoning_tokens
        out["inference_runtime"] = u.latency_s if not u.cached else None
    out["prompt_truncated"] = 1.0 if record.prompt.truncated else 0.0
    if record.judgements:
        out["judge_prompt_tokens"] = record.judge_usage.prompt_tokens
        out["judge_completion_tokens"] = record.judge_usage.completion_tokens
    return out


def aggregate(records: Iterable[InstanceResult]) -> list[Stat]:
    return aggregate_rows(scored_row(rec) for rec in records)


def scored_row(rec: InstanceResult) -> tuple[str, Mapping[str, float | None]] | None:
    """What aggregation needs of one record: its split and per-instance stats (None: has no scores)."""
    if rec.error is not None and rec.completion is None:
        return None  # counted in run.json errors; has no scores
    return rec.instance.split, instance_stats(rec)


def aggregate_rows(rows: Iterable[tuple[str, Mapping[str, float | None]] | None]) -> list[Stat]:
    """``aggregate`` over ``scored_row`` values (a service keeps only these, not whole records)."""
    agg = Aggregator()
    for row in rows:
        agg.add(row)
    return agg.stats()


class Aggregator:
    """Running count, sum, sum of squares, min, max and unscored per (stat, split): add rows as they come.

    Sums are exact, so they do not depend on the order the rows come in (a run finished from its writer's
    ledger adds them in completion order, the general path in position order, shards in any order):
    integral values are summed as integers, others as Shewchuk's non-overlapping partials (``_msum``), and
    the result is rounded once (``math.fsum``)."""

    __slots__ = ("_acc",)

    def __init__(self) -> None:
        # [count, int sum, int sum_sq, float partials, float partials of squares, min, max, unscored, nonfinite]
        self._acc: dict[tuple[str, str], list] = {}

    def add(self, row: tuple[str, Mapping[str, float | None]] | None) -> None:
        if row is None:
            return
        split, stats = row
        acc = self._acc
        for name, value in stats.items():
            a = acc.get((name, split))
            if a is None:
                a = acc[(name, split)] = [0, 0, 0, [], [], float("inf"), float("-inf"), 0, 0.0]
            if value is None:
                a[7] += 1
                continue
            v = float(value)
            a[0] += 1
            if v.is_integer():
                i = int(v)
                a[1] += i
                a[2] += i * i
            elif v == v and v not in (_INF, -_INF):
                _msum(a[3], v)
                _msum(a[4], v * v)
            else:  # inf / nan: plain float arithmetic, as before
                a[8] += v
            if v < a[5]:
                a[5] = v
            if v > a[6]:
                a[6] = v

    def __len__(self) -> int:
        """How many (stat, split) pairs it holds sums for."""
        return len(self._acc)

    def __contains__(self, pair: object) -> bool:
        return pair in self._acc

    def stats(self) -> list[Stat]:
        return [Stat(name=n, split=s, count=int(a[0]), sum=_exact(a[1], a[3], a[8]),
                     sum_squared=_exact(a[2], a[4], a[8] * a[8] if a[8] else 0.0),
                     min=a[5] if a[0] else None, max=a[6] if a[0] else None, unscored=int(a[7]))
                for (n, s), a in sorted(self._acc.items())]


_INF = float("inf")


def _msum(partials: list[float], x: float) -> None:
    """Add ``x`` to ``partials`` exactly (Shewchuk; the recipe behind ``math.fsum``)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


def _exact(whole: int, partials: list[float], nonfinite: float) -> float:
    total = math.fsum([*partials, whole]) if partials else float(whole)
    return total + nonfinite if nonfinite else total


def scored_row_json(d: Mapping) -> tuple[str, dict[str, float | None]] | None:
    """``scored_row`` of a record's JSON object, without building the InstanceResult (the same values)."""
    completion = d.get("completion")
    if d.get("error") is not None and not completion:
        return None
    out: dict[str, float | None] = dict(d.get("stats") or {})
    if completion:
        u = completion.get("usage") or {}
        out["num_prompt_tokens"] = u.get("prompt_tokens")
        out["num_completion_tokens"] = u.get("completion_tokens")
        if u.get("reasoning_tokens") is not None:
            out["num_reasoning_tokens"] = u["reasoning_tokens"]
        out["inference_runtime"] = u.get("latency_s", 0.0) if not u.get("cached", False) else None
    out["prompt_truncated"] = 1.0 if d["prompt"].get("truncated", False) else 0.0
    if d.get("judgements"):
        ju = d.get("judge_usage") or {}
        out["judge_prompt_tokens"] = ju.get("prompt_tokens")
        out["judge_completion_tokens"] = ju.get("completion_tokens")
    return d["instance"].get("split", "test"), out


class StatusCounts:
    """run.json's counts, added record by record (a record's JSON object)."""

    __slots__ = ("done", "errors", "requests", "cache_hits", "retries")

    def __init__(self) -> None:
        self.done = self.errors = self.requests = self.cache_hits = self.retries = 0

    def add(self, d: Mapping) -> None:
        self.done += 1
        if d.get("error") is not None:
            self.errors += 1
        completion = d.get("completion")
        if completion:
            u = completion.get("usage") or {}
            if u.get("cached", False):
                self.cache_hits += 1
            else:
                self.requests += 1
            self.retries += max(u.get("attempts", 1) - 1, 0)

    def status(self, spec: RunSpec, total: int) -> dict:
        done, errors = self.done, self.errors
        # Every instance answered with an error (e.g. each prompt over the server's context limit): the run
        # did not evaluate the model, so it is "failed", never "complete" (its records say why, per instance).
        state = "partial" if done < total else ("failed" if total and errors == done else "complete")
        return {
            "status": state,
            "run": spec.name,
            "digest": spec.digest(),
            "compat_digest": compat_digest(spec),
            "benchmark": spec.benchmark.name,
            "model": spec.model,
            "deployment": spec.deployment,
            "instances_total": total,
            "instances_done": done,
            "errors": errors,
            "requests": self.requests,
            "cache_hits": self.cache_hits,
            "retries": self.retries,
        }


def run_status(spec: RunSpec, records: Iterable[InstanceResult], total: int) -> dict:
    counts = StatusCounts()
    for r in records:
        counts.add(r.to_json())
    return counts.status(spec, total)
