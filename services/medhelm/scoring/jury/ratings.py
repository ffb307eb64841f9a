"""Ratings in long form (target, rater, value) and the targets x raters matrices statistics need.

A *target* is one (run, instance, criterion); raters are judge deployments or clinicians. Judge
ratings come from the records' judgements: only valid scores from real judges (not the
empty-response rule, which no judge gave).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from medhelm.scoring.jury.metric import EMPTY_RESPONSE_JUDGE
from medhelm.records import InstanceResult, JudgeStatus

Target = tuple[str, str, str]  # (run, instance id, criterion)


@dataclass(frozen=True)
class Rating:
    target: Target
    rater: str
    score: float  # raw, on the rubric's scale
    min_score: float
    max_score: float

    @property
    def normalized(self) -> float:
        return (self.score - self.min_score) / (self.max_score - self.min_score)


def judged(records: Iterable[InstanceResult]) -> Iterable[InstanceResult]:
    """Records that went through the jury (a completion and judgements)."""
    return (r for r in records if r.completion is not None and r.judgements)


def judge_ratings(records: Iterable[InstanceResult]) -> list[Rating]:
    return [Rating((r.run, r.instance.id, j.criterion), j.judge, float(j.score), j.min_score, j.max_score)
            for r in judged(records) for j in r.judgements
            if j.status is JudgeStatus.OK and j.score is not None and j.judge != EMPTY_RESPONSE_JUDGE
            and j.max_score > j.min_score]  # a record with an empty scale (damaged) rates nothing


def pivot(ratings: Sequence[Rating], *, normalized: bool = True, raters: Sequence[str] | None = None
          ) -> tuple[list[Target], list[str], np.ndarray]:
    """targets x raters matrix (NaN where a rater gave no valid score); targets in first-seen order."""
    rater_list = list(raters) if raters is not None else sorted({r.rater for r in ratings})
    col = {name: i for i, name in enumerate(rater_list)}
    row: dict[Target, int] = {}
    for r in ratings:
        row.setdefault(r.target, len(row))
    m = np.full((len(row), len(rater_list)), np.nan)
    for r in ratings:
        if r.rater in col:
            m[row[r.target], col[r.rater]] = r.normalized if normalized else r.score
    return list(row), rater_list, m
