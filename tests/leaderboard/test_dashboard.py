"""Every page of the Streamlit app under AppTest (real script, real store, no browser)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medhelm.store import open_store, read
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")


def _app(store: Path | str, **env: str) -> AppTest:
    os.environ["MEDHELM_STORE"] = str(store)
    for key in ("MEDHELM_RELEASE", "MEDHELM_REDACTED"):
        os.environ.pop(key, None)
    os.environ.update(env)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture(autouse=True)
def _clean_env(dashboard_env):  # noqa: ANN202 - the dashboard's variables are put back after each test
    yield


@pytest.fixture(scope="module")
def priced_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dash")
    models = default_models(3)
    write_suite(out, "local", models, catalogue(6), 15)
    prices = out / "prices.yaml"
    prices.write_text("prices:\n" + "".join(f"  - deployment: {m.deployment}\n    input_per_million: {i + 1}\n"
                                            f"    output_per_million: {2 * (i + 1)}\n" for i, m in enumerate(models)))
    assert run_cli("summarize", "--suites", "local", "-o", str(out), "--bootstrap", "100",
                   "--prices", str(prices))[0] == 0
    return out


def test_leaderboard_page_table_heatmap_scatter_and_matrix(priced_output: Path) -> None:
    at = _app(priced_output / "results.sqlite")
    assert at.title[0].value == "MedHELM leaderboard"
    board = at.dataframe[0].value
    assert board["Model"].tolist() == ["org/model-02", "org/model-01", "org/model-00"]
    with open_store(priced_output / "results.sqlite") as store:
        stored = read.stored_leaderboard(store, "local")
    assert board["Mean win rate"].tolist() == pytest.approx([r["win_rate"] for r in stored])
    assert board["Win rate 95% CI"].str.match(r"^\[\d\.\d\d, \d\.\d\d\]$").all()
    assert board["Cost (USD)"].notna().all() and board["USD per point"].notna().all()
    assert board["s / instance"].tolist() == pytest.approx([0.05] * 3)  # synthetic latency per request
    assert len(at.get("vega_lite_chart")) == 2  # category heatmap + cost scatter
    matrix = at.dataframe[1].value
    assert matrix.shape == (3, 6)
    assert "No prices" not in [i.value for i in at.info]


def test_filters_recompute_win_rates_on_the_selected_benchmarks(priced_output: Path) -> None:
    at = _app(priced_output / "results.sqlite")
    access = at.sidebar.multiselect(key="f_access_local")
    assert set(access.value) == {"public", "private", "gated"}
    access.set_value(["private"]).run()
    assert not at.exception
    assert at.dataframe[0].value["Benchmarks"].tolist() == [1, 1, 1]  # CLEAR is the only private one here
    assert at.dataframe[1].value.columns.tolist() == ["CLEAR"]
    at.sidebar.multiselect(key="f_access_local").set_value([]).run()
    assert "Nothing to rank with these filters." in [w.value for w in at.warning]


def test_benchmark_page_drills_down_to_prompt_output_references_and_judges(priced_output: Path) -> None:
    at = _app(priced_output / "results.sqlite")
    at.sidebar.radio(key="page").set_value("Benchmark").run()
    at.selectbox(key="bench_page_benchmark").set_value("mtsamples_replicate").run()
    assert not at.exception
    cells = at.dataframe[0].value
    assert len(cells) == 3 and cells["CI"].str.startswith("[").all()
    assert len(at.expander) == 10  # one page of instances
    texts = [t.value for t in at.expander[0].text]
    assert texts[0].startswith("Synthetic question 0 for mtsamples_replicate")  # prompt
    assert texts[1].startswith("✓ B")  # references
    assert texts[2] == "A synthetic clinical answer number 0."  # output
    judges = at.expander[0].dataframe[1].value
    assert judges["judge"].tolist() == ["local/judge-a", "local/judge-b", "local/judge-c"]
    assert judges["explanation"].str.contains("found the answer").all()
    metrics = at.expander[0].dataframe[0].value
    assert "jury_score_normalized" in metrics["stat"].tolist()
    at.number_input(key="bench_page").set_value(2).run()
    assert at.expander[0].label.startswith("id00010")


def test_compare_page_counts_paired_outcomes_and_shows_both_answers(priced_output: Path) -> None:
    at = _app(priced_output / "results.sqlite")
    at.sidebar.radio(key="page").set_value("Compare").run()
    at.selectbox(key="bench_page_compare").set_value("clear").run()
    assert not at.exception
    shared, a_better, ties, b_better = (int(m.value) for m in at.metric)
    assert shared == 15 and a_better + ties + b_better == 15
    with open_store(priced_output / "results.sqlite") as store:
        runs = read.runs(store, "local", "clear")
        ids_a, a = read.run_values(store, runs[0]["run_id"])
        ids_b, b = read.run_values(store, runs[1]["run_id"])
    assert ids_a == ids_b
    assert (a_better, ties, b_better) == (int((a > b).sum()), int((a == b).sum()), int((a < b).sum()))
    assert len(at.expander) == 10
    prompt, out_a, out_b = (t.value for t in at.expander[0].text)
    assert prompt.startswith("Synthetic question 0 for clear")
    # the synthetic model answers "B" (the reference) exactly when it scores 1
    assert (out_a, out_b) == ("B" if a[0] == 1 else "A", "B" if b[0] == 1 else "A")


def test_redacted_mode_shows_aggregates_only(priced_output: Path) -> None:
    at = _app(priced_output / "results.sqlite", MEDHELM_REDACTED="1")
    assert "Redacted mode" in at.sidebar.info[0].value
    assert len(at.dataframe[0].value) == 3  # the leaderboard is still there
    at.sidebar.radio(key="page").set_value("Benchmark").run()
    assert len(at.expander) == 0 and any("hidden" in i.value for i in at.info)
    at.sidebar.radio(key="page").set_value("Compare").run()
    assert len(at.expander) == 0 and int(at.metric[0].value) == 15  # scores only


def test_redacted_export_bundle_opens_redacted(priced_output: Path, tmp_path: Path) -> None:
    assert run_cli("export", str(tmp_path / "b"), "--redact", "-o", str(priced_output))[0] == 0
    at = _app(tmp_path / "b" / "results.sqlite")
    assert "Redacted mode" in at.sidebar.info[0].value
    assert at.dataframe[0].value["Model"].tolist() == ["org/model-02", "org/model-01", "org/model-00"]
    at.sidebar.radio(key="page").set_value("Compare").run()
    assert not at.exception and len(at.expander) == 0


def test_release_picker_and_missing_store(priced_output: Path, tmp_path: Path) -> None:
    write_suite(tmp_path, "other", default_models(2), catalogue(2), 5)
    assert run_cli("summarize", "--suites", "other", "-o", str(tmp_path), "--store",
                   str(priced_output / "results.sqlite"), "--bootstrap", "50")[0] == 0
    at = _app(priced_output / "results.sqlite", MEDHELM_RELEASE="local")
    assert at.sidebar.selectbox(key="release").value == "local"
    at.sidebar.selectbox(key="release").set_value("other").run()
    assert len(at.dataframe[0].value) == 2
    at = AppTest.from_file(APP, default_timeout=60)
    os.environ["MEDHELM_STORE"] = str(tmp_path / "nowhere.sqlite")
    at.run()
    assert "no results store here" in at.error[0].value
