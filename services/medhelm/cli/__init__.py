"""The `medhelm` command: a thin door. Each subcommand lives in its own module, imported lazily
so `medhelm --help` stays fast. Every subcommand module defines ``add_arguments(parser)`` and
``main(args) -> int``. User errors (``MedhelmError``) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
    "audit": ("medhelm.cli.audit", "list the audit trail: who saw instance text, every export"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medhelm", description="Holistic evaluation of LLMs on clinical work.")
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
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    from medhelm.errors import MedhelmError

    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    entry = getattr(module, f"main_{args.command.replace('-', '_')}", None) or module.main
    try:
        return int(entry(args) or 0)
    except MedhelmError as err:
        print(f"medhelm: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("medhelm: interrupted; finished instances are saved, run again to resume", file=sys.stderr)
        return 130


def _version() -> str:
    from medhelm.version import __version__

    return f"medhelm {__version__}"
