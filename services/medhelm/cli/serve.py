"""`medhelm serve [dashboard|scenarios|jury|metrics]` — the leaderboard, or one gRPC service."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from medhelm.cli import float_in, int_in
from medhelm.errors import ConfigError

TARGETS = ("dashboard", "scenarios", "jury", "metrics")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", default="dashboard", choices=TARGETS,
                   help="what to serve (default: the Streamlit leaderboard)")
    g = p.add_argument_group("network (the dashboard reads --host/--port too)")
    g.add_argument("--host", default=os.environ.get("MEDHELM_HOST", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1; 0.0.0.0 inside a pod; env MEDHELM_HOST)")
    g.add_argument("--port", type=int_in(0, 65535), default=None,
                   help="port (gRPC default 50051; 0 = any free port; the dashboard has its own default)")
    g.add_argument("--metrics-port", type=int_in(-1, 65535), default=9090,
                   help="Prometheus /metrics HTTP port; -1 = off; 0 = any free port (default: %(default)s)")
    g.add_argument("--health-port", type=int_in(0, 65535), default=None,
                   help="also answer plaintext grpc.health.v1 (only) on this port, off the event loop: "
                        "for kubelet gRPC probes when TLS is on (default: off; 0 = any free port)")
    g.add_argument("--max-message-mb", type=int_in(1, 2047), default=16, help="largest gRPC message (default: %(default)s)")
    g.add_argument("--grace-s", type=float_in(0, 3600), default=20.0, help="SIGTERM drain time (default: %(default)s)")
    g.add_argument("--max-concurrency", type=int_in(1, 10_000), default=16, help="items scored at once per stream")
    g.add_argument("--scoring-processes", type=int_in(0, 256), default=2,
                   help="metrics: worker processes for CPU-heavy metrics (ROUGE, long outputs), so health and "
                        "other calls are answered while they run; 0 = threads in the service process "
                        "(default: %(default)s)")
    g.add_argument("--max-calls", type=int_in(1, 100_000), default=32,
                   help="calls handled at once; more are refused RESOURCE_EXHAUSTED (health is never refused; "
                        "default: %(default)s)")
    g.add_argument("--max-call-s", type=float_in(0.001, 86_400), default=900.0,
                   help="longest a call may run before DEADLINE_EXCEEDED (default: %(default)s)")
    g.add_argument("--max-query-s", type=float_in(0.001, 3600), default=10.0,
                   help="cap on a metric's own database time limit, e.g. EHRSQL's (default: %(default)s)")
    g.add_argument("--max-aggregate-records", type=int_in(1, 10**9), default=1_000_000,
                   help="most records one AggregateRun call may stream (default: %(default)s)")
    g.add_argument("--max-aggregate-names", type=int_in(1, 10**7), default=10_000,
                   help="most distinct (stat, split) names one AggregateRun call may create (default: %(default)s)")
    g.add_argument("--max-aggregate-mb", type=int_in(1, 65_536), default=32,
                   help="most memory the stats of one AggregateRun call may hold, in MB (default: %(default)s)")
    g.add_argument("--max-aggregate-calls", type=int_in(1, 1024), default=4,
                   help="AggregateRun calls read at once; more wait their turn (default: %(default)s)")
    g.add_argument("--tls-cert", type=Path, help="server certificate (PEM); with --tls-key enables TLS")
    g.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    g.add_argument("--tls-client-ca", type=Path, help="CA for client certificates: enables mutual TLS")
    a = p.add_argument_group("who may call / see (docs/access.md)")
    a.add_argument("--allow-client", action="append", default=[], metavar="TYPE:VALUE",
                   help="gRPC: a client certificate identity allowed to call, matched in that field only: "
                        "uri:spiffe://..., dns:job.ns.svc, email:..., cn:...; repeatable; needs --tls-client-ca")
    a.add_argument("--caller-tokens", type=Path, default=Path(os.environ["MEDHELM_CALLER_TOKENS"])
                   if os.environ.get("MEDHELM_CALLER_TOKENS") else None,
                   help="gRPC: file of '<caller> <bearer token>' lines allowed to call (env MEDHELM_CALLER_TOKENS)")
    a.add_argument("--insecure-no-auth", action="store_true",
                   default=os.environ.get("MEDHELM_INSECURE_NO_AUTH") == "1",
                   help="serve on a non-loopback address without sign-in (dashboard) or caller authorization "
                        "(gRPC): anyone who reaches the port sees patient text (env MEDHELM_INSECURE_NO_AUTH=1)")
    w = p.add_argument_group("where")
    w.add_argument("-o", "--output-path", type=Path, default=Path("benchmark_output"), help="results root")
    w.add_argument("--local-path", type=Path, default=Path("prod_env"),
                   help="model_deployments.yaml (judges) and the request cache")
    w.add_argument("--data-dir", type=Path, default=Path(os.environ["MEDHELM_DATA_DIR"])
                   if os.environ.get("MEDHELM_DATA_DIR") else None, help="local mirror of benchmark files")
    w.add_argument("--offline", action="store_true", default=os.environ.get("MEDHELM_OFFLINE") == "1",
                   help="never download data (env MEDHELM_OFFLINE=1)")
    w.add_argument("--disable-cache", action="store_true", help="do not use the request cache")
    w.add_argument("--benchmark-root", dest="benchmark_roots", action="append", type=Path,
                   default=[Path(p) for p in os.environ.get("MEDHELM_BENCHMARK_ROOTS", "").split(os.pathsep) if p],
                   metavar="DIR", help="a folder whose benchmark files callers may name (config_path=, data_path=, "
                                       "jury_config_path=); repeatable; none = no path accepted from callers "
                                       "(env MEDHELM_BENCHMARK_ROOTS, ':'-separated)")
    w.add_argument("--allow-caller-metrics", action="store_true",
                   help="jury/metrics: score with the caller's metric specs (judges, prompt templates) instead of "
                        "the benchmark's as this server resolves it (off by default)")
    try:  # the leaderboard's own flags (--store, --release, --redacted), when the dashboard is installed
        from medhelm_dashboard.launch import add_dashboard_arguments
    except ImportError:
        return
    add_dashboard_arguments(p.add_argument_group("dashboard"))


def main(args: argparse.Namespace) -> int:
    if args.target == "dashboard":
        import importlib.util

        try:
            from medhelm_dashboard import launch  # the leaderboard's own launcher (Streamlit)
        except ImportError:
            launch = None
        if launch is None or importlib.util.find_spec("streamlit") is None:  # e.g. the slim service image
            raise ConfigError("the leaderboard is not installed here: run it from the dashboard image "
                              "(medhelm-k8s-dashboard) or pip install 'medhelm-k8s[dashboard]'")

        return int(launch.main(args) or 0)
    from medhelm.rpc.server import ServerConfig, serve
    from medhelm.rpc.tls import TlsFiles

    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
    for flag in ("max_message_mb", "max_calls", "max_call_s", "max_query_s", "max_aggregate_records"):
        if getattr(args, flag) <= 0:
            raise ConfigError(f"--{flag.replace('_', '-')} must be positive")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    callers = _callers(args)
    config = ServerConfig(service=args.target, host=args.host, port=50051 if args.port is None else args.port,
                          metrics_port=None if args.metrics_port < 0 else args.metrics_port,
                          max_message_mb=args.max_message_mb, grace_s=args.grace_s, tls=tls,
                          local_path=args.local_path, output_path=args.output_path, data_dir=args.data_dir,
                          offline=args.offline, use_cache=not args.disable_cache,
                          max_concurrency=args.max_concurrency, callers=callers, health_port=args.health_port,
                          max_calls=args.max_calls,
                          max_call_s=args.max_call_s, max_query_s=args.max_query_s,
                          max_aggregate_records=args.max_aggregate_records,
                          max_aggregate_names=args.max_aggregate_names, max_aggregate_mb=args.max_aggregate_mb,
                          max_aggregate_calls=args.max_aggregate_calls,
                          benchmark_roots=tuple(args.benchmark_roots),
                          allow_caller_metrics=args.allow_caller_metrics,
                          scoring_processes=args.scoring_processes)
    asyncio.run(serve(config))
    return 0


def _callers(args: argparse.Namespace):  # noqa: ANN202 - CallerPolicy | None (imported lazily)
    """Who may call the gRPC methods; refuses a non-loopback address with nobody named unless
    --insecure-no-auth."""
    from medhelm.rpc.authz import CallerPolicy
    from medhelm.access.exposure import is_loopback

    if args.allow_client and not args.tls_client_ca:
        raise ConfigError("--allow-client (certificate identities) needs mutual TLS: --tls-client-ca")
    policy = CallerPolicy.build(args.allow_client, args.caller_tokens)
    if policy.empty:
        if not is_loopback(args.host) and not args.insecure_no_auth:
            raise ConfigError(f"refusing to serve {args.target} on {args.host} without caller authorization: "
                              "pass --caller-tokens and/or --allow-client (see docs/access.md), or "
                              "--insecure-no-auth to let anyone who reaches the port call it")
        return None
    return policy
