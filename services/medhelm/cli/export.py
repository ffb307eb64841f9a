"""`medhelm export` (a shareable bundle of one release) and `medhelm import-helm` (a HELM
benchmark_output suite into the results store, to rank local runs against upstream's models)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from medhelm.cli.summarize import (_note, add_store_arguments, add_summarize_options, print_report,
                                   run_summarize, store_location, summarize_options, writable_store)
from medhelm.errors import ConfigError, escape


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
        report = write_bundle(store, release, args.bundle, redact=args.redact, force=args.force)
    if not args.redact and report.with_text:
        print(f"warning: without --redact the bundle holds the prompts and outputs of {report.with_text} instances "
              "(PHI for private data); share it only inside your organisation", file=sys.stderr)
    if report.redacted:
        kind = "aggregates only"
    elif report.with_text == report.instances:
        kind = f"{report.instances} instances included"
    else:
        kind = (f"{report.instances} instance scores included, {report.with_text} with prompt and output "
                "(imported HELM runs carry scores only)")
    print(f"wrote {report.path} (release '{report.release}', {kind}); view it with: "
          f"medhelm serve --store {Path(report.path).with_suffix('') / 'results.sqlite'}")
    return 0


def add_import_helm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path,
                   help="a HELM suite folder (benchmark_output/runs/<suite>), a release folder "
                        "(benchmark_output/releases/<release>) or a benchmark_output root")
    p.add_argument("--release", help="leaderboard name; with a benchmark_output root, also which release/suite to "
                                     "import (default: the only one there, or the suite's folder name)")
    p.add_argument("--suites", nargs="+", default=[], metavar="SUITE",
                   help="local suites (under --output-path/runs) to rank beside the imported models")
    p.add_argument("--failed-as-zero", action="store_true",
                   help="keep HELM's 0 for failed requests and unjudged instances (default: no value, counted as "
                        "errors, as our own runs)")
    add_summarize_options(p)
    add_store_arguments(p)


def main_import_helm(args: argparse.Namespace) -> int:
    from medhelm.files import plain_name
    from medhelm.store import suite_sources
    from medhelm.store.helm_runs import find_helm_release, is_helm_run, read_helm_run
    from medhelm.store.sources import read_medhelm_run

    for suite in args.suites:
        plain_name(suite, what="--suites")
    found = find_helm_release(Path(args.path), args.release)
    for other in found.not_runs:
        _note(f"skipped {escape(other.name)}: no run_spec.json (not a HELM run folder, or a damaged one)")
    # every run spec and stats file is read (and checked) before the store is opened
    imported = [read_helm_run(d, suite, found.schema, failed_as_zero=args.failed_as_zero) if is_helm_run(d)
                else read_medhelm_run(d, suite) for d, suite in found.runs]
    suites = sorted({suite for _, suite in found.runs})
    options = summarize_options(args, args.release or found.name, [*args.suites, *suites])
    for suite in args.suites:
        if not (Path(args.output_path) / "runs" / suite).is_dir():
            raise ConfigError("suite folder not found", path=Path(args.output_path) / "runs" / suite)
    with writable_store(store_location(args)) as store:
        # local suites first: they win over an imported run of the same model and benchmark
        sources = [*suite_sources(args.output_path, args.suites), *imported]
        report = run_summarize(store, sources, options)
        print_report(store, report)
    return 0
