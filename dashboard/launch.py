"""Start the leaderboard: ``streamlit run app.py`` headless on 127.0.0.1, no usage statistics.

The app's settings travel as environment variables (``MEDHELM_STORE``, ``MEDHELM_RELEASE``,
``MEDHELM_REDACTED``), which Streamlit passes to the script untouched and tests can set directly.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).with_name("app.py")
DEFAULT_PORT = 8501


def add_dashboard_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The dashboard's own flags (``medhelm serve`` adds --host, --port and --output-path itself)."""
    p.add_argument("--store", default=os.environ.get("MEDHELM_STORE_URL") or None,
                   help="results store: sqlite:///path or postgresql://... (default: env MEDHELM_STORE_URL, "
                        "so a password never sits in argv; else <output-path>/results.sqlite)")
    p.add_argument("--release", "--suite", dest="release",
                   help="release to open first; --suite S opens what `medhelm summarize --suite S` built, as "
                        "helm-server --suite does (default: the latest summarised)")
    p.add_argument("--create-store", action="store_true",
                   help="create an empty results store when there is none yet (a deployment whose leaderboard "
                        "comes up before the first `medhelm summarize`)")
    p.add_argument("--redacted", action="store_true",
                   help="aggregates only: never show instance text (for sharing outside the organisation)")


def environment(args: argparse.Namespace) -> dict[str, str]:
    store = getattr(args, "store", None) or str(Path(getattr(args, "output_path", None) or "benchmark_output")
                                               / "results.sqlite")
    env = {**os.environ, "MEDHELM_STORE": store}
    if getattr(args, "release", None):
        env["MEDHELM_RELEASE"] = args.release
    if getattr(args, "redacted", False):
        env["MEDHELM_REDACTED"] = "1"
    return env


def command(args: argparse.Namespace) -> list[str]:
    host = getattr(args, "host", None) or "127.0.0.1"
    port = getattr(args, "port", None)
    return [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
            "--server.address", host, "--server.port", str(DEFAULT_PORT if port is None else port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--global.developmentMode", "false", "--client.toolbarMode", "viewer"]


def main(args: argparse.Namespace) -> int:
    from medhelm.store import open_store
    from medhelm.store.backends import _without_password

    env = environment(args)
    open_store(env["MEDHELM_STORE"], create=bool(getattr(args, "create_store", False))).close()  # a wrong path or URL is one line now, not a page later
    print(f"medhelm: leaderboard at http://{getattr(args, 'host', None) or '127.0.0.1'}:"
          f"{getattr(args, 'port', None) or DEFAULT_PORT} (store {_without_password(env['MEDHELM_STORE'])})", file=sys.stderr)
    try:
        return subprocess.call(command(args), env=env)
    except KeyboardInterrupt:
        return 0

