"""`medhelm summarize` — finished runs -> the results store (SQLite by default, or PostgreSQL) and the
leaderboard tables the dashboard reads. helm-summarize compatible: ``--suite``/``--suites``, ``--release``,
``--output-path``; ``--schema``/``--auto-generate-schema`` are accepted and not needed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from medhelm.cli import SEED_MAX, int_in
from medhelm.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from medhelm.store import Store, SummarizeOptions, SummaryReport
    from medhelm.store.sources import RunSource


def add_arguments(p: argparse.ArgumentParser) -> None:
    what = p.add_argument_group("what")
    what.add_argument("--suites", nargs="+", default=[], metavar="SUITE",
                      help="suites under <output-path>/runs/ (a later suite's run replaces an earlier one's)")
    what.add_argument("--suite", action="append", default=[], help="one suite (helm-summarize's spelling)")
    what.add_argument("--release", help="leaderboard name (default: the suite's name, or the suites joined by '+')")
    add_store_arguments(p)
    add_summarize_options(p.add_argument_group("how"))
    p.add_argument("--pushgateway", default=os.environ.get("MEDHELM_PUSHGATEWAY") or None, metavar="URL",
                   help="push the release's scores as Prometheus gauges, group job=medhelm-release "
                        "(docs/compare.md; env MEDHELM_PUSHGATEWAY)")
    compat = p.add_argument_group("helm-summarize flags accepted for compatibility (not needed)")
    compat.add_argument("--schema", "--schema-path", dest="schema", help=argparse.SUPPRESS)
    compat.add_argument("--auto-generate-schema", action="store_true", help=argparse.SUPPRESS)
    compat.add_argument("-n", "--num-threads", type=int, help=argparse.SUPPRESS)


def add_summarize_options(how: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """Redaction, prices and bootstrap: shared by `summarize` and `import-helm`."""
    how.add_argument("--local-path", type=Path, default=Path("prod_env"),
                     help="model_deployments.yaml (deployments marked `redacted: true`) and prices.yaml")
    how.add_argument("--prices", type=Path, help="prices YAML (default: <local-path>/prices.yaml if present)")
    how.add_argument("--redact", action="store_true", help="keep no instance text in the store (aggregates only)")
    how.add_argument("--rank-baselines", action="store_true",
                     help="count the reference baselines (baseline/...) in the models' win rates and ranks "
                          "(default: shown marked, compared with the models, unranked)")
    how.add_argument("--bootstrap", type=int_in(0, 100_000), default=1000, metavar="N",
                     help="bootstrap replicates, 0-100000 (default 1000)")
    how.add_argument("--seed", type=int_in(0, SEED_MAX), default=0, help="bootstrap seed (default 0)")
    how.add_argument("--min-cell", type=int_in(1, 1_000_000), default=11, metavar="N",
                     help="patient subgroups with fewer scored instances are never stored or shown (default 11; "
                          "docs/report.md)")
    how.add_argument("--allow-fewer-runs", action="store_true",
                     help="replace a release even when fewer runs are found than it holds (default: refuse)")


def add_store_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("where")
    where.add_argument("-o", "--output-path", type=Path, default=Path("benchmark_output"),
                       help="results root holding runs/<suite>/ (default: %(default)s)")
    where.add_argument("--store", help="results store: sqlite:///path or postgresql://user@host/db "
                                       "(default: env MEDHELM_STORE_URL, else <output-path>/results.sqlite)")


def store_location(args: argparse.Namespace) -> str:
    # env MEDHELM_STORE_URL_FILE (a mounted Secret key): how the chart hands a PostgreSQL URL over (its password
    # never sits in argv or in an env var); MEDHELM_STORE_URL itself for a shell
    from medhelm.files import env_secret

    return args.store or env_secret("MEDHELM_STORE_URL") or str(Path(args.output_path) / "results.sqlite")


def main(args: argparse.Namespace) -> int:
    from medhelm.store import suite_sources

    suites = list(dict.fromkeys([*args.suite, *args.suites]))
    if not suites:
        raise ConfigError("name the suites to summarize: --suites SUITE [SUITE ...]")
    if args.schema or args.auto_generate_schema:
        print("note: no schema file is needed; benchmarks, metrics and the taxonomy come from the run specs",
              file=sys.stderr)
    from medhelm.files import plain_name

    for suite in suites:
        plain_name(suite, what="--suites")
    release = args.release or "+".join(suites)
    for suite in suites:  # fail before anything is written
        if not (Path(args.output_path) / "runs" / suite).is_dir():
            raise ConfigError("suite folder not found", path=Path(args.output_path) / "runs" / suite)
    options = summarize_options(args, release, suites)
    with writable_store(store_location(args)) as store:
        report = run_summarize(store, suite_sources(args.output_path, suites, note=_note), options)
        print_report(store, report)
        if getattr(args, "pushgateway", None):
            from medhelm.store.gauges import push, release_registry

            problem = push(release_registry(store, report.release), args.pushgateway, "medhelm-release")
            if problem:
                _note(problem)
    return 0


@contextmanager
def writable_store(location: str) -> Iterator[Store]:
    """The store to summarize into; a SQLite file this command created is removed again when it fails, with
    the folders made for it, so a failed summarize leaves every folder as it was (an existing store keeps its
    last release: it is written in one transaction)."""
    from medhelm.store import open_store
    from medhelm.store.backends import sqlite_path

    path = sqlite_path(location)
    if path is not None and path.is_symlink():
        path = Path(os.path.realpath(path))  # a failure removes what this command made, never the user's link
    # a link that leads nowhere after resolving (a loop) is the user's, never "created" here
    created = path is not None and not path.exists() and not path.is_symlink()
    was_empty = path is not None and not created and path.is_file() and path.stat().st_size == 0
    folders = _missing_folders(path.parent) if created and path is not None else []
    try:
        # the schema of a new store is made inside summarize's transaction (migrate): all or nothing
        with open_store(location, create=True, make_schema=False) as store:
            yield store
    except BaseException:
        if (created or was_empty) and path is not None:
            with suppress(OSError):  # nothing to remove where the store could not even be made: the error says why
                for leftover in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"),
                                 path.with_name(path.name + "-journal")):
                    leftover.unlink(missing_ok=True)
                if created:
                    path.unlink(missing_ok=True)
                else:
                    os.truncate(path, 0)  # an empty file given as the store is left empty, as it was
        for folder in folders:  # the folders made for it, deepest first (rmdir: only while empty)
            with suppress(OSError):
                folder.rmdir()
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """The folders on the way to ``folder`` that do not exist yet, deepest first."""
    missing = []
    for candidate in (folder, *folder.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    return missing


def summarize_options(args: argparse.Namespace, release: str, suites: list[str]) -> SummarizeOptions:
    """Every input checked (deployments, prices) before the store is touched."""
    from medhelm.deployments import DeploymentRegistry
    from medhelm.helm_env import METADATA_FILE, read_metadata
    from medhelm.store import SummarizeOptions
    from medhelm.store.costs import PriceTable

    if args.bootstrap < 0:
        raise ConfigError("--bootstrap must be >= 0")
    registry = DeploymentRegistry.load(Path(args.local_path))
    prices_path = args.prices or (Path(args.local_path) / "prices.yaml")
    prices = PriceTable.configured(prices_path if args.prices or prices_path.is_file() else None)
    metadata_path = Path(args.local_path) / METADATA_FILE  # HELM's prod_env/model_metadata.yaml, if there
    metadata = {m.name: m.to_json() for m in read_metadata(metadata_path)} if metadata_path.is_file() else {}
    return SummarizeOptions(release=release, suites=tuple(suites), replicates=args.bootstrap, seed=args.seed,
                            redact=args.redact, rank_baselines=args.rank_baselines, prices=prices,
                            allow_fewer_runs=args.allow_fewer_runs, min_cell=args.min_cell,
                            redacted_deployments=frozenset(d.name for d in registry if d.redacted),
                            model_metadata=metadata)


def run_summarize(store: Store, sources: Iterable[RunSource], options: SummarizeOptions) -> SummaryReport:
    from medhelm.store import summarize

    return summarize(store, sources, options, note=_note)


def _note(msg: str) -> None:
    from medhelm.errors import one_line

    print(f"note: {one_line(msg)}", file=sys.stderr)


def print_report(store: Store, report: SummaryReport, top: int = 10) -> None:
    """The release's leaderboard as the dashboard computes it (``store.tables.leaderboard`` on the stored
    cells): the models first, then the reference baselines; with baselines, each model's standing against
    them ("beats k of n"), which needs no second model; one line says why a lone model has no win rate."""
    from medhelm.store import read
    from medhelm.store.tables import leaderboard

    print(f"release '{report.release}': {report.runs} runs, {report.instances} instances, {report.benchmarks} "
          f"benchmarks, {report.models} models in {report.seconds:.1f} s -> {store.url}")
    if report.skipped:
        print(f"  {len(report.skipped)} run(s) skipped (see notes above)")
    ranked = read.meta(store, report.release).get("rank_baselines") == "1"
    rows = leaderboard(read.load_cells(store, report.release), rank_baselines=ranked)
    if not rows:
        return
    if not ranked:  # the models, then the baselines (each group best first)
        rows = [r for r in rows if not r.baseline] + [r for r in rows if r.baseline]
    costs = {(m["model"], m["deployment"]): (m.get("cost_usd"), m.get("jury_cost_usd"))
             for m in read.models(store, report.release)}
    priced = any(c is not None for pair in costs.values() for c in pair)
    money = f"{'candidate USD':>13} {'jury USD':>10}  " if priced else ""
    models = [r for r in rows if not r.baseline]
    lone = len(models) == 1 and not ranked
    versus = any(r.baseline for r in rows)
    standing = f"{'vs baselines (95% CI)':<27}" if versus else ""
    print(f"  {'rank':>4}  {'mean win rate (95% CI)':<24} {standing}{money}model [deployment]")
    for r in rows[:top]:
        wr = ("none: one model" if lone and not r.baseline else "-") if r.win_rate is None else f"{r.win_rate:.3f}"
        ci = "" if r.win_rate_low is None else f" ({r.win_rate_low:.2f}-{r.win_rate_high:.2f})"
        if priced:
            own, jury = costs.get((r.model, r.deployment), (None, None))
            money = f"{_usd(own):>13} {_usd(jury):>10}  "
        if versus:
            standing = f"{r.vs_baselines():<27}"
        rank = r.rank if r.rank is not None else "base" if r.baseline else "-"
        print(f"  {rank:>4}  {wr + ci:<24} {standing}{money}{r.model} [{r.deployment}]")
    if len(rows) > top:
        print(f"  ... {len(rows) - top} more: medhelm serve --store {store.url} --release {report.release}")
    if lone:
        print("  no win rate: it is the share of other models a model beats, benchmark by benchmark, so it needs "
              "two; " + ("'vs baselines' counts the baselines this one beats head to head (--rank-baselines ranks "
                         "it with them)" if versus else "add a model, or the reference baselines (run --baselines)"))


def _usd(value: float | None) -> str:
    return "no price" if value is None else f"{value:.4f}"
