"""Leaderboard fixtures: synthetic finished suites, a scratch PostgreSQL server, the CLI in-process."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli


@pytest.fixture(scope="session")
def small_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 models x 6 benchmarks (exact-match and jury) x 30 instances, summarised as release 'local'."""
    out = tmp_path_factory.mktemp("lb_out")
    write_suite(out, "local", default_models(4), catalogue(6), 30)
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(out), "--bootstrap", "200")
    assert code == 0, err
    return out


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL (Debian's `postgresql` package) on 127.0.0.1 and a free port."""
    initdb = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))), None)
    if initdb is None:
        pytest.skip("PostgreSQL server binaries not installed (Debian package `postgresql`)")
    bindir = Path(initdb).parent
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="medhelm-pg-"))
    os.chmod(base, 0o777)
    data = base / "data"
    port = _free_port()
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                        "--no-sync"], check=True, capture_output=True, timeout=120)
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(base / "log"),
                        "-o", f"-p {port} -k {base} -h 127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not start here: {e}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
