"""`medhelm serve` never leaves its Streamlit child behind: SIGTERM to the launcher (a kubelet stopping the
pod, a supervisor) stops both, and so does `kill -9` of the launcher (the kernel's parent-death signal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.leaderboard.browser import start_streamlit


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has stopped


def _start(small_output: Path, log: Path) -> tuple[subprocess.Popen, int, str]:
    store = f"sqlite:///{small_output / 'results.sqlite'}"

    def make(port: int) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-m", "medhelm", "serve", "--store", store, "--port", str(port)], os.environ.copy()

    proc, url = start_streamlit(make, log, "medhelm serve")  # serving: the launcher's Streamlit child listens
    children = _children(proc.pid)
    assert len(children) == 1 and _alive(children[0])
    return proc, children[0], url + "/_stcore/health"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigterm_to_serve_stops_streamlit_and_exits_zero(small_output, tmp_path):
    proc, child, url = _start(small_output, tmp_path / "serve.log")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0  # generous: only a hung stop reaches it
        assert _gone_within(child, 60)
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)
    finally:
        for pid in (proc.pid, child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_kill_9_of_serve_still_stops_streamlit(small_output, tmp_path):
    proc, child, _ = _start(small_output, tmp_path / "serve.log")
    try:
        proc.kill()
        proc.wait(timeout=60)
        assert _gone_within(child, 60)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
