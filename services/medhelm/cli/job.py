"""`medhelm job` (one shard of a suite, as one index of a Kubernetes Indexed Job) and `medhelm collect`.

A shard is ``medhelm run`` restricted to the positions ``position % count == index``: the same plan,
the same pipeline, the same records — written to ``shards/`` of each run directory on the shared
volume. Scenarios, jury and metrics may come from the gRPC services (``--*-service``) or be computed
in-process; the records are identical either way. ``medhelm collect`` merges the shards (and with
``--summarize`` then aggregates the suite into the results store the dashboard reads).

A scheduled run (a CronJob's Indexed Job, docs/kubernetes.md "Schedules") adds ``--suite-date``: the suite
is ``<--suite>-<the CronJob's scheduled date>`` (medhelm/schedules.py), the same for every shard and retry;
and ``--summarize-when-complete``: after its own shard succeeded, each shard asks for a finalize check
(``finalize_when_complete``). No shard waits for another (no deadlock with parallelism < completions) and no
pod needs the Kubernetes API. The check and the summary are one step under one lock, so "every shard is done"
is decided on exactly the files ``collect`` then merges:

* A shard's records are written and closed, then it writes ``.finalize.wanted`` in the suite's folder, then
  tries the exclusive lock file ``.finalize.lock`` (``O_CREAT|O_EXCL``, atomic on NFSv3+/CephFS/local disks).
* Only the lock's holder reads the record files to decide (``owed_shards``: positions without a successful
  record, from the same record files ``collect`` reads), and only the holder collects, which merges the shard
  files and deletes them; so no check ever reads a file a collect is deleting.
* The holder removes ``.finalize.wanted`` before it checks, so its check sees every record written before
  that; when the suite is complete it runs ``collect --summarize`` into the release of the suite's name and
  writes ``.summarized``. A shard that finds the lock taken exits 0: it has left ``.finalize.wanted``, and the
  holder, after releasing the lock, checks again when it finds that file there. So the last shard to finish is
  always seen by some check, whatever the order the shards finish in (tests/core/test_finalize_orders.py forces
  each order).
* A shard that finds the suite incomplete exits 0; a failed summarize releases the lock and fails the pod (its
  retry finalizes again); a lock left by a killed pod is broken after ``--finalize-stale-minutes``;
  ``.summarized`` records the release so a late retry does not redo it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from medhelm.cli import float_in, int_in
from medhelm.cli import run as run_cli
from medhelm.errors import ConfigError, MedhelmError
from medhelm.files import plain_name

if TYPE_CHECKING:  # pragma: no cover
    from medhelm.rundir import RunDir


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    run_cli.add_arguments(p)
    shard = p.add_argument_group("shard (Kubernetes Indexed Job)")
    shard.add_argument("--shard-index", type=int_in(0, 1_000_000), default=os.environ.get("JOB_COMPLETION_INDEX"),
                       help="this worker's index, 0-based (default: env JOB_COMPLETION_INDEX)")
    shard.add_argument("--shard-count", type=int_in(1, 1_000_000), default=os.environ.get("MEDHELM_SHARD_COUNT"),
                       help="number of shards = the Job's completions (default: env MEDHELM_SHARD_COUNT)")
    svc = p.add_argument_group("services (host:port; omitted = computed in this process)")
    svc.add_argument("--scenario-service", metavar="ADDR", default=os.environ.get("MEDHELM_SCENARIO_SERVICE"),
                     help="ScenarioService: instances and prompts (env MEDHELM_SCENARIO_SERVICE)")
    svc.add_argument("--jury-service", metavar="ADDR", default=os.environ.get("MEDHELM_JURY_SERVICE"),
                     help="JuryService: jury metrics (env MEDHELM_JURY_SERVICE)")
    svc.add_argument("--metrics-service", metavar="ADDR", default=os.environ.get("MEDHELM_METRICS_SERVICE"),
                     help="MetricsService: every other metric (env MEDHELM_METRICS_SERVICE)")
    svc.add_argument("--benchmark-root", dest="benchmark_roots", action="append", type=Path,
                     default=[Path(p) for p in os.environ.get("MEDHELM_BENCHMARK_ROOTS", "").split(os.pathsep) if p],
                     metavar="DIR", help="the folder shared with the services (theirs is the same): file arguments "
                                         "(config_path= ...) are sent to them as paths relative to it; repeatable "
                                         "(env MEDHELM_BENCHMARK_ROOTS, ':'-separated)")
    svc.add_argument("--tls-ca", type=Path, default=_env_path("MEDHELM_TLS_CA"),
                     help="CA that signed the services' certificates: use TLS (env MEDHELM_TLS_CA)")
    svc.add_argument("--tls-cert", type=Path, default=_env_path("MEDHELM_TLS_CERT"),
                     help="client certificate for mutual TLS (env MEDHELM_TLS_CERT)")
    svc.add_argument("--tls-key", type=Path, default=_env_path("MEDHELM_TLS_KEY"),
                     help="client key for mutual TLS (env MEDHELM_TLS_KEY)")
    svc.add_argument("--service-token-file", type=Path, default=_env_path("MEDHELM_SERVICE_TOKEN_FILE"),
                     help="file holding this caller's bearer token for the services' caller authorization "
                          "(env MEDHELM_SERVICE_TOKEN_FILE; mount it from a Kubernetes Secret)")
    svc.add_argument("--service-retry-s", type=float_in(0, 86_400), default=None, metavar="S",
                     help="how long a call waits for a service that is down (restarting, drained) before the "
                          "instance fails as unreachable (env MEDHELM_SERVICE_RETRY_S; default 120)")
    sched = p.add_argument_group("scheduled runs (a CronJob's Job: docs/kubernetes.md)")
    sched.add_argument("--suite-date", action="store_true",
                       help="append the scheduled date to --suite: <suite>-<date> from the CronJob's scheduled "
                            "time in the Job's name (env MEDHELM_JOB_NAME, from the downward API)")
    sched.add_argument("--date-format", default=None,
                       help="strftime format of that date (default: %%Y-%%m-%%d)")
    sched.add_argument("--timezone", default=None, help="IANA time zone of that date (default: UTC)")
    sched.add_argument("--summarize-when-complete", action="store_true",
                       help="after this shard: if every shard is done, collect and summarize the suite into "
                            "the release of its name (env MEDHELM_STORE_URL or <output-path>/results.sqlite)")
    sched.add_argument("--finalize-stale-minutes", type=int_in(1, 10_000), default=120,
                       help="break a finalize lock older than this (its pod was killed; default %(default)s)")


def add_collect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="default", help="suite to merge (default: %(default)s)")
    p.add_argument("-o", "--output-path", type=Path, default=Path("benchmark_output"), help="results root")
    p.add_argument("--summarize", action="store_true",
                   help="then `medhelm summarize` the suite into the results store (env MEDHELM_STORE_URL or "
                        "<output-path>/results.sqlite), so the dashboard shows it")
    p.add_argument("--local-path", type=Path, default=None,
                   help="with --summarize: the folder with model_deployments.yaml and prices.yaml the runs used "
                        "(as `run`/`job` --local-path; default: summarize's own default, prod_env)")


def main_job(args: argparse.Namespace) -> int:
    from medhelm.pipeline import run_suite
    from medhelm.rpc.remote import Endpoint, RemoteBenchmark, RemoteScoring

    shard = _shard(args)
    if args.suite_date:
        args.suite = scheduled_suite(args.suite, os.environ.get("MEDHELM_JOB_NAME"), tz=args.timezone,
                                     date_format=args.date_format)
    if args.summarize_when_complete and (Path(args.output_path) / "runs" / plain_name(args.suite, what="--suite")
                                         / SUMMARIZED).is_file():
        # a late retry or a duplicate pod of a summarized run: leave the finished suite as it is
        print(f"suite {args.suite}: already summarized; nothing to do")
        return 0
    options, plans = run_cli.plan_from_args(args)
    if args.dry_run:
        run_cli.print_dry_run(plans)
        return 0
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_cert and not args.tls_ca):
        raise ConfigError("mutual TLS needs --tls-ca, --tls-cert and --tls-key together")
    from medhelm.rpc.authz import read_token

    token = read_token(args.service_token_file) if getattr(args, "service_token_file", None) else None
    roots = tuple(getattr(args, "benchmark_roots", None) or ())
    from medhelm.rpc.remote import default_retry_s

    retry_s = args.service_retry_s if getattr(args, "service_retry_s", None) is not None else default_retry_s()
    endpoint = {name: Endpoint(addr, ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, token=token,
                               benchmark_roots=roots, retry_s=retry_s) if addr else None
                for name, addr in (("scenarios", args.scenario_service), ("jury", args.jury_service),
                                   ("metrics", args.metrics_service))}
    if any(endpoint.values()):
        from medhelm.rpc.remote import names_for

        for p in plans:  # a file the services cannot be named is refused now, before any record is written
            names_for(p.spec, roots)
    if endpoint["scenarios"] is not None:
        from medhelm.backend_kinds import BY_KIND

        local = [p for p in plans if BY_KIND[p.deployment.kind.value].in_process]
        if local:  # its prompts are cut to fit with its own tokenizer, which the service does not have
            raise ConfigError(f"run '{local[0].spec.name}' evaluates an in-process model "
                              f"(kind '{local[0].deployment.kind.value}'): run it without --scenario-service")
        plans = [dataclasses.replace(p, benchmark=RemoteBenchmark(p.spec, endpoint["scenarios"],
                                                                  p.max_prompt_tokens))
                 for p in plans]
    scoring = RemoteScoring(jury=endpoint["jury"], metrics=endpoint["metrics"])
    grouping = {"suite": options.suite, "shard": str(shard.index)}
    with run_cli.MetricsExport(args, service="job", grouping=grouping) as telemetry:
        with run_cli.output_errors(options.output_path, options.cache_path.parent):
            outcomes = asyncio.run(run_suite(plans, options, shard=shard, build_metrics=scoring,
                                             telemetry=telemetry))
        for o in outcomes:
            st = o.status
            print(f"shard {shard.index}/{shard.count}  {o.plan.spec.name}  "
                  f"{st.get('instances_done', 0)}/{st.get('instances_total', '?')}  {st.get('status', '?')}")
        _termination_message(shard, outcomes)
        code = run_cli.report(outcomes, options)  # the same summary and error lines as `medhelm run`
    if code == 0 and args.summarize_when_complete:
        return finalize_when_complete(options.suite, options.output_path, options.local_path,
                                      stale_minutes=args.finalize_stale_minutes)
    return code


def scheduled_suite(prefix: str, job_name: str | None, *, tz: str | None = None,
                    date_format: str | None = None) -> str:
    """The dated suite of a scheduled run (medhelm/schedules.py): from the CronJob's scheduled time, else
    (a Job started by hand from the CronJob) from now, with a note."""
    from datetime import datetime, timezone

    from medhelm import schedules

    when = schedules.scheduled_time(job_name)
    if when is None:
        when = datetime.now(timezone.utc)
        print("note: the Job's name carries no scheduled time (started by hand?): the suite takes today's date",
              file=sys.stderr)
    suite = schedules.dated_suite(prefix, when, tz=tz, date_format=date_format or schedules.DEFAULT_DATE_FORMAT)
    print(f"scheduled suite {suite}", flush=True)
    return suite


SUMMARIZED, LOCK, WANTED = ".summarized", ".finalize.lock", ".finalize.wanted"


def owed_shards(suite_dir: Path) -> dict[str, list[int]] | None:
    """Per run of the suite, the shard indexes still owing instances (read only: the record files as they
    are, the ones ``collect`` merges; ``finalize_when_complete`` calls it under the finalize lock, when no
    collect is deleting them). None when the suite has no run yet; -1 for a run another shard is preparing."""
    from medhelm.rundir import RunDir

    runs = sorted(p for p in suite_dir.iterdir() if RunDir(p).exists()) if suite_dir.is_dir() else []
    if not runs:
        return None
    owed: dict[str, list[int]] = {}
    for path in runs:
        run = RunDir(path)
        if not (path / "selection.json").is_file():  # another shard is preparing this run right now
            owed[path.name] = [-1]
            continue
        missing = missing_shards(run, count=max(_shard_counts(run), default=1))
        if missing:
            owed[path.name] = missing
    return owed


def finalize_when_complete(suite: str, output_path: Path, local_path: Path | None = None, *,
                           stale_minutes: int = 120) -> int:
    """Collect and summarize the suite if every shard is done; the check and the summary are made by the
    holder of the finalize lock, again while a shard finished during its hold (module doc)."""
    import json
    import socket
    import time

    from medhelm.rundir import write_atomic

    suite_dir = Path(output_path) / "runs" / suite
    if (suite_dir / SUMMARIZED).is_file():
        print(f"suite {suite}: already summarized")
        return 0
    if not suite_dir.is_dir():
        print(f"suite {suite}: no run yet; the last shard to finish summarizes")
        return 0
    wanted, lock = suite_dir / WANTED, suite_dir / LOCK
    # this shard's records are closed: ask for a check that sees them (the lock's holder, or ourselves)
    write_atomic(wanted, json.dumps({"shard": socket.gethostname(), "at": time.time()}) + "\n")
    while True:
        if not _take_lock(lock, suite, stale_minutes):
            print(f"suite {suite}: another shard is checking or summarizing it (and checks again for this one)")
            return 0
        try:
            wanted.unlink(missing_ok=True)  # taken: the check below sees every record closed before this
            if (suite_dir / SUMMARIZED).is_file():  # a shard that held the lock just before us finished it
                print(f"suite {suite}: already summarized")
                return 0
            owed = owed_shards(suite_dir)
            if owed is not None and not owed:
                code = main_collect(argparse.Namespace(suite=suite, output_path=Path(output_path), summarize=True,
                                                       local_path=local_path))
                if code == 0:
                    write_atomic(suite_dir / SUMMARIZED, json.dumps({"release": suite, "at": time.time()}) + "\n")
                    wanted.unlink(missing_ok=True)
                    print(f"suite {suite}: all shards done; summarized into release {suite}")
                return code
        finally:
            lock.unlink(missing_ok=True)
        if not wanted.exists():
            waiting = sorted({i for idx in (owed or {}).values() for i in idx if i >= 0})
            print(f"suite {suite}: shard(s) {', '.join(map(str, waiting)) or '?'} still owe instances; "
                  f"the last shard to finish summarizes")
            return 0
        # a shard finished while we held the lock (its own try failed): check again, for it


def _take_lock(lock: Path, suite: str, stale_minutes: int) -> bool:
    """Create the finalize lock (False: another shard holds it); a lock older than ``stale_minutes`` is
    moved aside first (its pod was killed mid-summarize; one mover wins)."""
    import json
    import socket
    import time

    try:
        age = time.time() - lock.stat().st_mtime
        if age > stale_minutes * 60:
            os.replace(lock, lock.with_name(f"{LOCK}.stale-{socket.gethostname()}"))
            print(f"suite {suite}: broke a finalize lock {int(age // 60)} min old")
    except FileNotFoundError:
        pass
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps({"holder": socket.gethostname(), "since": time.time()}) + "\n")
    return True


def _termination_message(shard, outcomes) -> None:
    """The shard's final counts in the pod's termination message (``medhelm k8s status`` reads it after the
    pod is gone from the scrape). Counts only; written only where Kubernetes asked for it."""
    path = os.environ.get("MEDHELM_TERMINATION_LOG")
    if not path:
        return
    done = sum(o.status.get("instances_done", 0) for o in outcomes)
    total = sum(o.status.get("instances_total", 0) for o in outcomes if isinstance(o.status.get("instances_total"), int))
    failed = sum(o.transient_failures for o in outcomes)
    try:
        Path(path).write_text(f"shard {shard.index}/{shard.count} done={done} total={total} failed={failed} "
                              f"runs={len(outcomes)} stopped={sum(1 for o in outcomes if o.error)}\n",
                              encoding="utf-8")
    except OSError:
        pass  # not in a pod (or a read-only path): the message is a convenience


def main_collect(args: argparse.Namespace) -> int:
    from medhelm.files import plain_name
    from medhelm.pipeline import collect_shards
    from medhelm.rundir import RunDir

    plain_name(args.suite, what="--suite")
    suite_dir = Path(args.output_path) / "runs" / args.suite
    runs = sorted(p for p in suite_dir.iterdir() if RunDir(p).exists()) if suite_dir.is_dir() else []
    if not runs:
        raise ConfigError(f"no runs in suite '{args.suite}'", path=suite_dir)
    incomplete = 0
    for path in runs:
        missing = missing_shards(RunDir(path))
        status = collect_shards(path)
        done, total = status.get("instances_done", 0), status.get("instances_total", 0)
        note = f"  (re-run shard index {', '.join(map(str, missing))})" if missing else ""
        print(f"{status.get('status', '?'):9} {done}/{total}  {path.name}{note}")
        incomplete += status.get("status") != "complete"
    if incomplete:
        print(f"medhelm: error: {incomplete} run(s) incomplete; re-run the listed shard indexes, then collect again",
              file=sys.stderr)
        return 2
    if getattr(args, "summarize", False):
        from medhelm.cli import summarize as summarize_cli

        parser = argparse.ArgumentParser(prog="medhelm summarize")
        summarize_cli.add_arguments(parser)
        local = ["--local-path", str(args.local_path)] if getattr(args, "local_path", None) else []
        return summarize_cli.main(parser.parse_args(["--suite", args.suite, "-o", str(args.output_path), *local]))
    return 0


def missing_shards(run: RunDir, count: int | None = None) -> list[int]:
    """Shard indexes that still owe instances: positions of the selection without a successful record in
    the run's record files, as ``index = position % count``. ``count``: the shard count, by default the one in
    the shard files' names (``-of-N``; none or several: [])."""
    if count is None:
        counts = _shard_counts(run)
        if len(counts) != 1:
            return []
        count = counts.pop()
    from medhelm.pipeline import finished_positions

    done = finished_positions(run)  # a bit a position, the ids joined on disk: any suite size
    return sorted({pos % count for pos, _ in enumerate(run.iter_selection()) if pos not in done})


def _shard_counts(run: RunDir) -> set[int]:
    """The shard counts named by the run's shard files (``shard-<i>-of-<n>.jsonl``)."""
    shards = run.path / "shards"
    return {int(f.stem.rsplit("-of-", 1)[1]) for f in shards.glob("shard-*-of-*.jsonl")} if shards.is_dir() else set()


def _shard(args: argparse.Namespace):
    from medhelm.pipeline import Shard

    if args.shard_index is None or args.shard_count is None:
        raise MedhelmError("medhelm job needs --shard-index and --shard-count "
                           "(or env JOB_COMPLETION_INDEX and MEDHELM_SHARD_COUNT)")
    return Shard(args.shard_index, args.shard_count)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None
