"""The bad-input boundary, tested from outside: the real CLI in a subprocess under ``prlimit``.

One assertion everywhere (``assert_bad_input``): exit 2 (or 70 for a bug), one error line on stderr
naming the file, no traceback, no planted patient marker echoed, within 120 s (a hang bound) and 1 GiB of
address space, and the output folder unchanged (or only holding what a resumed run would reuse).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark

MARKER = "ZQXPATIENTMARKER"  # planted in every CSV row; must never appear in an error
SECRET = "ZQXSECRETVALUE"  # an API-key-like environment variable; must never appear either
TIME_LIMIT_S = 120  # a hang, not a speed target: generous for a loaded machine (bench/ measures speed)
MEMORY_LIMIT = 1 << 30  # 1 GiB of address space
PRLIMIT = shutil.which("prlimit")


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    seconds: float


def run_cli(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """``medhelm <args>`` in a fresh process, capped at ``TIME_LIMIT_S`` and 1 GiB."""
    cmd = [sys.executable, "-m", "medhelm", *(str(a).replace("\x00", "") for a in args)]  # argv holds no NUL
    if PRLIMIT:
        cmd = [PRLIMIT, f"--as={MEMORY_LIMIT}", "--", *cmd]
    full_env = {**os.environ, "MEDHELM_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                "MEDHELM_LOG_DIR": str(cwd / "crash-logs"), "ZQX_API_KEY": SECRET, **(env or {})}
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, timeout=TIME_LIMIT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"medhelm {' '.join(map(str, args))[:200]} ran past {TIME_LIMIT_S} s (a hang)")
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                  time.monotonic() - started)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its content hash (the output folder before/after)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def assert_bad_input(result: Result, *, names: str | Path | None, out: Path | None = None,
                     before: dict[str, str] | None = None, codes: tuple[int, ...] = (2,),
                     contains: str | None = None) -> str:
    """The one assertion of this suite; returns the error line."""
    assert result.code in codes, f"exit {result.code}, expected {codes}; stderr: {result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    warnings = ("note:", "warning:", "medhelm: warning:")  # said before the error, each one line
    errors = [ln for ln in lines if ln.startswith("medhelm") and not ln.startswith(warnings)]
    others = [ln for ln in lines if not ln.startswith(("medhelm", *warnings))]
    assert len(errors) == 1 and not others, f"expected one error line, got: {lines[:10]}"
    line = errors[0]
    if names is not None:
        assert str(names) in line, f"the error does not name {names}: {line}"
    if contains is not None:
        assert contains in line, line
    for planted in (MARKER, SECRET):
        assert planted not in result.stderr and planted not in result.stdout, f"echoed {planted}: {line}"
    assert result.seconds < TIME_LIMIT_S
    if out is not None:
        assert snapshot(out) == (before or {}), f"the output folder changed: {sorted(snapshot(out))[:10]}"
    return line


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    """A small configurable benchmark whose every row carries the patient marker."""
    cfg = write_configurable_benchmark(tmp_path / "bench", 6, name="MARKED")
    csv = tmp_path / "bench" / "dataset.csv"
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join([lines[0]] + [ln.replace("Synthetic note", f"{MARKER} note") for ln in lines[1:]]) + "\n")
    return cfg


def entry(cfg: Path, model: str = "local/smollm2-135m-instruct", extra: str = "") -> str:
    return f"medhelm_configurable_benchmark:model={model},config_path={cfg}{extra}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long fuzzing budget runs only when asked for: ``pytest -m fuzz_long tests/boundary``."""
    if "fuzz_long" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="long fuzzing budget: run with -m fuzz_long")
    for item in items:
        if "fuzz_long" in item.keywords:
            item.add_marker(skip)
