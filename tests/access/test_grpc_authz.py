"""Caller authorization on the real gRPC services (child processes on 127.0.0.1): every medhelm.v1 method
refuses a caller without an allowed identity (bearer token or mTLS certificate) before any data moves,
counts it, and never echoes request content; an allowed caller works as before."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from medhelm.pipeline import RunOptions, plan_runs
from medhelm.pipeline.sampling import select_instances
from medhelm.rpc import codec
from medhelm.rpc.remote import Endpoint, RemoteBenchmark
from medhelm.runentries import parse_run_entry
from medhelm.v1 import jury_pb2, metrics_pb2, scenarios_pb2
from tests.access.conftest import MARKER
from tests.services.conftest import Service, write_deployment, write_qa_benchmark

pytestmark = pytest.mark.slow

SERVICES = {"scenarios": scenarios_pb2.DESCRIPTOR.services_by_name["ScenarioService"],
            "jury": jury_pb2.DESCRIPTOR.services_by_name["JuryService"],
            "metrics": metrics_pb2.DESCRIPTOR.services_by_name["MetricsService"]}


def _message_class(descriptor):  # noqa: ANN001, ANN202
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def _call(channel: grpc.Channel, service, method, metadata=()) -> grpc.StatusCode:  # noqa: ANN001
    """One call of any shape with a request that would carry patient text; returns its status code."""
    path = f"/{service.full_name}/{method.name}"
    req_cls, resp_cls = _message_class(method.input_type), _message_class(method.output_type)
    request = req_cls()
    if "run_spec_json" in req_cls.DESCRIPTOR.fields_by_name:
        request.run_spec_json = json.dumps({"note": MARKER})
    if "item" in req_cls.DESCRIPTOR.fields_by_name:
        request.item.instance_json = json.dumps({"input": MARKER})
    kw = {"request_serializer": req_cls.SerializeToString, "response_deserializer": resp_cls.FromString}
    try:
        if method.client_streaming and method.server_streaming:
            list(channel.stream_stream(path, **kw)(iter([request]), metadata=metadata, timeout=20))
        elif method.client_streaming:
            channel.stream_unary(path, **kw)(iter([request]), metadata=metadata, timeout=20)
        elif method.server_streaming:
            list(channel.unary_stream(path, **kw)(request, metadata=metadata, timeout=20))
        else:
            channel.unary_unary(path, **kw)(request, metadata=metadata, timeout=20)
    except grpc.RpcError as err:
        assert MARKER not in (err.details() or "")
        return err.code()
    return grpc.StatusCode.OK


def _stop(svc: Service) -> str:
    """Stop a service and return what it logged."""
    if svc.proc.poll() is None:
        svc.proc.terminate()
    log = svc.proc.stderr.read()
    svc.stop()
    return log


def _denied(metrics_url: str) -> dict[tuple[str, str], float]:
    text = httpx.get(metrics_url, timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("medhelm_rpc_denied_total{"):
            labels = dict(kv.split("=") for kv in line[line.index("{") + 1:line.index("}")].split(","))
            out[(labels["method"].strip('"'), labels["code"].strip('"'))] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, str]:
    job = secrets.token_urlsafe(32)
    f = tmp_path / "callers"
    f.write_text(f"# who may call\njob {job}\ndashboard {secrets.token_urlsafe(32)}\n")
    return f, job


def test_every_medhelm_method_refuses_callers_without_an_allowed_token(tokens, tmp_path):
    token_file, job_token = tokens
    started = []
    try:
        for name in SERVICES:
            started.append(Service(name, "--caller-tokens", str(token_file), "--local-path", str(tmp_path / "pe"),
                                   "--output-path", str(tmp_path / "out"), "--offline"))
        for (name, service), svc in zip(SERVICES.items(), started):
            with grpc.insecure_channel(svc.address) as ch:
                for method in service.methods:
                    assert _call(ch, service, method) == grpc.StatusCode.UNAUTHENTICATED, method.name
                    wrong = (("authorization", "Bearer " + secrets.token_urlsafe(32)),)
                    assert _call(ch, service, method, wrong) == grpc.StatusCode.PERMISSION_DENIED, method.name
                    # the right token passes authorization (the empty request then fails on its merits)
                    ok = _call(ch, service, method, (("authorization", f"Bearer {job_token}"),))
                    assert ok not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED), method.name
                health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert health.status == health_pb2.HealthCheckResponse.SERVING  # probes stay open
            counted = _denied(svc.metrics_url)
            for method in service.methods:
                assert counted[(method.name, "UNAUTHENTICATED")] == 1 and counted[(method.name, "PERMISSION_DENIED")] == 1
    finally:
        logs = "".join(_stop(s) for s in started)
    assert MARKER not in logs and job_token not in logs
    assert "refused (PERMISSION_DENIED)" in logs


def test_an_allowed_job_streams_instances_with_its_token(tokens, tmp_path, refused_url):
    token_file, job_token = tokens
    cfg = write_qa_benchmark(tmp_path / "bench", 10)
    local = tmp_path / "prod_env"
    write_deployment(local, f"{refused_url}/v1")
    entry = parse_run_entry(f"medhelm_configurable_benchmark:model=mock/svc-model,config_path={cfg},max_eval_instances=6")
    plan = plan_runs([entry], RunOptions(local_path=local, output_path=tmp_path / "out"))[0]
    svc = Service("scenarios", "--caller-tokens", str(token_file), "--output-path", str(tmp_path / "out"), "--offline",
                  "--benchmark-root", str(tmp_path / "bench"))
    try:
        expected = select_instances(list(plan.benchmark.instances()), 6, plan.spec.seed)
        shared = (tmp_path / "bench",)  # the folder the job shares with the service: config_path goes as a name
        assert list(RemoteBenchmark(plan.spec, Endpoint(svc.address, token=job_token, benchmark_roots=shared),
                                    None).instances()) == expected
        with pytest.raises(Exception, match="UNAUTHENTICATED"):
            list(RemoteBenchmark(plan.spec, Endpoint(svc.address, benchmark_roots=shared), None).instances())
    finally:
        log = _stop(svc)
    assert "refused (UNAUTHENTICATED) for anonymous" in log and job_token not in log


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    d = tmp_path / "pki"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=medhelm-test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "medhelm-job", "intruder"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", f"{who}.key",
                 "-out", f"{who}.csr", cwd=d)
        ext = ["-extfile", "san.cnf"] if who == "server" else []
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", *ext, "-out", f"{who}.pem", cwd=d)
    return d


def test_mtls_identity_is_authorized_per_certificate(pki, tmp_path):
    svc = Service("scenarios", "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                  "--tls-client-ca", str(pki / "ca.pem"), "--allow-client", "cn:medhelm-job",
                  "--output-path", str(tmp_path / "out"), "--offline")
    service = SERVICES["scenarios"]
    try:
        def ep(who: str) -> Endpoint:
            return Endpoint(svc.address, ca=pki / "ca.pem", cert=pki / f"{who}.pem", key=pki / f"{who}.key")

        with ep("medhelm-job").channel() as ch:
            listed = _call(ch, service, service.methods_by_name["ListBenchmarks"])
            assert listed == grpc.StatusCode.OK
        with ep("intruder").channel() as ch:  # a certificate from the same CA, but not an allowed caller
            for method in service.methods:
                assert _call(ch, service, method) == grpc.StatusCode.PERMISSION_DENIED, method.name
    finally:
        log = _stop(svc)
    assert MARKER not in log and "for certificate intruder" in log


def test_allow_client_matches_its_own_field_only(pki, tmp_path):
    """`--allow-client dns:X` admits a certificate whose DNS SAN is X, never one carrying X as its CN (any
    certificate from the same CA may carry any CN); `uri:` matches a URI SAN (a SPIFFE id). An identity without
    its field is refused at start."""
    spiffe = "spiffe://cluster.local/ns/clinical-ai/sa/medhelm"
    for name, cn, san in (("by-uri", "a", f"URI:{spiffe}"), ("by-dns", "b", "DNS:job.example"),
                          ("cn-only", "job.example", "DNS:other.example")):
        (pki / f"{name}.cnf").write_text(f"subjectAltName={san}\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=pki)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", f"{name}.cnf", "-out", f"{name}.pem", cwd=pki)
    svc = Service("scenarios", "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                  "--tls-client-ca", str(pki / "ca.pem"), "--allow-client", f"uri:{spiffe}",
                  "--allow-client", "dns:job.example", "--output-path", str(tmp_path / "out"), "--offline")
    service = SERVICES["scenarios"]
    method = service.methods_by_name["ListBenchmarks"]
    try:
        def status(name: str) -> grpc.StatusCode:
            ep = Endpoint(svc.address, ca=pki / "ca.pem", cert=pki / f"{name}.pem", key=pki / f"{name}.key")
            with ep.channel() as ch:
                return _call(ch, service, method)

        assert status("by-uri") == grpc.StatusCode.OK
        assert status("by-dns") == grpc.StatusCode.OK
        assert status("cn-only") == grpc.StatusCode.PERMISSION_DENIED  # job.example as its CN: the wrong field
    finally:
        _stop(svc)
    for bad in ("medhelm-job", "san:medhelm-job", "uri:"):
        code, err = _serve_error(pki, tmp_path, bad)
        assert code == 2 and "uri:VALUE, dns:VALUE, email:VALUE or cn:VALUE" in err and err.count("\n") == 1


def _serve_error(pki: Path, tmp_path: Path, identity: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "medhelm", "serve", "scenarios", "--port", "0",
                           "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                           "--tls-client-ca", str(pki / "ca.pem"), "--allow-client", identity,
                           "--output-path", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr


def test_allow_client_needs_mutual_tls(capsys):
    from medhelm.cli import main

    assert main(["serve", "scenarios", "--allow-client", "medhelm-job"]) == 2
    assert "--tls-client-ca" in capsys.readouterr().err
