"""Leaderboard fixtures: synthetic finished suites, a scratch PostgreSQL server, the CLI in-process."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests import ports
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
    initdb = pg_binary("initdb")
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
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                        "--no-sync"], check=True, capture_output=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be set up here: {e}")
    try:
        port = start_postgres(as_user, bindir, data, base, "-h 127.0.0.1")
    except RuntimeError as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(str(e))
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)



def pg_binary(name: str) -> str | None:
    """A PostgreSQL server program (initdb, pg_dump, pg_restore): Debian's versioned bin folder first, where they
    lie together (a wrapper on PATH may hold initdb alone), else PATH; None when neither has it."""
    return next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None) or shutil.which(name)


def start_postgres(as_user: list[str], bindir: Path, data: Path, base: Path, options: str) -> int:
    """``pg_ctl start`` of the cluster in ``data`` on a picked port (socket folder and log in ``base``, more
    server ``options``), again on a new port when the picked one was taken meanwhile (tests/ports.py); returns
    the port once the server accepts connections. RuntimeError (with the server's log) when it cannot start."""

    def start(port: int) -> int:
        log = base / "log"
        log.write_text("")  # this attempt's log only
        os.chmod(log, 0o666)
        # -w: returns once the server accepts connections; it gives up after 600 s (a hung start only)
        done = subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "600", "-l", str(log),
                               "-o", f"-p {port} -k {base} -c fsync=off {options}", "start"],
                              capture_output=True, text=True, timeout=700)
        if done.returncode != 0:
            text = log.read_text(errors="replace")
            if ports.taken(text):
                raise ports.PortTaken(text.strip().splitlines()[-1])
            raise RuntimeError(f"PostgreSQL could not start here: {done.stderr[-500:]} {text[-800:]}")
        return port

    return ports.on_a_free_port(start, "PostgreSQL")
