"""The suite's xdist groups are really applied: what tests/conftest.py puts in one group runs on one worker.

scripts/test.sh runs the full suite on pytest-xdist workers with ``--dist loadgroup``; every podman test must run
on one worker (they share one image store and the machine's few cores), every engines test on one.
Twice the grouping was silently not applied (a worker's config says dist "no"; pytest 9.2's node ids drop
xdist's group suffix) and the podman tests collided only at the end of a 30-minute run. This runs a small suite
through the same hook, on two real workers, and reads which worker ran what."""
from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO_ROOT

SUITE = '''
import os, time, pytest

@pytest.mark.container
@pytest.mark.parametrize("i", range(6))
def test_podman_a(i):
    time.sleep(0.2)
    print("RAN", os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.engines
@pytest.mark.parametrize("i", range(4))
def test_engine(i):
    time.sleep(0.2)
'''

SECOND = '''
import time, pytest
pytestmark = [pytest.mark.container]

@pytest.mark.parametrize("i", range(6))
def test_podman_b(i):
    time.sleep(0.2)
'''

PLAIN = '''
import time, pytest

@pytest.mark.parametrize("i", range(8))
def test_plain(i):
    time.sleep(0.2)
'''


def test_podman_and_engines_groups_each_run_on_one_worker(tmp_path: Path):
    suite = tmp_path / "suite"
    suite.mkdir()
    # the project's own grouping hook, nothing else of its conftest's fixtures is needed
    (suite / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    (suite / "test_one.py").write_text(SUITE)
    (suite / "test_two.py").write_text(SECOND)
    (suite / "test_three.py").write_text(PLAIN)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    container: c\n    engines: e\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "-v",
         "-p", "no:cacheprovider", str(suite)],
        capture_output=True, text=True, timeout=600, cwd=suite, env={**_env(), "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for line in done.stdout.splitlines():
        if line.startswith("[gw") and "PASSED" in line:
            worker = line.split("]", 1)[0][1:]
            test = line.split("PASSED", 1)[1].strip().split("::", 1)[1]
            name = test.split("[", 1)[0]
            group = "podman" if name.startswith("test_podman") else "engines" if name == "test_engine" else "plain"
            workers[group].add(worker)
    assert sum(1 for line in done.stdout.splitlines() if "PASSED" in line) == 24, done.stdout[-3000:]
    assert len(workers["podman"]) == 1, f"podman tests ran on {sorted(workers['podman'])}"
    assert len(workers["engines"]) == 1, f"engines tests ran on {sorted(workers['engines'])}"


def _env() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
