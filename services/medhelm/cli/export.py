"""`medhelm export` (a shareable bundle of one release) and `medhelm import-helm` (a HELM
benchmark_output suite into the results store, to rank local runs against upstream's models)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from medhelm.cli.summarize import (add_store_arguments, add_summarize_options, print_report, run_summarize,
                                   store_location, summarize_options)
from medhelm.errors import ConfigError


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, help="folder (or .zip) to write; must not exist yet (see --force)")
    p.add_argument("--force", action="store_true", help="replace an existing bundle at that path")
    p.add_argument("--release", help="release to export (default: the latest summarised)")
    p.add_argument("--redact", action="store_true",
                   help="aggregates only: no instances, instance ids or run specs (for sharing outside)")
    add_store_arguments(p)


def main_export(args: argparse.Namespace) -> int:
    from medhelm.store import open_store
    from medhelm.store.bundle import write_bundle
    from medhelm.store.read import resolve_release

    with open_store(store_location(args)) as store:
        release = resolve_release(store, args.release)
        if not args.redact:
            print("warning: without --redact the bundle holds prompts and outputs (PHI for private data); "
                  "share it only inside your organisation", file=sys.stderr)
        report = write_bundle(store, release, args.bundle, redact=args.redact, force=args.force)
    kind = "aggregates only" if report.redacted else f"{report.instances} instances included"
    print(f"wrote {report.path} (release '{report.release}', {kind}); view it with: "
          f"medhelm serve --store {Path(report.path).with_suffix('') / 'results.sqlite'}")
    return 0


def add_import_helm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path,
                   help="a HELM suite folder (benchmark_output/runs/<suite>) holding run directories")
    p.add_argument("--release", help="leaderboard name (default: the HELM suite's folder name)")
    p.add_argument("--suites", nargs="+", default=[], metavar="SUITE",
                   help="local suites (under --output-path/runs) to rank beside the imported models")
    add_summarize_options(p)
    add_store_arguments(p)


def main_import_helm(args: argparse.Namespace) -> int:
    from medhelm.store import open_store, suite_sources
    from medhelm.store.helm_runs import is_helm_run, read_helm_run
    from medhelm.store.sources import find_run_dirs, read_medhelm_run

    path = Path(args.path)
    if (path / "runs").is_dir() and not any(path.glob("*/run_spec.json")):
        raise ConfigError("this is a benchmark_output root; give one suite folder, e.g. runs/v2.0.0", path=path)
    run_dirs = find_run_dirs(path)
    if not run_dirs:
        raise ConfigError("no run directories (folders with run_spec.json) here", path=path)
    suite = path.resolve().name
    imported = [read_helm_run(d, suite) if is_helm_run(d) else read_medhelm_run(d, suite) for d in run_dirs]
    options = summarize_options(args, args.release or suite, [*args.suites, suite])
    with open_store(store_location(args), create=True) as store:
        # local suites first: they win over an imported run of the same model and benchmark
        sources = [*suite_sources(args.output_path, args.suites), *imported]
        report = run_summarize(store, sources, options)
        print_report(store, report)
    return 0
