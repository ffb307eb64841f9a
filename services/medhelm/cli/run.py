"""`medhelm run` (helm-run compatible) and `medhelm validate` — a thin door onto the pipeline."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from medhelm.errors import ConfigError, MedhelmError


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("what to run (HELM-compatible)")
    src.add_argument("-r", "--run-entries", nargs="+", default=[], metavar="ENTRY",
                     help="run entries like 'pubmed_qa:model=qwen/qwen2.5-7b-instruct,model_deployment=...'")
    src.add_argument("-c", "--conf-paths", nargs="+", default=[], metavar="CONF",
                     help="run-entry files: entries: [{description: \"...\", priority: 1}]")
    src.add_argument("--models-to-run", nargs="+", metavar="MODEL", help="only entries for these models")
    src.add_argument("--priority", type=int, help="only entries with priority <= this")
    src.add_argument("--suite", default="default", help="name grouping these runs (default: %(default)s)")
    src.add_argument("-m", "--max-eval-instances", type=_positive, metavar="N",
                     help="sample at most N instances per run (seeded, reproducible)")
    src.add_argument("--num-output-tokens", type=_positive, metavar="N", help="override max output tokens")
    src.add_argument("--seed", type=int, default=0, help="sampling and request seed (default: 0)")
    where = p.add_argument_group("where")
    where.add_argument("-o", "--output-path", default="benchmark_output", type=Path,
                       help="results root (default: %(default)s)")
    where.add_argument("--local-path", default="prod_env", type=Path,
                       help="model_deployments.yaml and request cache (default: %(default)s)")
    where.add_argument("--data-dir", type=Path, default=_env_path("MEDHELM_DATA_DIR"),
                       help="local mirror of benchmark files (air-gapped networks; env MEDHELM_DATA_DIR)")
    where.add_argument("--data-root", dest="data_roots", action="append", type=Path, default=[], metavar="DIR",
                       help="a folder a benchmark YAML may name its dataset_file/prompt_file in, besides the YAML's "
                            "own folder (repeatable)")
    where.add_argument("--allow-any-data-path", action="store_true",
                       help="let a benchmark YAML name files anywhere on this machine (off: only under its folder "
                            "or a --data-root)")
    how = p.add_argument_group("how")
    how.add_argument("-n", "--max-concurrency", "--num-threads", dest="max_concurrency", type=_positive,
                     default=8, metavar="N", help="requests in flight per run (default: %(default)s)")
    how.add_argument("-d", "--dry-run", action="store_true", help="plan and count; call no model")
    how.add_argument("--skip-completed-runs", action="store_true", help="skip runs that already finished")
    how.add_argument("--disable-cache", action="store_true", help="do not read or write the request cache")
    how.add_argument("--offline", action="store_true", default=os.environ.get("MEDHELM_OFFLINE") == "1",
                     help="never download data (env MEDHELM_OFFLINE=1)")
    how.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


add_validate_arguments = add_arguments


def main(args: argparse.Namespace) -> int:
    from medhelm.pipeline import run_suite

    options, plans = plan_from_args(args)
    if args.dry_run:
        print_dry_run(plans)
        return 0
    outcomes = asyncio.run(run_suite(plans, options))
    _print_summary(outcomes, options)
    failed = [o for o in outcomes if o.error]
    for o in failed:
        print(f"medhelm: error: {o.plan.spec.name}: {o.error}", file=sys.stderr)
    return 2 if failed else 0


def main_validate(args: argparse.Namespace) -> int:
    """Everything `run` checks before calling a model, plus loading every instance."""
    from medhelm.pipeline.sampling import sample_run

    _, plans = plan_from_args(args)
    for plan in plans:
        spec = plan.spec
        n = len(sample_run(plan.benchmark, spec))
        print(f"ok  {spec.name}  ({n} instances, metrics: {', '.join(m.name for m in spec.benchmark.metrics)})")
    print(f"{len(plans)} run(s) valid")
    return 0


def plan_from_args(args: argparse.Namespace):
    from medhelm.pipeline import RunOptions, plan_runs
    from medhelm.runentries import parse_run_entry, read_conf, select

    entries = [parse_run_entry(e) for e in args.run_entries]
    for conf in args.conf_paths:
        entries.extend(read_conf(conf))
    if not entries:
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    entries = select(entries, priority=args.priority, models_to_run=args.models_to_run)
    if not entries:
        raise MedhelmError("no run entry matches --priority/--models-to-run")
    options = RunOptions(suite=args.suite, output_path=args.output_path, local_path=args.local_path,
                         max_eval_instances=args.max_eval_instances, max_concurrency=args.max_concurrency,
                         dry_run=getattr(args, "dry_run", False),
                         skip_completed=getattr(args, "skip_completed_runs", False), data_dir=args.data_dir,
                         offline=args.offline, use_cache=not args.disable_cache, seed=args.seed,
                         num_output_tokens=args.num_output_tokens, progress=not args.quiet,
                         data_roots=tuple(args.data_roots), any_data_path=args.allow_any_data_path)
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise ConfigError("--data-dir is not a directory", path=args.data_dir)
    return options, plan_runs(entries, options)


def print_dry_run(plans) -> None:
    from medhelm.benchmarks.base import PromptBudget, approx_tokens
    from medhelm.pipeline.sampling import sample_run

    rows = []
    for plan in plans:
        spec = plan.spec
        instances = sample_run(plan.benchmark, spec)
        budget = PromptBudget(max_prompt_tokens=plan.max_prompt_tokens)
        tokens = sum(approx_tokens(plan.benchmark.prompt(i, budget).text) for i in instances)
        rows.append((spec.name, str(len(instances)), f"~{tokens:,}", f"{len(instances) * spec.max_tokens:,}"))
    _table(("run (dry run: no model called)", "instances", "prompt tokens", "max output tokens"), rows)


def _print_summary(outcomes, options) -> None:
    rows = []
    for o in outcomes:
        spec, st = o.plan.spec, o.status
        main = spec.benchmark.main_metric
        mean = "-"
        if not o.skipped and st.get("instances_done"):
            from medhelm.pipeline import RunDir

            for s in RunDir(o.plan.run_dir).stats() if (o.plan.run_dir / "stats.json").is_file() else []:
                if s.name == main and s.split == spec.benchmark.main_split and s.mean is not None:
                    mean = f"{s.mean:.3f}" + (f" ({s.unscored} unscored)" if s.unscored else "")
        state = "skipped" if o.skipped else ("stopped" if o.error else st.get("status", "?"))
        bench = spec.name.split(":", 1)[0]  # the benchmark and its arguments; the model has its own column
        rows.append((bench, spec.deployment, f"{st.get('instances_done', 0)}/{st.get('instances_total', '?')}",
                     f"{main}={mean}", str(st.get("errors", 0)), str(st.get("cache_hits", 0)),
                     f"{o.wall_time_s:.1f}s", state))
    print()
    _table(("benchmark", "deployment", "instances", "main metric", "errors", "cached", "time", "status"), rows)
    print(f"\nResults: {options.suite_dir.resolve()}")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{value}'") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{value}'")
    return n


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None
