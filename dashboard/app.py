"""MedHELM leaderboard (Streamlit). Run it with ``medhelm serve``; settings come from the environment
(see launch.py). Pages: the leaderboard, one benchmark with instance drill-down, two models compared, trends
across releases; for clinicians the blinded Review page, and jury calibration (judges vs judges vs
clinicians). A clinician with no other role gets only those two: the leaderboard (model names) is never loaded.
The session's principal is settled first (signin.py): nothing is read before it, and every read of
instance text goes through the store with it (refused below analyst, audited otherwise)."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling modules, however the app is started

import dataclasses  # noqa: E402

import board_data  # noqa: E402 - after the sys.path line
import page_benchmark  # noqa: E402
import page_compare  # noqa: E402
import page_equity  # noqa: E402
import page_leaderboard  # noqa: E402
import page_calibration  # noqa: E402
import page_review  # noqa: E402
import page_trends  # noqa: E402
import signin  # noqa: E402
from filters import sidebar_filters  # noqa: E402
from medhelm.access import Role  # noqa: E402
from safe_text import literal, no_addresses, visible  # noqa: E402
from medhelm.errors import MedhelmError  # noqa: E402

PAGES = {"Leaderboard": page_leaderboard.render, "Benchmark": page_benchmark.render, "Compare": page_compare.render}
TITLES = {"Leaderboard": "MedHELM leaderboard", "Benchmark": "Benchmark", "Compare": "Compare two models"}
# Pages that never load the leaderboard (no model names): what a clinician-only session may open.
REVIEW_PAGES = {"Review": page_review.render, "Jury calibration": page_calibration.render}
TITLES.update({"Review": "Clinician review", "Jury calibration": "Jury calibration"})
PAGES["Trends"] = page_trends.render  # scores across releases, flagged drops, MDD (aggregates: viewer-level)
TITLES["Trends"] = "Trends across releases"
PAGES["Equity"] = page_equity.render  # per patient subgroup, small cells suppressed (aggregates: viewer-level)
TITLES["Equity"] = "Performance by patient subgroup"

st.set_page_config(page_title="MedHELM leaderboard", layout="wide")
cfg = board_data.settings()
principal = signin.current_principal(cfg.redacted, "MedHELM leaderboard")  # stops here when not signed in
cfg = dataclasses.replace(cfg, principal=principal)
heading = st.empty()  # the page title goes out before any data is read
try:
    known = board_data.releases(cfg.store, principal)
except MedhelmError as err:
    st.error(literal(no_addresses(err), 500))  # escaped: an error may quote a store's data; no server addresses
    st.stop()
if not known:
    st.warning("The results store holds no release yet: run `medhelm summarize --suites ...`.")
    st.stop()
names = [r for r, _ in known]
default = names.index(cfg.release) if cfg.release in names else 0
release = st.sidebar.selectbox("Release", names, index=default, format_func=visible, key="release")
offered = (list(PAGES) if principal.role >= Role.VIEWER else []) + \
    [p for p in REVIEW_PAGES if principal.clinician or (p != "Review" and principal.role >= Role.VIEWER)]
page = st.sidebar.radio("Page", offered, key="page")
heading.title(TITLES[page])
signin.sidebar_identity(principal)
if page in REVIEW_PAGES:  # before the leaderboard is loaded: a clinician's session never receives model names
    try:
        REVIEW_PAGES[page](dataclasses.replace(cfg, release=release), release)
    except MedhelmError as err:  # refused, or the audit row could not be written: no text
        st.error(literal(no_addresses(err), 500))
    st.stop()
try:
    rel = board_data.load_release(cfg.store, release, dict(known)[release], principal)
except MedhelmError as err:
    st.error(literal(no_addresses(err), 500))
    st.stop()
redacted = cfg.redacted or rel.meta.get("redact") == "1" or principal.role < Role.ANALYST
if redacted:
    st.sidebar.info("Redacted mode: aggregates only, no instance text." if principal.role >= Role.ANALYST
                    or not signin.auth_enabled() else "Your role (viewer) shows aggregates only, no instance text.")
view = sidebar_filters(rel)
try:
    PAGES[page](cfg, rel, view, redacted)
except MedhelmError as err:  # refused (role, release), or the audit row could not be written: no text
    st.error(str(err))
