"""`medhelm compare`: the paired statistics against hand calculations and published worked examples, the
comparison on hand-made releases (SQLite and PostgreSQL) and suites, and the gate's exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from medhelm.store import open_store
from medhelm.store.bootstrap import stream_seed
from medhelm.store.compare import CompareOptions, compare, side_from_release, side_from_suite
from medhelm.store.paired import bootstrap_p, holm, mcnemar_exact, paired_bootstrap
from tests.leaderboard.compare_helpers import (EXACT, JURY, binom_two_sided, lower_is_better, table_pairs,
                                               write_run)
from tests.leaderboard.helpers import run_cli

# ---- McNemar's exact test: published examples and the binomial by hand ----


def test_mcnemar_exact_matches_armitage_and_berry():
    """Armitage & Berry (1994, p. 127), as worked by StatsDirect ("Exact matched pairs"): two culture media
    on 50 sputum specimens, growth on both 20, A only 12, B only 2, neither 16: exact two-sided P = 0.0129."""
    p = mcnemar_exact(12, 2)
    assert round(p, 4) == 0.0129
    assert p == pytest.approx(2 * (1 + 14 + 91) / 2 ** 14, rel=1e-12)  # 2 * P(X <= 2), X ~ Bin(14, 1/2)


def test_mcnemar_exact_matches_fagerland_2013():
    """Fagerland, Lydersen & Laake (2013, BMC Med Res Methodol 13:91), airway hyper-responsiveness before and
    after stem cell transplantation in 21 children (Bentur et al. 2009): discordant pairs 1 and 7, the McNemar
    exact conditional p-value is 0.070."""
    assert round(mcnemar_exact(1, 7), 3) == 0.070
    assert mcnemar_exact(7, 1) == mcnemar_exact(1, 7) == pytest.approx(18 / 256)


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (3, 3), (5, 0), (10, 25), (40, 61)])
def test_mcnemar_exact_is_the_two_sided_binomial(b, c):
    assert mcnemar_exact(b, c) == pytest.approx(binom_two_sided(b, c), rel=1e-9, abs=1e-15)


def test_holm_by_hand():
    # sorted p: .01 (x4 = .04), .02 (x3 = .06), .03 (x2 = .06 kept monotone), .5 (x1)
    assert holm([0.03, 0.5, 0.01, 0.02, math.nan])[:4] == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert math.isnan(holm([0.03, 0.5, 0.01, 0.02, math.nan])[4])


def test_paired_bootstrap_ci_matches_normal_theory_and_is_seeded():
    """For 400 paired differences the percentile CI of the mean is mean +/- 1.96 SD / sqrt(n) within a few
    percent of its half width (CLT), the same seed gives the same replicates, another seed others."""
    d = np.random.default_rng(7).normal(-0.05, 0.2, 400)
    reps = paired_bootstrap([d], 4000, [stream_seed(1, "x")])
    low, high = np.percentile(reps, [2.5, 97.5])
    half = 1.96 * d.std(ddof=1) / math.sqrt(len(d))
    assert (high - low) / 2 == pytest.approx(half, rel=0.08)
    assert (low + high) / 2 == pytest.approx(d.mean(), abs=0.15 * half)
    assert np.array_equal(reps, paired_bootstrap([d], 4000, [stream_seed(1, "x")]))
    assert not np.array_equal(reps, paired_bootstrap([d], 4000, [stream_seed(2, "x")]))
    assert bootstrap_p(reps) < 0.001  # the interval is well below 0


def test_paired_bootstrap_macro_averages_strata():
    """Two strata: each replicate is the mean of the two resampled stratum means (as the leaderboard)."""
    big, small = np.full(90, 0.2), np.full(10, -0.4)  # constant within a stratum: every replicate is exact
    reps = paired_bootstrap([big, small], 50, [stream_seed(0, "a"), stream_seed(0, "b")])
    assert reps == pytest.approx(np.full(50, (0.2 - 0.4) / 2))


# ---- comparisons of hand-made evaluations ----


@pytest.fixture(scope="module")
def hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Release 'accepted' and 'candidate' (same model and deployment behind them):

    * medcalc_bench (0/1): Armitage & Berry's table, candidate = medium B (both 20, A only 12, B only 2,
      neither 16): B - A = (22 - 32) / 50 = -0.2, p = 0.0129;
    * aci_bench (jury, 0-1): two strata (subsets) of 6 and 4 instances; instance 5 unscored in the candidate,
      and the candidate has one instance the baseline lacks: hand-computed means below;
    * error rate (lower is better, 0/1): falls from 10/30 to 2/30, all 8 changes one way: a significant gain;
    * model org/other only in the baseline; a second model renamed deployment in the candidate."""
    out = tmp_path_factory.mktemp("cmp")
    a, b = table_pairs(20, 12, 2, 16)
    err = lower_is_better(EXACT)
    for suite, exact, s1, s2, errs in (
            ("accepted", a, [0.5, 0.75, 0.25, 1.0, 0.5, 0.0], [0.25, 0.5, 0.75, 0.5], [1.0] * 10 + [0.0] * 20),
            ("candidate", b, [0.25, 0.75, 0.0, 0.75, 0.5, None], [0.5, 0.5, 1.0, 0.75, 1.0],
             [1.0] * 2 + [0.0] * 28)):
        write_run(out, suite, EXACT, "org/model", "local/model", exact)
        write_run(out, suite, JURY, "org/model", "local/model", s1, subset="one")
        write_run(out, suite, JURY, "org/model", "local/model", s2, subset="two")
        write_run(out, suite, err, "org/model", "local/model", errs)
        write_run(out, suite, EXACT, "org/two", "local/two-v1" if suite == "accepted" else "local/two-v2",
                  [1.0, 0.0, 1.0, 0.0])
    write_run(out, "accepted", EXACT, "org/other", "local/other", [1.0, 1.0])
    for suite in ("accepted", "candidate"):
        code, _, err_text = run_cli("summarize", "--suites", suite, "-o", str(out), "--bootstrap", "50")
        assert code == 0, err_text
    return out


