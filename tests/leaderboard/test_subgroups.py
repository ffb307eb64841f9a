"""Performance by patient subgroup (store/subgroups.py): the math against independent computations (pandas
group means, scipy's exact binomial interval and permutation test, Holm by its definition) on data with a known gap, and
small-cell suppression, then end to end: a configurable benchmark naming subgroup columns, run against the
mock OpenAI server and summarised into the store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from medhelm.cli import main as cli
from medhelm.store.paired import holm
from medhelm.store.subgroups import NOT_RECORDED, analyse, cells, merged_cells, permutation_p
from tests.leaderboard.subgroup_helpers import MARKER, make_subgroup_suite


def _known_gap(rng: np.random.Generator) -> pd.DataFrame:
    """Exact-match values (0/1) with a real gap: A ~ 0.85, B ~ 0.45, C ~ 0.7; D and E are small cells."""
    parts = [("A", 220, 0.85), ("B", 200, 0.45), ("C", 160, 0.7), ("D", 7, 1.0), ("E", 4, 0.0)]
    rows = [(g, float(rng.random() < p)) for g, n, p in parts for _ in range(n)]
    df = pd.DataFrame(rows, columns=["group", "value"])
    df.loc[df.sample(frac=0.05, random_state=1).index, "value"] = np.nan  # unscored instances belong to no group
    return df


def test_group_means_intervals_and_gap_match_pandas_and_scipy() -> None:
    df = _known_gap(np.random.default_rng(7))
    groups, gap = analyse(df["value"].to_numpy(), list(df["group"]), replicates=2000, seed=3, keys=("b", "m"))
    want = df.dropna().groupby("group")["value"].agg(["mean", "count"])
    # D (7) and E (4) are below 11: pooled (11), never returned alone
    assert [g.group for g in groups] == ["A", "B", "C", "D + E"]
    assert groups[3].n == want.loc[["D", "E"], "count"].sum()
    for g in groups[:3]:
        assert g.n == want.loc[g.group, "count"]
        assert g.value == pytest.approx(want.loc[g.group, "mean"], abs=1e-12)
        x = df.dropna().loc[df.dropna()["group"] == g.group, "value"].to_numpy()
        # 0/1 values: the exact (Clopper-Pearson) interval, as scipy computes it (store/intervals.py)
        ref = stats.binomtest(int(x.sum()), len(x)).proportion_ci(0.95, method="exact")
        assert (g.ci_low, g.ci_high) == pytest.approx((ref.low, ref.high), abs=1e-12)
        assert g.ci_low <= g.value <= g.ci_high
    shown = want.loc[["A", "B", "C"], "mean"]
    assert (gap.high_group, gap.low_group) == (shown.idxmax(), shown.idxmin()) == ("A", "B")  # D + E: ~0.64
    assert gap.gap == pytest.approx(shown.max() - shown.min(), abs=1e-12)
    assert gap.ratio == pytest.approx(shown.min() / shown.max(), abs=1e-12)
    assert gap.gap_low < gap.gap < gap.gap_high and gap.gap_low > 0.2  # a gap of ~0.4: its interval excludes 0
    assert (gap.n_groups, gap.n_suppressed, gap.n_pairs) == (4, 2, 6)
    # 2000 permutations, six pairs: the A-B gap is far beyond chance; Holm multiplies the smallest p by 6
    assert gap.p_holm == pytest.approx(6 / 2001)


def test_permutation_p_agrees_with_scipy() -> None:
    rng = np.random.default_rng(5)
    x = (rng.random(60) < 0.7).astype(float)
    y = (rng.random(50) < 0.55).astype(float)
    ours = permutation_p(x, y, 20000, np.random.default_rng(1))
    ref = stats.permutation_test((x, y), lambda a, b: np.mean(a) - np.mean(b), permutation_type="independent",
                                 n_resamples=20000, alternative="two-sided", random_state=2).pvalue
    assert 0.01 < ref < 0.9  # a borderline difference: the comparison is not decided by a floor or a ceiling
    assert ours == pytest.approx(ref, abs=0.015)


def test_holm_worked_by_hand() -> None:
    # sorted: 0.005 x 5 = 0.025, 0.01 x 4 = 0.04, 0.03 x 3 = 0.09, 0.04 x 2 = 0.08 -> 0.09 (monotone), 0.2 x 1
    assert holm([0.01, 0.04, 0.03, 0.2, 0.005]) == pytest.approx([0.04, 0.09, 0.09, 0.2, 0.025])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_no_gap_is_not_called_one() -> None:
    rng = np.random.default_rng(9)
    values = (rng.random(600) < 0.6).astype(float)
    labels = [["x", "y", "z"][i % 3] for i in range(600)]
    _, gap = analyse(values, labels, replicates=1000, seed=0, keys=("b",))
    assert gap.p_holm is not None and gap.p_holm > 0.05
    assert gap.gap < 0.1 and gap.gap_low < 0.02  # a small gap whose interval reaches (about) zero


def test_small_cells_are_pooled_until_the_pool_is_large_enough() -> None:
    assert cells({"a": 50, "b": 11, "c": 10}) == ({"a": "a", "b": "b + c", "c": "b + c"}, 2)
    # two small groups (3 + 2 = 5) are not enough together: the next smallest joins them
    assert cells({"a": 50, "b": 30, "c": 3, "d": 2}) == ({"a": "a", "b": "b + c + d", "c": "b + c + d",
                                                         "d": "b + c + d"}, 3)
    assert cells({"a": 50, "b": 30}, min_cell=31) == ({"a": "a + b", "b": "a + b"}, 2)
    assert cells({"a": 5}) == ({}, 1) and cells({"a": 4, "b": 6}) == ({}, 2)  # the whole population is small
    assert cells({"a": 11, "b": 12}) == ({"a": "a", "b": "b"}, 0)
    # the issue's case: 5 patients without a recorded sex no longer hide the 96 women; the pool is shown
    assert cells({"M": 99, "F": 96, NOT_RECORDED: 5})[0] == {"M": "M", "F": "F + not recorded",
                                                              NOT_RECORDED: "F + not recorded"}
    values = np.ones(70)
    labels = ["big"] * 40 + ["mid"] * 20 + ["tiny"] * 10
    groups, gap = analyse(values, labels, replicates=100, seed=0, keys=("b",))
    assert [(g.group, g.n) for g in groups] == [("big", 40), ("mid + tiny", 30)]
    assert (gap.n_groups, gap.n_suppressed, gap.gap) == (2, 2, 0.0)


def test_blank_and_missing_labels_are_the_group_not_recorded() -> None:
    labels = ["F"] * 20 + ["M"] * 20 + [""] * 6 + [None] * 3 + ["(blank)"] * 3
    values = np.r_[np.ones(20), np.zeros(20), np.full(12, 0.5)]
    groups, _ = analyse(values, labels, replicates=0, seed=0, keys=())
    assert [(g.group, g.n, g.value) for g in groups] == [("F", 20, 1.0), ("M", 20, 0.0), (NOT_RECORDED, 12, 0.5)]


def test_the_population_not_the_scored_count_decides_the_cells() -> None:
    """The issue's attack: in one release 4 requests of the 90+ group failed. Decided on scored counts, the
    90+ group (12 patients) fell below 11 in that release only and a different complement was hidden, so one
    release minus the other gave away a small group. On the population, both releases show the same cells."""
    labels = ["18-64"] * 60 + ["65-89"] * 40 + ["90+"] * 12
    first = np.ones(112)
    second = first.copy()
    second[100:104] = np.nan  # four failed requests in the 90+ group
    population = {"18-64": 60, "65-89": 40, "90+": 12}
    one, _ = analyse(first, labels, replicates=0, seed=0, keys=(), population=population)
    two, _ = analyse(second, labels, replicates=0, seed=0, keys=(), population=population)
    assert [g.group for g in one] == [g.group for g in two] == ["18-64", "65-89", "90+"]
    assert [g.n for g in two] == [60, 40, 8]  # the values are on the scored instances; the cells are not
    # by default the population is the vector's own labels, scored or not: the same cells again
    assert [g.group for g in analyse(second, labels, replicates=0, seed=0, keys=())[0]] == ["18-64", "65-89", "90+"]


def test_two_releases_compared_share_their_coarsest_cells() -> None:
    r1 = cells({"a": 50, "b": 12, "c": 10})  # c small: pooled with b
    r2 = cells({"a": 50, "b": 12, "c": 11})  # c large enough: shown alone
    assert merged_cells(r1, r2) == ({"a": "a", "b": "b + c", "c": "b + c"}, 2)
    assert merged_cells(r1, cells({"a": 5, "b": 3})) == ({}, 3)  # a release that shows nothing: nothing


def test_zero_replicates_give_no_interval_and_no_p() -> None:
    groups, gap = analyse(np.r_[np.ones(20), np.zeros(20)], ["a"] * 20 + ["b"] * 20, replicates=0, seed=0, keys=())
    assert [g.ci_low for g in groups] == [None, None]
    assert gap.gap == 1.0 and gap.p_holm is None and gap.gap_low is None


# ---- end to end: YAML subgroups -> records -> summarize -> the store -----------------------------------

def test_yaml_subgroups_reach_the_store(tmp_path: Path) -> None:
    s = make_subgroup_suite(tmp_path)
    (run_dir,) = (s["out"] / "runs" / "s").iterdir()
    first = json.loads((run_dir / "instances.jsonl").read_text().splitlines()[0])
    assert first["instance"]["subgroups"] in ({"age_band": "old", "sex": "M"}, {"age_band": "old", "sex": "F"},
                                              {"age_band": "young", "sex": "M"}, {"age_band": "young", "sex": "F"},
                                              {"age_band": "child", "sex": "M"}, {"age_band": "child", "sex": "F"})
    assert cli(["summarize", "--suite", "s", "-o", str(s["out"]), "--local-path", str(s["local"]), "--store",
                str(s["store"]), "--bootstrap", "500", "--redact"]) == 0
    con = sqlite3.connect(s["store"])
    scores = con.execute("SELECT attribute, grp, n, value FROM subgroup_scores ORDER BY attribute, grp").fetchall()
    # child (6) is below 11: pooled with the next smallest (young, 24), never shown alone
    assert scores == [("age_band", "old", 30, 1.0), ("age_band", "young + child", 30, 0.0),
                      ("sex", "F", 30, pytest.approx(0.5)), ("sex", "M", 30, pytest.approx(0.5))]
    gaps = {r[0]: r[1:] for r in con.execute(
        "SELECT attribute, n_groups, n_suppressed, gap, p_holm FROM subgroup_gaps").fetchall()}
    assert gaps["age_band"][:3] == (2, 2, 1.0) and gaps["age_band"][3] < 0.01
    assert gaps["sex"][:3] == (2, 0, 0.0) and gaps["sex"][3] == pytest.approx(1.0)
    for table in ("subgroup_scores", "subgroup_gaps"):
        assert {"child", "young"}.isdisjoint(v for row in con.execute(f"SELECT * FROM {table}") for v in row)
    con.close()


def test_a_benchmark_without_subgroups_keeps_its_records_and_store_shape(tmp_path: Path) -> None:
    s = make_subgroup_suite(tmp_path, subgroups=False)
    (run_dir,) = (s["out"] / "runs" / "s").iterdir()
    assert "subgroups" not in (run_dir / "instances.jsonl").read_text()
    assert cli(["summarize", "--suite", "s", "-o", str(s["out"]), "--local-path", str(s["local"]), "--store",
                str(s["store"]), "--bootstrap", "50"]) == 0
    con = sqlite3.connect(s["store"])
    # the tables come with the store (schema v2: no table is made on first use), and stay empty
    rows = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("subgroup_labels", "subgroup_scores", "subgroup_gaps")}
    con.close()
    assert rows == {"subgroup_labels": 0, "subgroup_scores": 0, "subgroup_gaps": 0}


def test_a_subgroup_column_missing_from_the_csv_is_one_line(tmp_path: Path, capsys) -> None:
    s = make_subgroup_suite(tmp_path)
    s["cfg"].write_text(s["cfg"].read_text().replace("[age_band, sex]", "[age_band, ethnicity]"))
    entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={s['cfg']}"
    code = cli(["validate", "--run-entries", entry, "--local-path", str(s["local"])])
    err = capsys.readouterr().err
    assert code == 2 and "subgroup column 'ethnicity'" in err and "data.csv" in err
    assert MARKER not in err and len(err.strip().splitlines()) == 1


def test_postgres_and_sqlite_stores_hold_the_same_subgroups(tmp_path: Path, postgres_url: str) -> None:
    from medhelm.store import open_store
    from medhelm.store.subgroups import read_subgroups

    import psycopg

    s = make_subgroup_suite(tmp_path)
    with psycopg.connect(postgres_url, autocommit=True) as con:  # a database of its own: the server is shared
        con.execute("DROP DATABASE IF EXISTS subgroups_test")
        con.execute("CREATE DATABASE subgroups_test")
    postgres_url = postgres_url.rsplit("/", 1)[0] + "/subgroups_test"
    got = []
    for store in (str(s["store"]), postgres_url):
        for _ in range(2):  # the second summarize replaces the release (its labels, scores and gaps) in place
            assert cli(["summarize", "--suite", "s", "--release", "sg-pg", "-o", str(s["out"]), "--local-path",
                        str(s["local"]), "--store", store, "--bootstrap", "300"]) == 0
        with open_store(store) as st:
            got.append(read_subgroups(st, "sg-pg"))
            labels = st.query("SELECT COUNT(*) FROM subgroup_labels l JOIN runs r ON r.run_id = l.run_id "
                              "WHERE r.release = 'sg-pg'")[0][0]
            assert labels == 2  # one run, two attributes: the first summarize's rows were replaced
    sqlite_rows, pg_rows = got
    assert sqlite_rows == pg_rows and len(sqlite_rows[0]) == 4
    html = tmp_path / "pg.html"
    assert cli(["report", "--release", "sg-pg", "--store", postgres_url, "--out", str(html)]) == 0
    assert cli(["report", "verify", str(html), "--store", postgres_url]) == 4  # unsigned: the signature NOT checked


def test_a_redacted_export_carries_the_shown_subgroups_and_no_labels(tmp_path: Path) -> None:
    s = make_subgroup_suite(tmp_path)
    assert cli(["summarize", "--suite", "s", "-o", str(s["out"]), "--local-path", str(s["local"]), "--store",
                str(s["store"]), "--bootstrap", "100"]) == 0
    bundle = tmp_path / "bundle"
    assert cli(["export", str(bundle), "--redact", "--store", str(s["store"])]) == 0
    con = sqlite3.connect(bundle / "results.sqlite")
    assert con.execute("SELECT COUNT(*) FROM subgroup_labels").fetchone()[0] == 0  # per instance: not shared
    assert con.execute("SELECT attribute, grp FROM subgroup_scores ORDER BY attribute, grp").fetchall() == [
        ("age_band", "old"), ("age_band", "young + child"), ("sex", "F"), ("sex", "M")]
    con.close()
    csv_text = (bundle / "subgroup_scores.csv").read_text() + (bundle / "subgroup_gaps.csv").read_text()
    assert '"old"' in csv_text and '"young + child"' in csv_text
    assert '"young"' not in csv_text and '"child"' not in csv_text
    assert cli(["report", "--store", str(bundle / "results.sqlite"), "--out", str(tmp_path / "r.html")]) == 0
    assert ">old<" in (tmp_path / "r.html").read_text()
    full = tmp_path / "full"
    assert cli(["export", str(full), "--store", str(s["store"])]) == 0
    con = sqlite3.connect(full / "results.sqlite")
    assert con.execute("SELECT COUNT(*) FROM subgroup_labels").fetchone()[0] == 2
    con.close()


def test_a_free_text_subgroup_column_is_refused_without_echoing_it(tmp_path: Path, capsys) -> None:
    s = make_subgroup_suite(tmp_path)
    s["cfg"].write_text(s["cfg"].read_text().replace("[age_band, sex]", "[note]"))  # the note: patient text
    data = tmp_path / "data.csv"
    data.write_text(data.read_text().replace(" patient ", " patient with a long history of hypertension "))
    entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={s['cfg']}"
    code = cli(["validate", "--run-entries", entry, "--local-path", str(s["local"])])
    err = capsys.readouterr().err
    assert code == 2 and "subgroup column 'note' holds a value of" in err and "data.csv:2" in err
    assert MARKER not in err and "patient" not in err


@pytest.mark.parametrize("redacted", ["0", "1"])  # 1: a viewer's session (aggregates only) sees the same
def test_the_equity_page_shows_the_shown_groups_and_the_gap(tmp_path: Path, dashboard_env, redacted: str) -> None:
    import os

    from streamlit.testing.v1 import AppTest

    s = make_subgroup_suite(tmp_path)
    assert cli(["summarize", "--suite", "s", "-o", str(s["out"]), "--local-path", str(s["local"]), "--store",
                str(s["store"]), "--bootstrap", "200"]) == 0
    os.environ.pop("MEDHELM_RELEASE", None)
    os.environ.update(MEDHELM_STORE=str(s["store"]), MEDHELM_REDACTED=redacted)
    at = AppTest.from_file(str(Path(__file__).parents[2] / "dashboard" / "app.py"), default_timeout=90).run()
    assert not at.exception, [e.value for e in at.exception]
    at.sidebar.radio[0].set_value("Equity").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Performance by patient subgroup"
    gaps = at.dataframe[0].value
    row = gaps[gaps["Attribute"] == "age_band"].iloc[0]
    assert row["Groups shown"] == 2 and row["Groups suppressed"] == 2  # the small child cell pooled with young
    assert set(gaps["Attribute"]) == {"age_band", "sex"}
    at.selectbox(key="equity_pick").set_value(("SG", "sex")).run()
    groups = at.dataframe[1].value
    assert sorted(groups["Group"]) == ["F", "M"] and list(groups["Instances"]) == [30, 30]
    page = " ".join(str(d.value.to_dict()) for d in at.dataframe)
    at.selectbox(key="equity_pick").set_value(("SG", "age_band")).run()
    assert sorted(at.dataframe[1].value["Group"]) == ["old", "young + child"]
    assert MARKER not in page and "'young'" not in page and "'child'" not in page
