"""One gRPC service process: the servicer plus health, reflection, Prometheus, TLS, limits, SIGTERM.

``medhelm serve scenarios|jury|metrics`` builds a ``ServerConfig`` and calls ``serve(config)``.

Health is answered twice: on the service's own port (``grpc.health.v1``, behind TLS when TLS is on) and,
with ``health_port``, by a second, plaintext gRPC server that carries nothing but ``grpc.health.v1``. The
kubelet's gRPC probe speaks plaintext only, so the chart points its probes there; that server runs on its
own threads, off the scoring event loop. What it answers depends on the name asked:

* ``""`` (liveness): NOT_SERVING when the loop has not ticked for ``stall_s`` seconds (a wedged loop gets
  restarted) and from the moment SIGTERM arrives; a loop that is merely busy is not restarted.
* the service's own name (readiness, start-up): the same, and SERVING only while the port that serves
  answers its own health check within ``ready_s``: asked from inside the process over 127.0.0.1, through the
  service port's TLS (trusting ``--tls-client-ca``, else the certificate file's own chain; presenting the
  server's certificate as the client's under mutual TLS). A loop starved by a caller's stream therefore takes
  the pod out of its Service until it answers again. Where the process cannot call itself at all (a mutual-TLS
  server certificate without the clientAuth usage: the handshake is refused, UNAVAILABLE) it logs that once
  and asks the loop instead: a callback on it must run within ``ready_s``.

No patient data ever crosses the health port."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from medhelm.errors import ConfigError
from medhelm.rpc.authz import CallerAuthorization, CallerPolicy
from medhelm.rpc.decoding import StrictDecoding
from medhelm.rpc.telemetry import CallLimits, Telemetry
from medhelm.rpc.tls import TlsFiles
from medhelm.telemetry import serve_http

log = logging.getLogger("medhelm.rpc")

SERVICES = ("scenarios", "jury", "metrics")
FULL_NAMES = {"scenarios": "medhelm.v1.ScenarioService", "jury": "medhelm.v1.JuryService",
              "metrics": "medhelm.v1.MetricsService"}


@dataclass(frozen=True)
class ServerConfig:
    service: str
    host: str = "127.0.0.1"
    port: int = 50051  # 0 = any free port (printed on start)
    metrics_port: int | None = 9090  # Prometheus /metrics over HTTP; None = off; 0 = any free port
    max_message_mb: int = 16  # well below a pod's memory: one message is decoded whole
    grace_s: float = 20.0  # SIGTERM: stop taking calls, let running ones finish this long
    tls: TlsFiles | None = None
    local_path: Path = Path("prod_env")  # model_deployments.yaml (judges) and the request cache
    output_path: Path = Path("benchmark_output")  # results (AggregateSuite) and downloaded scenarios
    data_dir: Path | None = None
    offline: bool = False
    use_cache: bool = True
    max_concurrency: int = 16  # items scored at once per stream
    callers: CallerPolicy | None = None  # who may call the medhelm.v1 methods; None = anyone (loopback)
    max_calls: int = 32  # calls handled at once (health excluded); more get RESOURCE_EXHAUSTED
    max_call_s: float = 900.0  # a call running longer gets DEADLINE_EXCEEDED
    max_query_s: float = 10.0  # cap on a metric's own database time limit (EHRSQL timeout_s)
    max_aggregate_records: int = 1_000_000  # AggregateRun: more records get RESOURCE_EXHAUSTED
    max_aggregate_names: int = 10_000  # AggregateRun: more distinct (stat, split) names get RESOURCE_EXHAUSTED
    max_aggregate_mb: int = 32  # AggregateRun: sums (and names) held past this get RESOURCE_EXHAUSTED
    max_aggregate_calls: int = 4  # AggregateRun calls read at once; more wait their turn
    benchmark_roots: tuple[Path, ...] = ()  # folders whose files callers may name; () = none
    allow_caller_metrics: bool = False  # trust callers' metric specs (judges, templates)
    health_port: int | None = None  # plaintext grpc.health.v1 only (kubelet probes); None = off; 0 = any
    stall_s: float = 30.0  # the health port answers NOT_SERVING when the event loop stalls this long
    ready_s: float = 1.0  # readiness on the health port: the service port must answer its health this fast
    scoring_processes: int = 2  # jury/metrics: worker processes for CPU-heavy metrics; 0 = threads in-process

    def __post_init__(self) -> None:
        if self.service not in SERVICES:
            raise ConfigError(f"unknown service '{self.service}' (one of {', '.join(SERVICES)})")


def build_servicer(config: ServerConfig, telemetry: Telemetry) -> tuple[object, list]:
    """The servicer for ``config.service`` and what to close when the server stops."""
    from medhelm.rpc.owned import ServerBenchmarks, places_from

    owned = ServerBenchmarks(places_from(config.benchmark_roots, data_dir=config.data_dir,
                                         cache_dir=config.output_path / "scenarios", offline=config.offline))
    if config.service == "scenarios":
        from medhelm.rpc.scenarios import ScenarioServicer

        return ScenarioServicer(telemetry, benchmarks=owned), []
    from medhelm.deployments import DeploymentRegistry
    from medhelm.inference import ClientPool, RequestCache, RetryPolicy
    from medhelm.inference.cache import cache_file
    from medhelm.rpc.scoring import JURY_METRICS, MetricHost

    cache = RequestCache(cache_file(config.local_path)) if config.use_cache else None
    # a judge's rate limit is waited out for at most 240 s: a verdict takes at most two requests of a judge (the
    # re-ask of one that does not parse), and both fit in the caller's call deadline (remote.Endpoint.timeout_s,
    # 600 s), so the caller hears the judge's last refusal (UNAVAILABLE) rather than its own deadline
    pool = ClientPool(cache=cache, retry=RetryPolicy(rate_limit_wait_s=240.0), observer=telemetry)
    deployments = DeploymentRegistry.load(config.local_path)
    served = None if config.allow_caller_metrics else owned
    if config.service == "jury":  # judges are network-bound: no scoring processes
        from medhelm.rpc.jury import JuryServicer

        host = MetricHost(deployments, pool, accept=lambda m: m.name in JURY_METRICS, what="jury metric",
                          max_concurrency=config.max_concurrency, benchmarks=served, max_query_s=config.max_query_s)
        return JuryServicer(telemetry, host), [host, pool]
    from medhelm.rpc.metrics import AggregateLimits, MetricsServicer
    from medhelm.scoring.cpu import CpuPool

    cpu = CpuPool(config.scoring_processes) if config.scoring_processes > 0 else None
    if cpu is not None:
        cpu.start()  # spawned before the port opens: the first 1 MB item does not also pay for start-up
    host = MetricHost(deployments, pool, max_concurrency=config.max_concurrency, benchmarks=served,
                      max_query_s=config.max_query_s, cpu=cpu)
    limits = AggregateLimits(max_records=config.max_aggregate_records, max_names=config.max_aggregate_names,
                             max_held_mb=config.max_aggregate_mb, max_answer_mb=config.max_message_mb,
                             max_calls=config.max_aggregate_calls)
    return MetricsServicer(telemetry, host, output_path=config.output_path, limits=limits), [host, pool]


def _prices(local_path: Path):
    """``<local-path>/prices.yaml`` for the cost counters (as `medhelm summarize`); None when there is none."""
    from medhelm.store.costs import PriceTable

    path = Path(local_path) / "prices.yaml"
    return PriceTable.load(path) if path.is_file() else None


def _register(service: str, servicer: object, server: grpc.aio.Server) -> None:
    # The *_pb2 modules put each service's descriptor in the default pool, which reflection reads
    # (jury_pb2_grpc alone imports only common_pb2: JuryService was NOT_FOUND by reflection).
    from medhelm.v1 import jury_pb2, metrics_pb2, scenarios_pb2  # noqa: F401
    from medhelm.v1 import jury_pb2_grpc, metrics_pb2_grpc, scenarios_pb2_grpc

    adders = {"scenarios": scenarios_pb2_grpc.add_ScenarioServiceServicer_to_server,
              "jury": jury_pb2_grpc.add_JuryServiceServicer_to_server,
              "metrics": metrics_pb2_grpc.add_MetricsServiceServicer_to_server}
    adders[service](servicer, server)


async def serve(config: ServerConfig, *, on_ready: Callable[[int, int | None], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set), then drain gracefully.

    ``on_ready(grpc_port, metrics_port)`` is called once the server accepts calls."""
    telemetry = Telemetry(config.service, prices=_prices(config.local_path))
    telemetry.limits = CallLimits(max_calls=config.max_calls, max_call_s=config.max_call_s)
    # CPU-heavy metrics run in scoring processes (--scoring-processes); what still runs in threads (SQL,
    # --scoring-processes 0) holds the GIL in 5 ms slices by default: shorter slices let the loop in sooner.
    sys.setswitchinterval(0.0005)
    servicer, closables = build_servicer(config, telemetry)
    limit = config.max_message_mb * 1024 * 1024
    guard = [CallerAuthorization(config.callers, config.service, telemetry.registry)] \
        if config.callers is not None and not config.callers.empty else []
    guard.append(StrictDecoding())  # after the caller check: an unauthorized caller's bytes are never parsed
    server = grpc.aio.server(interceptors=guard, options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit),
                                      ("grpc.so_reuseport", 0)])
    _register(config.service, servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((FULL_NAMES[config.service], health.SERVICE_NAME,
                                         reflection.SERVICE_NAME), server)
    address = f"{config.host}:{config.port}"
    check_port_free(config.host, config.port, "--port")
    try:  # grpcio returns 0 or, since 1.5x, raises RuntimeError for a port in use
        port = (server.add_secure_port(address, config.tls.credentials()) if config.tls
                else server.add_insecure_port(address))
    except RuntimeError:
        port = 0
    if port == 0:
        raise ConfigError(f"cannot listen on {address} (in use?): choose another port with --port")
    http = None
    metrics_port = None
    if config.metrics_port is not None:
        http, metrics_port = serve_http(telemetry, config.metrics_port, config.host)
    probe = _HealthPort(config, FULL_NAMES[config.service]) if config.health_port is not None else None
    await server.start()
    for name in ("", FULL_NAMES[config.service]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    ticker = None
    if probe is not None:
        ticker = asyncio.create_task(probe.tick_forever())
        probe.watch(port, loop=asyncio.get_running_loop())
        probe.start()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests run servers in threads)
            pass
    # One machine-readable line: tests and scripts read the bound ports from it.
    print(f"medhelm serve {config.service}: listening on {config.host}:{port}"
          + (f" metrics http://{config.host}:{metrics_port}/metrics" if metrics_port is not None else "")
          + (" tls" if config.tls else "") + (" callers-authorized" if guard else "")
          + (f" health {config.host}:{probe.port}" if probe is not None else ""), flush=True)
    if on_ready is not None:
        on_ready(port, metrics_port)
    try:
        await stop.wait()
    finally:
        # Health goes NOT_SERVING first so load balancers stop routing, then running calls get grace_s.
        if probe is not None:
            probe.draining = True
        await health_servicer.enter_graceful_shutdown()
        await server.stop(config.grace_s)
        if ticker is not None:
            ticker.cancel()
        if probe is not None:
            probe.stop()
        for c in closables:
            await c.aclose()
        if http is not None:
            http.shutdown()
        print(f"medhelm serve {config.service}: stopped", file=sys.stderr, flush=True)



def check_port_free(host: str, port: int, flag: str) -> None:
    """A port in use is one line naming it and the flag that changes it, before gRPC tries it (gRPC's C core
    logs its own multi-line complaint to stderr first)."""
    if not port:
        return
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server: TIME_WAIT is no obstacle
            probe.bind(where)
    except OSError as err:
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror or err}): choose another port with {flag}")\
            from None


class _HealthPort(health.HealthServicer):
    """Plaintext ``grpc.health.v1`` on its own port and threads (see the module docstring)."""

    def __init__(self, config: ServerConfig, full_name: str) -> None:
        import time
        from concurrent import futures

        super().__init__()
        self._clock = time.monotonic
        self.beat = self._clock()
        self.stall_s, self.ready_s = config.stall_s, config.ready_s
        self.draining = False
        self.full_name = full_name
        self.names = {"", full_name}
        self._config = config
        self._service: grpc.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._port_checkable = True
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="health"),
                                  options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self, self.server)
        address = f"{config.host}:{config.health_port}"
        check_port_free(config.host, config.health_port, "--health-port")
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise ConfigError(f"cannot listen on {address} (health port in use?): choose another with --health-port")

    def watch(self, service_port: int, *, loop: asyncio.AbstractEventLoop) -> None:
        """Readiness asks the service port itself, as a client of this process would (over its TLS)."""
        self._loop = loop
        host = self._config.host.strip("[]")
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        target = f"[{host}]:{service_port}" if ":" in host else f"{host}:{service_port}"
        tls = self._config.tls
        if tls is None:
            self._service = grpc.insecure_channel(target)
            return
        from medhelm.rpc.tls import read_pem, self_check_name

        cert, key = read_pem(tls.cert, "--tls-cert"), read_pem(tls.key, "--tls-key")
        roots = read_pem(tls.client_ca, "--tls-client-ca") if tls.client_ca else cert
        mutual = tls.client_ca is not None
        credentials = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key if mutual else None,
                                                   certificate_chain=cert if mutual else None)
        name = self_check_name(tls.cert, host)
        options = [("grpc.ssl_target_name_override", name)] if name else []
        self._service = grpc.secure_channel(target, credentials, options=options)

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)
        if self._service is not None:
            self._service.close()

    async def tick_forever(self) -> None:
        while True:
            self.beat = self._clock()
            await asyncio.sleep(1.0)

    def _port_answers(self) -> bool:
        if self._service is None or self._loop is None:
            return False
        if not self._port_checkable:
            return self._loop_answers()
        try:
            reply = health_pb2_grpc.HealthStub(self._service).Check(
                health_pb2.HealthCheckRequest(service=self.full_name), timeout=self.ready_s)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE and self._config.tls is not None:
                self._port_checkable = False
                log.warning("readiness: this process cannot call its own TLS port (a mutual-TLS server "
                            "certificate without the clientAuth usage?): readiness asks the event loop instead")
                return self._loop_answers()
            log.warning("readiness: the service port did not answer its health check within %g s (%s)",
                        self.ready_s, err.code().name)
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def _loop_answers(self) -> bool:
        import threading

        ran = threading.Event()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(ran.set)
        return ran.wait(self.ready_s)

    def Check(self, request, context):  # noqa: N802 (gRPC's name)
        if request.service not in self.names:
            context.set_code(grpc.StatusCode.NOT_FOUND)
            return health_pb2.HealthCheckResponse()
        ok = not self.draining and self._clock() - self.beat < self.stall_s
        if ok and request.service:  # readiness: the port that serves answers, now
            ok = self._port_answers()
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING if ok
                                              else health_pb2.HealthCheckResponse.NOT_SERVING)
