"""`medhelm serve [dashboard|scenarios|jury|metrics]` — the leaderboard, or one gRPC service."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from medhelm.errors import ConfigError

TARGETS = ("dashboard", "scenarios", "jury", "metrics")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", default="dashboard", choices=TARGETS,
                   help="what to serve (default: the Streamlit leaderboard)")
    g = p.add_argument_group("network (the dashboard reads --host/--port too)")
    g.add_argument("--host", default=os.environ.get("MEDHELM_HOST", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1; 0.0.0.0 inside a pod; env MEDHELM_HOST)")
    g.add_argument("--port", type=int, default=None,
                   help="port (gRPC default 50051; 0 = any free port; the dashboard has its own default)")
    g.add_argument("--metrics-port", type=int, default=9090,
                   help="Prometheus /metrics HTTP port; -1 = off; 0 = any free port (default: %(default)s)")
    g.add_argument("--health-port", type=int, default=None,
                   help="also answer plaintext grpc.health.v1 (only) on this port, off the event loop: "
                        "for kubelet gRPC probes when TLS is on (default: off; 0 = any free port)")
    g.add_argument("--max-message-mb", type=int, default=64, help="largest gRPC message (default: %(default)s)")
    g.add_argument("--grace-s", type=float, default=20.0, help="SIGTERM drain time (default: %(default)s)")
    g.add_argument("--max-concurrency", type=int, default=16, help="items scored at once per stream")
    g.add_argument("--tls-cert", type=Path, help="server certificate (PEM); with --tls-key enables TLS")
    g.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    g.add_argument("--tls-client-ca", type=Path, help="CA for client certificates: enables mutual TLS")
    w = p.add_argument_group("where")
    w.add_argument("-o", "--output-path", type=Path, default=Path("benchmark_output"), help="results root")
    w.add_argument("--local-path", type=Path, default=Path("prod_env"),
                   help="model_deployments.yaml (judges) and the request cache")
    w.add_argument("--data-dir", type=Path, default=Path(os.environ["MEDHELM_DATA_DIR"])
                   if os.environ.get("MEDHELM_DATA_DIR") else None, help="local mirror of benchmark files")
    w.add_argument("--offline", action="store_true", default=os.environ.get("MEDHELM_OFFLINE") == "1",
                   help="never download data (env MEDHELM_OFFLINE=1)")
    w.add_argument("--disable-cache", action="store_true", help="do not use the request cache")
    try:  # the leaderboard's own flags (--store, --release, --redacted), when the dashboard is installed
        from medhelm_dashboard.launch import add_dashboard_arguments
    except ImportError:
        return
    add_dashboard_arguments(p.add_argument_group("dashboard"))


def main(args: argparse.Namespace) -> int:
    if args.target == "dashboard":
        try:
            from medhelm_dashboard import launch  # the leaderboard's own launcher (Streamlit)
        except ImportError:
            raise ConfigError("the leaderboard is not installed: pip install 'medhelm-k8s[dashboard]'") from None

        return int(launch.main(args) or 0)
    from medhelm.rpc.server import ServerConfig, serve
    from medhelm.rpc.tls import TlsFiles

    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
    if args.max_message_mb <= 0:
        raise ConfigError("--max-message-mb must be positive")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    config = ServerConfig(service=args.target, host=args.host, port=50051 if args.port is None else args.port,
                          metrics_port=None if args.metrics_port < 0 else args.metrics_port,
                          max_message_mb=args.max_message_mb, grace_s=args.grace_s, tls=tls,
                          local_path=args.local_path, output_path=args.output_path, data_dir=args.data_dir,
                          offline=args.offline, use_cache=not args.disable_cache,
                          max_concurrency=args.max_concurrency, health_port=args.health_port)
    asyncio.run(serve(config))
    return 0
