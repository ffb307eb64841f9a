"""The leaderboard: mean win rate with CIs, category heatmap, cost vs win rate, benchmark matrix."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import streamlit as st

from board_data import Release, Settings
from filters import View
from safe_frames import safe_frame
from safe_text import literal
from medhelm.baselines import is_baseline
from medhelm.store.costs import cost_per_point, total_cost
from medhelm.store.intervals import METHOD
from medhelm.store.tables import CellTable, group_scores, leaderboard

BASELINE_MARK = " (baseline)"
BOARD_FORMATS = {"Mean win rate": "{:.3f}", "Mean score": "{:.3f}", "Cost (USD)": "${:.2f}", "Candidate USD": "${:.2f}",
                 "Jury USD": "${:.2f}", "USD per point": "${:.4f}", "Prompt tokens": "{:,.0f}",
                 "Output tokens": "{:,.0f}", "Inference s": "{:.1f}", "s / instance": "{:.3f}"}

if TYPE_CHECKING:  # pragma: no cover
    import altair as alt


def render(cfg: Settings, rel: Release, view: View, redacted: bool) -> None:
    table = view.table
    n_base = sum(is_baseline(m) for m, _ in table.rows)
    rows = f"{len(table.rows) - n_base} models" + (f" + {n_base} baselines" if n_base else "")
    st.caption(f"Release **{literal(rel.name, 80)}** · {rows} · {len(table.columns)} benchmarks · "
               f"{METHOD} ({literal(rel.meta.get('replicates', '?'), 12)} replicates, seed "
               f"{literal(rel.meta.get('seed', '?'), 20)}) · win rate: ties count half")
    if not table.rows or not table.columns:
        st.warning("Nothing to rank with these filters.")
        return
    rank_baselines = st.sidebar.checkbox(
        "Rank baselines with the models", value=rel.meta.get("rank_baselines") == "1", key=f"rank_base_{rel.name}",
        help="Reference baselines (baseline/…) answer without a model. Off: they are compared with the models "
             "(their win rate says where they would stand) but not ranked, and the models' win rates ignore them.")
    board = leaderboard_frame(rel, view, rank_baselines=rank_baselines)
    for note in board_notes(board, rank_baselines):
        st.info(note)
    shown = filled(board)
    numeric = {c: f for c, f in BOARD_FORMATS.items() if c in shown and pd.api.types.is_numeric_dtype(shown[c])}
    st.dataframe(safe_frame(shown).style.format(numeric), hide_index=True, width="stretch", key="leaderboard",
                 column_config={
        "Mean win rate": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.3f"),
        "Candidate USD": st.column_config.Column(help="the model's own requests"),
        "Jury USD": st.column_config.Column(help="its judges' tokens, same price table")})
    left, right = st.columns(2)
    with left:
        st.subheader("Categories (macro average)")
        if any(g.value is not None for g in group_scores(table, "category")):
            st.altair_chart(_heatmap(table), width="stretch")
        else:
            st.info("No benchmark on this page is placed in the MedHELM taxonomy: give its YAML `category:` and "
                    "`subcategory:` (see `medhelm list`) to see the category heatmap.")
    with right:
        st.subheader("Cost vs mean win rate")
        priced = board.dropna(subset=["Cost (USD)", "Mean win rate"])
        if priced.empty:
            st.info("No point to plot: a point needs a price (`medhelm summarize --prices prices.yaml`) and a "
                    "win rate (two or more models or baselines on a benchmark).")
        else:
            st.altair_chart(_scatter(priced), width="stretch")
    st.subheader("Benchmarks (main metric; jury scores on 0–1)")
    custom = custom_prompts(rel.meta)
    st.dataframe(safe_frame(_matrix(view, {b for b, _, _ in custom}).map(
        lambda v: "not run" if np.isnan(v) else f"{v:.3f}")), width="stretch", key="matrix")
    if custom:
        st.caption(literal("† prompt differs from the benchmark's default (prompt_path=): " + "; ".join(
            f"{b} × {m} [{d}]" for b, m, d in custom) + ". Not comparable with default-prompt results.", 2000))


def leaderboard_frame(rel: Release, view: View, *, rank_baselines: bool = False) -> pd.DataFrame:
    models = rel.models.set_index(["model", "deployment"]) if len(rel.models) else pd.DataFrame()
    metadata = _meta_json(rel.meta, "model_metadata")
    reasoning = _meta_json(rel.meta, "reasoning_tokens")  # "model|deployment" -> [own, judges'], when any
    out = []
    versus = any(is_baseline(m) or is_baseline(d) for m, d in view.table.rows)
    for r in leaderboard(view.table, rank_baselines=rank_baselines):
        m = models.loc[(r.model, r.deployment)] if (r.model, r.deployment) in models.index else {}
        about = metadata.get(r.model) or {}
        own, jury = _num(m.get("cost_usd")), _num(m.get("jury_cost_usd"))
        cost = total_cost(own, jury)
        rank = str(r.rank) if r.rank is not None else "baseline" if r.baseline else "–"
        out.append({"Rank": rank, "Model": r.model + (BASELINE_MARK if r.baseline else ""), "Deployment": r.deployment, "Mean win rate": r.win_rate,
                    "Win rate 95% CI": _ci(r.win_rate_low, r.win_rate_high, "{:.2f}"),
                    # a model's standing against the baselines (beats k of n, 95% CI), the CLI summary's text
                    **({"Vs baselines": r.vs_baselines() or "–"} if versus else {}),
                    "Rank 95% CI": _ci(r.rank_low, r.rank_high, "{:.0f}"), "Mean score": r.mean_score,
                    "Benchmarks": r.n_benchmarks, "Cost (USD)": cost, "Candidate USD": own, "Jury USD": jury,
                    "USD per point": cost_per_point(cost, r.mean_score),
                    "Prompt tokens": _int(m.get("prompt_tokens")), "Output tokens": _int(m.get("completion_tokens")),
                    "Inference s": _num(m.get("inference_s")),
                    "s / instance": _per(m.get("inference_s"), m.get("n_instances")),
                    # of the output tokens, a reasoning model's thinking (priced apart: reasoning_per_million)
                    **({"Reasoning tokens": _reasoning(reasoning.get(f"{r.model}|{r.deployment}"))}
                       if reasoning else {}),
                    **({"Display name": about.get("display_name"), "Creator": about.get("creator_organization_name"),
                        "Access": about.get("access"), "Released": about.get("release_date")} if metadata else {})})
    return pd.DataFrame(out)


def _reasoning(entry: list | None) -> int | str | None:
    """The model's own thinking tokens; "≈N" when (some of) the count is our estimate (the provider states
    none: Anthropic, Bedrock Converse, vLLM's parser; inference/anthropic.py)."""
    count = _int((entry or [None])[0])
    estimated = bool(entry and len(entry) > 2 and entry[2])
    return f"≈{count:,}" if estimated and count is not None else count


