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