def _by_bench(result):
    return {(r.model_b, r.benchmark): r for r in result.results}


def _check_hand_numbers(result) -> None:
    rows = _by_bench(result)
    ex = rows[("org/model", "medcalc_bench")]
    assert (ex.n_pairs, ex.a_only_right, ex.b_only_right, ex.test) == (50, 12, 2, "mcnemar-exact")
    assert ex.score_a == pytest.approx(32 / 50) and ex.score_b == pytest.approx(22 / 50)
    assert ex.diff == pytest.approx(-0.2)
    assert round(ex.p_value, 4) == 0.0129
    assert ex.change == "drop" and ex.significant
    assert ex.ci_low < -0.2 < ex.ci_high < 0
    jury = rows[("org/model", "aci_bench")]
    # stratum one, paired on ids 0-4 (5 unscored in B): A mean 3/5 = .6, B 2.25/5 = .45, diff -.15
    # stratum two, paired on ids 0-3 (id 4 only in B): A mean 2/4 = .5, B 2.75/4 = .6875, diff +.1875
    assert (jury.n_pairs, jury.n_only_a, jury.n_only_b, jury.test) == (9, 1, 1, "bootstrap")
    assert jury.score_a == pytest.approx((0.6 + 0.5) / 2)
    assert jury.score_b == pytest.approx((0.45 + 0.6875) / 2)
    assert jury.diff == pytest.approx((-0.15 + 0.1875) / 2)
    assert jury.change == "no change" and jury.a_only_right is None
    errs = rows[("org/model", "medcalc_bench_err")]
    assert errs.diff == pytest.approx(-8 / 30) and errs.lower_is_better
    assert errs.p_value == pytest.approx(binom_two_sided(8, 0)) and errs.change == "gain" and not errs.gate
    two = rows[("org/two", "medcalc_bench")]  # matched by model name across deployments
    assert (two.deployment_a, two.deployment_b, two.diff, two.change) == ("local/two-v1", "local/two-v2", 0.0,
                                                                         "no change")
    assert result.unmatched == ("org/other [local/other]",)


def test_compare_releases_by_hand(hand: Path):
    with open_store(hand / "results.sqlite") as store:
        result = compare(side_from_release(store, "accepted"), side_from_release(store, "candidate"),
                         CompareOptions(replicates=1000, seed=3))
    _check_hand_numbers(result)
    assert result.gate_failed


def test_compare_suites_gives_the_same_as_releases(hand: Path):
    opts = CompareOptions(replicates=300, seed=5)
    from_suites = compare(side_from_suite(hand, "accepted"), side_from_suite(hand, "candidate"), opts)
    _check_hand_numbers(from_suites)
    with open_store(hand / "results.sqlite") as store:
        from_store = compare(side_from_release(store, "accepted"), side_from_release(store, "candidate"), opts)
    assert [r.to_json() for r in from_suites.results] == [r.to_json() for r in from_store.results]


