"""Provider fixtures: the local fakes of the cloud APIs (``medhelm.devtools.fake_providers``), the
credentials they expect in the environment, deployments of each native kind pointing at them, and a TLS
certificate for the fakes that official SDKs only reach over https (azure-identity's authority)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from medhelm.devtools.fake_providers import FakeAnthropic, FakeAzureOpenAI, FakeBedrock, FakeGemini
from medhelm.devtools.mock_openai import default_responder

AWS_KEY, AWS_SECRET = "AKIDMEDHELMTEST", "medhelm/secret/for+tests"
KEYS = {"ANTHROPIC_TEST_KEY": "sk-ant-test-key", "GEMINI_TEST_KEY": "AIza-test-key", "AZURE_TEST_KEY": "azure-test-key",
        "AWS_ACCESS_KEY_ID": AWS_KEY, "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "GATEWAY_TEST_KEY": "apim-key-123"}
KINDS = ("anthropic", "gemini", "bedrock", "azure_openai")


def judging_responder(body: dict) -> str:
    """Judge prompts (they carry <RESPONSE>) get a rubric verdict; any other prompt the default answer."""
    text = body["messages"][-1]["content"]
    if "<RESPONSE>" in text:
        return json.dumps({"faithfulness": {"score": 4, "explanation": "f"}, "safety": {"score": 5, "explanation": "s"}})
    return default_responder(body)


@pytest.fixture
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return KEYS


def make_fake(kind: str, **kwargs):
    if kind == "anthropic":
        return FakeAnthropic(**{"api_key": KEYS["ANTHROPIC_TEST_KEY"], **kwargs})
    if kind == "gemini":
        return FakeGemini(**{"api_key": KEYS["GEMINI_TEST_KEY"], **kwargs})
    if kind == "bedrock":
        return FakeBedrock(**{"aws_keys": {AWS_KEY: AWS_SECRET}, **kwargs})
    return FakeAzureOpenAI(**{"api_key": KEYS["AZURE_TEST_KEY"], **kwargs})


def deployment_entry(kind: str, base_url: str, name: str | None = None, **options) -> dict:
    """A model_deployments.yaml item of ``kind`` pointing at a fake."""
    name = name or f"{kind}/fake-model"
    entry: dict = {"name": name, "model_name": f"test/{name.replace('/', '-')}", "kind": kind, "base_url": base_url,
                   "max_sequence_length": 4096, "timeout_s": 30}
    if kind == "anthropic":
        entry.update(served_model_name="claude-test", api_key_env="ANTHROPIC_TEST_KEY")
    elif kind == "gemini":
        entry.update(served_model_name="gemini-test", api_key_env="GEMINI_TEST_KEY")
    elif kind == "bedrock":
        entry.update(served_model_name="anthropic.claude-test-v1:0")
        options = {"region": "us-east-1", **options}
    else:
        entry.update(served_model_name="gpt-test", api_key_env="AZURE_TEST_KEY")
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
