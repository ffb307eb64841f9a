"""The plaintext health-only port (the kubelet's gRPC probes, with TLS on or off): it answers for the
service's own name, refuses other names, answers while the scoring event loop is busy; liveness ("") turns
NOT_SERVING when the loop stalls past ``stall_s`` (so a wedged pod is restarted), readiness (the service's
name) as soon as the port that serves stops answering (so a starved pod leaves its Service), through that
port's own TLS and mutual TLS too, and both again once it recovers."""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from medhelm.rpc.server import ServerConfig, serve


def _check(port: int, service: str, timeout: float = 30.0) -> str:  # a hung call only: a starved machine can take seconds
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service),
                                                         timeout=timeout)
        except grpc.RpcError as err:
            return err.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def test_health_port_follows_the_event_loop(tmp_path, capsys):
    ready = threading.Event()
    holder: dict = {}

    def run() -> None:
        async def main() -> None:
            holder["loop"] = asyncio.get_running_loop()
            holder["stop"] = asyncio.Event()
            await serve(ServerConfig(service="scenarios", port=0, metrics_port=None, health_port=0, stall_s=1.5,
                                     grace_s=0.5, output_path=tmp_path / "out", local_path=tmp_path / "env"),
                        on_ready=lambda *_: ready.set(), stop=holder["stop"])
        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(120)
    line = capsys.readouterr().out
    port = int(line.split(" health ")[1].split()[0].rsplit(":", 1)[1])
    assert _check(port, "medhelm.v1.ScenarioService") == "SERVING"
    assert _check(port, "") == "SERVING"
    assert _check(port, "medhelm.v1.JuryService") == "NOT_FOUND"
    # a wedged loop: the health port still answers (its own threads), but says NOT_SERVING past stall_s.
    # The loop is held by an event this test releases, not by a sleep: no step depends on how fast it runs.
    wedged, release = threading.Event(), threading.Event()

    def wedge() -> None:
        wedged.set()
        release.wait(120)

    holder["loop"].call_soon_threadsafe(wedge)
    assert wedged.wait(120)
    blocked_at = time.monotonic()
    # readiness asks the port that serves, which cannot answer while the loop is held: NOT_SERVING at once
    assert _check(port, "medhelm.v1.ScenarioService", timeout=10) == "NOT_SERVING"
    answers = []
    deadline = blocked_at + 60
    while not answers or answers[-1] != "NOT_SERVING":  # every answer comes while the loop is held
        assert time.monotonic() < deadline, answers
        answers.append(_check(port, "", timeout=10))
        time.sleep(0.1)
    # liveness: never NOT_SERVING before stall_s (less the loop's 1 s tick): a lower bound, however loaded
    assert time.monotonic() - blocked_at >= 1.5 - 1.0
    assert set(answers) <= {"SERVING", "NOT_SERVING"}, answers
    release.set()
    deadline = time.monotonic() + 60
    while _check(port, "medhelm.v1.ScenarioService", timeout=10) != "SERVING":  # the loop recovered
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert _check(port, "") == "SERVING"
    # SIGTERM-like stop: NOT_SERVING during the drain, then the port closes
    holder["loop"].call_soon_threadsafe(holder["stop"].set)
    thread.join(120)
    assert not thread.is_alive()
    assert _check(port, "medhelm.v1.ScenarioService", timeout=0.5) in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_reflection_describes_every_service(start_service, tmp_path):
    """grpcurl-style reflection resolves each service's own symbol (JuryService was NOT_FOUND before)."""
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    for name, full in (("jury", "medhelm.v1.JuryService"), ("metrics", "medhelm.v1.MetricsService"),
                       ("scenarios", "medhelm.v1.ScenarioService")):
        svc = start_service(name, "--output-path", str(tmp_path / "out"), "--local-path", str(tmp_path / "env"))
        with grpc.insecure_channel(svc.address) as ch:
            db = ProtoReflectionDescriptorDatabase(ch)
            assert db.FindFileContainingSymbol(full).name == f"medhelm/v1/{name}.proto"
        svc.stop()


def _serving(tmp_path, tls, capsys):
    """A scenarios server with ``tls`` and a health port, run in a thread: (health port, loop, stop, thread)."""
    ready = threading.Event()
    holder: dict = {}

    def run() -> None:
        async def main() -> None:
            holder["loop"] = asyncio.get_running_loop()
            holder["stop"] = asyncio.Event()
            await serve(ServerConfig(service="scenarios", port=0, metrics_port=None, health_port=0, grace_s=0.5,
                                     tls=tls, output_path=tmp_path / "out", local_path=tmp_path / "env"),
                        on_ready=lambda *_: ready.set(), stop=holder["stop"])
        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(120)
    line = capsys.readouterr().out
    return int(line.split(" health ")[1].split()[0].rsplit(":", 1)[1]), holder, thread


def test_readiness_checks_the_tls_port_itself(tmp_path, capsys, caplog):
    """Behind TLS and mutual TLS the health port's readiness still asks the service port (through its TLS, with
    the server's own certificate as the client's): SERVING while it answers, NOT_SERVING while its loop is held."""
    from medhelm.rpc.tls import TlsFiles
    from tests.services.podman import make_tls

    pki = make_tls(tmp_path / "pki", ["medhelm-scenarios"])  # no localhost: the name is taken from the cert
    for tls in (TlsFiles(pki["tls.crt"], pki["tls.key"], pki["ca.crt"]), TlsFiles(pki["tls.crt"], pki["tls.key"])):
        if tls.client_ca is None:  # one-way TLS trusts the certificate file's chain: give it the CA too
            chain = tmp_path / "chain.pem"
            chain.write_bytes(pki["tls.crt"].read_bytes() + pki["ca.crt"].read_bytes())
            tls = TlsFiles(chain, pki["tls.key"])
        port, holder, thread = _serving(tmp_path, tls, capsys)
        try:
            assert _check(port, "medhelm.v1.ScenarioService") == "SERVING"
            wedged, release = threading.Event(), threading.Event()
            holder["loop"].call_soon_threadsafe(lambda: (wedged.set(), release.wait(120)))
            assert wedged.wait(120)
            assert _check(port, "medhelm.v1.ScenarioService", timeout=10) == "NOT_SERVING"
            release.set()
            deadline = time.monotonic() + 60
            while _check(port, "medhelm.v1.ScenarioService", timeout=10) != "SERVING":
                assert time.monotonic() < deadline
                time.sleep(0.2)
        finally:
            holder["loop"].call_soon_threadsafe(holder["stop"].set)
            thread.join(120)
        assert "cannot call its own TLS port" not in caplog.text  # the port answered, not the fallback
        assert "did not answer its health check" in caplog.text  # it was asked while the loop was held
        caplog.clear()
