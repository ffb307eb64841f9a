"""The previous release (chart and medhelm 0.1.0, store schema v1), for the upgrade tests: its files taken from
git at its commit, as its image and chart were built from them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = "4bab593"  # the last commit before store schema versions were migrated


def previous_tree(dest: Path, *paths: str) -> Path:
    """``paths`` of the previous release extracted under ``dest`` (skips where this checkout lacks the history)."""
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], capture_output=True).returncode:
        pytest.skip(f"the previous release's commit {PREVIOUS} is not in this checkout's history")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS, *paths], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest
