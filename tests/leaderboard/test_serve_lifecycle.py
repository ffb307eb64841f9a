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

from tests.leaderboard.browser import free_port


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has stopped


def _start(small_output: Path) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    store = f"sqlite:///{small_output / 'results.sqlite'}"
    proc = subprocess.Popen([sys.executable, "-m", "medhelm", "serve", "--store", store, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}/_stcore/health"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"serve did not start: {proc.stderr.read()[-500:] if proc.stderr else ''}")
        time.sleep(0.3)
    children = _children(proc.pid)
    assert len(children) == 1 and _alive(children[0])
    return proc, children[0], url


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigterm_to_serve_stops_streamlit_and_exits_zero(small_output):
    proc, child, url = _start(small_output)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert _gone_within(child, 10)
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)
    finally:
        for pid in (proc.pid, child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_kill_9_of_serve_still_stops_streamlit(small_output):
    proc, child, _ = _start(small_output)
    try:
        proc.kill()
        proc.wait(timeout=10)
        assert _gone_within(child, 15)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
