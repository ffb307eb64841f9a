"""`medhelm job` (one shard of a suite, as one index of a Kubernetes Indexed Job) and `medhelm collect`.

A shard is ``medhelm run`` restricted to the positions ``position % count == index``: the same plan,
the same pipeline, the same records — written to ``shards/`` of each run directory on the shared
volume. Scenarios, jury and metrics may come from the gRPC services (``--*-service``) or be computed
in-process; the records are identical either way. ``medhelm collect`` merges the shards (and with
``--summarize`` then aggregates the suite into the results store the dashboard reads).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from medhelm.cli import int_in
from medhelm.cli import run as run_cli
from medhelm.errors import ConfigError, MedhelmError

if TYPE_CHECKING:  # pragma: no cover
    from medhelm.pipeline import RunDir


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
    svc.add_argument("--tls-ca", type=Path, default=_env_path("MEDHELM_TLS_CA"),
                     help="CA that signed the services' certificates: use TLS (env MEDHELM_TLS_CA)")
    svc.add_argument("--tls-cert", type=Path, default=_env_path("MEDHELM_TLS_CERT"),
                     help="client certificate for mutual TLS (env MEDHELM_TLS_CERT)")
    svc.add_argument("--tls-key", type=Path, default=_env_path("MEDHELM_TLS_KEY"),
                     help="client key for mutual TLS (env MEDHELM_TLS_KEY)")
    svc.add_argument("--service-token-file", type=Path, default=_env_path("MEDHELM_SERVICE_TOKEN_FILE"),
                     help="file holding this caller's bearer token for the services' caller authorization "
                          "(env MEDHELM_SERVICE_TOKEN_FILE; mount it from a Kubernetes Secret)")


def add_collect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="default", help="suite to merge (default: %(default)s)")
    p.add_argument("-o", "--output-path", type=Path, default=Path("benchmark_output"), help="results root")
    p.add_argument("--summarize", action="store_true",
                   help="then `medhelm summarize` the suite into the results store (env MEDHELM_STORE_URL or "
                        "<output-path>/results.sqlite), so the dashboard shows it")


def main_job(args: argparse.Namespace) -> int:
    from medhelm.pipeline import run_suite
    from medhelm.rpc.remote import Endpoint, RemoteBenchmark, RemoteScoring

    shard = _shard(args)
    options, plans = run_cli.plan_from_args(args)
    if args.dry_run:
        run_cli.print_dry_run(plans)
        return 0
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_cert and not args.tls_ca):
        raise ConfigError("mutual TLS needs --tls-ca, --tls-cert and --tls-key together")
    from medhelm.rpc.authz import read_token

    token = read_token(args.service_token_file) if getattr(args, "service_token_file", None) else None
    endpoint = {name: Endpoint(addr, ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, token=token) if addr else None
                for name, addr in (("scenarios", args.scenario_service), ("jury", args.jury_service),
                                   ("metrics", args.metrics_service))}
    if endpoint["scenarios"] is not None:
        local = [p.spec.name for p in plans if p.deployment.kind.value == "llamacpp"]
        if local:  # its prompts are cut to fit with its own tokenizer, which the service does not have
            raise ConfigError(f"run '{local[0]}' evaluates an in-process llama.cpp model: "
                              f"run it without --scenario-service")
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
        return run_cli.report(outcomes, options)  # the same summary and error lines as `medhelm run`


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
    from medhelm.pipeline import RunDir, collect_shards

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
        return summarize_cli.main(parser.parse_args(["--suite", args.suite, "-o", str(args.output_path)]))
    return 0


def missing_shards(run: RunDir) -> list[int]:
    """Shard indexes that still owe instances (from the shard files' ``-of-N`` and the selection)."""
    counts = {int(f.stem.rsplit("-of-", 1)[1]) for f in (run.path / "shards").glob("shard-*-of-*.jsonl")} \
        if (run.path / "shards").is_dir() else set()
    if len(counts) != 1:
        return []
    count = counts.pop()
    done = run.finished_ids()  # 8 bytes an id, the selection streamed: any suite size
    return sorted({pos % count for pos, iid in enumerate(run.iter_selection()) if iid not in done})


def _shard(args: argparse.Namespace):
    from medhelm.pipeline import Shard

    if args.shard_index is None or args.shard_count is None:
        raise MedhelmError("medhelm job needs --shard-index and --shard-count "
                           "(or env JOB_COMPLETION_INDEX and MEDHELM_SHARD_COUNT)")
    return Shard(args.shard_index, args.shard_count)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None
