"""Agreement statistics against published worked examples, and against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from medhelm.scoring.jury import agreement as ag

# Shrout & Fleiss (1979), Table 2: 6 targets rated by 4 judges.
SHROUT_FLEISS = [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]]
# ... and their Table 4 (two decimals).
PUBLISHED_ICC = {"1,1": .17, "2,1": .29, "3,1": .71, "1,k": .44, "2,k": .62, "3,k": .91}

# Krippendorff (2011) "Computing Krippendorff's Alpha-Reliability", reliability data: 4 observers x 12 units.
N = None
KRIPPENDORFF = [[1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
                [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
                [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
                [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N]]
PUBLISHED_ALPHA = {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849, "ratio": 0.797}


def exact_icc(rows: list[list[int]]) -> dict[str, F]:
    """Shrout & Fleiss's formulas in exact rational arithmetic (an independent, loop-based implementation)."""
    n, k = len(rows), len(rows[0])
    grand = F(sum(map(sum, rows)), n * k)
    row_means = [F(sum(r), k) for r in rows]
    col_means = [F(sum(r[j] for r in rows), n) for j in range(k)]
    ss_total = sum((F(x) - grand) ** 2 for r in rows for x in r)
    ss_rows = k * sum((m - grand) ** 2 for m in row_means)
    ss_cols = n * sum((m - grand) ** 2 for m in col_means)
    bms, jms = ss_rows / (n - 1), ss_cols / (k - 1)
    wms = (ss_total - ss_rows) / (n * (k - 1))
    ems = (ss_total - ss_rows - ss_cols) / ((n - 1) * (k - 1))
    return {"1,1": (bms - wms) / (bms + (k - 1) * wms),
            "2,1": (bms - ems) / (bms + (k - 1) * ems + k * (jms - ems) / n),
            "3,1": (bms - ems) / (bms + (k - 1) * ems),
            "1,k": (bms - wms) / bms,
            "2,k": (bms - ems) / (bms + (jms - ems) / n),
            "3,k": (bms - ems) / bms}


def exact_alpha(data: list[list[int | None]], level: str) -> F:
    """Krippendorff's alpha from pairable values, one unit at a time, in exact arithmetic."""
    units = [[row[u] for row in data if row[u] is not None] for u in range(len(data[0]))]
    units = [u for u in units if len(u) >= 2]
    values = sorted({v for u in units for v in u})
    o = {(c, k): F(0) for c in values for k in values}
    for u in units:
        m = len(u)
        for i, c in enumerate(u):
            for j, k in enumerate(u):
                if i != j:
                    o[c, k] += F(1, m - 1)
    n_c = {c: sum(o[c, k] for k in values) for c in values}
    n = sum(n_c.values())

    def delta(c: int, k: int) -> F:
        if level == "nominal":
            return F(int(c != k))
        if level == "interval":
            return F((c - k) ** 2)
        if level == "ratio":
            return F(c - k, c + k) ** 2
        lo, hi = min(c, k), max(c, k)
        return (sum(n_c[g] for g in values if lo <= g <= hi) - (n_c[c] + n_c[k]) / 2) ** 2

    d_o = sum(o[c, k] * delta(c, k) for c in values for k in values)
    d_e = sum(n_c[c] * n_c[k] * delta(c, k) for c in values for k in values) / (n - 1)
    return 1 - d_o / d_e


@pytest.mark.parametrize("form", ag.ICC_FORMS)
def test_icc_matches_shrout_fleiss_exactly_and_as_published(form):
    got = ag.icc(np.array(SHROUT_FLEISS)).get(form)
    assert got == pytest.approx(float(exact_icc(SHROUT_FLEISS)[form]), abs=1e-6)
    assert round(got, 2) == PUBLISHED_ICC[form]


def test_icc_mean_squares_match_the_published_anova_table():
    r = ag.icc(np.array(SHROUT_FLEISS))
    assert (round(r.bms, 2), round(r.wms, 2), round(r.jms, 2), round(r.ems, 2)) == (11.24, 6.26, 32.49, 1.02)


def test_icc_drops_incomplete_targets_and_is_none_when_undefined():
    with_gap = np.array(SHROUT_FLEISS + [[3, np.nan, 4, 5]], dtype=float)
    assert ag.icc(with_gap).n == 6
    assert ag.icc_value(with_gap, "2,1") == pytest.approx(ag.icc_value(np.array(SHROUT_FLEISS), "2,1"))
    assert ag.icc(np.array([[1, 2, 3]])) is None  # one target
    assert ag.icc(np.array([[1], [2]])) is None  # one rater
    assert ag.icc_value(np.full((4, 3), 3.0), "2,1") is None  # no variance at all: undefined, not 0


@pytest.mark.parametrize("level", ag.LEVELS)
def test_krippendorff_alpha_matches_the_worked_example(level):
    data = np.array([[np.nan if v is None else v for v in row] for row in KRIPPENDORFF])
    got = ag.krippendorff_alpha(data, level)
    assert got == pytest.approx(float(exact_alpha(KRIPPENDORFF, level)), abs=1e-6)
    assert got == pytest.approx(PUBLISHED_ALPHA[level], abs=5e-4)


def test_krippendorff_alpha_wikipedia_example_and_edge_cases():
    n = np.nan  # 3 coders x 15 units (Wikipedia's example): nominal 0.691, interval 0.811
    data = np.array([[n, n, n, n, n, 3, 4, 1, 2, 1, 1, 3, 3, n, 3],
                     [1, n, 2, 1, 3, 3, 4, 3, n, n, n, n, n, n, n],
                     [n, n, 2, 1, 3, 4, 4, n, 2, 1, 1, 3, 3, n, 4]])
    assert ag.krippendorff_alpha(data, "nominal") == pytest.approx(0.691358, abs=1e-6)
    assert ag.krippendorff_alpha(data, "interval") == pytest.approx(0.810845, abs=1e-6)
    assert ag.krippendorff_alpha(np.array([[1, 2, 3], [1, 2, 3]]), "ordinal") == pytest.approx(1.0)
    assert ag.krippendorff_alpha(np.array([[2, 2], [2, 2]])) is None  # one value only: undefined
    with pytest.raises(ValueError):
        ag.krippendorff_alpha(data, "cardinal")


def test_spearman_with_ties_and_missing():
    # hand-computed: ranks x = 1..5, y = (1, 2, 3.5, 5, 3.5) -> rho = 0.82078268...
    assert ag.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826817, abs=1e-9)
    assert ag.spearman([1, 2, 3, np.nan], [3, 2, 1, 9]) == pytest.approx(-1.0)
    assert ag.spearman([1, 1, 1], [1, 2, 3]) is None
    assert list(ag.rank_average(np.array([10, 20, 20, 30]))) == [1, 2.5, 2.5, 4]


def test_bootstrap_ci_is_seeded_and_brackets_the_estimate():
    m = np.array(SHROUT_FLEISS, dtype=float)
    stat = lambda rows: ag.icc_value(rows, "3,k")  # noqa: E731
    a = ag.bootstrap(stat, m, n_boot=500, seed=3)
    assert a == ag.bootstrap(stat, m, n_boot=500, seed=3)
    assert a.low <= a.value <= a.high and a.n == 6 and a.high - a.low > 0.01
    assert ag.bootstrap(stat, m, n_boot=0).low is None
    assert str(ag.Estimate(None)) == "n/a"
