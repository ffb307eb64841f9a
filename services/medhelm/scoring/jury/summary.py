"""Per-run jury figures, computed from a stream of InstanceResult records (``RunDir.iter_records()``):
the jury score with a bootstrap 95 % CI, judge failure rates per judge x criterion, judge-token cost,
and agreement between judges. The leaderboard and ``medhelm jury stats`` both call these.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from medhelm.scoring.jury import agreement as ag
from medhelm.scoring.jury.metric import EMPTY_RESPONSE_JUDGE
from medhelm.scoring.jury.ratings import judge_ratings, judged, pivot
from medhelm.records import InstanceResult, JudgeStatus


@dataclass(frozen=True)
class JudgeCounts:
    judge: str
    criterion: str
    requested: int
    ok: int
    unscored: int  # the judge answered, but not a valid score (after one re-ask)
    error: int  # the judge could not be asked (a non-retryable server error)

    @property
    def failure_rate(self) -> float | None:
        return (self.unscored + self.error) / self.requested if self.requested else None

    def to_json(self) -> dict:
        return {"judge": self.judge, "criterion": self.criterion, "requested": self.requested, "ok": self.ok,
                "unscored": self.unscored, "error": self.error, "failure_rate": self.failure_rate}


@dataclass(frozen=True)
class JurySummary:
    instances: int  # records that went through the jury
    unscored_instances: int  # no valid score at all (jury_score is None)
    empty_responses: int  # scored as the rubric minimum without judges
    jury_score: ag.Estimate  # mean of per-instance jury_score (raw scale)
    jury_score_normalized: ag.Estimate  # the leaderboard column (0-1)
    coverage: float | None  # mean of per-instance jury_coverage
    counts: tuple[JudgeCounts, ...]
    judge_prompt_tokens: int
    judge_completion_tokens: int
    judge_reasoning_tokens: int | None = None  # of the completion tokens, the judges' thinking (None: not stated)
    judge_reasoning_estimated: bool = False  # some of it is our estimate (Anthropic, Converse): shown with "≈"

    def to_json(self) -> dict:
        return {"instances": self.instances, "unscored_instances": self.unscored_instances,
                "empty_responses": self.empty_responses, "jury_score": self.jury_score.to_json(),
                "jury_score_normalized": self.jury_score_normalized.to_json(), "coverage": self.coverage,
                "judges": [c.to_json() for c in self.counts], "judge_prompt_tokens": self.judge_prompt_tokens,
                "judge_completion_tokens": self.judge_completion_tokens,
                # absent unless a judge stated its thinking: summaries of other judges keep their bytes
                **({} if self.judge_reasoning_tokens is None else
                   {"judge_reasoning_tokens": self.judge_reasoning_tokens}),
                **({"judge_reasoning_tokens_estimated": True} if self.judge_reasoning_estimated else {})}


def summarize(records: Iterable[InstanceResult], *, n_boot: int = ag.DEFAULT_BOOTSTRAP, seed: int = 0
              ) -> JurySummary:
    recs = list(judged(records))
    counts: dict[tuple[str, str], list[int]] = {}
    raw, norm, coverage = [], [], []
    empty = prompt_tokens = completion_tokens = 0
    reasoning_tokens: int | None = None
    estimated = False
    for r in recs:
        empty += any(j.judge == EMPTY_RESPONSE_JUDGE for j in r.judgements)
        prompt_tokens += r.judge_usage.prompt_tokens or 0
        completion_tokens += r.judge_usage.completion_tokens or 0
        if r.judge_usage.reasoning_tokens is not None:
            reasoning_tokens = (reasoning_tokens or 0) + r.judge_usage.reasoning_tokens
            estimated = estimated or r.judge_usage.reasoning_estimated
        for j in r.judgements:
            if j.judge == EMPTY_RESPONSE_JUDGE:
                continue
            c = counts.setdefault((j.judge, j.criterion), [0, 0, 0, 0])
            c[0] += 1
            c[{JudgeStatus.OK: 1, JudgeStatus.UNSCORED: 2, JudgeStatus.ERROR: 3}[j.status]] += 1
        if r.stats.get("jury_score") is not None:
            raw.append(float(r.stats["jury_score"]))
            norm.append(float(r.stats["jury_score_normalized"]))
        if r.stats.get("jury_coverage") is not None:
            coverage.append(float(r.stats["jury_coverage"]))
    mean = ag.mean_or_none
    return JurySummary(
        instances=len(recs), unscored_instances=len(recs) - len(raw), empty_responses=empty,
        jury_score=ag.bootstrap(mean, np.array(raw), n_boot=n_boot, seed=seed),
        jury_score_normalized=ag.bootstrap(mean, np.array(norm), n_boot=n_boot, seed=seed),
        coverage=float(np.mean(coverage)) if coverage else None,
        counts=tuple(JudgeCounts(j, c, *v) for (j, c), v in sorted(counts.items())),
        judge_prompt_tokens=prompt_tokens, judge_completion_tokens=completion_tokens,
        judge_reasoning_tokens=reasoning_tokens, judge_reasoning_estimated=estimated)


# ------------------------------------------------------------------------------------------------
# agreement between judges


@dataclass(frozen=True)
class PairAgreement:
    a: str
    b: str
    spearman: ag.Estimate

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "spearman": self.spearman.to_json()}


@dataclass(frozen=True)
class CriterionAgreement:
    criterion: str
    scale: tuple[float, float]  # the rubric's (min, max) score
    alpha_level: str  # the Krippendorff level that fits the scale (ag.alpha_level)
    alpha: ag.Estimate  # Krippendorff's alpha at that level
    icc2_1: ag.Estimate
    mean_abs_difference: ag.Estimate  # mean |a - b| over judge pairs, 0-1 units (0 = always agree)
    exact_agreement: ag.Estimate  # share of targets where every judge gave the same score

    def to_json(self) -> dict:
        return {"criterion": self.criterion, "scale": list(self.scale), "alpha_level": self.alpha_level,
                "alpha": self.alpha.to_json(), "icc2_1": self.icc2_1.to_json(),
                "mean_abs_difference": self.mean_abs_difference.to_json(),
                "exact_agreement": self.exact_agreement.to_json()}


@dataclass(frozen=True)
class AgreementReport:
    judges: tuple[str, ...]
    targets: int  # (run, instance, criterion) with at least one valid score
    icc2_1: ag.Estimate
    icc2_k: ag.Estimate
    icc3_k: ag.Estimate
    alpha_ordinal: ag.Estimate
    pairs: tuple[PairAgreement, ...]
    criteria: tuple[CriterionAgreement, ...]
    alpha_level: str = "ordinal"  # the level that fits every criterion's scale (ordinal when they differ)
    alpha: ag.Estimate = ag.Estimate(None)  # Krippendorff's alpha at alpha_level, all criteria pooled
    notes: tuple[str, ...] = ()  # e.g. a judge dropped because it has no valid score here

    def to_json(self) -> dict:
        return {"judges": list(self.judges), "targets": self.targets, "icc2_1": self.icc2_1.to_json(),
                "icc2_k": self.icc2_k.to_json(), "icc3_k": self.icc3_k.to_json(),
                "alpha_ordinal": self.alpha_ordinal.to_json(), "alpha_level": self.alpha_level,
                "alpha": self.alpha.to_json(), "pairs": [p.to_json() for p in self.pairs],
                "criteria": [c.to_json() for c in self.criteria], "notes": list(self.notes),
                "methods": {"icc": ag.ICC_METHOD, "other": ag.BOOTSTRAP_METHOD}}


def judge_agreement(records: Iterable[InstanceResult], *, n_boot: int = ag.DEFAULT_BOOTSTRAP, seed: int = 0,
                    judges: Iterable[str] = ()) -> AgreementReport:
    """Agreement between judges on 0-1-normalised scores; targets are (run, instance, criterion).

    ICCs carry F-distribution intervals; alpha, Spearman and the rest a percentile bootstrap over targets.
    ``judges``: judges expected here (a pooled jury config); one without a single valid score is dropped with
    a note (it would leave no complete row and turn every ICC into None)."""
    records = list(records)
    asked = {j.judge for r in judged(records) for j in r.judgements if j.judge != EMPTY_RESPONSE_JUDGE}
    ratings = judge_ratings(records)
    targets, all_judges, m = pivot(ratings, raters=sorted({r.rater for r in ratings} | asked | set(judges)))
    rated = ~np.isnan(m).all(axis=0) if m.size else np.zeros(len(all_judges), bool)
    notes = tuple(f"judge {j} has no valid score here: left out of the agreement" for j, ok in
                  zip(all_judges, rated) if not ok)
    m = m[:, rated] if m.size else m.reshape(len(targets), int(rated.sum()))
    judge_names = [j for j, ok in zip(all_judges, rated) if ok]
    scales = {r.target[2]: (r.min_score, r.max_score) for r in ratings}
    complete = ag.complete_rows(m)
    if len(judge_names) >= 2 and complete.shape[0] == 0:
        notes += ("no target was rated by every judge (pooled runs with different juries?): no ICC",)
    boot = lambda fn, rows, **kw: ag.bootstrap(fn, rows, n_boot=n_boot, seed=seed, **kw)  # noqa: E731
    alpha_of = lambda level: lambda rows: ag.krippendorff_alpha(rows.T, level)  # noqa: E731
    pairs = tuple(PairAgreement(judge_names[a], judge_names[b],
                                boot(_spearman_cols, ag.complete_rows(m[:, [a, b]]), bounds=(-1.0, 1.0)))
                  for a, b in combinations(range(len(judge_names)), 2))
    criteria = []
    for criterion in sorted({t[2] for t in targets}):
        block = m[[i for i, t in enumerate(targets) if t[2] == criterion]]
        rows = ag.complete_rows(block)
        lo, hi = scales[criterion]
        level = ag.alpha_level(lo, hi)
        criteria.append(CriterionAgreement(
            criterion, (lo, hi), level, boot(alpha_of(level), block, bounds=(-1.0, 1.0)),
            ag.icc_estimate(rows, "2,1"), boot(_mean_abs_difference, rows), boot(_exact_agreement, rows)))
    levels = {c.alpha_level for c in criteria}
    level = levels.pop() if len(levels) == 1 else "ordinal"
    ordinal = boot(alpha_of("ordinal"), m, bounds=(-1.0, 1.0))
    return AgreementReport(
        judges=tuple(judge_names), targets=len(targets),
        icc2_1=ag.icc_estimate(complete, "2,1"), icc2_k=ag.icc_estimate(complete, "2,k"),
        icc3_k=ag.icc_estimate(complete, "3,k"), alpha_ordinal=ordinal,
        pairs=pairs, criteria=tuple(criteria), alpha_level=level,
        alpha=ordinal if level == "ordinal" else boot(alpha_of(level), m, bounds=(-1.0, 1.0)), notes=notes)


def _spearman_cols(rows: np.ndarray) -> float | None:
    return ag.spearman(rows[:, 0], rows[:, 1])


def _mean_abs_difference(rows: np.ndarray) -> float | None:
    if rows.shape[0] == 0 or rows.shape[1] < 2:
        return None
    diffs = [np.abs(rows[:, a] - rows[:, b]) for a, b in combinations(range(rows.shape[1]), 2)]
    return float(np.mean(diffs))


def _exact_agreement(rows: np.ndarray) -> float | None:
    if rows.shape[0] == 0 or rows.shape[1] < 2:
        return None
    return float(np.mean(np.ptp(rows, axis=1) == 0))
