"""`medhelm sample-size` (alias `plan`; store/sample_size.py): sample sizes against published examples and hand calculations (the normal quantiles from
the standard library, not scipy), the pilot's variability and cost read from a release and a suite."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from medhelm.store.paired import (independent_discordance, minimum_detectable_mcnemar, minimum_detectable_t,
                                  n_mcnemar, n_paired_t, power_mcnemar, power_paired_t)
from tests.leaderboard.compare_helpers import EXACT, JURY, table_pairs, write_run
from tests.leaderboard.helpers import run_cli

Z = NormalDist().inv_cdf


def connor_by_hand(delta: float, psi: float, alpha: float = 0.05, power: float = 0.8) -> int:
    return math.ceil(((Z(1 - alpha / 2) * math.sqrt(psi) + Z(power) * math.sqrt(psi - delta ** 2)) / delta) ** 2)


def test_connor_published_example():
    """Connor (1987) as worked by powerandsamplesize.com ("Compare Paired Proportions, McNemar's Z-test,
    2-sided"): p01 = 0.45, p10 = 0.05, alpha 0.05, power 0.80 -> 23 pairs."""
    assert n_mcnemar(0.05 - 0.45, 0.5) == 23
    assert power_mcnemar(23, 0.4, 0.5) >= 0.8 > power_mcnemar(22, 0.4, 0.5)


@pytest.mark.parametrize("delta,psi,alpha,power", [(0.1, 0.2, 0.05, 0.8), (0.05, 0.3, 0.05, 0.9),
                                                   (0.02, 0.1, 0.01, 0.8), (0.2, 0.6, 0.1, 0.95)])
def test_connor_by_hand(delta, psi, alpha, power):
    assert n_mcnemar(delta, psi, alpha, power) == connor_by_hand(delta, psi, alpha, power)
    # hand: psi .2, delta .1 -> ((1.95996 * .44721 + .84162 * .43589) / .1)^2 = 154.6 -> 155
    if (delta, psi, alpha, power) == (0.1, 0.2, 0.05, 0.8):
        assert n_mcnemar(delta, psi) == 155


def test_mcnemar_impossible_differences():
    assert n_mcnemar(0.3, 0.2) is None  # more change than discordant pairs allow
    assert n_mcnemar(1.0, 1.0) is None  # every pair discordant one way: no variance left
    assert n_mcnemar(0.0, 0.2) is None


def test_paired_t_matches_gpower():
    """G*Power, t tests - means: difference between two dependent means (matched pairs), effect size dz 0.5,
    alpha 0.05 two-tailed, power 0.80 -> total sample size 34 (actual power 0.8078)."""
    assert n_paired_t(0.5, 1.0) == 34
    assert round(power_paired_t(34, 0.5, 1.0), 4) == 0.8078
    assert power_paired_t(33, 0.5, 1.0) < 0.8
    # the normal approximation by hand is a lower bound: (1.95996 + .84162)^2 / .25 = 31.4 -> 32 < 34
    assert math.ceil(((Z(0.975) + Z(0.8)) / 0.5) ** 2) == 32
    assert n_paired_t(0.05, 0.2) == n_paired_t(0.5, 2.0)  # only delta / sd matters


def test_minimum_detectable_differences_invert_the_sizes():
    mdd = minimum_detectable_t(34, 1.0)
    assert 0.49 < mdd <= 0.5 and n_paired_t(mdd, 1.0) == 34
    mdd = minimum_detectable_mcnemar(23, 0.5)
    assert mdd < 0.4 and n_mcnemar(mdd, 0.5) <= 23 < n_mcnemar(mdd * 0.98, 0.5)
    assert minimum_detectable_t(1, 1.0) is None and minimum_detectable_mcnemar(10, 0.0) is None


def test_independent_discordance_by_hand():
    # accuracy .7 against .6 or .8, scoring independently: .7 * .4 + .6 * .3 = .46; .7 * .2 + .8 * .3 = .38
    assert independent_discordance(0.7, 0.1) == pytest.approx(0.46)
    assert independent_discordance(0.95, 0.1) == pytest.approx(0.95 * 0.15 + 0.85 * 0.05)  # 1.05 is no accuracy


@pytest.fixture(scope="module")
def pilot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two models on the same 50 exact-match instances (Armitage & Berry's table: 14 discordant) and 10 jury
    instances; 100 prompt + 10 completion tokens per instance; a third model so --model is needed."""
    out = tmp_path_factory.mktemp("plan")
    a, b = table_pairs(20, 12, 2, 16)
    ja = [0.5, 0.75, 0.25, 1.0, 0.5, 0.0, 0.25, 0.5, 0.75, 0.5]
    jb = [0.25, 0.75, 0.0, 0.75, 0.5, 0.25, 0.5, 0.5, 1.0, 0.75]
    for model, exact, jury in (("org/a", a, ja), ("org/b", b, jb), ("org/c", a, ja)):
        write_run(out, "pilot", EXACT, model, model.replace("org/", "api/"), exact)
        write_run(out, "pilot", JURY, model, model.replace("org/", "api/"), jury)
    prices = out / "prices.yaml"
    prices.write_text("prices:\n" + "".join(f"  - deployment: api/{m}\n    input_per_million: 1.0\n"
                                            f"    output_per_million: 2.0\n" for m in "ab"))
    code, _, err = run_cli("summarize", "--suites", "pilot", "-o", str(out), "--bootstrap", "20", "--prices",
                           str(prices))
    assert code == 0, err
    return out


PER_INSTANCE = 2 * (100 * 1.0 + 10 * 2.0) / 1e6  # both models: prompt and completion tokens at list price


def _plan(pilot: Path, *argv: str) -> dict:
    code, out, err = run_cli("plan", *argv, "-o", str(pilot), "--json")
    assert code == 0, err
    return {r["benchmark"]: r for r in json.loads(out)["rows"]}


@pytest.mark.parametrize("source", ["--release", "--suite"])
def test_plan_from_a_two_model_pilot(pilot: Path, source: str):
    extra = ["--prices", str(pilot / "prices.yaml")] if source == "--suite" else []
    rows = _plan(pilot, source, "pilot", "--model", "org/a", "--model", "api/b", "--difference", "0.1", *extra)
    ex = rows["medcalc_bench"]
    assert ex["metric"] == "0/1 (McNemar)" and ex["pilot_n"] == 50
    assert ex["discordant"] == pytest.approx(14 / 50)
    assert ex["n_required"] == connor_by_hand(0.1, 0.28)
    assert ex["cost_per_instance_usd"] == pytest.approx(PER_INSTANCE)
    assert ex["cost_usd"] == pytest.approx(PER_INSTANCE * ex["n_required"])
    jury = rows["aci_bench"]
    sd = float(np.std(np.subtract([0.25, 0.75, 0.0, 0.75, 0.5, 0.25, 0.5, 0.5, 1.0, 0.75],
                                  [0.5, 0.75, 0.25, 1.0, 0.5, 0.0, 0.25, 0.5, 0.75, 0.5]), ddof=1))
    assert jury["metric"] == "continuous (paired t)" and jury["sd_diff"] == pytest.approx(sd)
    assert jury["n_required"] == n_paired_t(0.1, sd)
    assert jury["mdd_at_pilot_n"] == pytest.approx(minimum_detectable_t(10, sd))


def test_plan_from_one_model_and_stated_values(pilot: Path):
    rows = _plan(pilot, "--release", "pilot", "--model", "org/a", "--difference", "0.1")
    ex = rows["medcalc_bench"]
    assert ex["basis"].startswith("pilot: one model") and ex["discordant"] == pytest.approx(
        independent_discordance(32 / 50, 0.1))
    assert ex["cost_per_instance_usd"] == pytest.approx(PER_INSTANCE)  # the unknown second model priced alike
    rows = _plan(pilot, "--release", "pilot", "--model", "org/c", "--difference", "0.1")
    assert rows["medcalc_bench"]["cost_usd"] is None  # org/c has no price: no cost, never 0
    code, out, _ = run_cli("plan", "--difference", "0.4", "--discordant", "0.5", "--json")
    assert code == 0 and json.loads(out)["rows"][0]["n_required"] == 23
    code, same, _ = run_cli("sample-size", "--difference", "0.4", "--discordant", "0.5", "--json")
    assert code == 0 and same == out  # the subcommand's clearer name, `plan` kept as its alias
    code, out, _ = run_cli("plan", "--difference", "0.5", "--sd", "1")
    assert code == 0 and " 34 " in out


@pytest.mark.parametrize("argv,needle", [
    (["--difference", "0.1"], "give a pilot"),
    (["--release", "pilot", "--difference", "0.1"], "holds 3 models"),
    (["--release", "pilot", "--model", "org/zz", "--difference", "0.1"], "no model or deployment named"),
    (["--release", "pilot", "--suite", "pilot", "--difference", "0.1"], "one pilot"),
    (["--release", "pilot", "--model", "org/a", "--difference", "0"], "expected a number"),
])
def test_plan_bad_input_exit_2(pilot: Path, argv, needle):
    code, _, err = run_cli("plan", *argv, "-o", str(pilot))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_plan_difference_beyond_the_pilot_is_a_row_note_not_a_crash(pilot: Path):
    # org/a is right on 32 of 50: 0.64 +/- 0.9 leaves 0-1 both ways
    rows = _plan(pilot, "--release", "pilot", "--model", "org/a", "--difference", "0.9")
    assert rows["medcalc_bench"]["n_required"] is None and "does not fit" in rows["medcalc_bench"]["note"]
    rows = _plan(pilot, "--release", "pilot", "--model", "org/a", "--model", "org/b", "--difference", "0.5")
    # 0.5 > the pilot's 0.28 discordant share: a difference that large makes at least half the pairs discordant
    assert rows["medcalc_bench"]["discordant"] == 0.5 and "raised" in rows["medcalc_bench"]["note"]
    assert rows["medcalc_bench"]["n_required"] == connor_by_hand(0.5, 0.5 + 1e-12)
