"""Real containers for the tests: the repository's two images (service, dashboard) built with podman by
scripts/build_images.sh on a Debian base made by debootstrap (scripts/container_base.sh) and pinned by
digest, gRPC health probes run from the host the way the kubelet runs them, and throwaway TLS material. Skips (with the reason) only where podman cannot run at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests import ports

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("MEDHELM_TEST_IMAGE", "localhost/medhelm-k8s:test")  # the slim service image
DASHBOARD_IMAGE = os.environ.get("MEDHELM_TEST_DASHBOARD_IMAGE", "localhost/medhelm-k8s-dashboard:test")


def run(*cmd: str, timeout: float = 120, check: bool = True, input_text: str | None = None
        ) -> subprocess.CompletedProcess:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input_text)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[:4])} ... exit {done.returncode}: {done.stderr[-3000:]}")
    return done


def base_image() -> str:
    """The Debian bookworm base (made once with debootstrap, cached), or skip with why podman cannot run."""
    if not shutil.which("bash") or os.name != "posix":
        pytest.skip("podman needs Linux")
    done = subprocess.run(["bash", str(REPO / "scripts" / "container_base.sh")], capture_output=True, text=True,
                          timeout=1200)
    if done.returncode == 3:
        pytest.skip(f"podman cannot run here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    smoke = subprocess.run(["podman", "run", "--rm", done.stdout.split()[-1], "true"], capture_output=True, text=True,
                           timeout=120)
    if smoke.returncode != 0:  # e.g. no user namespaces / cgroups for containers on this machine
        pytest.skip(f"podman cannot start a container here: {smoke.stderr.strip()[-300:]}")
    return done.stdout.split()[-1]


def ca_bundle() -> Path | None:
    """The CA bundle package downloads need inside a build (this machine's; a hospital's internal one)."""
    for candidate in (os.environ.get("MEDHELM_PIP_CA"), os.environ.get("PIP_CERT"),
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def build_images(out: Path) -> dict:
    """Both images (service, dashboard) built by scripts/build_images.sh, the script a release uses: the base
    pinned by digest, each image's SBOM stored in ``out`` next to the build record, whose content is returned
    (``images.json``, with the SBOM entries made absolute)."""
    base = base_image()
    env = {**os.environ, "BASE_IMAGE": base, "MEDHELM_IMAGE_SERVICE": IMAGE, "MEDHELM_IMAGE_DASHBOARD": DASHBOARD_IMAGE,
           "MEDHELM_IMAGE_OUT": str(out)}
    if os.environ.get("MEDHELM_PIP_INDEX_URL"):
        env["MEDHELM_PIP_INDEX_URL"] = os.environ["MEDHELM_PIP_INDEX_URL"]
    ca = ca_bundle()
    if ca is not None:
        env["MEDHELM_PIP_CA"] = str(ca)
    done = subprocess.run(["bash", str(REPO / "scripts" / "build_images.sh")], capture_output=True, text=True,
                          env=env, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(Path(done.stdout.split()[-1]).read_text())
    for facts in record["images"].values():
        facts["sbom"] = str(out / facts["sbom"])
    return record


def run_published(name: str, publish: list[int], *args: str) -> dict[int, int]:
    """``podman run -d --name <name> <args>`` with each container port of ``publish`` published on its own
    picked port of the host's 127.0.0.1; when one of them was taken meanwhile, the half-made container is
    removed and the run repeated on new ports (tests/ports.py). Returns {container port: host port}."""

    def start(first: int) -> dict[int, int]:
        host = {inside: first if i == 0 else ports.pick() for i, inside in enumerate(publish)}
        flags = [x for inside, outside in host.items() for x in ("-p", f"127.0.0.1:{outside}:{inside}")]
        done = run("podman", "run", "-d", "--name", name, *flags, *args, check=False)
        if done.returncode != 0:
            run("podman", "rm", "--force", name, check=False)
            if ports.taken(done.stderr):
                raise ports.PortTaken(done.stderr.strip().splitlines()[-1])
            raise AssertionError(f"podman run {name} ... exit {done.returncode}: {done.stderr[-3000:]}")
        return host

    return ports.on_a_free_port(start, f"podman run {name}")


def grpc_probe(port: int, service: str = "", *, timeout_s: float = 1.0, host: str = "127.0.0.1") -> str:
    """What the kubelet's gRPC probe does: plaintext grpc.health.v1.Health/Check with the probe's service."""
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as err:
            return err.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def wait_for(check, what: str, timeout_s: float = 90.0, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def make_tls(folder: Path, hosts: list[str]) -> dict[str, Path]:
    """A CA, a server certificate for ``hosts`` (also usable as a client's: a service checks its own TLS port for
    readiness, rpc/server.py) and a separate client certificate (openssl)."""
    folder.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=medhelm-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    sans = ",".join(("IP:" if h[0].isdigit() else "DNS:") + h for h in hosts)
    (folder / "server.cnf").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n")
    (folder / "client.cnf").write_text("extendedKeyUsage=clientAuth\n")
    for who, cert, key in (("server", "tls.crt", "tls.key"), ("client", "client.crt", "client.key")):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=medhelm-{who}", "-keyout", key,
            "-out", f"{who}.csr")
        ssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{who}.cnf", "-out", cert)
    for f in folder.iterdir():
        f.chmod(0o644)  # read by the containers' non-root user
    return {name: folder / name for name in ("ca.crt", "tls.crt", "tls.key", "client.crt", "client.key")}
