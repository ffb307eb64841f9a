"""Shared by the leaderboard tests."""

from __future__ import annotations

import contextlib
import io

from medhelm.cli import main as cli_main


def run_cli(*argv: str) -> tuple[int, str, str]:
    """The real `medhelm` entry point in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()