def test_cli_gate_exit_codes_and_json(hand: Path):
    code, out, err = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(hand))
    assert code == 3, err
    assert "DROP*" in out and "GATE FAILED" in out and "medcalc_bench" in out
    # the drop is 0.2: a threshold above it passes the gate (the drop is still reported)
    code, out, _ = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(hand),
                           "--threshold", "0.25")
    assert code == 0 and "gate passed" in out and "DROP " in out
    code, out, _ = run_cli("compare", "--release", "accepted", "--suite", "candidate", "-o", str(hand), "--json",
                           "--bootstrap", "200")
    assert code == 3
    doc = json.loads(out)
    assert doc["gate_failed"] and doc["drops"] == 1 and doc["gains"] == 1
    assert doc["b"] == "suite candidate" and doc["options"]["replicates"] == 200
    (ex,) = [r for r in doc["results"] if r["benchmark"] == "medcalc_bench" and r["model_b"] == "org/model"]
    assert (ex["a_only_right"], ex["b_only_right"], ex["gate"]) == (12, 2, True)
    # the same evaluation against itself: nothing changes, exit 0
    code, out, _ = run_cli("compare", "--release", "candidate", "--release", "candidate", "-o", str(hand))
    assert code == 0 and "0 significant drop(s), 0 gain(s)" in out


def test_cli_holm_and_pair(hand: Path):
    code, out, _ = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(hand), "--json",
                           "--adjust", "holm")
    doc = json.loads(out)
    tested = [r for r in doc["results"] if r["p_value"] is not None]
    assert all(r["p_adjusted"] >= r["p_value"] for r in tested)
    # explicit pairing: the baseline's org/other against the candidate's org/two
    code, out, err = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(hand),
                             "--pair", "org/other=local/two-v2", "--json")
    assert code == 0, err
    (r,) = json.loads(out)["results"]
    assert (r["model_a"], r["model_b"], r["n_pairs"], r["diff"]) == ("org/other", "org/two", 2, -0.5)


@pytest.mark.parametrize("argv,needle", [
    (["--release", "accepted"], "exactly two sources"),
    (["--release", "accepted", "--release", "nope"], "unknown release 'nope'"),
    (["--release", "accepted", "--suite", "nope"], "suite folder not found"),
    (["--release", "accepted", "--release", "candidate", "--pair", "x"], "--pair expects A=B"),
    (["--release", "accepted", "--release", "candidate", "--pair", "org/zzz=org/two"], "no model or deployment"),
    (["--release", "accepted", "--release", "candidate", "--threshold", "-1"], "expected a number"),
])
def test_cli_bad_input_is_one_line_exit_2(hand: Path, argv, needle):
    code, out, err = run_cli("compare", *argv, "-o", str(hand))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _own_database(postgres_url: str, name: str) -> str:
    """A database of its own on the shared scratch server (other tests count the releases in theirs)."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + "/" + name


def test_compare_on_postgresql(hand: Path, postgres_url: str):
    postgres_url = _own_database(postgres_url, "medhelm_compare")
    for suite in ("accepted", "candidate"):
        code, _, err = run_cli("summarize", "--suites", suite, "-o", str(hand), "--store", postgres_url,
                               "--bootstrap", "20")
        assert code == 0, err
    code, out, err = run_cli("compare", "--release", "accepted", "--release", "candidate", "--store", postgres_url,
                             "--json", "--bootstrap", "300", "--seed", "5")
    assert code == 3, err
    with open_store(hand / "results.sqlite") as store:
        local = compare(side_from_release(store, "accepted"), side_from_release(store, "candidate"),
                        CompareOptions(replicates=300, seed=5))
    assert json.loads(out)["results"] == [r.to_json() for r in local.results]


def test_cli_fail_on_missing_and_names_without_control_characters(hand: Path, tmp_path: Path):
    # the baseline's org/other has no counterpart in the candidate
    code, out, _ = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(hand),
                           "--threshold", "0.5")
    assert code == 0 and "no counterpart in B: org/other [local/other]" in out
    code, out, _ = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(hand),
                           "--threshold", "0.5", "--fail-on-missing")
    assert code == 3 and "--fail-on-missing" in out
    evil = "org/\x1b[2Jevil\rx"
    for suite, vals in (("e1", [1.0] * 10 + [0.0] * 10), ("e2", [0.0] * 20)):
        write_run(tmp_path, suite, EXACT, evil, "local/evil", vals)
    code, out, _ = run_cli("compare", "--suite", "e1", "--suite", "e2", "-o", str(tmp_path))
    assert code == 3 and "\x1b" not in out and "\r" not in out and "org/\\x1b[2Jevil\\rx" in out


def test_helm_release_folder_and_suite_compare_alike(tmp_path: Path):
    """A HELM release folder imported as the leaderboard reads it (`import-helm`) and the same HELM suite read
    straight from its folder give the same comparison; two of its models compared with --pair, by hand from the
    HELM runs' own per-instance stats (followup_yesno: mock-a right on 17 of 20, mock-b on 10 of 20)."""
    helm = Path(__file__).parents[1] / "data" / "helm" / "real"
    out = tmp_path / "out"
    code, _, err = run_cli("import-helm", str(helm), "--release", "fixtures-release", "-o", str(out),
                           "--bootstrap", "20")
    assert code == 0, err
    pair = ["--pair", "mockorg/gpt-4-mock-a=mockorg/gpt-4-mock-b", "--json", "--bootstrap", "300"]
    code, from_store, err = run_cli("compare", "--release", "fixtures-release", "--release", "fixtures-release",
                                    "-o", str(out), *pair)
    assert code in (0, 3), err
    code, from_folder, err = run_cli("compare", "--suite", "fixtures", "--suite", "fixtures", "-o", str(helm), *pair)
    assert code in (0, 3), err
    store_rows, folder_rows = json.loads(from_store)["results"], json.loads(from_folder)["results"]
    assert store_rows == folder_rows and len(store_rows) == 3
    yesno = next(r for r in store_rows if r["benchmark"] == "followup_yesno")
    stats = {}
    for model in ("a", "b"):
        run = next((helm / "runs" / "fixtures").glob(f"followup_yesno:*mock-{model},*"))
        stats[model] = {e["instance_id"]: s["sum"] / s["count"] for e in json.loads(
            (run / "per_instance_stats.json").read_text()) for s in e["stats"]
            if s["name"]["name"] == "exact_match" and s["count"]}
    both = sorted(set(stats["a"]) & set(stats["b"]))
    a_only = sum(stats["a"][i] == 1 and stats["b"][i] == 0 for i in both)
    b_only = sum(stats["a"][i] == 0 and stats["b"][i] == 1 for i in both)
    assert yesno["n_pairs"] == len(both)
    assert (yesno["a_only_right"], yesno["b_only_right"]) == (a_only, b_only)
    assert yesno["diff"] == pytest.approx(sum(stats["b"][i] - stats["a"][i] for i in both) / len(both))
    assert yesno["p_value"] == pytest.approx(binom_two_sided(a_only, b_only))


