"""Trends: each model's score per benchmark and per category across releases with CIs; significant drops
against the previous release marked; next to each CI the minimum detectable difference at its n.

Aggregates only (scores, CIs, paired changes computed from per-instance numbers): viewer-level; releases
the principal may not see are never read. The math is ``medhelm.store.trends`` (and ``compare``); names
from the store are shown in tables and charts as plain text (``safe_frame`` for the CSV download).
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

import board_data
from board_data import Release, Settings
from filters import View
from medhelm.store import open_store
from medhelm.store.compare import MULTIPLICITY_RULE
from medhelm.store.trends import ALPHA, POWER, trends
from safe_frames import safe_frame

FLAGS = {"drop": "▼ significant drop", "gain": "▲ significant gain", "no change": "no significant change",
         "untestable": "not testable", "": "first release shown"}


@st.cache_data(show_spinner="Comparing releases…", max_entries=8)
def _load(store: str, releases: tuple[tuple[str, str], ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, category groups) of these releases, oldest first; the stamps invalidate the cache."""
    with open_store(store) as s:
        # 500 replicates: a display (the gate, `medhelm compare`, uses 2000 by default)
        cells, groups = trends(s, [r for r, _ in releases], replicates=500)
    return pd.DataFrame([c.to_json() for c in cells]), pd.DataFrame([g.__dict__ for g in groups])


def render(cfg: Settings, rel: Release, view: View, redacted: bool) -> None:
    known = board_data.releases(cfg.store, cfg.principal)  # newest first, only what the principal may see
    names = [r for r, _ in known]
    upto = names.index(rel.name) if rel.name in names else 0
    history = list(reversed(known[upto:]))  # oldest first, ending at the release picked in the sidebar
    if len(history) < 2:
        st.info("Trends need at least two releases up to this one: summarize another suite as a new release "
                "(`medhelm summarize --suites ... --release ...`).")
    shown = st.slider("Releases shown", min_value=1, max_value=max(len(history), 1),
                      value=min(len(history), 6), key="trend_n") if len(history) > 1 else 1
    history = history[-shown:]
    cells, groups = _load(cfg.store, tuple(history))
    if cells.empty:
        st.warning("No scores in these releases.")
        return
    categories = {c.category or "Unclassified" for c in view.table.columns}
    cells = cells[[(c or "Unclassified") in categories for c in cells["category"]]]
    models = sorted({f"{m} [{d}]" for m, d in zip(cells["model"], cells["deployment"])})
    picked = st.multiselect("Models", models, default=models[:6], key="trend_models")
    cells = cells[[f"{m} [{d}]" in picked for m, d in zip(cells["model"], cells["deployment"])]]
    st.caption(f"Paired changes against the previous release on the instances both scored (McNemar's exact test "
               f"for 0/1 metrics, else the paired bootstrap), alpha {ALPHA:g}; "
               f"{MULTIPLICITY_RULE.format(family='model x benchmark of a release pair')}. MDD = the smallest difference a "
               f"paired test on this many instances detects with {POWER:.0%} power: a change below it may be real "
               "but this suite is too small to tell.")
    drops = cells[cells["flag"] == "drop"]
    if len(drops):
        st.error(f"{len(drops)} significant drop(s) against the previous release (marked ▼ below).")
    else:
        st.success("No significant drop against the previous release among the shown models and benchmarks.")
    level = st.radio("Level", ["Benchmark", "Category"], horizontal=True, key="trend_level")
    order = {r: i for i, (r, _) in enumerate(history)}
    if level == "Benchmark":
        labels = dict(sorted({(b, f"{d} ({b})") for b, d in zip(cells["benchmark"], cells["display_name"])}))
        if not labels:
            st.info("No benchmark matches the filters.")
            return
        flagged = [b for b in labels if b in set(drops["benchmark"])]
        first = list(labels).index(flagged[0]) if flagged else 0  # open where something dropped
        bench = st.selectbox("Benchmark", list(labels), index=first, format_func=labels.get, key="trend_bench")
        sub = cells[cells["benchmark"] == bench].copy()
        st.altair_chart(_chart(sub, order, flags=True), width="stretch")
        st.dataframe(safe_frame(_cell_table(sub)), hide_index=True, width="stretch", key="trend_cells")
        if len(drops):
            st.subheader("All flagged drops")
            st.dataframe(safe_frame(_cell_table(drops)), hide_index=True, width="stretch", key="trend_drops")
    else:
        g = groups[[f"{m} [{d}]" in picked for m, d in zip(groups["model"], groups["deployment"])]] \
            if len(groups) else groups
        g = g[[c in categories for c in g["category"]]] if len(g) else g
        if g.empty:
            st.info("No category scores (categories average higher-is-better benchmarks only).")
            return
        cat = st.selectbox("Category", sorted(set(g["category"])), key="trend_cat")
        sub = g[g["category"] == cat].copy()
        sub["flag"] = ""
        st.altair_chart(_chart(sub, order, flags=False), width="stretch")
        in_cat = cells[cells["category"] == cat]
        n_drops = int((in_cat["flag"] == "drop").sum())
        st.caption(f"Macro average over the category's benchmarks (its interval combines the benchmarks' "
                   f"intervals, from summarize); "
                   f"{n_drops} flagged drop(s) on its benchmarks in the shown releases.")
        st.dataframe(safe_frame(pd.DataFrame({
            "Release": sub["release"], "Model": sub["model"], "Deployment": sub["deployment"],
            "Score": sub["value"], "95% CI": [_ci(a, b) for a, b in zip(sub["ci_low"], sub["ci_high"])],
            "Benchmarks": sub["n_benchmarks"]})), hide_index=True, width="stretch", key="trend_groups")


