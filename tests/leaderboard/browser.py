"""Start the real app (``streamlit run`` on 127.0.0.1) and drive it with headless chromium via npm's
playwright-core. Shared by the browser test and bench/bench_dashboard.py.

Needs Debian's ``chromium`` and ``npm install playwright-core`` into ``MEDHELM_TOOLS_DIR``
(default ~/.cache/medhelm-tools, as scripts/_env.sh does; installed here on first use if missing).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).with_name("browser_shot.js")
# scripts/_env.sh installs playwright-core here for the whole test suite
NODE_CACHE = Path(os.environ.get("MEDHELM_TOOLS_DIR", Path.home() / ".cache" / "medhelm-tools"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def missing_tools() -> str | None:
    """Why the browser cannot run here (None when it can); installs playwright-core if npm is available."""
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (Debian: apt-get install -y chromium)"
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm not installed"
    if not (NODE_CACHE / "node_modules" / "playwright-core").is_dir():
        NODE_CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
                               str(NODE_CACHE), "playwright-core"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            return f"npm install playwright-core failed: {done.stderr.strip().splitlines()[-1:]}"
    return None


def launch_module():  # noqa: ANN201 - a module
    """dashboard/launch.py (the installed ``medhelm_dashboard.launch`` when the package is importable)."""
    try:
        from medhelm_dashboard import launch
    except ImportError:
        spec = importlib.util.spec_from_file_location("medhelm_dashboard_launch",
                                                      Path(__file__).parents[2] / "dashboard" / "launch.py")
        launch = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launch)
    return launch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(store: str, *, redacted: bool = False, timeout_s: float = 60, app: Path | None = None
                ) -> Iterator[str]:
    """The dashboard as ``medhelm serve`` starts it (or another ``app`` script the same way); yields its URL;
    stops it (by its own pid) after."""
    launch = launch_module()
    port = free_port()
    args = argparse.Namespace(store=store, host="127.0.0.1", port=port, release=None, redacted=redacted,
                              output_path=None)
    cmd = launch.command(args)
    if app is not None:
        cmd[cmd.index(str(launch.APP))] = str(app)
    proc = subprocess.Popen(cmd, env=launch.environment(args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read().decode().strip() == "ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start: {(proc.stderr.read() if proc.stderr else '')[-500:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def screenshot(url: str, path: Path, timeout_ms: int = 60000) -> dict:
    """Run the node script; returns its timings (seconds to title, to leaderboard table, total)."""
    env = {**os.environ, "NODE_PATH": str(NODE_CACHE / "node_modules"), "CHROMIUM": CHROMIUM}
    done = subprocess.run(["node", str(SCRIPT), url, str(path), str(timeout_ms)], capture_output=True, text=True,
                          env=env, timeout=timeout_ms / 1000 + 60)
    if done.returncode != 0:
        raise RuntimeError(f"browser failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
