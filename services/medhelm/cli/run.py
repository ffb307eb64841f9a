"""`medhelm run` (helm-run compatible) and `medhelm validate` — a thin door onto the pipeline."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

from medhelm.cli import SEED_MAX, int_in
from medhelm.errors import ConfigError, MedhelmError
from medhelm.inference.pacing import AUTO, AUTO_CEILING


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("what to run (HELM-compatible)")
    src.add_argument("-r", "--run-entries", nargs="+", default=[], metavar="ENTRY",
                     help="run entries like 'pubmed_qa:model=qwen/qwen2.5-7b-instruct,model_deployment=...'")
    src.add_argument("-c", "--conf-paths", nargs="+", default=[], metavar="CONF",
                     help="run-entry files: entries: [{description: \"...\", priority: 1}]")
    src.add_argument("--models-to-run", nargs="+", metavar="MODEL", help="only entries for these models")
    src.add_argument("--priority", type=int_in(-10**6, 10**6), help="only entries with priority <= this")
    src.add_argument("--suite", default="default", help="name grouping these runs (default: %(default)s)")
    src.add_argument("-m", "--max-eval-instances", type=_positive, metavar="N",
                     help="sample at most N instances per run (seeded, reproducible)")
    src.add_argument("--num-output-tokens", type=int_in(1, 10**7), metavar="N", help="override max output tokens")
    src.add_argument("--seed", type=int_in(0, SEED_MAX), default=0, help="sampling and request seed (default: 0)")
    src.add_argument("--baselines", action="store_true",
                     help="also run the reference baselines on every benchmark (zero cost, no model): random and "
                          "majority answers for multiple choice/classification, empty and copied input for generation")
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
    how.add_argument("-n", "--max-concurrency", "--num-threads", dest="max_concurrency", type=concurrency_arg,
                     default="auto", metavar="N|auto",
                     help="requests in flight per run: a number (a hard cap), or auto: each remote deployment is "
                          f"paced to its server, at most {AUTO_CEILING} in flight (default: %(default)s)")
    how.add_argument("-d", "--dry-run", action="store_true", help="plan and count; call no model")
    how.add_argument("--skip-completed-runs", action="store_true", help="skip runs that already finished")
    how.add_argument("--disable-cache", action="store_true", help="do not read or write the request cache")
    how.add_argument("--offline", action="store_true", default=os.environ.get("MEDHELM_OFFLINE") == "1",
                     help="never download data (env MEDHELM_OFFLINE=1)")
    how.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    how.add_argument("--max-attempts", type=_positive, default=6, metavar="N",
                     help="tries per model request, retries included (default: %(default)s)")
    how.add_argument("--retry-base-delay", type=_non_negative, default=0.5, metavar="SECONDS",
                     help="first retry back-off ceiling, doubled per retry, full jitter (default: %(default)s)")
    how.add_argument("--rate-limit-wait", type=_non_negative, default=600.0, metavar="SECONDS",
                     help="a request refused for a rate limit (429, or a stated Retry-After) is retried past "
                          "--max-attempts until its first refusal is this old; 0: --max-attempts only "
                          "(default: %(default)s)")
    obs = p.add_argument_group("metrics (Prometheus; docs/observability.md)")
    obs.add_argument("--metrics-port", type=_port, default=_env_int("MEDHELM_METRICS_PORT"), metavar="PORT",
                     help="serve /metrics on this port while running; 0 = any free port (env MEDHELM_METRICS_PORT)")
    obs.add_argument("--metrics-host", default=os.environ.get("MEDHELM_METRICS_HOST", "127.0.0.1"),
                     help="address for /metrics (default: %(default)s; env MEDHELM_METRICS_HOST, 0.0.0.0 in pods)")
    obs.add_argument("--metrics-linger", type=_non_negative, default=_env_float("MEDHELM_METRICS_LINGER_S", 0.0),
                     metavar="SECONDS", help="keep serving /metrics this long after the end, for a last scrape "
                                             "(env MEDHELM_METRICS_LINGER_S)")
    obs.add_argument("--pushgateway", default=os.environ.get("MEDHELM_PUSHGATEWAY") or None, metavar="URL",
                     help="also push the final values to this Prometheus Pushgateway (env MEDHELM_PUSHGATEWAY)")
    obs.add_argument("--prices", type=Path, default=None,
                     help="prices YAML for the cost counters (default: <local-path>/prices.yaml if present)")


add_validate_arguments = add_arguments


def main(args: argparse.Namespace) -> int:
    from medhelm.pipeline import run_suite

    options, plans = plan_from_args(args)
    if args.dry_run:
        print_dry_run(plans)
        return 0
    with MetricsExport(args, service="run", grouping={"suite": options.suite}) as telemetry:
        with output_errors(options.output_path, options.cache_path.parent):
            outcomes = asyncio.run(run_suite(plans, options, telemetry=telemetry))
        return report(outcomes, options)  # before lingering: the summary does not wait for the last scrape


@contextlib.contextmanager
def output_errors(folder, cache_folder=None):
    """A full or read-only output folder (or request-cache folder): one line naming it (exit 74), not a crash."""
    import errno
    import sqlite3

    from medhelm.errors import OutputUnwritable

    try:
        yield
    except OSError as err:
        mapped = OutputUnwritable.from_os_error(err, folder)
        if mapped is None:
            raise
        raise mapped from None
    except sqlite3.OperationalError as err:  # the request cache: SQLite's own codes, not errno
        primary = getattr(err, "sqlite_errorcode", 0) & 0xFF
        code = {sqlite3.SQLITE_FULL: errno.ENOSPC, sqlite3.SQLITE_READONLY: errno.EROFS}.get(primary)
        if code is None and primary in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN) and cache_folder is not None:
            code = _folder_trouble(cache_folder)  # e.g. WAL's shared memory file cannot grow on a full disk
        if code is None or cache_folder is None:
            raise
        raise OutputUnwritable.from_os_error(OSError(code, "sqlite"), cache_folder) from None


def _folder_trouble(folder) -> int | None:
    """ENOSPC/EROFS when the folder's file system is (nearly) full or read-only, else None."""
    import errno

    try:
        fs = os.statvfs(folder)
    except OSError:
        return None
    if fs.f_flag & os.ST_RDONLY:
        return errno.EROFS
    return errno.ENOSPC if fs.f_bavail * fs.f_frsize < 1024 * 1024 else None