def _chart(sub: pd.DataFrame, order: dict[str, int], *, flags: bool) -> alt.Chart:
    sub = sub.assign(Model=[f"{m} [{d}]" for m, d in zip(sub["model"], sub["deployment"])],
                     Release=sub["release"], Flag=[FLAGS.get(f, f) for f in sub["flag"]])
    x = alt.X("Release:N", sort=sorted(order, key=order.get), title="Release (oldest → newest)",
              axis=alt.Axis(labelAngle=0))
    base = alt.Chart(sub)
    line = base.mark_line(point=True).encode(x=x, y=alt.Y("value:Q", title="Score (95% CI)",
                                                           scale=alt.Scale(zero=False)),
                                             color="Model:N", tooltip=["Model", "Release", "value", "Flag"])
    bars = base.mark_errorbar().encode(x=x, y=alt.Y("ci_low:Q", title="Score (95% CI)"), y2="ci_high:Q",
                                       color="Model:N")
    layers = [bars, line]
    if flags:
        drops = base.transform_filter(alt.datum.flag == "drop").mark_point(
            shape="triangle-down", size=220, filled=True, color="#d62728").encode(x=x, y="value:Q",
                                                                                  tooltip=["Model", "Release", "Flag"])
        layers.append(drops)
    return alt.layer(*layers).properties(height=320)


def _ci(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None or pd.isna(low) or pd.isna(high) else f"[{low:.3f}, {high:.3f}]"


def _cell_table(sub: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "Release": sub["release"], "Model": sub["model"], "Deployment": sub["deployment"],
        "Benchmark": sub["benchmark"], "Score": sub["value"].round(4),
        "95% CI": [_ci(a, b) for a, b in zip(sub["ci_low"], sub["ci_high"])],
        "n": sub["n_instances"], "MDD (80% power)": sub["mdd"].astype(float).round(4),
        "vs previous": sub["previous"].fillna(""), "Change": sub["change"].astype(float).round(4),
        "Change 95% CI": [_ci(a, b) for a, b in zip(sub["change_low"], sub["change_high"])],
        "p": sub["p_value"].astype(float).round(4), "p (Holm)": sub["p_adjusted"].astype(float).round(4), "Flag": [FLAGS.get(f, f) for f in sub["flag"]],
        "MDD basis": sub["mdd_basis"]})
