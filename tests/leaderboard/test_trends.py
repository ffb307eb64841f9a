"""The Trends page: scores across releases with CIs, the paired change against the previous release with its
flag, and the minimum detectable difference next to each CI — under AppTest (real script, real store) and in
a real browser; aggregates only, so a viewer (redacted mode) sees it too, and names stay text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medhelm.store import open_store
from medhelm.store.paired import minimum_detectable_mcnemar
from medhelm.store.trends import trends
from tests.leaderboard import browser
from tests.leaderboard.compare_helpers import EXACT, JURY, table_pairs, write_run
from tests.leaderboard.helpers import run_cli

APP = Path(__file__).parents[2] / "dashboard" / "app.py"
HOSTILE = "org/**bold** <img src=x onerror=alert(1)> :red[x]"


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Releases r1 -> r2 -> r3: org/a drops on medcalc_bench from r1 to r2 (Armitage & Berry's table: 32/50 ->
    22/50, p = 0.0129) and stays in r3; a model with a hostile name stays flat; aci_bench (jury) flat."""
    out = tmp_path_factory.mktemp("trends")
    a, b = table_pairs(20, 12, 2, 16)
    flat = [1.0, 0.0] * 10
    jury = [0.5, 0.75, 0.25, 1.0, 0.5, 0.0, 0.25, 0.5]
    for suite, exact in (("r1", a), ("r2", b), ("r3", b)):
        write_run(out, suite, EXACT, "org/a", "local/a", exact)
        write_run(out, suite, JURY, "org/a", "local/a", jury)
        write_run(out, suite, EXACT, HOSTILE, "local/h", flat)
        code, _, err = run_cli("summarize", "--suites", suite, "-o", str(out), "--bootstrap", "100")
        assert code == 0, err
    return out


def test_trends_core_by_hand(three: Path):
    with open_store(three / "results.sqlite") as store:
        cells, groups = trends(store, ["r1", "r2", "r3"], replicates=500)
    by = {(c.release, c.model, c.benchmark): c for c in cells}
    first = by[("r1", "org/a", "medcalc_bench")]
    assert (first.previous, first.flag, first.change) == (None, "", None)
    assert first.value == pytest.approx(32 / 50) and first.n_instances == 50
    assert first.mdd == pytest.approx(minimum_detectable_mcnemar(50, 2 * 0.64 * 0.36))  # independent errors
    drop = by[("r2", "org/a", "medcalc_bench")]
    assert (drop.previous, drop.flag) == ("r1", "drop")
    assert drop.change == pytest.approx(-0.2) and round(drop.p_value, 4) == 0.0129
    assert drop.change_low < -0.2 < drop.change_high < 0
    assert drop.mdd == pytest.approx(minimum_detectable_mcnemar(50, 14 / 50))  # paired: 14 discordant of 50
    assert drop.mdd_basis == "paired with the previous release"
    same = by[("r3", "org/a", "medcalc_bench")]
    assert (same.previous, same.flag, same.change) == ("r2", "no change", 0.0)
    assert by[("r3", HOSTILE, "medcalc_bench")].flag == "no change"
    assert {(g.release, g.category) for g in groups} >= {("r1", EXACT.category), ("r3", JURY.category)}


def _app(store: Path, **env: str) -> AppTest:
    for key in ("MEDHELM_RELEASE", "MEDHELM_REDACTED"):
        os.environ.pop(key, None)
    os.environ["MEDHELM_STORE"] = str(store)
    os.environ.update(env)
    at = AppTest.from_file(str(APP), default_timeout=90).run()
    assert not at.exception, [e.value for e in at.exception]
    at.sidebar.radio[0].set_value("Trends").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture(autouse=True)
def _clean_env(dashboard_env):  # noqa: ANN202 - the dashboard's variables are put back after each test
    yield


@pytest.mark.parametrize("redacted", ["0", "1"])  # 1: a viewer's session (aggregates only) sees the same
def test_trends_page_marks_the_drop_with_ci_and_mdd(three: Path, redacted: str):
    at = _app(three / "results.sqlite", MEDHELM_REDACTED=redacted)
    assert at.title[0].value == "Trends across releases"
    assert [e.value for e in at.error] == ["1 significant drop(s) against the previous release (marked ▼ below)."]
    assert at.selectbox(key="trend_bench").value == "medcalc_bench"  # opens where something dropped
    table = at.dataframe[0].value
    row = table[(table["Release"] == "r2") & (table["Model"] == "org/a")].iloc[0]
    assert row["Flag"] == "▼ significant drop" and row["vs previous"] == "r1"
    assert row["Change"] == pytest.approx(-0.2) and row["p"] == pytest.approx(0.0129, abs=1e-4)
    assert row["MDD (80% power)"] == pytest.approx(minimum_detectable_mcnemar(50, 14 / 50), abs=1e-4)
    assert row["95% CI"].startswith("[") and row["Change 95% CI"].startswith("[-")
    assert set(table["Release"]) == {"r1", "r2", "r3"}
    drops = at.dataframe[1].value
    assert list(drops["Benchmark"]) == ["medcalc_bench"] and list(drops["Release"]) == ["r2"]
    # the hostile name is a cell value (formula-safe text), never markup anywhere on the page
    assert HOSTILE in set(table["Model"])
    markdown = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "<img" not in markdown and "**bold**" not in markdown
    at.radio(key="trend_level").set_value("Category").run()
    assert not at.exception
    groups = at.dataframe[0].value
    assert {"r1", "r2", "r3"} == set(groups["Release"]) and groups["95% CI"].str.startswith("[").all()


