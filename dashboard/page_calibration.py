"""Jury calibration: how far the LLM jury can be trusted on this hospital's data, measured continuously.

For one jury-scored benchmark, side by side: agreement between the judges (ICC(2,1) with its
F-distribution 95 % CI per criterion, and overall) and agreement of the jury with the clinicians who
rated answers on the Review page (ICC(2,1) of the jury mean vs the clinician mean per criterion, and of
each judge vs the clinician mean, with the judge's bias in rubric points). Aggregates only: no instance
text and no candidate model is read into the page (judges are named: they are the instrument, not the
subject). Computed by ``store.review.agreement`` (the code ``medhelm jury stats``/``calibrate`` use).
Failure semantics: a principal without viewer role or the clinician grant, or a restricted release, is
refused in the data layer (the app shows the one-line error); no ratings yet, or ratings the release's
records no longer match, show "no ratings" — never a 0.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from board_data import Settings
from medhelm.scoring.jury import agreement as ag
from medhelm.store import open_store, review
from safe_frames import safe_frame
from safe_text import literal, one_line  # selectbox options are plain text; labels are Markdown


def _ci(e: ag.Estimate) -> str:
    return str(e) if e.value is not None else "n/a"


@st.cache_data(show_spinner="Computing agreement…", max_entries=16)
def _agreement(store: str, release: str, benchmark: str, stamp: tuple, _principal) -> review.Agreement:  # noqa: ANN001
    with open_store(store) as s:
        return review.agreement(s, _principal, release, benchmark)


def render(cfg: Settings, release: str) -> None:
    principal = cfg.principal
    with open_store(cfg.store) as store:
        benchmarks = review.jury_benchmarks(store, release, principal)
        if not benchmarks:
            st.info("This release has no jury-scored (open-ended) benchmark.")
            return
        labels = {b["benchmark"]: one_line(f"{b['display_name'] or b['benchmark']} ({b['benchmark']})", 200)
                  for b in benchmarks}
        bench = st.selectbox("Benchmark", list(labels), format_func=labels.get, key="calib_benchmark")
        stored = review.stored_ratings(store, release=release, benchmark=bench, latest=False)
        latest = [(len(stored), stored[-1].at if stored else None)]
        created = store.query("SELECT value FROM meta WHERE release = ? AND key = 'created_at'", (release,))
    principal.require_aggregates(release)  # the cache below is shared: ask before reading from it
    a = _agreement(cfg.store, release, bench, (tuple(latest[0]), created[0][0] if created else ""), principal)
    st.caption(f"ICC(2,1) with 95% CI ({ag.ICC2_METHOD}); bias by {ag.BOOTSTRAP_METHOD}. "
               f"Clinician ratings: {a.ratings} from {a.raters} rater(s)"
               + (f", {a.not_blind} by raters not blind to the model" if a.not_blind else "") + ".")
    c = a.clinicians
    by_crit = {x.criterion: x for x in c.criteria} if c is not None else {}
    rows = [{"Criterion": x.criterion, "Judges vs judges": _ci(x.icc2_1),
             "Jury vs clinicians": _ci(by_crit[x.criterion].jury_icc2_1) if x.criterion in by_crit else "no ratings",
             "Rated items": by_crit[x.criterion].targets if x.criterion in by_crit else 0}
            for x in a.judges.criteria]
    rows.append({"Criterion": "all criteria", "Judges vs judges": _ci(a.judges.icc2_1),
                 "Jury vs clinicians": _ci(c.jury_icc2_1) if c is not None else "no ratings",
                 "Rated items": c.targets if c is not None else 0})
    st.subheader("Agreement per criterion (ICC(2,1), 95% CI)")
    st.dataframe(safe_frame(pd.DataFrame(rows)), hide_index=True, width="stretch", key="calib_criteria")
    st.subheader("Per judge")
    judge_rows = []
    vs = {j.judge: j for j in c.judges} if c is not None else {}
    for name in a.judges.judges:
        j = vs.get(name)
        judge_rows.append({"Judge": name, "ICC(2,1) vs clinicians": _ci(j.icc2_1) if j else "no ratings",
                           "Bias vs clinicians (points)": _ci(j.bias) if j else "no ratings"})
    pairs = [{"Judges": f"{p.a} vs {p.b}", "Spearman": _ci(p.spearman)} for p in a.judges.pairs]
    st.dataframe(safe_frame(pd.DataFrame(judge_rows)), hide_index=True, width="stretch", key="calib_judges")
    if pairs:
        st.caption("Judge pairs: Spearman's rho (95% CI, bootstrap)")
        st.dataframe(safe_frame(pd.DataFrame(pairs)), hide_index=True, width="stretch", key="calib_pairs")
    if c is not None and len(c.clinicians) >= 2:
        st.text(f"Clinicians among themselves: ICC(2,1) {_ci(c.clinician_icc2_1)}, ICC(2,k) {_ci(c.clinician_icc2_k)}")
    for note in a.judges.notes:
        st.caption(literal(note))

