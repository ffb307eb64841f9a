"""What the pages read, cached per (store, release, summarize time) so a re-summarised release reloads.

Only pre-aggregated tables are read here; instance pages are fetched on demand, one page at a time,
through ``store.read`` with the session's ``Principal``: a viewer's request for text is refused there
(and audited as denied), an analyst's is audited before the text comes back. Releases restricted to
other groups are neither listed nor loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from medhelm.access import Principal
from medhelm.store import open_store, read
from medhelm.store.tables import CellTable


@dataclass(frozen=True)
class Settings:
    store: str
    release: str | None
    redacted: bool  # the whole app shows aggregates only
    principal: Principal | None = None  # who is looking (set by app.py once signed in)


def settings() -> Settings:
    _serve_metrics()
    return Settings(store=os.environ.get("MEDHELM_STORE", "benchmark_output/results.sqlite"),
                    release=os.environ.get("MEDHELM_RELEASE") or None,
                    redacted=os.environ.get("MEDHELM_REDACTED", "") not in ("", "0", "false"))


_METRICS: list[object] = []  # the /metrics server, started once per process (the module outlives reruns)


def _serve_metrics() -> None:
    """Prometheus /metrics of the dashboard process (audit counters) when MEDHELM_METRICS_PORT is set.
    A port in use is not fatal: the leaderboard matters more than its counters."""
    port = os.environ.get("MEDHELM_METRICS_PORT")
    if _METRICS or not port:
        return
    _METRICS.append(port)
    try:
        from prometheus_client import start_http_server

        start_http_server(int(port), addr=os.environ.get("MEDHELM_METRICS_ADDR", "127.0.0.1"))
    except (OSError, ValueError):
        pass


def releases(store: str, principal: Principal) -> list[tuple[str, str]]:
    """(release, created_at) the principal may see, newest first. Not cached: one small query, and a new
    summarize shows at once."""
    with open_store(store) as s:
        return [(r, read.meta(s, r).get("created_at", "")) for r in s.releases() if principal.may_see_release(r)]


@dataclass(frozen=True)
class Release:
    """Everything the leaderboard pages need for one release, read once."""

    name: str
    meta: dict
    cells: CellTable
    cell_rows: pd.DataFrame  # one row per (benchmark, model, deployment) with value and CI
    benchmarks: pd.DataFrame
    models: pd.DataFrame


def load_release(store: str, release: str, stamp: str, principal: Principal) -> Release:
    principal.require_release(release)
    return _load_release(store, release, stamp)


@st.cache_data(show_spinner="Loading the leaderboard…", max_entries=8)
def _load_release(store: str, release: str, stamp: str) -> Release:  # stamp: created_at, invalidates the cache
    with open_store(store) as s:
        return Release(release, read.meta(s, release), read.load_cells(s, release), pd.DataFrame(read.cells(s, release)),
                       pd.DataFrame(read.benchmarks(s, release)), pd.DataFrame(read.models(s, release)))


@st.cache_data(show_spinner=False, max_entries=64)
def beside(store: str, release: str, stamp: str, benchmark: str) -> tuple[tuple[str, ...], dict, bool]:
    """The columns shown beside a benchmark's main one (its card's: ``lenient_match`` beside HELM's
    ``exact_match``, upstream's ``<name>_accuracy`` beside ``jury_score_normalized``), their values per
    (model, deployment), and whether the release predates the column names (its ``exact_match`` is lenient)."""
    from medhelm.cards import BY_NAME

    card = BY_NAME.get(benchmark)
    names = card.beside if card else ()
    with open_store(store) as s:
        return (names, read.column_values(s, release, benchmark, names, card.main_split if card else "test"),
                read.legacy_names(s, release))


@st.cache_data(show_spinner=False, max_entries=64)
def runs(store: str, release: str, stamp: str, benchmark: str) -> pd.DataFrame:
    with open_store(store) as s:
        return pd.DataFrame(read.runs(s, release, benchmark))


def instances(store: str, run_id: int, offset: int, limit: int, principal: Principal) -> list[dict]:
    """One page of instance text (never cached: each view is audited, and a viewer is refused)."""
    with open_store(store) as s:
        return read.instances_page(s, run_id, principal=principal, offset=offset, limit=limit)


def paired(store: str, left: int, right: int, offset: int, limit: int, principal: Principal
           ) -> list[tuple[dict, dict]]:
    with open_store(store) as s:
        return read.paired_instances(s, left, right, principal=principal, offset=offset, limit=limit)


@st.cache_data(show_spinner=False, max_entries=64)
def run_values(store: str, stamp: str, run_id: int) -> pd.Series:
    """A run's leaderboard values by instance id (numbers only: allowed in redacted mode)."""
    with open_store(store) as s:
        ids, values = read.run_values(s, run_id)
    return pd.Series(values, index=ids, dtype=float)
