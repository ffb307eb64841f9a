"""One benchmark: every model's cell with its interval, then drill-down to instances of one run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import board_data
from board_data import Release, Settings
from filters import View
from safe_text import literal, no_addresses, visible
from safe_frames import safe_frame

PAGE_SIZE = 10
_BESIDE_HELP = ("shown beside the ranked Score, never ranked: the other rule's mean over the same instances "
                "(lenient_match: our reading of 'A.', '(A)', 'Answer: A'; <benchmark>_accuracy: MedHELM's 1-5 "
                "jury mean, as its leaderboard shows it); empty where a run has no such stat (docs/metrics.md)")


def pick_benchmark(view: View, key: str) -> str | None:
    cols = view.table.columns
    if not cols:
        st.warning("No benchmark matches the filters.")
        return None
    labels = {c.benchmark: visible(f"{c.display_name} ({c.benchmark})") for c in cols}
    return st.selectbox("Benchmark", list(labels), format_func=labels.get, key=key)


def render(cfg: Settings, rel: Release, view: View, redacted: bool) -> None:
    bench = pick_benchmark(view, "bench_page_benchmark")
    if bench is None:
        return
    info = rel.benchmarks.set_index("benchmark").loc[bench]
    st.text(f"{info['category'] or 'Unclassified'} › {info['subcategory'] or '—'} · access {info['access']} · "
            f"main metric {info['main_metric']}" + (" (lower is better)" if info["lower_is_better"] else ""))
    if info.get("description"):
        st.text(visible(info["description"], keep_lines=True))  # data: plain text, never Markdown
    names, values, legacy = board_data.beside(cfg.store, rel.name, rel.meta.get("created_at", ""), bench)
    if legacy and info["main_metric"] == "exact_match":
        st.warning("This release was summarized before the multiple-choice columns were renamed: its Score is "
                   "the lenient rule (today's lenient_match), not HELM's exact_match. Re-run `medhelm summarize` "
                   "to rank by HELM's rule (docs/metrics.md).")
    cells = rel.cell_rows[rel.cell_rows["benchmark"] == bench]
    shown = cells.assign(CI=[_ci(lo, hi) for lo, hi in zip(cells["ci_low"], cells["ci_high"])],
                         MDD=_mdds(cfg, rel, bench, cells),
                         **{name: [values.get((m, d), {}).get(name) for m, d in zip(cells["model"], cells["deployment"])]
                            for name in names})
    shown = safe_frame(shown[["model", "deployment", "value", "CI", *names, "MDD", "n_instances", "n_unscored",
                              "n_runs", "suites"]])
    st.dataframe(shown.sort_values("value", ascending=bool(info["lower_is_better"])), hide_index=True,
                 width="stretch", key="bench_cells", column_config={
                     "value": st.column_config.NumberColumn(f"Score ({info['main_metric']})", format="%.3f"),
                     **{name: st.column_config.NumberColumn(name, format="%.3f", help=_BESIDE_HELP)
                        for name in names},
                     "n_unscored": st.column_config.NumberColumn("Unscored"),
                     "MDD": st.column_config.NumberColumn(
                         "MDD (80% power)", format="%.3f",
                         help="minimum detectable difference: the smallest true difference from another model a "
                              "paired test on this many instances detects with 80% power at alpha 0.05 (errors "
                              "assumed independent); smaller differences may be real but this suite cannot tell "
                              "(docs/compare.md)")})
    runs = board_data.runs(cfg.store, rel.name, rel.meta.get("created_at", ""), bench)
    if runs.empty:
        return
    st.subheader("Instances")
    labels = {int(r.run_id): visible(f"{r.model} [{r.deployment}] — {r.stratum} ({r.suite})")
              for r in runs.itertuples()}
    run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="bench_run")
    run = runs.set_index("run_id").loc[run_id]
    if redacted or bool(run["redacted"]):
        st.info("Instance text is hidden: " + ("redacted mode." if redacted else "this deployment is redacted."))
        return
    page = st.number_input("Page", min_value=1, value=1, step=1, key="bench_page")
    items = board_data.instances(cfg.store, run_id, (int(page) - 1) * PAGE_SIZE, PAGE_SIZE, cfg.principal)
    if not items:
        st.info("No instance records for this run (imported aggregates).")
    for item in items:
        value = "unscored" if item["main_value"] is None else f"{item['main_value']:.3f}"
        # the label renders Markdown: the id is escaped; the error text is shown inside, as plain text
        with st.expander(f"{literal(item['instance_id'], 80)} · {value}" + (" · error" if item["error"] else "")):
            show_instance(item)


def show_instance(item: dict, *, with_prompt: bool = True) -> None:
    if item.get("error"):
        st.markdown("**Error**")
        st.text(no_addresses(item["error"]))
    if with_prompt:
        st.markdown("**Prompt**")
        st.text(item["prompt"] or "(not stored)")
        st.markdown("**References**")
        st.text("\n".join(("✓ " if r.get("correct", True) else "✗ ") + r["text"] for r in item["references"]) or "—")
    st.markdown("**Output**")
    st.text(item["output"] if item["output"] is not None else "(no output)")
    st.markdown("**Metrics**")
    st.dataframe(safe_frame(pd.DataFrame([{"stat": k, "value": v} for k, v in sorted(item["stats"].items())])),
                 hide_index=True)
    if item["judgements"]:
        st.markdown("**Judges**")
        st.dataframe(safe_frame(pd.DataFrame([{"judge": j.get("judge"), "criterion": j.get("criterion"), "score": j.get("score"),
                                    "scale": f"{j.get('min_score')}–{j.get('max_score')}", "status": j.get("status"),
                                    "explanation": j.get("explanation")} for j in item["judgements"]])),
                     hide_index=True, width="stretch")


def _ci(low: float | None, high: float | None) -> str:
    return "" if low is None or pd.isna(low) else f"[{low:.3f}, {high:.3f}]"


def _mdds(cfg: Settings, rel: Release, bench: str, cells: pd.DataFrame) -> list[float | None]:
    """Per cell: the MDD at its n from its runs' stored values (numbers only: allowed in redacted mode)."""
    from medhelm.store.trends import single_mdd

    runs = board_data.runs(cfg.store, rel.name, rel.meta.get("created_at", ""), bench)
    out = []
    for model, dep in zip(cells["model"], cells["deployment"]):
        ids = runs[(runs["model"] == model) & (runs["deployment"] == dep)]["run_id"] if len(runs) else []
        values = [board_data.run_values(cfg.store, rel.meta.get("created_at", ""), int(i)).to_numpy() for i in ids]
        out.append(single_mdd(np.concatenate(values))[0] if values else None)
    return out