def _meta_json(meta: dict, key: str) -> dict:
    """A JSON object summarize kept in the release's meta: ``model_metadata`` (HELM's model_metadata.yaml:
    model -> display name, creator, access, release date) or ``reasoning_tokens``; {} when absent."""
    import json

    try:
        value = json.loads(meta.get(key) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def filled(board: pd.DataFrame) -> pd.DataFrame:
    """The table with each missing number shown as "–": the grid draws a missing number as "None", and
    neither its column formats nor a Styler's ``na_rep`` change that. A column with a gap becomes text in its
    format (it then sorts as text); a full column stays numeric. The win-rate bar draws a gap as empty."""
    out = board.copy()
    for col, fmt in BOARD_FORMATS.items():
        if col in out and col != "Mean win rate" and out[col].isna().any():
            out[col] = [("–" if v is None or (isinstance(v, float) and np.isnan(v)) else fmt.format(v))
                        for v in out[col]]
    return out


def board_notes(board: pd.DataFrame, rank_baselines: bool = False) -> list[str]:
    """What a reader needs to read the table: why a win rate or rank is missing, what a baseline is."""
    if not len(board):
        return []
    base = board["Model"].str.endswith(BASELINE_MARK)
    models = board[~base]
    notes = []
    if len(models) == 1 and not rank_baselines:
        notes.append("Win rates compare models benchmark by benchmark, so they need two or more: with one model "
                     "on this page there is nothing for it to win against, hence no win rate or rank. "
                     + ("\"Vs baselines\" says where it stands: how many of the baselines it beats head to head "
                        "(better on more of their shared benchmarks than worse). " if "Vs baselines" in board else "")
                     + "Add a model, or switch on \"Rank baselines with the models\" in the sidebar to rank it "
                       "against them.")
    elif models["Rank"].eq("–").any():
        notes.append("A model marked – shares no benchmark with another row: win rates need two on a benchmark.")
    if base.any():
        notes.append("Rows marked (baseline) are zero-cost reference answers (a random or the majority answer, an "
                     "empty answer, the input copied back), scored by the same metrics: a model should beat them. "
                     + ("They are ranked with the models here (sidebar switch)." if rank_baselines else
                        "Their win rate says where they would stand against the models; they are not ranked and do "
                        "not change the models' win rates (sidebar switch)."))
    return notes


def _heatmap(table: CellTable) -> alt.Chart:
    import altair as alt  # imported after the table is on its way: a slow import on a cold start

    scores = pd.DataFrame([{"Model": g.model, "Category": g.group, "Score": g.value, "CI": _ci(g.ci_low, g.ci_high,
                                                                                              "{:.2f}")}
                           for g in group_scores(table, "category") if g.value is not None])
    if scores.empty:
        return alt.Chart(pd.DataFrame({"x": []})).mark_rect()
    base = alt.Chart(scores).encode(x=alt.X("Category:N", title=None, axis=alt.Axis(labelAngle=-20, labelLimit=220)),
                                    y=alt.Y("Model:N", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=260)))
    rect = base.mark_rect().encode(color=alt.Color("Score:Q", scale=alt.Scale(scheme="blues", domain=[0, 1])),
                                   tooltip=["Model", "Category", alt.Tooltip("Score:Q", format=".3f"), "CI"])
    text = base.mark_text(fontSize=11).encode(text=alt.Text("Score:Q", format=".2f"))
    return (rect + text).properties(height=max(200, 40 * scores["Model"].nunique()))


