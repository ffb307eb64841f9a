"""Clinician review: a blinded sample of a jury-scored benchmark's answers, scored on the benchmark's rubric.

Blind by construction: the page renders only what ``store.review.ReviewItem`` makes public — an opaque
item id, the question, the answer, the reference and the rubric's criteria. It never reads the
leaderboard, never names a model, deployment, run or instance, and its widget keys carry only the
opaque id (keys reach the browser). The items' places (run, instance) stay in the server-side session
state, which Streamlit never sends. Showing a sample and saving a rating go through the store with the
session's principal: refused without the clinician grant (audited), audited when shown and when saved.
Data is text: answers and questions are ``st.text``; labels built from data pass ``literal``.
"""

from __future__ import annotations

import streamlit as st

from board_data import Settings
from medhelm.errors import MedhelmError
from medhelm.store import open_store, review
from safe_text import literal, one_line  # selectbox options are plain text; labels are Markdown

DEFAULT_SAMPLE = 10


def render(cfg: Settings, release: str) -> None:
    principal = cfg.principal
    if principal is None or not principal.clinician:
        st.info("The Review page is for clinicians: ask your administrator for the clinician role.")
        return
    with open_store(cfg.store) as store:
        benchmarks = review.jury_benchmarks(store, release, principal)
    if not benchmarks:
        st.info("This release has no jury-scored (open-ended) benchmark to review.")
        return
    labels = {b["benchmark"]: one_line(f"{b['display_name'] or b['benchmark']} ({b['benchmark']})", 200)
              for b in benchmarks}
    bench = st.selectbox("Benchmark", list(labels), format_func=labels.get, key="review_benchmark")
    size = int(st.number_input("Sample size", min_value=1, max_value=review.MAX_SAMPLE, value=DEFAULT_SAMPLE,
                               step=1, key="review_size"))
    st.caption("Answers are shown in random order without the name of the model that wrote them. Score each "
               "criterion on the rubric's scale; your ratings are stored with your name and the time.")
    state = st.session_state
    wanted = (release, bench, size)
    new = st.button("New sample", key="review_new")
    if state.get("review_for") != wanted or new:
        with open_store(cfg.store) as store:
            state["review_items"] = review.sample(store, principal, release, bench, n=size)
        state["review_for"], state["review_pos"], state["review_saved"] = wanted, 0, 0
    items = state["review_items"]
    pos = state["review_pos"]
    if not items:
        st.success("Nothing left to review here: you have rated every answer of this benchmark.")
        return
    if pos >= len(items):
        st.success(f"Sample done: {state['review_saved']} answer(s) rated. Press “New sample” for more.")
        return
    item = items[pos]
    st.progress(pos / len(items), text=f"Item {pos + 1} of {len(items)} · {item.item}")
    st.markdown("**Question / input**")
    st.text(item.question)
    st.markdown("**Answer to rate**")
    st.text(item.answer)
    if any(r.strip() for r in item.references):
        with st.expander("Reference answer"):
            st.text("\n\n".join(r for r in item.references if r.strip()))
    with st.form(key=f"review_form_{item.item}"):
        scores = {}
        for i, c in enumerate(item.criteria):
            label = literal(c.name) + (f" — {literal(c.description, 400)}" if c.description else "")
            options = list(range(int(c.min_score), int(c.max_score) + 1))
            scores[c.name] = st.radio(label, options, index=None, horizontal=True, key=f"review_{item.item}_{i}",
                                      help=f"{int(c.min_score)} = very poor … {int(c.max_score)} = excellent")
        cols = st.columns(2)
        save = cols[0].form_submit_button("Save ratings", type="primary")
        skip = cols[1].form_submit_button("Skip")
    if skip:
        state["review_pos"] = pos + 1
        st.rerun()
    if save:
        missing = [c.name for c in item.criteria if scores.get(c.name) is None]
        if missing:
            st.warning("Score every criterion before saving (missing: " + literal(", ".join(missing)) + ").")
            return
        try:
            with open_store(cfg.store) as store:
                review.rate(store, principal, item, scores)
        except MedhelmError as err:
            st.error(literal(err, 300))
            return
        state["review_pos"], state["review_saved"] = pos + 1, state["review_saved"] + 1
        st.rerun()
