"""A crafted store never shows Streamlit's generic error box (issue 52, item 7): a run's value vector of the
wrong length or not made of float64s, ids that are not a list, a record nested 200,000 deep or of another
shape are each one line on the page naming the release (and run, instance) and what is wrong — the real
app under AppTest, on a real summarized store edited as an attacker with write access would."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medhelm.access.roles import Principal
from medhelm.errors import ConfigError
from medhelm.store import open_store, read
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")
BENCH = "mtsamples_replicate"
DEEP = "[" * 200_000 + "]" * 200_000


@pytest.fixture(autouse=True)
def _clean_env(dashboard_env):  # noqa: ANN202 - the dashboard's variables are put back after each test
    yield


@pytest.fixture(scope="module")
def summarized(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("crafted")
    write_suite(out, "local", default_models(2), catalogue(6), 6)
    assert run_cli("summarize", "--suites", "local", "-o", str(out), "--bootstrap", "20")[0] == 0
    return out / "results.sqlite"


CRAFTS = {
    "value vector one short": ("UPDATE runs SET value_blob = substr(value_blob, 1, length(value_blob) - 8) "
                               "WHERE benchmark = ?", "numbers for"),
    "value vector of 7 bytes": ("UPDATE runs SET value_blob = X'00000000000000' WHERE benchmark = ?",
                                "not a vector of numbers"),
    "ids not a list": ("UPDATE runs SET value_ids = '{\"a\": 1}' WHERE benchmark = ?", "numbers for no list of"),
    "ids nested 200k deep": (f"UPDATE runs SET value_ids = '{DEEP}' WHERE benchmark = ?", "nested too deeply"),
    "record nested 200k deep": (f"UPDATE instances SET record_json = '{{\"a\": {DEEP}}}' WHERE run_id IN "
                                "(SELECT run_id FROM runs WHERE benchmark = ?)", "nested too deeply"),
    "record of another shape": ("UPDATE instances SET record_json = '{\"prompt\": 5, \"completion\": [1]}' "
                                "WHERE run_id IN (SELECT run_id FROM runs WHERE benchmark = ?)", "shape a run writes"),
    "record not JSON": ("UPDATE instances SET record_json = '{\"a\": ' WHERE run_id IN "
                        "(SELECT run_id FROM runs WHERE benchmark = ?)", "not JSON"),
}


@pytest.mark.parametrize("craft", sorted(CRAFTS))
def test_a_crafted_store_is_one_line_on_the_page_naming_the_release(summarized, tmp_path, craft):
    sql, says = CRAFTS[craft]
    store = tmp_path / "results.sqlite"
    shutil.copy(summarized, store)
    with sqlite3.connect(store) as conn:
        assert conn.execute(sql, (BENCH,)).rowcount > 0
    os.environ["MEDHELM_STORE"] = str(store)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.sidebar.radio(key="page").set_value("Benchmark").run()
    at.selectbox(key="bench_page_benchmark").set_value(BENCH).run()
    assert not at.exception, [e.value for e in at.exception]  # never Streamlit's generic box
    errors = [e.value for e in at.error]
    assert len(errors) == 1, errors
    line = errors[0]
    assert "\n" not in line and "release 'local'" in line and says in line, line
    # the other benchmarks' pages are still shown
    at.selectbox(key="bench_page_benchmark").set_value(next(b.name for b in catalogue(6) if b.name != BENCH)).run()
    assert not at.exception and not at.error


def test_the_readers_name_release_run_and_instance(summarized, tmp_path):
    store = tmp_path / "results.sqlite"
    shutil.copy(summarized, store)
    with sqlite3.connect(store) as conn:
        conn.execute(CRAFTS["record nested 200k deep"][0], (BENCH,))
        conn.execute(CRAFTS["value vector one short"][0], (BENCH,))
    with open_store(store) as s:
        run_id, suite, run_name = s.query("SELECT run_id, suite, run_name FROM runs WHERE benchmark = ? "
                                          "ORDER BY run_id LIMIT 1", (BENCH,))[0]
        with pytest.raises(ConfigError) as err:
            read.run_values(s, run_id)
        assert f"release 'local', run '{suite}/{run_name}'" in str(err.value)
        with pytest.raises(ConfigError) as err:
            read.instances_page(s, run_id, principal=Principal.local(source="test"), limit=2)
        assert f"run '{suite}/{run_name}', instance '" in str(err.value) and "nested too deeply" in str(err.value)
