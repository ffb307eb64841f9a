"""Equity: each benchmark's main metric per patient subgroup (age band, sex, ...) with 95 % intervals, and the
largest gap between groups with its Holm-adjusted p-value, as ``medhelm summarize`` stored them
(``medhelm.store.subgroups``). A group below the small-cell threshold was never stored on its own (it is pooled,
decided on the benchmark's data: ``subgroups.cells``), so it cannot be shown here; the page states the rule.

Aggregates only (viewer-level): no instance is read. Names and labels from the store are shown as plain text
(``safe_frame`` also for the CSV download).
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from board_data import Release, Settings
from filters import View
from medhelm.store import open_store
from medhelm.store.subgroups import SUPPRESSION, read_subgroups
from safe_frames import safe_frame


@st.cache_data(show_spinner=False, max_entries=8)
def _load(store: str, release: str, stamp: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scores, gaps) of the release; ``stamp`` (its summarize time) invalidates the cache."""
    with open_store(store) as s:
        scores, gaps = read_subgroups(s, release)
    return pd.DataFrame(scores), pd.DataFrame(gaps)


def render(cfg: Settings, rel: Release, view: View, redacted: bool) -> None:
    scores, gaps = _load(cfg.store, rel.name, str(rel.meta.get("created_at", "")))
    if gaps.empty:
        st.info("No benchmark of this release names patient subgroups (a configurable benchmark's `subgroups:` "
                "columns; docs/report.md).")
        return
    shown = {c.benchmark for c in view.table.columns}  # the sidebar's filters (category, access, ...)
    names = {c.benchmark: c.display_name or c.benchmark for c in view.table.columns}
    gaps = gaps[gaps["benchmark"].isin(shown)]
    scores = scores[scores["benchmark"].isin(shown)] if not scores.empty else scores
    if gaps.empty:
        st.info("No benchmark with subgroups matches the filters.")
        return
    min_cell = "/".join(str(int(x)) for x in sorted(gaps["min_cell"].unique()))
    st.caption(SUPPRESSION.format(min_cell=min_cell) + " Gap = highest minus lowest shown group; p = two-sided "
               "permutation test, Holm-adjusted over every pair of the attribute's groups.")
    table = pd.DataFrame({
        "Benchmark": [names.get(b, b) for b in gaps["benchmark"]], "Attribute": gaps["attribute"],
        "Model": gaps["model"], "Deployment": gaps["deployment"], "Groups shown": gaps["n_groups"],
        "Groups suppressed": gaps["n_suppressed"], "Highest": gaps["high_group"], "Lowest": gaps["low_group"],
        "Gap": gaps["gap"], "Gap 95% CI low": gaps["gap_low"], "Gap 95% CI high": gaps["gap_high"],
        "Ratio low/high": gaps["ratio"], "p (Holm)": gaps["p_holm"]})
    st.subheader("Largest gap between subgroups")
    st.dataframe(safe_frame(table), hide_index=True, width="stretch")
    if scores.empty:
        return
    pairs = sorted({(b, a) for b, a in zip(scores["benchmark"], scores["attribute"])})
    label = {p: f"{names.get(p[0], p[0])} by {p[1]}" for p in pairs}
    pick = st.selectbox("Benchmark and attribute", pairs, format_func=lambda p: label[p], key="equity_pick")
    part = scores[(scores["benchmark"] == pick[0]) & (scores["attribute"] == pick[1])]
    frame = pd.DataFrame({"group": part["grp"], "model": [f"{m} [{d}]" for m, d in zip(part["model"],
                                                                                           part["deployment"])],
                          "value": part["value"], "low": part["ci_low"], "high": part["ci_high"], "n": part["n"]})
    base = alt.Chart(safe_frame(frame)).encode(y=alt.Y("group:N", title=pick[1]), color=alt.Color("model:N"))
    chart = base.mark_rule().encode(x=alt.X("low:Q", title="score (95% CI)"), x2="high:Q") + \
        base.mark_point(filled=True).encode(x="value:Q", tooltip=["group", "model", "value", "low", "high", "n"])
    st.altair_chart(chart, width="stretch")
    st.dataframe(safe_frame(frame.rename(columns={"group": "Group", "model": "Model", "value": "Value",
                                                  "low": "95% CI low", "high": "95% CI high", "n": "Instances"})),
                 hide_index=True, width="stretch")