def test_the_gate_and_the_report_use_one_multiplicity_rule(tmp_path: Path):
    """Issue 51: `compare` gated on the raw p while the report used Holm. One model drops (McNemar 12 vs 3,
    raw p = 0.035) beside three that do not change: Holm over the four gives 4 x 0.035 = 0.14, so neither the
    gate nor the report calls it a drop, both say which rule they used, and the report lists the same p."""
    a, b = table_pairs(20, 12, 3, 15)
    for suite, vals in (("acc", a), ("cand", b)):
        write_run(tmp_path, suite, EXACT, "org/m1", "local/m1", vals)
        for k in (2, 3, 4):
            write_run(tmp_path, suite, EXACT, f"org/m{k}", f"local/m{k}", [1.0, 0.0] * 10)
        code, _, err = run_cli("summarize", "--suites", suite, "-o", str(tmp_path), "--bootstrap", "50")
        assert code == 0, err
    raw = binom_two_sided(12, 3)
    assert 0.01 < raw < 0.05 and 4 * raw > 0.05
    code, out, _ = run_cli("compare", "--release", "acc", "--release", "cand", "-o", str(tmp_path))
    assert code == 0 and "gate passed" in out and "Holm-adjusted" in out
    code, out, _ = run_cli("compare", "--release", "acc", "--release", "cand", "-o", str(tmp_path), "--json")
    doc = json.loads(out)
    (m1,) = [r for r in doc["results"] if r["model_b"] == "org/m1"]
    assert m1["p_value"] == pytest.approx(raw) and m1["p_adjusted"] == pytest.approx(4 * raw)
    assert m1["change"] == "no change" and not doc["gate_failed"] and doc["options"]["adjust"] == "holm"
    assert "Holm" in doc["multiplicity"]
    html = tmp_path / "r.html"
    code, _, err = run_cli("report", "--release", "cand", "--against", "acc", "--out", str(html), "-o",
                           str(tmp_path))
    assert code == 0, err
    change = html.read_text()
    change = change[change.index("Change against"):]
    assert "Holm-adjusted" in change and f"{4 * raw:.4f}" in change and "Drops: 0" in change
