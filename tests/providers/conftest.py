"""What the provider tests share: the local fakes of the cloud APIs (``medhelm.devtools.fakes``), the
credentials they expect in the environment and a deployment of each kind pointing at its fake (both declared
by the fake: ``test_environment``, ``test_entry``; no kind is named here), our clients
through one ClientPool (``native_deployment``, ``short_request``, ``generate``), ``medhelm run`` in a child
process over pubmed_qa with a planted marker (``marked_mirror``, ``assert_no_marker``), and a TLS certificate
for the fakes that an official SDK reaches over https only (a token authority)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from medhelm.devtools.fakes import fake_class, fake_kinds
from medhelm.devtools.fakes.server import FakeServer
from medhelm.devtools.mock_openai import default_responder
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import Deployment, GenerationRequest, Message

# the environment every fake's test deployment reads (None: unset), and the gateway options' key
ENVIRONMENT: dict[str, str | None] = {name: value for kind in fake_kinds()
                                      for name, value in fake_class(kind).test_environment.items()}
ENVIRONMENT["GATEWAY_TEST_KEY"] = "apim-key-123"
KEYS = {name: value for name, value in ENVIRONMENT.items() if value is not None}


def judging_responder(body: dict) -> str:
    """Judge prompts (they carry <RESPONSE>) get a rubric verdict; any other prompt the default answer."""
    text = body["messages"][-1]["content"]
    if "<RESPONSE>" in text:
        return json.dumps({"faithfulness": {"score": 4, "explanation": "f"}, "safety": {"score": 5, "explanation": "s"}})
    return default_responder(body)


@pytest.fixture
def keys(monkeypatch):
    for name, value in ENVIRONMENT.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    return KEYS


def make_fake(kind: str, **kwargs) -> FakeServer:
    """The fake of ``kind`` (``devtools/fakes/<kind>.py``), accepting the credentials of ``KEYS`` unless
    ``kwargs`` say otherwise."""
    return fake_class(kind).accepting(**kwargs)


def deployment_entry(kind: str, base_url: str, name: str | None = None, **options) -> dict:
    """A model_deployments.yaml item of ``kind`` pointing at a fake (its ``test_entry``)."""
    name = name or f"{kind}/fake-model"
    declared = fake_class(kind).test_entry
    assert declared, f"devtools/fakes/{kind}.py declares no test_entry"
    entry: dict = {"name": name, "model_name": f"test/{name.replace('/', '-')}", "kind": kind, "base_url": base_url,
                   "max_sequence_length": 4096, "timeout_s": 30, **declared}
    options = {**declared.get("options", {}), **options}
    entry.pop("options", None)
    if options:
        entry["options"] = options
    return entry


def write_deployments(folder: Path, entries: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": entries}))
    return folder


@pytest.fixture(scope="session")
def tls(tmp_path_factory) -> dict[str, str]:
    """A CA and a server certificate for 127.0.0.1 (openssl), for fakes served over https."""
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=medhelm-test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "san.cnf", "-out", "server.pem")
    return {"ca": str(d / "ca.pem"), "cert": str(d / "server.pem"), "key": str(d / "server.key")}


# -- our clients against the fakes --------------------------------------------------------------------------

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.0, max_delay_s=0.0, jitter="none")


def native_deployment(kind: str, base_url: str, **options) -> Deployment:
    entry = deployment_entry(kind, base_url, **options)
    entry.pop("max_sequence_length")
    return Deployment(**entry)


def short_request(text: str = "Is aspirin an NSAID? yes or no", **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("system", "Answer briefly."), Message("user", text)), max_tokens=16, **kw)


async def generate(dep: Deployment, request: GenerationRequest, policy: RetryPolicy = FAST):
    pool = ClientPool(retry=policy)
    try:
        completion = await pool.get(dep).generate(request)
        return completion, pool.stats[dep.name]
    finally:
        await pool.aclose()


def entra_env(srv, **extra) -> dict[str, str]:
    return {"AZURE_TENANT_ID": srv.tenant, "AZURE_CLIENT_ID": srv.client_id, "AZURE_AUTHORITY_HOST": srv.base_url,
            **extra}


def post_json(url: str, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json",
                                                                                   **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# -- medhelm run through the fakes ---------------------------------------------------------------------------

MARKER = "QZX-PLANTED-MARKER-7c1e"


@pytest.fixture(scope="module")
def marked_mirror(shared_data, tmp_path_factory) -> Path:
    """pubmed_qa's slice with MARKER planted in every question (a copy in a temp folder, never in the repo)."""
    data = json.loads((shared_data / "pubmedqa" / "ori_pqal_sample.json").read_text())
    for item in data.values():
        item["QUESTION"] = f"{item['QUESTION']} ({MARKER})"
    root = tmp_path_factory.mktemp("marked")
    (root / "pubmed_qa").mkdir()
    (root / "pubmed_qa" / "ori_pqal.json").write_text(json.dumps(data))
    return root


def medhelm(*args: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in {**os.environ, **ENVIRONMENT}.items() if value is not None}
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=600,
                          env=env)


def only_run(out: Path) -> Path:
    runs = list((out / "runs" / "default").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines() if line]


def assert_no_marker(*procs: subprocess.CompletedProcess, folders: tuple[Path, ...] = ()) -> None:
    """The marker is in no output stream, no log, no status file and no error field of a record."""
    for proc in procs:
        assert MARKER not in proc.stdout and MARKER not in proc.stderr
    for folder in folders:
        for path in folder.rglob("*"):
            if not path.is_file() or path.suffix in (".sqlite", ".db", ".sqlite-wal") or "cache" in path.parts:
                continue
            text = path.read_text(errors="replace")
            if path.name == "instances.jsonl":  # records hold the prompt by design; never in an error
                for rec in map(json.loads, text.splitlines()):
                    assert MARKER not in json.dumps(rec.get("error")), path
                continue
            if path.name in ("scenario_state.json", "display_predictions.json", "display_requests.json",
                             "instances.json"):
                continue  # HELM-shaped copies of the records: the prompt by design
            assert MARKER not in text, path
