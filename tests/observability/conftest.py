"""Observability fixtures: promtool / pushgateway from Debian's packages (scripts/_env.sh unpacks them),
scrapes parsed into {(name, labels): value}, a `medhelm` child process whose /metrics we can read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import ports

_TOOL_DIRS = [os.environ.get("MEDHELM_TOOLS_DIR"), str(Path.home() / ".cache" / "medhelm-tools")]


def prometheus_tool(name: str) -> Path | None:
    for d in filter(None, _TOOL_DIRS):
        path = Path(d) / "prometheus" / "usr" / "bin" / name
        if path.is_file():
            return path
    return None


@pytest.fixture(scope="session")
def promtool() -> Path:
    path = prometheus_tool("promtool")
    if path is None:
        pytest.skip("promtool missing: scripts/_env.sh unpacks it from Debian's prometheus package (needs apt-get)")
    return path


def check_metrics(promtool: Path, text: str) -> None:
    """`promtool check metrics` (exposition format and naming conventions) on one scrape."""
    done = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(scrape: dict, name: str, **labels: str) -> float:
    """The sum of ``name`` over every series whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in scrape.items() if n == name and want <= set(lab))


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode("utf-8")


def start_tool(exe: Path, args: Callable[[int], list[str]], log: Path) -> tuple[subprocess.Popen, str]:
    """A Prometheus tool (Prometheus, the Pushgateway: they cannot report a port they picked themselves)
    listening on 127.0.0.1 at a picked port, started again on a new one when that was taken meanwhile
    (tests/ports.py); returns (process, URL) once the process itself listens and answers /-/ready.
    ``args(port)`` are its flags; its output goes to ``log``."""

    def start(port: int) -> tuple[subprocess.Popen, str]:
        url = f"http://127.0.0.1:{port}"
        with open(log, "w") as out:
            proc = subprocess.Popen([str(exe), f"--web.listen-address=127.0.0.1:{port}", *args(port)],
                                    stdout=out, stderr=subprocess.STDOUT)

        def ready() -> bool:
            try:
                fetch(url + "/-/ready")
                return True
            except OSError:
                return False

        try:
            ports.serving(proc, port, exe.name, lambda: log.read_text(errors="replace"), ready=ready)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return proc, url

    return ports.on_a_free_port(start, exe.name)


class MedhelmProcess:
    """`python -m medhelm <args>` with its stdout/stderr collected by threads and its /metrics URL."""

    METRICS = re.compile(r"metrics (http://\S+/metrics)")

    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "medhelm", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [threading.Thread(target=self._pump, args=(s, sink), daemon=True)
                         for s, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def metrics_url(self, timeout: float = 300) -> str:  # start-up takes seconds; this only stops a hang
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.err):
                m = self.METRICS.search(line)
                if m:
                    return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no metrics URL from medhelm: {self.stderr[-2000:]}")

    def wait_for(self, text: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stdout:
                return
            if self.proc.poll() is not None:
                for t in self._threads:
                    t.join(60)  # returns as soon as the pipe is drained
                if text in self.stdout:
                    return
                break
            time.sleep(0.1)
        raise AssertionError(f"'{text}' never printed; stdout {self.stdout[-2000:]} stderr {self.stderr[-2000:]}")

    def finish(self, timeout: float = 300) -> int:
        """Its exit code once it has ended or is lingering (``--metrics-linger``; stderr says so), SIGTERM then
        ending the linger: a long linger keeps /metrics up for the test's last scrape however slow the
        machine, and costs no time."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and "metrics lingering" not in self.stderr and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.stop()

    def stop(self, wait: float = 0) -> int:
        """Its exit code: waits ``wait`` seconds for it to end by itself, then terminates it."""
        try:
            self.proc.wait(timeout=wait)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: still running
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(timeout=120)
        for t in self._threads:
            t.join(60)  # returns as soon as the pipe is drained
        return code
