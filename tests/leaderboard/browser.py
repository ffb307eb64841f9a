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
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import ports

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


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as r:
            return r.read().decode().strip() == "ok"
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the app (by its own pid), SIGKILL if it has not gone within 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_streamlit(make: Callable[[int], tuple[list[str], dict[str, str]]], log: Path,
                    what: str = "streamlit") -> tuple[subprocess.Popen, str]:
    """Start the app ``make(port)`` describes (command, environment) on a picked port, again on a new one when
    the port was taken meanwhile (tests/ports.py); returns (process, URL) once the process itself listens there
    and answers /_stcore/health. Its stderr goes to ``log``."""

    def start(port: int) -> tuple[subprocess.Popen, str]:
        cmd, env = make(port)
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            ports.serving(proc, port, what, lambda: log.read_text(encoding="utf-8", errors="replace"),
                          ready=lambda: _healthy(url))
        except BaseException:
            stop(proc)
            raise
        return proc, url

    return ports.on_a_free_port(start, what)


@contextmanager
def running_app(store: str, *, redacted: bool = False, app: Path | None = None) -> Iterator[str]:
    """The dashboard as ``medhelm serve`` starts it (or another ``app`` script the same way); yields its URL;
    stops it (by its own pid) after."""
    launch = launch_module()

    def make(port: int) -> tuple[list[str], dict[str, str]]:
        args = argparse.Namespace(store=store, host="127.0.0.1", port=port, release=None, redacted=redacted,
                                  output_path=None)
        cmd = launch.command(args)
        if app is not None:
            cmd[cmd.index(str(launch.APP))] = str(app)
        return cmd, launch.environment(args)

    with tempfile.TemporaryDirectory(prefix="medhelm-app-") as work:
        proc, url = start_streamlit(make, Path(work) / "streamlit.log")
        try:
            yield url
        finally:
            stop(proc)


def screenshot(url: str, path: Path, timeout_ms: int = 300000) -> dict:  # a hang only
    """Run the node script; returns its timings (seconds to title, to leaderboard table, total)."""
    env = {**os.environ, "NODE_PATH": str(NODE_CACHE / "node_modules"), "CHROMIUM": CHROMIUM}
    done = subprocess.run(["node", str(SCRIPT), url, str(path), str(timeout_ms)], capture_output=True, text=True,
                          env=env, timeout=timeout_ms / 1000 + 60)
    if done.returncode != 0:
        raise RuntimeError(f"browser failed: {done.stderr.strip()[-2500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
