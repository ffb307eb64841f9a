"""Issue 6's dashboard target, measured in one run; writes section `dashboard` of docs/benchmarks.md.

On the 370k-record store of bench_summarize.py (built here if absent), the app is started for real
(``streamlit run`` on 127.0.0.1, as ``medhelm serve`` does) and headless Debian chromium (npm
playwright-core) opens it: time from navigation to the leaderboard table being visible. Target < 2 s.
The first load after start (cold: the release is read from the store) and the median of 3 reloads (warm).

    .venv/bin/python bench/bench_dashboard.py [--workdir DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_summarize import generate, machine, table, write_section  # noqa: E402
from tests.leaderboard import browser  # noqa: E402

TARGET_S = 2.0
# The floor: a Streamlit app with the same kinds of elements and trivial data, on the same machine and browser.
FLOOR_APP = """
import pandas as pd
import streamlit as st
st.title("MedHELM leaderboard")
df = pd.DataFrame({"a": range(10), "b": range(10)})
st.dataframe(df)
st.line_chart(df)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", type=Path, help="bench_summarize's work directory (reused if it has a store)")
    p.add_argument("--reloads", type=int, default=3)
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = p.parse_args()
    why = browser.missing_tools()
    if why:
        raise SystemExit(f"cannot run the browser: {why}")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    try:
        store = root / "results.sqlite"
        if not store.is_file():
            if not (root / "runs" / "bench").is_dir():
                generate(root, 10, 37, 1000)
            subprocess.run([sys.executable, "-m", "medhelm", "summarize", "--suites", "bench", "-o", str(root)],
                           check=True, capture_output=True)
        env_machine = machine()
        (root / "floor_app.py").write_text(FLOOR_APP)
        with browser.running_app(str(store), app=root / "floor_app.py") as url:
            floor = [browser.screenshot(url, root / "floor.png") for _ in range(1 + args.reloads)]
        with browser.running_app(str(store)) as url:
            cold = browser.screenshot(url, root / "cold.png")
            warm = [browser.screenshot(url, root / "warm.png") for _ in range(args.reloads)]
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    warm_s = statistics.median(w["leaderboard_s"] for w in warm)
    revisit_s = statistics.median(w["revisit_s"] for w in [cold, *warm])
    floor_cold, floor_warm = floor[0]["leaderboard_s"], statistics.median(f["leaderboard_s"] for f in floor[1:])
    body = "\n".join([
        f"Store: 10 models x 37 benchmarks x 1,000 instances (bench_summarize's). Headless chromium via "
        f"playwright-core, 1400x1000. Machine: {env_machine}.",
        "",
        *table([("first paint of the leaderboard, first load after start (cold server, empty browser cache)", f"{cold['leaderboard_s']:.2f} s",
                 f"< {TARGET_S:.0f} s", cold["leaderboard_s"] < TARGET_S),
                (f"first visit, median of {args.reloads} new browsers (warm server, empty browser cache)", f"{warm_s:.2f} s", f"< {TARGET_S:.0f} s",
                 warm_s < TARGET_S),
                (f"revisit: the same browser opens it again, scripts cached (median of {1 + args.reloads})",
                 f"{revisit_s:.2f} s", f"< {TARGET_S:.0f} s", revisit_s < TARGET_S),
                ("title visible (cold)", f"{cold['title_s']:.2f} s", "", None),
                ("floor: trivial app with a title, a 10-row table and a chart (cold / warm)",
                 f"{floor_cold:.2f} s / {floor_warm:.2f} s", "", None),
                ("ratio to the floor (cold / warm)",
                 f"{cold['leaderboard_s'] / floor_cold:.2f} x / {warm_s / floor_warm:.2f} x", "", None)]),
        "",
        "The app reads pre-aggregated tables (cells with their bootstrap replicates) and recomputes win rates "
        "for the filters in numpy; no per-instance row is read for the leaderboard (its script run takes about "
        "0.1 s). The rest is Streamlit's front end in the browser"
        + (f": on this machine even the trivial app needs {floor_warm:.2f} s warm, so the 2 s target cannot be "
           "met here by any Streamlit page." if floor_warm >= TARGET_S else "."),
    ])
    print(body)
    if not args.no_write:
        write_section("dashboard", "Dashboard: first paint of the leaderboard", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