def report(outcomes, options) -> int:
    """The summary table, then one error line per run that stopped or left instances failing (run and job)."""
    _print_summary(outcomes, options)
    _note_truncation(outcomes)
    failed = [o for o in outcomes if o.error]
    for o in failed:
        print(f"medhelm: error: {o.plan.spec.name}: {o.error}", file=sys.stderr)
    return 2 if failed else 0


def _note_truncation(outcomes) -> None:
    """One note per run whose prompts were cut to fit the context window (also under -q: a cut note or record
    changes what was evaluated, and the stat alone is easy to miss)."""
    from medhelm.rundir import RunDir

    for o in outcomes:
        if o.skipped or not RunDir(o.plan.run_dir).has_stats():
            continue
        cut = sum(s.sum for s in RunDir(o.plan.run_dir).stats() if s.name == "prompt_truncated")
        if cut:
            print(f"note: {o.plan.spec.name}: {int(cut)} of {o.status.get('instances_done', '?')} prompt(s) were cut "
                  "to fit the context window (stat prompt_truncated; raise max_sequence_length or shorten the input)",
                  file=sys.stderr)


class MetricsExport:
    """``--metrics-port`` / ``--pushgateway``: a Telemetry served while the block runs (None when neither is
    asked for: no metric work at all), lingering ``--metrics-linger`` seconds, then pushed once."""

    def __init__(self, args: argparse.Namespace, *, service: str, grouping: dict[str, str]) -> None:
        self._args, self._service, self._grouping = args, service, grouping
        self._server = None
        self.port: int | None = None
        self.telemetry = None

    def __enter__(self):
        args = self._args
        if args.metrics_port is None and not args.pushgateway:
            return None
        from medhelm.store.costs import PriceTable
        from medhelm.telemetry import Telemetry, serve_http

        prices_path = args.prices or (Path(args.local_path) / "prices.yaml")
        prices = PriceTable.configured(prices_path if args.prices or prices_path.is_file() else None)
        self.telemetry = Telemetry(self._service, prices=prices)
        if args.metrics_port is not None:
            self._server, self.port = serve_http(self.telemetry, args.metrics_port, args.metrics_host)
            print(f"medhelm {self._service}: metrics http://{args.metrics_host}:{self.port}/metrics",
                  file=sys.stderr, flush=True)
        return self.telemetry

    def __exit__(self, *exc: object) -> None:
        if self.telemetry is None:
            return
        args = self._args
        if args.pushgateway:
            from medhelm.telemetry import push_final

            problem = push_final(self.telemetry, args.pushgateway, job=f"medhelm-{self._service}",
                                 grouping=self._grouping)
            if problem:
                print(f"medhelm: warning: {problem}", file=sys.stderr)
        if self._server is not None:
            if args.metrics_linger > 0 and exc[0] is None:
                _linger(args.metrics_linger, self._service)
            self._server.shutdown()


