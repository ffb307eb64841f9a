"""`medhelm serve` -> dashboard/launch.py: the command it runs and its errors (the real server is started
in test_browser.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from medhelm.errors import ConfigError
from tests.leaderboard.browser import launch_module

launch = launch_module()


def test_command_is_headless_loopback_without_usage_stats() -> None:
    args = argparse.Namespace(host=None, port=None, store=None, output_path=Path("out"), release="r1", redacted=True)
    cmd = launch.command(args)
    flags = dict(zip(cmd[cmd.index(str(launch.APP)) + 1::2], cmd[cmd.index(str(launch.APP)) + 2::2]))
    assert cmd[1:3] == [str(launch.CSP), "run"]  # streamlit run, wrapped to send a Content-Security-Policy
    assert "--client.showErrorDetails" in cmd  # no tracebacks (server paths) for viewers
    assert flags["--server.headless"] == "true" and flags["--server.address"] == "127.0.0.1"
    assert flags["--server.port"] == "8501" and flags["--browser.gatherUsageStats"] == "false"
    env = launch.environment(args)
    assert env["MEDHELM_STORE"] == str(Path("out") / "results.sqlite")
    assert env["MEDHELM_RELEASE"] == "r1" and env["MEDHELM_REDACTED"] == "1"


def test_serve_arguments_parse() -> None:
    p = argparse.ArgumentParser()
    launch.add_dashboard_arguments(p)
    args = p.parse_args(["--store", "postgresql://u@h/db", "--redacted"])
    assert launch.environment(args)["MEDHELM_STORE"] == "postgresql://u@h/db"


def test_a_missing_store_is_one_line_before_streamlit_starts(tmp_path: Path) -> None:
    args = argparse.Namespace(host="127.0.0.1", port=0, store=str(tmp_path / "none.sqlite"), release=None,
                              redacted=False, output_path=None)
    with pytest.raises(ConfigError, match="no results store here; run `medhelm summarize` first"):
        launch.main(args)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match="is not a MedHELM results store"):
        launch.main(argparse.Namespace(store=str(empty), host=None, port=None))
