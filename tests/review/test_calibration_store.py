"""Jury-vs-clinician calibration from ratings stored by the Review page, checked against hand calculation.

One model, 5 answers, three judges with fixed scores and two clinicians with fixed ratings (rubric 1-5):

    answer            0  1  2  3  4
    judge-a           2  3  4  5  1
    judge-b           2  3  5  5  1
    judge-c           2  3  3  5  1      jury mean     2  3  4    5    1
    cleo              2  4  4  5  1
    dora              2  2  5  4  2      clinician mean 2  3  4.5  4.5  1.5

Jury mean vs clinician mean (n = 5 targets, k = 2 raters), grand mean 3.05:
    SS_total 17.725, SS_targets 2 x 8.675 = 17.35, SS_raters 5 x (0.05^2 + 0.05^2) = 0.025, SS_error 0.35
    BMS 4.3375, JMS 0.025, EMS 0.0875
    ICC(2,1) = (BMS - EMS) / (BMS + EMS + 2 (JMS - EMS) / 5) = 4.25 / 4.4 = 85/88
Judge-a equals the jury mean here, so its ICC vs the clinicians is 85/88 too; its bias (judge - clinician
mean) is (0 + 0 - 0.5 + 0.5 - 0.5) / 5 = -0.1.
Cleo vs dora (grand mean 3.1): SS_total 18.9, SS_targets 15.4, SS_raters 0.1, SS_error 3.4 -> BMS 3.85,
JMS 0.1, EMS 0.85; ICC(2,1) = 3 / (3.85 + 0.85 - 0.3) = 15/22.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from medhelm.access import Principal, Role
from medhelm.scoring.jury import agreement as ag
from medhelm.store import open_store, review
from medhelm.store.synthetic import SyntheticModel, catalogue, write_suite
from tests.leaderboard.helpers import run_cli
from tests.leaderboard.conftest import postgres_url  # noqa: F401 - the shared scratch PostgreSQL fixture
from tests.review.conftest import JURY_BENCH

JUDGE_SCORES = {"local/judge-a": [2, 3, 4, 5, 1], "local/judge-b": [2, 3, 5, 5, 1], "local/judge-c": [2, 3, 3, 5, 1]}
CLINICIANS = {"cleo@h.org": [2, 4, 4, 5, 1], "dora@h.org": [2, 2, 5, 4, 2]}
JURY_ICC = 85 / 88
CLINICIAN_ICC = 15 / 22


@pytest.fixture
def rated(tmp_path: Path) -> tuple[Path, Path]:
    """(output folder, run dir): the fixed judge scores summarised, the clinicians' ratings stored."""
    out = tmp_path / "out"
    run_dir = _fixed_run(out)
    assert run_cli("summarize", "--suites", "local", "-o", str(out), "--bootstrap", "20")[0] == 0
    _rate(str(out / "results.sqlite"))
    return out, run_dir


