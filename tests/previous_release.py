"""The previous release (chart and medhelm 0.1.0, store schema v1), for the upgrade tests: its files taken from
git at its commit, as its image and chart were built from them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = "4bab593"  # the last commit before store schema versions were migrated
PREVIOUS_V2 = "f2a4802"  # the last commit of store schema v2 (before runs recorded their access)


def previous_tree(dest: Path, *paths: str, commit: str = PREVIOUS) -> Path:
    """``paths`` of the previous release (or of ``commit``) extracted under ``dest`` (skips where this checkout
    lacks the history)."""
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode:
        pytest.skip(f"the previous release's commit {commit} is not in this checkout's history")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, *paths], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest
