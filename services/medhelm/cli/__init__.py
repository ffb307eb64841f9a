"""The `medhelm` command: a thin door. Each subcommand lives in its own module, imported lazily
so `medhelm --help` stays fast. Every subcommand module defines ``add_arguments(parser)`` and
``main(args) -> int``. User errors (``MedhelmError``, and argparse's usage errors) become one line on
stderr and exit code 2. Anything else is a bug: the last resort prints one line ("internal error in
<command> ...; details in <log file>") and exits 70, and the log file gets the traceback's frames (file,
line, function) and the exception's type only — never its message or locals, which may hold instance text.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

# name -> (module, one-line help). Modules are imported only for the chosen subcommand.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("medhelm.cli.run", "evaluate run entries (helm-run compatible)"),
    "summarize": ("medhelm.cli.summarize", "aggregate suites into the results store and leaderboard"),
    "serve": ("medhelm.cli.serve", "serve the leaderboard, or a gRPC service (scenarios | jury | metrics)"),
    "list": ("medhelm.cli.catalogue", "list the MedHELM benchmarks by category and subcategory"),
    "describe": ("medhelm.cli.catalogue", "describe one benchmark"),
    "validate": ("medhelm.cli.run", "check run entries, configs and data without running anything"),
    "jury": ("medhelm.cli.jury", "jury statistics: agreement between judges, calibration against clinicians"),
    "job": ("medhelm.cli.job", "run one shard of a suite (inside a Kubernetes Indexed Job)"),
    "collect": ("medhelm.cli.job", "merge the shards of a suite into finished runs"),
    "k8s": ("medhelm.cli.k8s", "submit / watch / collect an evaluation Job on a cluster (kubectl)"),
    "export": ("medhelm.cli.export", "write a shareable bundle (use --redact for aggregates only)"),
    "import-helm": ("medhelm.cli.export", "import a HELM benchmark_output suite"),
    "report": ("medhelm.cli.report", "write the signed HTML evaluation report of a release; `report verify FILE`"),
    "store": ("medhelm.cli.store", "the results store's schema version: status, migrate (before an upgrade's pods)"),
    "audit": ("medhelm.cli.audit", "list the audit trail: who saw instance text, every export"),
    "compare": ("medhelm.cli.compare", "compare two releases/suites per model and benchmark (paired tests; a gate)"),
    "sample-size": ("medhelm.cli.sample_size", "instances per benchmark needed to detect a difference, and their cost"),
    "plan": ("medhelm.cli.sample_size", "the same as sample-size (its first name, kept for existing scripts)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (not a usage block) and exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        from medhelm.errors import one_line

        print(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


SEED_MAX = 2**32 - 1  # numpy's and the servers' seed range


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (so a port or a seed out of range is a usage error)."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got '{value[:40]}'") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer from {lo} to {hi}, got {value[:40]}")
        return n

    parse.__name__ = "integer"
    return parse


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{value[:40]}'") from None
        if not lo <= x <= hi:  # NaN fails this too
            raise argparse.ArgumentTypeError(f"expected a number from {lo:g} to {hi:g}, got {value[:40]}")
        return x

    parse.__name__ = "number"
    return parse


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="medhelm", description="Holistic evaluation of LLMs on clinical work.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            mod = importlib.import_module(module)
            adder = getattr(mod, f"add_{name.replace('-', '_')}_arguments", None) or mod.add_arguments
            adder(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in SUBCOMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed as one line
        return done.code if isinstance(done.code, int) else 2
    if not args.command:
        parser.print_help()
        return 0
    from medhelm.errors import MedhelmError, one_line

    try:
        module = importlib.import_module(SUBCOMMANDS[args.command][0])
        entry = getattr(module, f"main_{args.command.replace('-', '_')}", None) or module.main
        return int(entry(args) or 0)
    except MedhelmError as err:
        print(f"medhelm: error: {one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("medhelm: interrupted; finished instances are saved, run again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `medhelm list | head`: the reader left; not a bug
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except BaseException as err:  # noqa: BLE001 - the last resort: a bug must not look like a user error
        if isinstance(err, SystemExit):
            raise
        return _internal_error(args.command, err)


def _internal_error(command: str, err: BaseException) -> int:
    from medhelm.errors import INTERNAL_EXIT

    frames = traceback.extract_tb(err.__traceback__)
    last = frames[-1] if frames else None
    place = f"{Path(last.filename).name}:{last.lineno}" if last else "?"
    log = _write_crash_log(command, err, frames)
    where = f"details in {log}" if log else "no log file could be written (set MEDHELM_LOG_DIR)"
    print(f"medhelm: internal error in `medhelm {command}` ({type(err).__name__} at {place}); {where}; "
          f"this is a bug, not your input: please report it with the log file", file=sys.stderr)
    return INTERNAL_EXIT


def _write_crash_log(command: str, err: BaseException, frames: traceback.StackSummary) -> Path | None:
    """The traceback's frames and exception types (never messages: they may quote instance text)."""
    lines = [f"medhelm {_version()} internal error in `medhelm {command}` at "
             f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
             "(exception messages and variables are left out on purpose: they may hold patient text)"]
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and cur not in chain and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for exc in reversed(chain):
        lines.append(f"Traceback of {type(exc).__module__}.{type(exc).__qualname__}:")
        for fr in traceback.extract_tb(exc.__traceback__) if exc is not err else frames:
            lines.append(f"  {fr.filename}:{fr.lineno} in {fr.name}")
    for folder in _log_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / f"crash-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}.log"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            return path
        except OSError:
            continue
    return None


def _log_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("MEDHELM_LOG_DIR"):
        dirs.append(Path(os.environ["MEDHELM_LOG_DIR"]))
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    dirs.append(Path(state) / "medhelm" / "logs")
    dirs.append(Path(tempfile.gettempdir()) / f"medhelm-logs-{os.getuid() if hasattr(os, 'getuid') else 0}")
    return dirs


def _version() -> str:
    from medhelm.version import __version__

    return f"medhelm {__version__}"