def _scatter(priced: pd.DataFrame) -> alt.Chart:
    import altair as alt

    kind = np.where(priced["Model"].str.endswith(BASELINE_MARK), "baseline (zero cost)", "model")
    return alt.Chart(priced.assign(Kind=kind)).mark_circle(size=90).encode(
        x=alt.X("Cost (USD):Q", scale=alt.Scale(zero=False)), y=alt.Y("Mean win rate:Q", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("Kind:N", legend=alt.Legend(orient="bottom", title=None)),
        tooltip=["Model", "Deployment", alt.Tooltip("Cost (USD):Q", format="$.2f"),
                 alt.Tooltip("Mean win rate:Q", format=".3f")]).properties(height=320)


def custom_prompts(meta: dict) -> list[tuple[str, str, str]]:
    """(benchmark, model, deployment) cells whose runs used a non-default prompt (summarize records them)."""
    import json

    try:
        return [tuple(x) for x in json.loads(meta.get("custom_prompts") or "[]")]
    except ValueError:
        return []


def _matrix(view: View, custom: set[str] = frozenset()) -> pd.DataFrame:
    t = view.table
    names = [f"{r[0]} [{r[1]}]" for r in t.rows]
    columns = [c.display_name + (" †" if c.benchmark in custom else "") for c in t.columns]
    return pd.DataFrame(t.values, index=names, columns=columns)


def _ci(low: float | None, high: float | None, fmt: str) -> str:
    return "–" if low is None or high is None else f"[{fmt.format(low)}, {fmt.format(high)}]"


def _num(v: object) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)  # type: ignore[arg-type]


def _per(total: object, count: object) -> float | None:
    t, n = _num(total), _num(count)
    return None if t is None or not n else t / n


def _int(v: object) -> int | None:
    n = _num(v)
    return None if n is None else int(n)