def _linger(seconds: float, service: str) -> None:
    """Keep serving /metrics ``seconds`` longer, for a last scrape. Said on stderr when it starts; SIGTERM
    (a pod deleted, a test that has scraped) ends it early and the process exits as it would have (0)."""
    import signal
    import threading

    done = threading.Event()
    main = threading.current_thread() is threading.main_thread()  # signal handlers: the main thread only
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set()) if main else None
    try:
        print(f"medhelm {service}: metrics lingering {seconds:g} s (SIGTERM ends it)", file=sys.stderr, flush=True)
        done.wait(seconds)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def main_validate(args: argparse.Namespace) -> int:
    """Everything `run` checks before calling a model, plus loading every instance."""
    from medhelm.benchmarks.base import StreamedInstances
    from medhelm.inference import llamacpp_check
    from medhelm.pipeline.sampling import select_instances, stream_run

    llamacpp_check.check_fresh()  # the embedded runtime answers a test prompt now, whatever an earlier check said
    _, plans = plan_from_args(args)
    for result in llamacpp_check.results():
        print(f"ok  embedded runtime: llama-cpp-python {result.version} answered a test prompt on this CPU "
              f"({result.cpu})")
    for plan in plans:
        spec = plan.spec
        try:
            source = plan.benchmark.instances()  # loaded once: a loader's notes (skipped rows) print once
            if isinstance(source, StreamedInstances):
                loaded = source
                n = stream_run(plan.benchmark, spec).count  # a streamed benchmark is counted, not held
            else:
                loaded = list(source)
                n = len(select_instances(loaded, spec.max_eval_instances, spec.seed, source=spec.benchmark.name))
        except MedhelmError as err:
            raise err.with_context(f"run '{spec.name}': ") from None
        print(f"ok  {spec.name}  ({n} instances, metrics: {', '.join(m.name for m in spec.benchmark.metrics)})")
        _say_loaded(len(loaded), getattr(plan.benchmark, "expected_count", None),
                    getattr(plan.benchmark, "instance_set", None), spec.benchmark.name)
    print(f"{len(plans)} run(s) valid")
    from medhelm.deployments import DeploymentRegistry

    for line in DeploymentRegistry.load(args.local_path).kept_lines():  # HELM entries of classes we do not run
        print(line)
    return 0


def _say_loaded(n: int, expected: int | None, chosen, name: str) -> None:
    """What ``validate`` says about the instances it loaded: the instance set (when the benchmark has several)
    and how the count compares with the published one. "as on MedHELM's leaderboard" only for the leaderboard's
    set at its count; "as published" only for a benchmark with a single set."""
    if chosen is not None:
        kind = "MedHELM's leaderboard set" if chosen.leaderboard else "not MedHELM's leaderboard set"
        print(f"    instance_set={chosen.name} ({kind}): {chosen.description}")
    if expected is None:
        print(f"    loaded {n:,} instances (no published count to compare with: `medhelm describe {name}` says why)")
    elif n != expected:
        where = "MedHELM's leaderboard evaluated" if chosen is not None and chosen.leaderboard else \
            "the full published data gives"
        print(f"    note: loaded {n:,} instances; {where} {expected:,} (a partial mirror, another release of the "
              f"file, or rows skipped as not part of the benchmark)")
    elif chosen is None:
        print(f"    loaded {n:,} instances: as published")
    elif chosen.leaderboard:
        print(f"    loaded {n:,} instances: as on MedHELM's leaderboard")
    else:
        print(f"    loaded {n:,} instances: every published item of instance_set={chosen.name}")


