"""Two models on the same instances of one benchmark: paired wins/ties/losses, then the answers side by side."""

from __future__ import annotations

import numpy as np
import streamlit as st

import board_data
from board_data import Release, Settings
from filters import View
from page_benchmark import PAGE_SIZE, pick_benchmark, show_instance
from safe_text import literal, visible


def render(cfg: Settings, rel: Release, view: View, redacted: bool) -> None:
    bench = pick_benchmark(view, "bench_page_compare")
    if bench is None:
        return
    runs = board_data.runs(cfg.store, rel.name, rel.meta.get("created_at", ""), bench)
    kept = {r for r in view.table.rows}
    runs = runs[[(m, d) in kept for m, d in zip(runs["model"], runs["deployment"])]]
    strata = sorted(runs["stratum"].unique())
    stratum = (st.selectbox("Subset", strata, format_func=visible, key="cmp_stratum") if len(strata) > 1
               else (strata[0] if strata else None))
    runs = runs[runs["stratum"] == stratum]
    if len(runs) < 2:
        st.info("This benchmark needs runs of at least two models to compare.")
        return
    labels = {int(r.run_id): visible(f"{r.model} [{r.deployment}] ({r.suite})") for r in runs.itertuples()}
    ids = list(labels)
    a_col, b_col = st.columns(2)
    left = a_col.selectbox("Model A", ids, index=0, format_func=labels.get, key="cmp_a")
    right = b_col.selectbox("Model B", ids, index=1, format_func=labels.get, key="cmp_b")
    stamp = rel.meta.get("created_at", "")
    a, b = board_data.run_values(cfg.store, stamp, left), board_data.run_values(cfg.store, stamp, right)
    both = a.to_frame("a").join(b.to_frame("b"), how="inner").dropna()
    lower = bool(rel.benchmarks.set_index("benchmark").loc[bench, "lower_is_better"])
    diff = (both["b"] - both["a"]) if lower else (both["a"] - both["b"])
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Shared instances", len(both))
    m2.metric("A better", int((diff > 0).sum()))
    m3.metric("Ties", int((diff == 0).sum()))
    m4.metric("B better", int((diff < 0).sum()))
    if len(both):
        st.caption(f"Mean on shared instances: A {both['a'].mean():.3f} · B {both['b'].mean():.3f} · "
                   f"difference {np.mean(both['a'] - both['b']):+.3f}")
    flagged = runs.set_index("run_id")["redacted"]
    if redacted or bool(flagged.loc[left]) or bool(flagged.loc[right]):
        st.info("Instance text is hidden (redacted). The counts above use scores only.")
        return
    page = st.number_input("Page", min_value=1, value=1, step=1, key="cmp_page")
    for item_a, item_b in board_data.paired(cfg.store, left, right, (int(page) - 1) * PAGE_SIZE, PAGE_SIZE,
                                            cfg.principal):
        with st.expander(f"{literal(item_a['instance_id'], 80)} · A {_v(item_a)} · B {_v(item_b)}"):
            st.text(item_a["prompt"] or "(not stored)")
            ca, cb = st.columns(2)
            with ca:
                st.markdown("**A**")
                show_instance(item_a, with_prompt=False)
            with cb:
                st.markdown("**B**")
                show_instance(item_b, with_prompt=False)


def _v(item: dict) -> str:
    return "unscored" if item["main_value"] is None else f"{item['main_value']:.3f}"
