"""The images for real: the repository's Dockerfile built by scripts/build_images.sh with `podman build` (on a
Debian bookworm base made with debootstrap, no Docker Hub here, pinned by digest), then run as the non-root
user with a read-only root filesystem: `medhelm --help`; the slim service image without the dashboard's stack;
the three gRPC services answering health from it (the service port, and the plaintext health port the
kubelet's probes use, in TLS mode too), Prometheus /metrics; the dashboard from its own image; each image's
CycloneDX SBOM valid against the CycloneDX schema and true to what the image holds."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.services.podman import grpc_probe, make_tls, run, run_published, wait_for
from medhelm.version import __version__

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(2400)]

FULL = {"scenarios": "medhelm.v1.ScenarioService", "jury": "medhelm.v1.JuryService",
        "metrics": "medhelm.v1.MetricsService"}


@pytest.fixture
def containers():
    names: list[str] = []
    yield names
    for name in names:
        run("podman", "rm", "--force", "--time", "2", name, check=False, timeout=60)


def _data_dir(tmp_path):
    data = tmp_path / "data"
    (data / "prod_env").mkdir(parents=True)
    os.chown(data, 10001, 10001) if os.geteuid() == 0 else data.chmod(0o777)
    os.chown(data / "prod_env", 10001, 10001) if os.geteuid() == 0 else (data / "prod_env").chmod(0o777)
    return data


@pytest.mark.parametrize("flavor", ["service", "dashboard"])
def test_image_runs_as_non_root_on_a_read_only_root(flavor, images):
    image = images["images"][flavor]["reference"]
    done = run("podman", "run", "--rm", "--read-only", image, "--help")
    assert "serve" in done.stdout and "run" in done.stdout
    who = run("podman", "run", "--rm", "--read-only", "--entrypoint", "id", image)
    assert who.stdout.split()[0] == "uid=10001(medhelm)"
    # nothing but the venv came from the build stage: no wheels, no pip, no build tree, in any layer
    # (/usr/share/python-wheels is the base image's own: Debian's python3-venv bundles pip for ensurepip)
    found = run("podman", "run", "--rm", "--read-only", "--entrypoint", "sh", image, "-c",
                "find / -xdev \\( -name '*.whl' -o -path /src \\) -not -path '/usr/share/python-wheels/*' -print;"
                " ls /opt/medhelm/bin/ | grep -x pip; true")
    assert found.stdout.strip() == ""
    history = run("podman", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image).stdout
    assert "/wheels" not in history and "pip install" not in history  # the runtime stage never ran pip
    # writing outside the mounted volumes fails: the root filesystem is read-only
    denied = run("podman", "run", "--rm", "--read-only", "--entrypoint", "sh", image, "-c", "touch /opt/x",
                 check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr


DASHBOARD_STACK = ("streamlit", "pyarrow", "pandas", "altair", "pydeck")


def test_slim_image_has_no_dashboard_stack(images):
    """The service image cannot import the dashboard's stack (the dashboard image can), says so in one line
    when asked for the dashboard, and is the smaller of the two; the sizes are in docs/kubernetes.md."""
    slim, dash = (images["images"][f]["reference"] for f in ("service", "dashboard"))
    probe = ("import importlib.util, sys; "
             f"print(' '.join(m for m in {DASHBOARD_STACK!r} if importlib.util.find_spec(m)))")
    assert run("podman", "run", "--rm", "--read-only", "--entrypoint", "python", slim, "-c", probe).stdout.strip() == ""
    assert run("podman", "run", "--rm", "--read-only", "--entrypoint", "python", dash, "-c",
               probe).stdout.split() == list(DASHBOARD_STACK)
    for module in ("streamlit", "pyarrow"):
        denied = run("podman", "run", "--rm", "--read-only", "--entrypoint", "python", slim, "-c",
                     f"import {module}", check=False)
        assert denied.returncode == 1 and f"No module named '{module}'" in denied.stderr
    refused = run("podman", "run", "--rm", "--read-only", slim, "serve", "dashboard", check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "medhelm-k8s-dashboard" in refused.stderr
    sizes = {f: images["images"][f]["size_bytes"] for f in ("service", "dashboard")}
    assert sizes["service"] < sizes["dashboard"], sizes


def _sbom(images: dict, flavor: str) -> dict:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    facts = images["images"][flavor]
    stored = Path(facts["sbom"]).read_text()
    inside = run("podman", "run", "--rm", "--entrypoint", "cat", facts["reference"],
                 "/usr/share/doc/medhelm-k8s/sbom.cdx.json").stdout
    assert stored == inside  # the file next to the image is the image's own
    bom = json.loads(stored)
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    assert validator.validate_str(stored) is None
    broken = json.loads(stored)
    broken["components"][0]["type"] = "wheel"  # not a CycloneDX component type: the validator must refuse it
    assert validator.validate_str(json.dumps(broken)) is not None
    return bom


@pytest.mark.parametrize("flavor", ["service", "dashboard"])
def test_sbom_is_valid_cyclonedx_and_lists_what_the_image_holds(flavor, images):
    bom = _sbom(images, flavor)
    image = images["images"][flavor]["reference"]
    props = {p["name"]: p["value"] for p in bom["metadata"]["properties"]}
    assert props["medhelm:base-image"] == images["base_image"]
    assert props["medhelm:image"] == ("medhelm-k8s" if flavor == "service" else "medhelm-k8s-dashboard")
    labels = json.loads(run("podman", "image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout)
    assert f"{labels['org.opencontainers.image.base.name']}@{labels['org.opencontainers.image.base.digest']}" \
        == images["base_image"] and images["base_image"].split("@")[1].startswith("sha256:")
    # every Python distribution in the image's venv, with its version, and nothing else
    listed = run("podman", "run", "--rm", "--read-only", "--entrypoint", "python", image, "-c",
                 "import importlib.metadata as m; print('\\n'.join(sorted("
                 "f\"{d.metadata['Name'].lower()}=={d.version}\" for d in m.distributions())))").stdout.split()
    python = sorted(f"{c['name'].lower()}=={c['version']}" for c in bom["components"]
                    if c.get("purl", "").startswith("pkg:pypi/"))
    assert python == sorted(set(listed) - {f"medhelm-k8s=={__version__}"}), set(python) ^ set(listed)
    assert bom["metadata"]["component"]["name"] == "medhelm-k8s"  # the root: the package itself
    grpcio = next(c for c in bom["components"] if c["name"] == "grpcio")
    assert grpcio["purl"] == f"pkg:pypi/grpcio@{grpcio['version']}" and f"grpcio=={grpcio['version']}" in listed
    assert any(c["name"] == "streamlit" for c in bom["components"]) == (flavor == "dashboard")
    # every Debian package dpkg says is installed, with its version
    dpkg = run("podman", "run", "--rm", "--read-only", "--entrypoint", "dpkg-query", image, "-W",
               "--showformat=${Package}=${Version}\\n").stdout.split()
    debian = sorted(f"{c['name']}={c['version']}" for c in bom["components"] if c.get("purl", "").startswith("pkg:deb/"))
    assert debian == sorted(dpkg)
    libc = next(c for c in bom["components"] if c["name"] == "libc6")
    assert libc["purl"].startswith("pkg:deb/debian/libc6@") and "distro=debian-12" in libc["purl"]


def test_services_answer_health_from_the_host(image, containers, tmp_path):
    data = _data_dir(tmp_path)
    tls = make_tls(tmp_path / "tls", ["localhost", "127.0.0.1"])
    ports = {}
    for name in FULL:
        cname = f"medhelm-test-{name}-{os.getpid()}"
        # 0.0.0.0 inside the container, published on the host's 127.0.0.1 only: no caller authorization here
        # (tests/access covers it), so the operator's explicit flag that says so
        args = ["serve", name, "--host=0.0.0.0", "--port=50051", "--health-port=8086", "--metrics-port=9090",
                "--output-path=/data/benchmark_output", "--local-path=/data/prod_env", "--insecure-no-auth"]
        mounts = ["-v", f"{data}:/data"]
        if name == "metrics":  # TLS mode: the kubelet's plaintext probe must still pass on the health port
            args += ["--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key", "--tls-client-ca=/tls/ca.crt"]
            mounts += ["-v", f"{tls['ca.crt'].parent}:/tls:ro"]
        containers.append(cname)  # removed after the test, whatever happens
        host = run_published(cname, [50051, 8086, 9090], "--read-only", "--cap-drop=ALL",
                             "--security-opt=no-new-privileges", *mounts, image, *args)
        ports[name] = (host[50051], host[8086], host[9090])
    for name, (grpc_port, health_port, metrics_port) in ports.items():
        wait_for(lambda: grpc_probe(health_port, FULL[name]) == "SERVING", f"{name} health port", timeout_s=120)
        assert grpc_probe(health_port) == "SERVING"  # the probe with no service name too
        assert grpc_probe(health_port, "medhelm.v1.Nope") == "NOT_FOUND"
        if name == "metrics":  # plaintext on the TLS port fails the handshake
            assert grpc_probe(grpc_port, FULL[name], timeout_s=3) in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        else:
            assert grpc_probe(grpc_port, FULL[name]) == "SERVING"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
            assert b"python_info" in reply.read() or reply.status == 200
    # mutual TLS from the host with the separate client certificate
    from medhelm.rpc.remote import Endpoint
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ep = Endpoint(f"localhost:{ports['metrics'][0]}", ca=tls["ca.crt"], cert=tls["client.crt"], key=tls["client.key"])
    with ep.channel() as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=FULL["metrics"]),
                                                     timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    # SIGTERM: the health port turns NOT_SERVING (or goes away) and the process exits cleanly
    cname = containers[0]
    run("podman", "stop", "--time", "30", cname, timeout=90)
    state = run("podman", "inspect", "--format", "{{.State.ExitCode}}", cname).stdout.strip()
    assert state == "0"
    logs = run("podman", "logs", cname).stderr
    assert "stopped" in logs


def test_summarize_then_dashboard_answers_http(image, dashboard_image, containers, tmp_path):
    from medhelm.store.synthetic import catalogue, default_models, write_suite

    data = _data_dir(tmp_path)
    write_suite(data / "benchmark_output", "nightly", default_models(3), catalogue(3), 5)
    os.system(f"chown -R 10001:10001 {data}") if os.geteuid() == 0 else None
    done = run("podman", "run", "--rm", "--read-only", "-v", f"{data}:/data", image, "summarize", "--suite", "nightly",
               "--output-path=/data/benchmark_output", "--local-path=/data/prod_env")
    assert (data / "benchmark_output" / "results.sqlite").is_file(), done.stdout + done.stderr
    cname = f"medhelm-test-dashboard-{os.getpid()}"
    containers.append(cname)  # removed after the test, whatever happens
    port = run_published(cname, [8501], "--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                         "-v", f"{data}:/data", dashboard_image, "serve", "dashboard", "--host=0.0.0.0",
                         "--port=8501", "--output-path=/data/benchmark_output", "--local-path=/data/prod_env",
                         "--insecure-no-auth", "--redacted")[8501]

    def health():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=3) as reply:
                return reply.read().decode()
        except OSError:
            return None

    try:
        assert wait_for(health, "dashboard /_stcore/health", timeout_s=120) == "ok"
    except AssertionError:
        logs = run("podman", "logs", cname, check=False)
        raise AssertionError(logs.stdout[-2000:] + logs.stderr[-2000:]) from None
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as reply:
        assert reply.status == 200 and b"<html" in reply.read().lower()