def _fixed_run(out: Path) -> Path:
    [run_dir] = write_suite(out, "local", [SyntheticModel("acme/m", "acme/m-dep", 0.5)],
                            catalogue(names=[JURY_BENCH]), 5)
    lines = []
    for line in (run_dir / "instances.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for j in rec["judgements"]:
            j["score"] = float(JUDGE_SCORES[j["judge"]][rec["position"]])
        lines.append(json.dumps(rec))
    (run_dir / "instances.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def _rate(store: str) -> None:
    with open_store(store) as s:
        for email, scores in CLINICIANS.items():
            who = Principal(email, Role.NONE, source="oidc", clinician=True)
            for item in review.sample(s, who, "local", JURY_BENCH, n=5):
                review.rate(s, who, item, {"accuracy": scores[int(item.place.instance_id[2:])]})


def _check(report: dict) -> None:
    assert report["clinicians"] == sorted(CLINICIANS) and report["targets"] == 5 and report["unmatched"] == 0
    assert report["jury_icc2_1"]["value"] == pytest.approx(JURY_ICC)
    assert report["clinician_icc2_1"]["value"] == pytest.approx(CLINICIAN_ICC)
    assert report["jury_bias"]["value"] == pytest.approx(-0.1)
    [criterion] = report["criteria"]
    assert criterion["criterion"] == "accuracy" and criterion["targets"] == 5
    assert criterion["jury_icc2_1"]["value"] == pytest.approx(JURY_ICC)
    judges = {j["judge"]: j for j in report["judges"]}
    assert judges["local/judge-a"]["icc2_1"]["value"] == pytest.approx(JURY_ICC)
    assert judges["local/judge-a"]["bias"]["value"] == pytest.approx(-0.1)
    assert judges["local/judge-b"]["bias"]["value"] == pytest.approx((0 + 0 + 0.5 + 0.5 - 0.5) / 5)
    # the interval is the F-distribution one (#19's code), on the same hand matrix, and holds the estimate
    hand = np.array([[2, 2], [3, 3], [4, 4.5], [5, 4.5], [1, 1.5]])
    expected = ag.icc_estimate(hand, "2,1")
    got = report["jury_icc2_1"]
    assert expected.value == pytest.approx(JURY_ICC) and got["method"] == ag.ICC2_METHOD
    assert (got["low"], got["high"]) == pytest.approx((expected.low, expected.high))
    assert got["low"] < JURY_ICC < got["high"]


def test_calibrate_reads_the_stored_ratings_and_matches_hand_calculation(rated) -> None:
    out, _ = rated
    code, stdout, err = run_cli("jury", "calibrate", "--store", str(out / "results.sqlite"), "--json")
    assert code == 0, err
    _check(json.loads(stdout))
    code, text, _ = run_cli("jury", "calibrate", "--store", str(out / "results.sqlite"), "--benchmark", JURY_BENCH)
    assert code == 0 and "per criterion (jury mean vs clinician mean):" in text and "0.966" in text


def test_calibrate_from_a_postgresql_store(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:  # a database of its own on the shared server
        conn.execute("DROP DATABASE IF EXISTS review_calibration")
        conn.execute("CREATE DATABASE review_calibration")
    url = postgres_url.rsplit("/", 1)[0] + "/review_calibration"
    out = tmp_path / "out"
    _fixed_run(out)
    assert run_cli("summarize", "--suites", "local", "-o", str(out), "--store", url, "--bootstrap", "20")[0] == 0
    _rate(url)
    code, stdout, err = run_cli("jury", "calibrate", "--store", url, "--json")
    assert code == 0, err
    _check(json.loads(stdout))


def test_the_csv_path_stays_and_agrees_with_the_store(rated, tmp_path: Path) -> None:
    out, run_dir = rated
    csv = tmp_path / "ratings.csv"
    csv.write_text("instance_id,rater,criterion,score\n" + "".join(
        f"id{i:05d},{who},accuracy,{s}\n" for who, scores in CLINICIANS.items() for i, s in enumerate(scores)))
    code, stdout, err = run_cli("jury", "calibrate", "--ratings", str(csv), "--run-dir", str(run_dir), "--json")
    assert code == 0, err
    _check(json.loads(stdout))
    code, stdout, err = run_cli("jury", "calibrate", "--store", str(out / "results.sqlite"), "--run-dir", str(run_dir),
                                "--json")
    assert code == 0, err
    _check(json.loads(stdout))


def test_the_dashboards_agreement_puts_judges_next_to_clinicians(rated) -> None:
    out, _ = rated
    viewer = Principal("v@h.org", Role.VIEWER)
    with open_store(out / "results.sqlite") as s:
        a = review.agreement(s, viewer, "local", JURY_BENCH)
    assert a.ratings == 10 and a.raters == 2 and a.not_blind == 0
    assert a.clinicians.jury_icc2_1.value == pytest.approx(JURY_ICC)
    judges = np.array(list(JUDGE_SCORES.values()), dtype=float).T  # 5 targets x 3 judges
    assert a.judges.criteria[0].icc2_1.value == pytest.approx(ag.icc_value((judges - 1) / 4, "2,1"))


def test_calibrate_without_ratings_is_one_line(tmp_path: Path) -> None:
    from tests.review.conftest import write_output

    out = write_output(tmp_path / "out")
    code, _, err = run_cli("jury", "calibrate", "--store", str(out / "results.sqlite"))
    assert code == 2 and "no clinician ratings" in err and "Review page" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("jury", "calibrate", "--ratings", "x.csv")
    assert code == 2 and "--run-dir" in err
