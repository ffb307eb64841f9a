"""Sidebar filters: category, access level and suite narrow the table; win rates are recomputed on it."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from safe_text import visible

from board_data import Release
from medhelm.store.tables import CellTable


@dataclass(frozen=True)
class View:
    table: CellTable  # the filtered cells
    suites: tuple[str, ...]


def sidebar_filters(rel: Release) -> View:
    cols = rel.cells.columns
    categories = sorted({c.category or "Unclassified" for c in cols})
    access = sorted({c.access or "unknown" for c in cols})
    suites = sorted({s for v in rel.models.get("suites", []) for s in str(v).split(",") if s})
    st.sidebar.markdown("**Filters**")  # widget keys per release: options differ between releases
    pick_cat = st.sidebar.multiselect("Category", categories, default=categories, format_func=visible,
                                      key=f"f_category_{rel.name}")
    pick_access = st.sidebar.multiselect("Access", access, default=access, format_func=visible,
                                         key=f"f_access_{rel.name}")
    pick_suites = st.sidebar.multiselect("Suite", suites, default=suites, format_func=visible,
                                         key=f"f_suite_{rel.name}")
    keep_cols = [(c.category or "Unclassified") in pick_cat and (c.access or "unknown") in pick_access for c in cols]
    row_suites = {(m, d): set(str(s).split(",")) for m, d, s in
                  zip(rel.models["model"], rel.models["deployment"], rel.models["suites"])} if len(rel.models) else {}
    keep_rows = [bool(row_suites.get(r, set()) & set(pick_suites)) for r in rel.cells.rows]
    return View(rel.cells.select(columns=keep_cols, rows=keep_rows), tuple(pick_suites))
