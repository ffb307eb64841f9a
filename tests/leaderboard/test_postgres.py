"""The PostgreSQL store gives the same leaderboard as SQLite (same schema, same queries, same math)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm.access import Principal
from medhelm.store import Store, open_store, read
from tests.leaderboard.helpers import run_cli


def _tables(store: Store, release: str) -> dict:
    return {"leaderboard": read.stored_leaderboard(store, release), "cells": read.cells(store, release),
            "models": read.models(store, release), "benchmarks": read.benchmarks(store, release),
            "groups": store.query_dicts("SELECT * FROM group_scores WHERE release = ? ORDER BY level, grp, model",
                                        (release,))}


def test_sqlite_and_postgres_stores_give_the_same_leaderboard(small_output: Path, postgres_url: str) -> None:
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(small_output), "--bootstrap", "200",
                           "--store", postgres_url)
    assert code == 0, err
    with open_store(small_output / "results.sqlite") as lite, open_store(postgres_url) as pg:
        a, b = _tables(lite, "local"), _tables(pg, "local")
        assert a == b
        assert len(a["leaderboard"]) == 4 and len(a["cells"]) == 24
        run_id = read.runs(pg, "local", a["cells"][0]["benchmark"])[0]["run_id"]
        page = read.instances_page(pg, run_id, principal=Principal.local(), limit=2)
        assert page and page[0]["prompt"].startswith("Synthetic question")
        # one release of that name (the session's database is shared: other tests' releases may be there too)
        assert pg.releases().count("local") == 1
    # summarising again replaces the release (no duplicate keys, same numbers)
    assert run_cli("summarize", "--suites", "local", "-o", str(small_output), "--bootstrap", "200",
                   "--store", postgres_url)[0] == 0
    with open_store(postgres_url) as pg:
        assert _tables(pg, "local") == b


def test_dashboard_reads_a_postgres_store(small_output: Path, postgres_url: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    assert run_cli("summarize", "--suites", "local", "-o", str(small_output), "--bootstrap", "200",
                   "--store", postgres_url)[0] == 0
    monkeypatch.setenv("MEDHELM_STORE", postgres_url)
    at = AppTest.from_file(str(Path(__file__).parents[2] / "dashboard" / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert at.dataframe[0].value["Model"].tolist() == ["org/model-03", "org/model-02", "org/model-01",
                                                        "org/model-00"]
