"""The app started for real (``streamlit run`` on 127.0.0.1) and driven by headless chromium."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.leaderboard import browser

pytestmark = pytest.mark.slow


def test_leaderboard_renders_in_a_real_browser(small_output: Path, tmp_path: Path) -> None:
    why = browser.missing_tools()
    if why:
        pytest.skip(why)
    shot = tmp_path / "leaderboard.png"
    with browser.running_app(str(small_output / "results.sqlite")) as url:
        timings = browser.screenshot(url, shot)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30_000  # a drawn page (table, heatmap), not an empty shell
    assert 0 < timings["title_s"] <= timings["leaderboard_s"] <= timings["total_s"]
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):  # keep it for a human look
        Path(os.environ["MEDHELM_SCREENSHOT_DIR"], "leaderboard.png").write_bytes(data)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's shape on a mock model: one model and the baselines on the yes/no example and a
    summary benchmark, both placed in the taxonomy; summarised twice, baselines apart and ranked."""
    from medhelm.devtools.mock_openai import MockOpenAIServer
    from tests.leaderboard.helpers import note_summary_benchmark, run_cli

    root = tmp_path_factory.mktemp("demo")
    examples = Path(__file__).parents[2] / "examples"
    local = root / "prod_env"
    local.mkdir()
    gen = note_summary_benchmark(root)
    with MockOpenAIServer(responder=lambda body: "Yes") as srv:
        (local / "model_deployments.yaml").write_text(
            f"model_deployments:\n  - name: mock/yes\n    model_name: test/yes\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: says-yes\n    max_sequence_length: 4096\n")
        (local / "prices.yaml").write_text("prices:\n  - deployment: mock/yes\n    input_per_million: 1.0\n"
                                           "    output_per_million: 2.0\n")
        entries = [f"medhelm_configurable_benchmark:model=test/yes,model_deployment=mock/yes,config_path={c}"
                   for c in (examples / "exact_match_demo" / "exact_match_demo.yaml", gen)]
        code, _, err = run_cli("run", "--run-entries", *entries, "--baselines", "--suite", "demo",
                               "-o", str(root / "out"), "--local-path", str(local), "-q")
        assert code == 0, err
    for store, flags in (("apart", ()), ("ranked", ("--rank-baselines",))):
        code, _, err = run_cli("summarize", "--suites", "demo", "-o", str(root / "out"), "--local-path", str(local),
                               "--store", f"sqlite:///{root / store}.sqlite", "--bootstrap", "100", *flags)
        assert code == 0, err
    return root


def _read_board(store: Path, shot: Path) -> dict:
    import json
    import subprocess

    env = {**os.environ, "NODE_PATH": str(browser.NODE_CACHE / "node_modules"), "CHROMIUM": browser.CHROMIUM}
    with browser.running_app(str(store)) as url:
        done = subprocess.run(["node", str(Path(__file__).with_name("browser_board.js")), url, str(shot), "300000"],
                              capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):
        Path(os.environ["MEDHELM_SCREENSHOT_DIR"], shot.name).write_bytes(shot.read_bytes())
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("store", ["apart", "ranked"])
def test_demo_board_marks_baselines_and_leaves_nothing_empty(demo_store: Path, store: str) -> None:
    why = browser.missing_tools()
    if why:
        pytest.skip(why)
    seen = _read_board(demo_store / f"{store}.sqlite", demo_store / f"board-{store}.png")
    text, cells = seen["text"], [c.strip() for c in seen["cells"]]
    every = [c.strip() for c in seen["all_cells"]]
    assert "None" not in text and not {"None", "nan", "NaN"} & set(every), every
    # the grid draws a missing number as "None" on its canvas (its accessible text is then ""): every cell has
    # text, but the win-rate bar, which draws a missing value as an empty bar
    headers = seen["headers"]
    grid = [row for row in (cells[i:i + len(headers)] for i in range(0, len(cells), len(headers))) if row != headers]
    assert headers[:4] == ["Rank", "Model", "Deployment", "Mean win rate"] and len(grid) == 5
    assert all(value for row in grid for h, value in zip(headers, row) if h != "Mean win rate"), grid
    assert "" not in every[len(grid) * len(headers):]  # the benchmark matrix: "not run" where a row has no value
    for baseline in ("baseline/random", "baseline/majority", "baseline/empty", "baseline/copy-input"):
        assert f"{baseline} (baseline)" in cells
    assert "Rows marked (baseline) are zero-cost reference answers" in text
    # the heatmap and the cost plot are drawn (two categories, priced rows): no section left empty
    assert "No benchmark on this page is placed" not in text and "No point to plot" not in text
    assert seen["charts"] == 2 and min(seen["chart_heights"]) > 150
    if store == "apart":  # one model, baselines unranked: the page says why there is no win rate
        assert "with one model on this page there is nothing for it to win against" in text
        assert "baseline" in cells and "–" in cells
    else:
        assert "ranked with the models here" in text and "1" in cells and "baseline" not in cells
