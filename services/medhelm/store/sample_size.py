"""How many instances a benchmark needs to tell two models apart, and what evaluating them costs.

Paired design (both models answer the same instances), two-sided test at ``alpha`` with ``power``, for a
true difference ``difference`` in the benchmark's main metric:

* 0/1 metrics (exact match, accuracy): Connor (1987) for McNemar's test, from the discordant proportion
  psi (share of instances exactly one model gets right);
* other metrics (jury scores, ROUGE, ...): the paired t-test (noncentral t), from the SD of the paired
  differences.

Where the variability comes from (``basis``), best first: a stated ``--sd``/``--discordant``; a pilot of
both models (their paired differences on the instances both scored: the real correlation); a pilot of one
model (its per-instance SD times sqrt(2), or psi of two independent scorers: both assume the models'
errors are unrelated, which overstates the need when they are correlated, as models usually are). The
minimum detectable difference at the pilot's own n is reported too (what the current suite can see).

Cost: instances x the per-instance cost of each compared model in the pilot (``models`` table of the
store: candidate + jury USD, or tokens/GPU time re-priced with a ``PriceTable``; a suite: its records'
tokens priced), never a guess: no price is None.

Failure semantics: a benchmark the pilot cannot size (no values, zero spread, a difference larger than
psi allows) gets ``n_required = None`` and says why in ``note``; bad options raise ``ConfigError``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from medhelm.errors import ConfigError, escape
from medhelm.store.backends import Store
from medhelm.store.compare import Row, Side, paired_values
from medhelm.store.costs import PriceTable, Usage, total_cost
from medhelm.store.paired import (independent_discordance, is_binary, minimum_detectable_mcnemar,
                                  minimum_detectable_t, n_mcnemar, n_paired_t)


@dataclass(frozen=True)
class PlanOptions:
    difference: float  # the smallest true difference worth detecting (metric units)
    alpha: float = 0.05
    power: float = 0.8
    sd: float | None = None  # stated SD of the paired differences (continuous metrics)
    discordant: float | None = None  # stated discordant proportion (0/1 metrics)

    def __post_init__(self) -> None:
        if not (0 < self.difference < math.inf):
            raise ConfigError("--difference must be a positive number")
        if not 0 < self.alpha < 1 or not 0 < self.power < 1:
            raise ConfigError("--alpha and --power must be between 0 and 1")
        if self.sd is not None and not 0 < self.sd < math.inf:
            raise ConfigError("--sd must be a positive number")
        if self.discordant is not None and not 0 < self.discordant <= 1:
            raise ConfigError("--discordant must be in (0, 1]")


@dataclass(frozen=True)
class PlanRow:
    benchmark: str
    metric: str  # "0/1 (McNemar)" | "continuous (paired t)"
    basis: str
    pilot_n: int | None
    sd_diff: float | None
    discordant: float | None
    n_required: int | None
    mdd_at_pilot_n: float | None  # smallest difference the pilot's n detects with this power
    cost_per_instance_usd: float | None  # both models together
    cost_usd: float | None
    note: str = ""

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def stated(options: PlanOptions) -> list[PlanRow]:
    """Without a pilot: one row per stated variability."""
    rows = []
    if options.discordant is not None:
        n = n_mcnemar(options.difference, options.discordant, options.alpha, options.power)
        rows.append(PlanRow("(stated)", "0/1 (McNemar)", "stated discordant proportion", None, None,
                            options.discordant, n, None, None, None,
                            "" if n else "the difference cannot exceed the discordant proportion"))
    if options.sd is not None:
        rows.append(PlanRow("(stated)", "continuous (paired t)", "stated SD of paired differences", None, options.sd,
                            None, n_paired_t(options.difference, options.sd, options.alpha, options.power), None,
                            None, None))
    if not rows:
        raise ConfigError("give a pilot (--release or --suite) or a stated --sd / --discordant")
    return rows


def plan(side: Side, models: tuple[Row, ...], options: PlanOptions,
         costs: dict[Row, float | None]) -> list[PlanRow]:
    """Per benchmark the pilot ``side`` holds for ``models`` (one or two rows)."""
    if not 1 <= len(models) <= 2:
        raise ConfigError("plan compares one or two pilot models")
    per_instance = [costs.get(m) for m in models]
    if len(models) == 1:
        per_instance = per_instance * 2  # the other model unknown: assume it costs as much per instance
    unit = None if any(c is None for c in per_instance) else float(sum(per_instance))  # type: ignore[arg-type]
    out = []
    benches = sorted({k[2] for k in side.values if k[:2] in models})
    for bench in benches:
        if len(models) == 2:
            row = _paired_pilot(side, models, bench, options)
        else:
            row = _single_pilot(side, models[0], bench, options)
        cost = None if unit is None or row.n_required is None else unit * row.n_required
        out.append(PlanRow(**{**asdict(row), "cost_per_instance_usd": unit, "cost_usd": cost}))
    return out


def _paired_pilot(side: Side, models: tuple[Row, ...], bench: str, o: PlanOptions) -> PlanRow:
    strata, _, _ = paired_values(side, side, models[0], models[1], bench)
    x = np.concatenate([s[1] for s in strata]) if strata else np.empty(0)
    y = np.concatenate([s[2] for s in strata]) if strata else np.empty(0)
    n = len(x)
    if n < 2:
        return _empty(bench, "pilot: both models", n, "fewer than 2 instances both models scored")
    basis = "pilot: both models, paired"
    if is_binary(np.concatenate([x, y])):
        psi = o.discordant if o.discordant is not None else float(np.mean(x != y))
        if o.discordant is not None:
            basis = "stated discordant proportion"
        return _binary(bench, basis, n, psi, o)
    sd = o.sd if o.sd is not None else float(np.std(y - x, ddof=1))
    return _continuous(bench, "stated SD of paired differences" if o.sd is not None else basis, n, sd, o)


def _single_pilot(side: Side, model: Row, bench: str, o: PlanOptions) -> PlanRow:
    vals = [v[~np.isnan(v)] for k, (_, v) in side.values.items() if k[:2] == model and k[2] == bench]
    x = np.concatenate(vals) if vals else np.empty(0)
    n = len(x)
    if n < 2:
        return _empty(bench, "pilot: one model", n, "fewer than 2 scored instances")
    if is_binary(x):
        if o.discordant is not None:
            return _binary(bench, "stated discordant proportion", n, o.discordant, o)
        psi = independent_discordance(float(x.mean()), o.difference)
        return _binary(bench, "pilot: one model, errors assumed independent", n, psi, o)
    if o.sd is not None:
        return _continuous(bench, "stated SD of paired differences", n, o.sd, o)
    return _continuous(bench, "pilot: one model, SD x sqrt(2) (independence assumed)", n,
                       float(np.std(x, ddof=1)) * math.sqrt(2.0), o)


def _binary(bench: str, basis: str, n: int, psi: float, o: PlanOptions) -> PlanRow:
    if math.isnan(psi):  # one model's accuracy +/- the difference leaves 0-1 both ways
        return _empty(bench, basis, n, "the difference does not fit the pilot's accuracy")
    raised = 0 < psi < o.difference
    if raised:  # a difference this large makes at least that share of pairs discordant
        psi = o.difference
    need = n_mcnemar(o.difference, psi, o.alpha, o.power) if psi > 0 else None
    note = ("discordant share raised to the difference (the pilot's was smaller)" if raised else "") if need else \
        ("no discordant pair in the pilot: state --discordant" if psi == 0 else "no McNemar answer for this difference")
    return PlanRow(bench, "0/1 (McNemar)", basis, n, None, psi, need,
                   minimum_detectable_mcnemar(n, psi, o.alpha, o.power) if psi > 0 else None, None, None, note)


def _continuous(bench: str, basis: str, n: int, sd: float, o: PlanOptions) -> PlanRow:
    need = n_paired_t(o.difference, sd, o.alpha, o.power) if sd > 0 else None
    return PlanRow(bench, "continuous (paired t)", basis, n, sd, None, need,
                   minimum_detectable_t(n, sd, o.alpha, o.power) if sd > 0 else None, None, None,
                   "" if sd > 0 else "no spread in the pilot: state --sd")


def _empty(bench: str, basis: str, n: int, note: str) -> PlanRow:
    return PlanRow(bench, "-", basis, n, None, None, None, None, None, None, note)


# ---- per-instance cost of the pilot models ----

def costs_from_release(store: Store, release: str, prices: PriceTable | None) -> dict[Row, float | None]:
    """USD per instance per (model, deployment): the stored candidate + jury cost (priced at summarize),
    or the stored tokens / GPU time re-priced with ``prices``."""
    out: dict[Row, float | None] = {}
    # reasoning models' thinking (summarize keeps it in the release's meta, when some model thought)
    kept = store.query("SELECT value FROM meta WHERE release = ? AND key = 'reasoning_tokens'", (release,))
    try:
        thinking = json.loads(kept[0][0]) if kept else {}
    except (ValueError, TypeError):
        thinking = {}
    for m in store.query_dicts("SELECT * FROM models WHERE release = ?", (release,)):
        n = m.get("n_instances") or 0
        if not n:
            out[(m["model"], m["deployment"])] = None
            continue
        if prices is not None:
            reasoning = (thinking.get(f"{m['model']}|{m['deployment']}") or [0])[0] if isinstance(thinking, dict) else 0
            usd = prices.cost(m["deployment"], m["model"], Usage(int(m["prompt_tokens"] or 0),
                                                                  int(m["completion_tokens"] or 0),
                                                                  float(m["gpu_s"] or 0.0), int(reasoning or 0))).usd
        else:
            usd = total_cost(m.get("cost_usd"), m.get("jury_cost_usd"))
        out[(m["model"], m["deployment"])] = None if usd is None else usd / n
    return out


def costs_from_suite(output_path: Path, suite: str, prices: PriceTable) -> dict[Row, float | None]:
    """USD per instance per (model, deployment) of a suite's complete runs (candidate tokens or GPU time)."""
    from medhelm.store.ingest import suite_sources

    totals: dict[Row, list[float]] = {}
    for src in suite_sources(Path(output_path), [suite]):
        if not src.complete:
            continue
        t = totals.setdefault((src.model, src.deployment), [0.0, 0.0, 0.0, 0.0, 0.0])
        latency = 0.0
        for r in src.rows(False):
            t[0] += r.prompt_tokens
            t[1] += r.completion_tokens
            t[3] += 1
            t[4] += r.reasoning_tokens  # thinking, at its own price (reasoning_per_million)
            latency += r.latency_s
        wall = src.status.get("wall_time_s")
        t[2] += float(wall) if isinstance(wall, (int, float)) and wall > 0 else latency
    return {row: (None if not t[3] else _per(prices.cost(row[1], row[0], Usage(int(t[0]), int(t[1]), t[2],
                                                                            int(t[4]))).usd, t[3]))
            for row, t in totals.items()}


def _per(usd: float | None, n: float) -> float | None:
    return None if usd is None else usd / n


def pick_models(side: Side, names: list[str]) -> tuple[Row, ...]:
    """The pilot rows named (model or deployment), or the side's only one or two rows."""
    rows = side.rows
    if not names:
        if len(rows) > 2:
            raise ConfigError(f"the pilot {escape(side.label)} holds {len(rows)} models: name one or two with --model")
        return tuple(rows)
    out = []
    for name in names:
        found = [r for r in rows if name in r]
        if len(found) != 1:
            raise ConfigError(f"--model: {'no' if not found else len(found)} model or deployment named "
                              f"'{escape(name)}' in the pilot {escape(side.label)}")
        out.append(found[0])
    if len(set(out)) != len(out):
        raise ConfigError("--model: name two different models")
    return tuple(out)