def plan_from_args(args: argparse.Namespace):
    from medhelm.files import check_output_folder, plain_name
    from medhelm.pipeline import RunOptions, plan_runs
    from medhelm.runentries import parse_run_entry, read_conf, select

    plain_name(args.suite, what="--suite")
    check_output_folder(args.output_path, flag="--output-path")

    entries = [parse_run_entry(e) for e in args.run_entries]
    for conf in args.conf_paths:
        entries.extend(read_conf(conf))
    if not entries:
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    entries = select(entries, priority=args.priority, models_to_run=args.models_to_run)
    if not entries:
        raise MedhelmError("no run entry matches --priority/--models-to-run")
    options = RunOptions(suite=args.suite, output_path=args.output_path, local_path=args.local_path,
                         max_eval_instances=args.max_eval_instances,
                         max_concurrency=AUTO_CEILING if args.max_concurrency == AUTO else args.max_concurrency,
                         adaptive=args.max_concurrency == AUTO, rate_share=_rate_share(args),
                         dry_run=getattr(args, "dry_run", False),
                         skip_completed=getattr(args, "skip_completed_runs", False), data_dir=args.data_dir,
                         offline=args.offline, use_cache=not args.disable_cache, seed=args.seed,
                         num_output_tokens=args.num_output_tokens, progress=not args.quiet,
                         max_attempts=getattr(args, "max_attempts", 6),
                         retry_base_delay_s=getattr(args, "retry_base_delay", 0.5),
                         rate_limit_wait_s=getattr(args, "rate_limit_wait", 600.0),
                         data_roots=tuple(args.data_roots), any_data_path=args.allow_any_data_path)
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise ConfigError("--data-dir is not a directory", path=args.data_dir)
    return options, plan_runs(entries, options, with_baselines=getattr(args, "baselines", False))


def concurrency_arg(value: str) -> int | str:
    """``--max-concurrency``: ``auto`` or an integer from 1 to 10,000."""
    return AUTO if value.strip().lower() == AUTO else int_in(1, 10_000)(value)


def _rate_share(args: argparse.Namespace) -> float:
    """This process's part of a deployment's configured rate budget: a Job's shards running at once split it
    evenly (``MEDHELM_SHARD_PARALLELISM``, set by the Job; else every shard may run at once)."""
    count = getattr(args, "shard_count", None)
    if not count:
        return 1.0
    parallel = os.environ.get("MEDHELM_SHARD_PARALLELISM", "")
    running = min(int(count), int(parallel)) if parallel.isdigit() and int(parallel) > 0 else int(count)
    return 1.0 / max(1, running)


def print_dry_run(plans) -> None:
    from medhelm.benchmarks.base import PromptBudget
    from medhelm.tokens import approx_tokens
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
            from medhelm.rundir import RunDir

            run_dir = RunDir(o.plan.run_dir)
            for s in run_dir.stats() if run_dir.has_stats() else []:
                if s.name == main and s.split == spec.benchmark.main_split and s.mean is not None:
                    mean = f"{s.mean:.3f}" + (f" ({s.unscored} unscored)" if s.unscored else "")
        state = "skipped" if o.skipped else ("stopped" if o.error else st.get("status", "?"))
        bench = spec.name.split(":", 1)[0]  # the benchmark and its arguments; the model has its own column
        rows.append((bench, spec.deployment, f"{st.get('instances_done', 0)}/{st.get('instances_total', '?')}",
                     f"{main}={mean}", str(st.get("errors", 0)), str(st.get("cache_hits", 0)),
                     f"{o.wall_time_s:.1f}s", state))
    print()
    _table(("benchmark", "deployment", "instances", "main metric", "errors", "cached", "time", "status"), rows)
    paced = {o.plan.spec.deployment: o.pacing for o in outcomes if o.pacing}  # the last run's word per deployment
    if paced:
        print()
        for deployment, line in paced.items():
            print(f"pacing {deployment}: {line}")
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


def _non_negative(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{value}'") from None
    if not x >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got '{value}'")
    return x


def _port(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got '{value}'") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got '{value}'")
    return n


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return _port(value)
    except argparse.ArgumentTypeError as err:
        raise ConfigError(str(err), field=name) from None


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return _non_negative(value)
    except argparse.ArgumentTypeError as err:
        raise ConfigError(str(err), field=name) from None


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None
