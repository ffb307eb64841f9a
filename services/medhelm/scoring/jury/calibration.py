"""Calibration of the jury against clinicians, as the MedHELM paper did — inside the product.

Input: clinician ratings — a CSV with columns ``instance_id, rater, criterion, score`` (one row per
rating, on the rubric's scale), or the ratings the dashboard's Review page stored in the results store
(``store.review.clinician_ratings``, which also name the run) — and the run's records. Output: clinician–clinician agreement (how
much the reference itself can be trusted), jury–clinician agreement (jury mean vs clinician mean per
instance × criterion) overall and per criterion, and each judge's bias (mean of judge − clinician
mean, in rubric points) and ICC against the clinicians. ICC intervals come from the F distribution
(``agreement.icc_estimate``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from medhelm import files
from medhelm.errors import ConfigError
from medhelm.scoring.jury import agreement as ag
from medhelm.scoring.jury.ratings import Rating, Target, judge_ratings, pivot
from medhelm.records import InstanceResult

COLUMNS = ("instance_id", "rater", "criterion", "score")


@dataclass(frozen=True)
class ClinicianRating:
    instance_id: str
    rater: str
    criterion: str
    score: float
    line: int  # in the CSV, for error messages (0: from the store)
    run: str = ""  # the run's name when known (store ratings); a CSV names one run, given apart


def read_ratings(path: str | Path) -> list[ClinicianRating]:
    path = Path(path)
    text = files.read_text(path, limit=files.DATA_LIMIT, missing="ratings file not found", what="ratings CSV")
    try:
        with io.StringIO(text, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise ConfigError(f"missing column(s) {missing}; expected {', '.join(COLUMNS)}", path=path, line=1)
            out = []
            for row in reader:
                line = reader.line_num
                values = {c: (row.get(c) or "").strip() for c in COLUMNS}
                for c in COLUMNS:
                    if not values[c]:
                        raise ConfigError("empty value", path=path, line=line, field=c)
                try:
                    score = float(values["score"])
                except ValueError:
                    score = math.nan
                if not math.isfinite(score):
                    raise ConfigError("score is not a number (a finite one)", path=path, line=line, field="score")
                out.append(ClinicianRating(values["instance_id"], values["rater"], values["criterion"], score, line))
    except csv.Error as err:
        raise ConfigError(f"malformed CSV ({err})", path=path) from None
    if not out:
        raise ConfigError("no ratings", path=path)
    return out


@dataclass(frozen=True)
class JudgeBias:
    judge: str
    bias: ag.Estimate  # mean(judge - clinician mean), rubric points; > 0 = more lenient than clinicians
    icc2_1: ag.Estimate  # this judge vs the clinician mean

    def to_json(self) -> dict:
        return {"judge": self.judge, "bias": self.bias.to_json(), "icc2_1": self.icc2_1.to_json()}


@dataclass(frozen=True)
class CriterionCalibration:
    criterion: str
    targets: int  # rated (instance, criterion) pairs of this criterion in the run(s)
    jury_icc2_1: ag.Estimate  # jury mean vs clinician mean, this criterion only

    def to_json(self) -> dict:
        return {"criterion": self.criterion, "targets": self.targets, "jury_icc2_1": self.jury_icc2_1.to_json()}


@dataclass(frozen=True)
class CalibrationReport:
    clinicians: tuple[str, ...]
    targets: int  # rated (instance, criterion) pairs that are in the run
    unmatched: int  # ratings whose instance/criterion the run does not have
    clinician_icc2_1: ag.Estimate
    clinician_icc2_k: ag.Estimate
    clinician_alpha_ordinal: ag.Estimate
    jury_icc2_1: ag.Estimate  # jury mean vs clinician mean
    jury_spearman: ag.Estimate
    jury_bias: ag.Estimate
    judges: tuple[JudgeBias, ...]
    criteria: tuple[CriterionCalibration, ...] = ()

    def to_json(self) -> dict:
        return {"clinicians": list(self.clinicians), "targets": self.targets, "unmatched": self.unmatched,
                "criteria": [c.to_json() for c in self.criteria],
                "clinician_icc2_1": self.clinician_icc2_1.to_json(),
                "clinician_icc2_k": self.clinician_icc2_k.to_json(),
                "clinician_alpha_ordinal": self.clinician_alpha_ordinal.to_json(),
                "jury_icc2_1": self.jury_icc2_1.to_json(), "jury_spearman": self.jury_spearman.to_json(),
                "jury_bias": self.jury_bias.to_json(), "judges": [j.to_json() for j in self.judges]}


def calibrate(ratings: Sequence[ClinicianRating], records: Iterable[InstanceResult], *, source: str = "",
              n_boot: int = ag.DEFAULT_BOOTSTRAP, seed: int = 0) -> CalibrationReport:
    jury = judge_ratings(records)
    if not jury:
        raise ConfigError("the run has no valid judge scores to calibrate", path=source or None)
    # (instance id, criterion lower-cased) -> the run's target and scale; with the run for ratings that name it
    scale = {(r.target[1], r.target[2].lower()): (r.target, r.min_score, r.max_score) for r in jury}
    by_run = {(r.target[0], r.target[1], r.target[2].lower()): (r.target, r.min_score, r.max_score) for r in jury}
    clinician: list[Rating] = []
    unmatched = 0
    for c in ratings:
        found = by_run.get((c.run, c.instance_id, c.criterion.lower())) if c.run else \
            scale.get((c.instance_id, c.criterion.lower()))
        if found is None:
            unmatched += 1
            continue
        target, lo, hi = found
        if not lo <= c.score <= hi:
            raise ConfigError(f"score {c.score:g} outside the rubric's {lo:g}-{hi:g}", path=source or None,
                              line=c.line or None, field="score")
        clinician.append(Rating(target, c.rater, c.score, lo, hi))
    if not clinician:
        raise ConfigError("no rated instance/criterion is in the run (check instance_id and criterion)",
                          path=source or None)
    return _report(clinician, jury, unmatched, n_boot=n_boot, seed=seed)


def _report(clinician: list[Rating], jury: list[Rating], unmatched: int, *, n_boot: int, seed: int
            ) -> CalibrationReport:
    targets, clinicians, cm = pivot(clinician, normalized=False)
    rated = set(targets)
    judges = sorted({r.rater for r in jury if r.target in rated})
    jm = _align(jury, targets, judges)
    clinician_mean = _nanmean_rows(cm)
    jury_mean = _nanmean_rows(jm)
    both = np.column_stack([jury_mean, clinician_mean])
    boot = lambda fn, rows, **kw: ag.bootstrap(fn, rows, n_boot=n_boot, seed=seed, **kw)  # noqa: E731
    judge_bias = []
    for i, name in enumerate(judges):
        pair = ag.complete_rows(np.column_stack([jm[:, i], clinician_mean]))
        judge_bias.append(JudgeBias(name, boot(_mean_difference, pair), ag.icc_estimate(pair, "2,1")))
    pair = ag.complete_rows(both)
    criteria = []
    for criterion in sorted({t[2] for t in targets}):
        rows = [i for i, t in enumerate(targets) if t[2] == criterion]
        criteria.append(CriterionCalibration(criterion, len(rows), ag.icc_estimate(ag.complete_rows(both[rows]), "2,1")))
    return CalibrationReport(
        clinicians=tuple(clinicians), targets=len(targets), unmatched=unmatched,
        clinician_icc2_1=ag.icc_estimate(cm, "2,1"), clinician_icc2_k=ag.icc_estimate(cm, "2,k"),
        clinician_alpha_ordinal=boot(lambda rows: ag.krippendorff_alpha(rows.T, "ordinal"), cm, bounds=(-1.0, 1.0)),
        jury_icc2_1=ag.icc_estimate(pair, "2,1"),
        jury_spearman=boot(lambda rows: ag.spearman(rows[:, 0], rows[:, 1]), pair, bounds=(-1.0, 1.0)),
        jury_bias=boot(_mean_difference, pair),
        judges=tuple(judge_bias), criteria=tuple(criteria))


def _align(jury: list[Rating], targets: list[Target], judges: list[str]) -> np.ndarray:
    """Judge scores on the clinicians' targets (rows in the same order), raw scale."""
    row = {t: i for i, t in enumerate(targets)}
    col = {j: i for i, j in enumerate(judges)}
    m = np.full((len(targets), len(judges)), np.nan)
    for r in jury:
        if r.target in row:
            m[row[r.target], col[r.rater]] = r.score
    return m


def _nanmean_rows(m: np.ndarray) -> np.ndarray:
    counts = (~np.isnan(m)).sum(axis=1)
    sums = np.nansum(m, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _mean_difference(rows: np.ndarray) -> float | None:
    return float(np.mean(rows[:, 0] - rows[:, 1])) if rows.shape[0] else None