def test_trends_page_ends_at_the_picked_release_and_shows_fewer(three: Path):
    at = _app(three / "results.sqlite", MEDHELM_RELEASE="r2")
    at.selectbox(key="trend_bench").set_value("medcalc_bench").run()
    assert set(at.dataframe[0].value["Release"]) == {"r1", "r2"}
    at.slider(key="trend_n").set_value(1).run()
    table = at.dataframe[0].value
    assert set(table["Release"]) == {"r2"} and set(table["Flag"]) == {"first release shown"}
    assert [e.value for e in at.success]  # no drop among what is shown


@pytest.mark.slow
def test_trends_page_in_a_real_browser(three: Path, tmp_path: Path):
    why = browser.missing_tools()
    if why:
        pytest.skip(why)
    shot = tmp_path / "trends.png"
    with browser.running_app(str(three / "results.sqlite"), app=APP) as url:
        env = {**os.environ, "NODE_PATH": str(browser.NODE_CACHE / "node_modules"), "CHROMIUM": browser.CHROMIUM}
        done = subprocess.run(["node", str(Path(__file__).with_name("browser_trends.js")), url, str(shot), "300000"],
                              capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "1 significant drop(s) against the previous release" in seen["text"]
    assert "MDD = the smallest difference" in seen["text"]
    assert seen["charts"] == 1 and seen["tables"] == 2 and seen["chart_box"]["height"] > 200
    assert HOSTILE in seen["text"]  # the hostile model name shows as the characters it is made of
    assert seen["injected"] == 0  # and made no image and no bold text
    assert seen["violations"] == 0, seen.get("csp")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):
        Path(os.environ["MEDHELM_SCREENSHOT_DIR"], "trends.png").write_bytes(data)


def test_benchmark_page_shows_the_mdd_next_to_each_ci(three: Path):
    os.environ["MEDHELM_STORE"] = str(three / "results.sqlite")
    os.environ["MEDHELM_REDACTED"] = "1"  # numbers only: a viewer sees it
    at = AppTest.from_file(str(APP), default_timeout=90).run()
    at.sidebar.radio[0].set_value("Benchmark").run()
    at.selectbox(key="bench_page_benchmark").set_value("medcalc_bench").run()
    assert not at.exception, [e.value for e in at.exception]
    cells = at.dataframe[0].value.set_index("model")
    # r3 (the newest release): org/a right on 22 of 50, so 2p(1 - p) of pairs discordant if errors are independent
    assert cells.loc["org/a", "MDD"] == pytest.approx(minimum_detectable_mcnemar(50, 2 * 0.44 * 0.56))
    assert cells.loc["org/a", "MDD"] > 0.2  # the 0.2 drop is near what 50 instances can see


@pytest.mark.parametrize("groups,seen", [(["medhelm-viewers"], {"r1", "r2", "r3"}),
                                         (["medhelm-viewers", "oncology-team"], {"r1", "r2", "r3", "private-r3"})])
def test_trends_respect_restricted_releases(three: Path, tmp_path: Path, groups, seen):
    """Signed in (OIDC claims seeded into st.user) as a viewer: a release restricted to other groups is
    neither offered nor part of anyone else's trend; the group it is restricted to sees it."""
    import shutil
    import time

    out = tmp_path / "out"
    shutil.copytree(three, out)
    code, _, err = run_cli("summarize", "--suites", "r3", "--release", "private-r3", "-o", str(out),
                           "--bootstrap", "20")
    assert code == 0, err
    policy = tmp_path / "access.yaml"
    policy.write_text("groups_claim: groups\nroles:\n  viewer: [medhelm-viewers]\n  analyst: []\n  admin: []\n"
                      "default_role: none\nreleases:\n  private-*: [oncology-team]\n")
    for key in ("MEDHELM_RELEASE", "MEDHELM_REDACTED"):
        os.environ.pop(key, None)
    os.environ.update(MEDHELM_STORE=str(out / "results.sqlite"), MEDHELM_AUTH="oidc",
                      MEDHELM_ACCESS_POLICY=str(policy))
    try:
        at = AppTest.from_file(str(APP), default_timeout=90)
        at.user = {"is_logged_in": True, "email": "someone@hospital.example", "groups": groups,
                   "exp": int(time.time()) + 3600}
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert set(at.sidebar.selectbox(key="release").options) == seen
        at.sidebar.radio[0].set_value("Trends").run()
        assert not at.exception, [e.value for e in at.exception]
        assert set(at.dataframe[0].value["Release"]) == seen
    finally:
        for key in ("MEDHELM_AUTH", "MEDHELM_ACCESS_POLICY"):
            os.environ.pop(key, None)
