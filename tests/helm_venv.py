"""crfm-helm's own venv for the tests that use HELM as the oracle (its clients' requests, helm-run, its schema):
one recipe, built on first use under MEDHELM_ENGINES_DIR (~/.cache/medhelm-engines/helm-0.5.16, beside the
engines' venvs) and reused while its recipe is unchanged. The build holds a file lock: two pytest-xdist workers
asking at once build it once (the second waits, then finds it ready), never one removing what the other installs.
A machine that cannot build it (no package index) skips the asking test with the reason. ``venv_python`` is that
recipe for any tool venv (an official SDK whose pins clash with the product's, driven from a child process).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

VERSION = "0.5.16"
ENGINES = Path(os.environ.get("MEDHELM_ENGINES_DIR", Path.home() / ".cache" / "medhelm-engines"))
# HELM's core deps its client path imports, and the SDKs of its extras at versions within its pins (openai at
# the floor of HELM's ~=2.8: its AzureOpenAI sends the key as `api-key` and as a bearer token; later 2.x send
# only `api-key`)
PACKAGES = ("cattrs==22.2.0", "dacite==1.9.2", "pyhocon==0.3.63", "retrying==1.4.2", "sqlitedict==2.1.0",
            "colorlog==6.12.0", "tqdm==4.70.1", "ubelt==1.4.3", "PyYAML==6.0.4", "filelock==4.3.1", "numpy",
            "zstandard", "openai==2.8.0", "tiktoken==0.14.0", "pydantic==2.14.4", "anthropic==0.125.0",
            "websocket-client==1.9.2", "google-genai==1.75.0", "boto3==1.44.8", "botocore==1.44.8")


@contextmanager
def _locked(name: str):
    ENGINES.mkdir(parents=True, exist_ok=True)
    with open(ENGINES / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        yield


def _run_or_skip(step: list[str], what: str) -> None:
    done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.skip(f"cannot build {what} (offline?): {(done.stderr.strip().splitlines() or [''])[-1][:200]}")


def venv_python(name: str, *installs: tuple[str, ...], recipe: str | None = None) -> Path:
    """The interpreter of the venv ``ENGINES/name``, each of ``installs`` one ``pip install`` into it; built first
    when missing or made from another recipe (``recipe``: the text that identifies it, by default the installs)."""
    venv = ENGINES / name
    python, ok = venv / "bin" / "python", venv / ".ok"
    want = recipe if recipe is not None else "\n".join(" ".join(step) for step in installs)
    with _locked(name):
        if not ok.is_file() or ok.read_text() != want:
            shutil.rmtree(venv, ignore_errors=True)
            _run_or_skip([sys.executable, "-m", "venv", str(venv)], f"the venv {venv}")
            for step in installs:
                _run_or_skip([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *step],
                             f"{' '.join(step)} in {venv}")
            ok.write_text(want)
    return python


def helm_python() -> Path:
    """The venv's interpreter, built first when missing or made from another recipe."""
    return venv_python(f"helm-{VERSION}", ("--no-deps", f"crfm-helm=={VERSION}"), PACKAGES,
                       recipe="\n".join((VERSION, *PACKAGES)))


def installed_beside(python: Path, name: str, packages: tuple[str, ...]) -> Path:
    """``packages`` in a folder of their own beside the venv (pip --target), installed once per list."""
    folder = ENGINES / f"helm-{VERSION}-{name}"
    ok, want = folder / ".ok", "\n".join(packages)
    with _locked(f"helm-{VERSION}-{name}"):
        if not ok.is_file() or ok.read_text() != want:
            shutil.rmtree(folder, ignore_errors=True)
            _run_or_skip([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
                          str(folder), *packages], f"{packages} for crfm-helm {VERSION} in {folder}")
            ok.write_text(want)
    return folder


def site_packages(python: Path) -> Path:
    """The venv's site-packages (HELM's package data: its schemas, its static files)."""
    lib = python.parent.parent / "lib"
    return next(lib.glob("python3*/site-packages"))
