"""No configured secret leaves in any output, even when every server echoes what it received.

Keys of 8 to 200 characters are planted in every provider kind (openai, azure_openai with an api-key and with
an Entra ID client secret, anthropic, gemini public and Vertex, bedrock with a session token, a gateway
subscription key) and every credential source (the variable itself, ``<NAME>_FILE``, an access-token file,
HELM's credentials.conf entries, ``HELM_CREDENTIALS``, a caller token). Each fake answers with an error that
quotes every credential it received — raw, URL-encoded, inside ``key=`` and inside a base64 ``user:key``,
the URL with its query, in the body and in a reply header (``credential_echo``). Then everything the run,
``summarize``, ``export`` (unredacted), ``report`` and the Jury service produce is searched, byte for byte,
for every key in each of those encodings: stdout, stderr, every file of the output folder (the SQLite store
and the request cache included), the bundle, the crash-log folder and the Jury service's gRPC answers.
The echo is proven to have happened (the recorded errors carry the fake's text with ``***`` in place of
each key), so the scrubbing, not a dropped message, is what is tested."""

from __future__ import annotations

import base64
import json
import os
import secrets
import string
import subprocess
import sys
import urllib.parse
from pathlib import Path

import grpc
import pytest
import yaml

from medhelm.devtools.fakes.anthropic import FakeAnthropic
from medhelm.devtools.fakes.azure_openai import FakeAzureOpenAI
from medhelm.devtools.fakes.bedrock import FakeBedrock
from medhelm.devtools.fakes.gemini import FakeGemini
from medhelm.devtools.fakes.shc import FakeSHCGateway
from medhelm.devtools.fixtures import write_configurable_benchmark
from medhelm.devtools.mock_openai import MockOpenAIServer

ECHOED, INSTANCES = 2, 4
LENGTHS = (8, 9, 12, 17, 24, 32, 40, 64, 108, 150, 200)


def _key(length: int, tag: str) -> str:
    """A random key of ``length`` characters; some carry characters a URL or base64 changes (``/+=``)."""
    alphabet = string.ascii_letters + string.digits + ("/+=-" if length % 2 else "-_")
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _forms(key: str) -> set[bytes]:
    """The encodings a leak would take (computed here, apart from medhelm.scrub's own list)."""
    raw = key.encode()
    forms = {raw, urllib.parse.quote(key, safe="").encode(), urllib.parse.quote_plus(key).encode(),
             base64.b64encode(raw).rstrip(b"="), base64.urlsafe_b64encode(raw).rstrip(b"="),
             base64.b64encode(b"user:" + raw).rstrip(b"="), json.dumps(key).strip('"').encode()}
    return {f for f in forms if len(f) >= 8}


class Keys:
    def __init__(self) -> None:
        names = ("OA_ENV", "OA_FILE", "ANT", "GEM", "AZ", "SUB", "AZ_SECRET", "AWS_ID", "AWS_SECRET", "AWS_TOKEN",
                 "VERTEX_TOKEN", "HELM_ANT", "HELM_SHC", "HELM_DEP", "HELM_ENV_VAR", "JUDGE", "CALLER")
        self.values = {n: _key(LENGTHS[i % len(LENGTHS)], n) for i, n in enumerate(names)}
        self.values["AWS_ID"] = "AKIA" + "".join(secrets.choice(string.ascii_uppercase + string.digits)
                                                 for _ in range(16))  # the 20-character AWS shape

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    def leaks(self, blob: bytes) -> list[str]:
        return [f"{name} ({len(key)} chars) as {form[:12]!r}…" for name, key in self.values.items()
                for form in _forms(key) if form in blob]


def _assert_clean(keys: Keys, what: str, blob: bytes | str) -> None:
    data = blob.encode() if isinstance(blob, str) else blob
    found = keys.leaks(data)
    assert not found, f"{what}: {found}"


def _all_files(*folders: Path):
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                yield path


@pytest.fixture
def world(tmp_path):
    """Every fake started, echoing; the deployments, credential files and environment that point at them."""
    keys = Keys()
    env_dir = tmp_path / "prod_env"
    env_dir.mkdir()
    (tmp_path / "oa_file_key").write_text(keys["OA_FILE"] + "\n")
    (tmp_path / "vertex_token").write_text(keys["VERTEX_TOKEN"])
    fakes = {
        "oa_env": MockOpenAIServer(), "oa_file": MockOpenAIServer(),
        "anthropic": FakeAnthropic(api_key=keys["ANT"]), "gemini": FakeGemini(api_key=keys["GEM"]),
        "azure": FakeAzureOpenAI(api_key=keys["AZ"]),
        "entra": FakeAzureOpenAI(api_key=None, tenant="t1", client_id="app", client_secret=keys["AZ_SECRET"]),
        "bedrock": FakeBedrock(aws_keys={keys["AWS_ID"]: keys["AWS_SECRET"]}),
        "vertex": FakeGemini(platform="vertex", bearer=keys["VERTEX_TOKEN"]),
        "helm_ant": FakeAnthropic(api_key=keys["HELM_ANT"]),
        "helm_shc": FakeSHCGateway(routes={"/claude/route": "claude"}, subscription_key=keys["HELM_SHC"]),
        "helm_dep": MockOpenAIServer(),
        "judge": MockOpenAIServer(),
    }
    for fake in fakes.values():
        fake.start()
    # 400: each refused instance is recorded with the echo and the run goes on (a 401/403 stops the run at the
    # first refusal, exit 2: that path is driven below, with oa_env, helm_ant and the judge)
    statuses = {name: 400 for name in ("oa_env", "oa_file", "anthropic", "gemini", "azure", "entra", "bedrock",
                                       "vertex", "helm_ant", "helm_shc", "helm_dep", "judge")}
    for name, fake in fakes.items():
        # ECHOED of each run's requests refused for good with the echo (the rest answered: a complete run
        # with errors, which summarize stores); Entra: the token endpoint answers, the chat route echoes
        fake.echo_credentials(ECHOED, statuses[name], **({"only": "/chat/"} if name == "entra" else {}))
    base = lambda name: fakes[name].base_url  # noqa: E731
    common = {"max_sequence_length": 4096, "timeout_s": 30}
    items = [
        {"name": "leak/oa-env", "model_name": "t/oa-env", "kind": "openai", "base_url": base("oa_env"),
         "served_model_name": "m", "api_key_env": "OA_ENV_KEY", **common},
        {"name": "leak/oa-file", "model_name": "t/oa-file", "kind": "openai", "base_url": base("oa_file"),
         "served_model_name": "m", "api_key_env": "OA_FILE_KEY", **common},
        {"name": "leak/anthropic", "model_name": "t/ant", "kind": "anthropic", "base_url": base("anthropic"),
         "served_model_name": "claude-test", "api_key_env": "ANT_KEY", **common},
        {"name": "leak/gemini", "model_name": "t/gem", "kind": "gemini", "base_url": base("gemini"),
         "served_model_name": "gemini-test", "api_key_env": "GEM_KEY", **common},
        {"name": "leak/azure", "model_name": "t/az", "kind": "azure_openai", "base_url": base("azure"),
         "served_model_name": "gpt-test", "api_key_env": "AZ_KEY", **common,
         "options": {"subscription_key_env": "SUB_KEY"}},
        {"name": "leak/entra", "model_name": "t/entra", "kind": "azure_openai", "base_url": base("entra"),
         "served_model_name": "gpt-test", **common, "options": {"auth": "entra"}},
        {"name": "leak/bedrock", "model_name": "t/bedrock", "kind": "bedrock", "base_url": base("bedrock"),
         "served_model_name": "anthropic.claude-test-v1:0", **common, "options": {"region": "us-east-1"}},
        {"name": "leak/vertex", "model_name": "t/vertex", "kind": "gemini", "base_url": base("vertex"),
         "served_model_name": "gemini-test", **common,
         "options": {"platform": "vertex", "region": "us-central1", "project": "p",
                     "access_token_file": str(tmp_path / "vertex_token")}},
        # HELM prod_env entries keyed from credentials.conf: <host>ApiKey, a gateway key, deployments {...}
        {"name": "anthropic/claude-leak", "model_name": "anthropic/claude-leak", "tokenizer_name": "a/t",
         "max_sequence_length": 4096,
         "client_spec": {"class_name": "helm.clients.anthropic_client.AnthropicMessagesClient",
                         "args": {"base_url": base("helm_ant"), "anthropic_model_name": "claude-test"}}},
        {"name": "stanfordhealthcare/claude-leak", "model_name": "anthropic/claude-shc", "tokenizer_name": "a/t",
         "max_sequence_length": 4096,
         "client_spec": {"class_name": "helm.clients.stanfordhealthcare_claude_client.StanfordHealthCareClaudeClient",
                         "args": {"model": "claude-3-7-sonnet-20250219", "deployment": "claude/route"}}},
        {"name": "acme/gpt-leak", "model_name": "acme/gpt-leak", "tokenizer_name": "a/t", "max_sequence_length": 4096,
         "client_spec": {"class_name": "helm.clients.openai_client.OpenAIClient",
                         "args": {"base_url": base("helm_dep"), "openai_model_name": "m"}}},
        {"name": "leak/judge", "model_name": "t/judge", "kind": "openai", "base_url": base("judge"),
         "served_model_name": "judge", "api_key_env": "JUDGE_KEY", **common},
    ]
    (env_dir / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": items}))
    (env_dir / "credentials.conf").write_text(
        f'anthropicApiKey: "{keys["HELM_ANT"]}"\n'
        f'stanfordhealthcareEndpoint: "{base("helm_shc")}"\n'
        f'stanfordhealthcareApiKey: ${{SHC_KEY_VAR}}\n'
        f'deployments: {{ "acme/gpt-leak": "{keys["HELM_DEP"]}" }}\n')
    env = {**os.environ, "OA_ENV_KEY": keys["OA_ENV"], "OA_FILE_KEY_FILE": str(tmp_path / "oa_file_key"),
           "ANT_KEY": keys["ANT"], "GEM_KEY": keys["GEM"], "AZ_KEY": keys["AZ"], "SUB_KEY": keys["SUB"],
           "AZURE_TENANT_ID": "t1", "AZURE_CLIENT_ID": "app", "AZURE_CLIENT_SECRET": keys["AZ_SECRET"],
           "AZURE_AUTHORITY_HOST": base("entra"), "AWS_ACCESS_KEY_ID": keys["AWS_ID"],
           "AWS_SECRET_ACCESS_KEY": keys["AWS_SECRET"], "AWS_SESSION_TOKEN": keys["AWS_TOKEN"],
           "SHC_KEY_VAR": keys["HELM_SHC"], "JUDGE_KEY": keys["JUDGE"], "MEDHELM_LOG_DIR": str(tmp_path / "logs"),
           "MEDHELM_OFFLINE": "1"}
    env.pop("OA_FILE_KEY", None)
    env.pop("HELM_CREDENTIALS", None)
    yield keys, fakes, env_dir, env, tmp_path
    for fake in fakes.values():
        (fake.stop if hasattr(fake, "stop") else fake.kill)()


def _medhelm(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=600,
                          env=env)


RUN_MODELS = ("leak/oa-env", "leak/oa-file", "leak/anthropic", "leak/gemini", "leak/azure", "leak/entra",
              "leak/bedrock", "leak/vertex", "anthropic/claude-leak", "stanfordhealthcare/claude-leak",
              "acme/gpt-leak")


def test_no_planted_key_in_anything_the_run_summarize_and_export_produce(world):
    keys, fakes, env_dir, env, tmp = world
    cfg = write_configurable_benchmark(tmp / "bench", INSTANCES, name="LEAK")
    entries = [f"medhelm_configurable_benchmark:model_deployment={m},config_path={cfg}" for m in RUN_MODELS]
    out = tmp / "out"
    procs = [_medhelm(env, "run", "-r", *entries, "--local-path", str(env_dir), "-o", str(out), "-q",
                      "--max-attempts", "2", "--retry-base-delay", "0")]
    run = procs[0]
    # every run is complete, and each says in one line that it had refused bad requests (exit 2)
    assert run.returncode == 2 and run.stderr.count("refused as a bad request") == len(RUN_MODELS), run.stderr[-3000:]
    store = out / "results.sqlite"
    procs.append(_medhelm(env, "summarize", "-o", str(out), "--store", str(store), "--release", "r1", "--suites", "default",
                          "--local-path", str(env_dir), "--bootstrap", "0"))
    assert procs[-1].returncode == 0, procs[-1].stderr[-3000:]
    bundle = tmp / "bundle"
    procs.append(_medhelm(env, "export", str(bundle), "--store", str(store), "--release", "r1"))
    assert procs[-1].returncode == 0, procs[-1].stderr[-3000:]

    # every fake did echo: its refusals are the echo, and the records carry its text with the keys scrubbed
    for name, fake in fakes.items():
        if name == "judge":
            continue
        refused = fake.refused if hasattr(fake, "refused") else None
        assert refused is None or any(kind == "echo" for _, kind in refused), name
    errors = []
    for path in out.rglob("instances.jsonl"):
        errors += [json.loads(line)["error"] for line in path.read_text().splitlines() if line]
    errors = [e for e in errors if e]
    assert len(errors) == ECHOED * len(RUN_MODELS), errors
    assert all("invalid credentials received" in e for e in errors), errors

    # a run whose every instance is refused: the CLI's error line quotes the first echo (stderr, exit 2)
    fakes["oa_env"].echo_credentials(INSTANCES, 401)
    procs.append(_medhelm(env, "run", "-r", entries[0], "--local-path", str(env_dir), "-o", str(out), "-q",
                          "--suite", "failing", "--disable-cache"))
    assert procs[-1].returncode == 2 and "invalid credentials received" in procs[-1].stderr, procs[-1].stderr

    for proc in procs:
        _assert_clean(keys, "stdout", proc.stdout)
        _assert_clean(keys, "stderr", proc.stderr)
    assert "***" in procs[-1].stderr
    assert bundle.exists()
    for path in _all_files(out, bundle, tmp / "logs"):
        _assert_clean(keys, str(path), path.read_bytes())
    _assert_clean(keys, "the dashboard's drill-down", _drill_down(store))
    # scrubbed, not dropped: each record's error kept the echo with *** where the keys stood
    assert all("***" in e for e in errors), [e for e in errors if "***" not in e][:3]


def _drill_down(store: Path) -> str:
    """Every text the dashboard's Benchmark page shows for every run of the release (errors included), the
    real app under AppTest."""
    import sqlite3

    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).parents[2] / "dashboard" / "app.py")
    with sqlite3.connect(store) as conn:
        bench = conn.execute("SELECT benchmark FROM benchmarks").fetchone()[0]
        runs = [r for (r,) in conn.execute("SELECT run_id FROM runs ORDER BY run_id")]
    saved = {k: os.environ.get(k) for k in ("MEDHELM_STORE", "MEDHELM_RELEASE", "MEDHELM_REDACTED")}
    os.environ["MEDHELM_STORE"] = str(store)
    os.environ.pop("MEDHELM_RELEASE", None)
    os.environ.pop("MEDHELM_REDACTED", None)
    shown = []
    try:
        at = AppTest.from_file(app, default_timeout=120).run()
        at.sidebar.radio(key="page").set_value("Benchmark").run()
        at.selectbox(key="bench_page_benchmark").set_value(bench).run()
        for run_id in runs:
            at.selectbox(key="bench_run").set_value(run_id).run()
            assert not at.exception, [e.value for e in at.exception]
            shown += [str(e.value) for kind in ("text", "markdown", "error", "code", "caption") for e in at.get(kind)]
            shown += [e.label for e in at.expander]
            shown += [df.value.to_csv() for df in at.dataframe]
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    text = "\n".join(shown)
    assert "invalid credentials received" in text  # the drill-down does show the errors
    return text


JURY = ("  - name: jury_score\n    rubric: aci_bench\n    max_tokens: 64\n    judges:\n"
        "      - {name: leak/judge, model_name: t/judge}\n"
        "      - {name: anthropic/claude-leak, model_name: anthropic/claude-leak}\n")


def test_no_planted_key_in_the_jury_services_answers_or_its_log(world, monkeypatch):
    """The Jury service's judges echo their keys (one from the environment, one from HELM_CREDENTIALS, the
    caller's token too): the explanation in its gRPC answer, its status details and its log hold none."""
    from medhelm.pipeline import RunOptions, plan_runs
    from medhelm.rpc import codec
    from medhelm.rpc.remote import names_for
    from medhelm.runentries import parse_run_entry
    from medhelm.scoring.base import ScoringItem
    from medhelm.specs import Completion
    from medhelm.v1 import common_pb2, jury_pb2_grpc
    from tests.services.conftest import Service

    keys, fakes, env_dir, env, tmp = world
    cfg = write_configurable_benchmark(tmp / "broot" / "leak", 2, name="LEAKJURY", max_tokens=32)
    cfg.write_text(cfg.read_text() + JURY)
    # the service reads HELM's credentials from the variable (the file is then not read: HELM's rule)
    conf = (env_dir / "credentials.conf").read_text().replace("${SHC_KEY_VAR}", f'"{keys["HELM_SHC"]}"')
    (env_dir / "credentials.conf").write_text("this file is not read when HELM_CREDENTIALS is set {{{")
    (tmp / "callers").write_text(f"job {keys['CALLER']}\n")
    service_env = {**env, "HELM_CREDENTIALS": conf}
    fakes["helm_ant"].echo_credentials(50, 401)
    fakes["judge"].echo_credentials(50, 403)

    for name in ("OA_ENV_KEY", "JUDGE_KEY", "HELM_CREDENTIALS"):  # planning here resolves the deployments
        monkeypatch.setenv(name, service_env[name])
    entry = parse_run_entry(f"medhelm_configurable_benchmark:model_deployment=leak/oa-env,config_path={cfg}")
    plan = plan_runs([entry], RunOptions(local_path=env_dir, output_path=tmp / "plan"))[0]
    spec = names_for(plan.spec, (tmp / "broot",))  # file arguments as names under the service's root
    instances = list(plan.benchmark.instances())[:2]
    svc = Service("jury", "--local-path", str(env_dir), "--benchmark-root", str(tmp / "broot"), "--offline",
                  "--disable-cache", "--caller-tokens", str(tmp / "callers"), env=service_env)
    answers = []
    try:
        with grpc.insecure_channel(svc.address) as ch:
            stub = jury_pb2_grpc.JuryServiceStub(ch)
            metadata = (("authorization", f"Bearer {keys['CALLER']}"),)
            for position, instance in enumerate(instances):
                item = ScoringItem(spec, instance, _prompt(plan, instance), Completion("The note is fine."))
                request = common_pb2.ScoreRequest(setup=codec.setup_message(spec), item=codec.item_message(item, position))
                try:
                    answer = stub.JudgeOne(request, metadata=metadata, timeout=120)
                    answers.append(answer.SerializeToString())
                    answers.append(str(answer).encode())
                except grpc.RpcError as err:
                    answers.append(f"{err.code()} {err.details()}".encode())
    finally:
        svc.stop()
        log = svc.proc.stderr.read() if not svc.proc.stderr.closed else ""
    blob = b"\n".join(answers)
    _assert_clean(keys, "jury answers", blob)
    assert b"judge call failed" in blob and b"invalid credentials received" in blob and b"***" in blob, blob[:2000]
    assert any(kind == "echo" for _, kind in fakes["helm_ant"].refused)
    _assert_clean(keys, "jury service log", log)


def _prompt(plan, instance):
    from medhelm.benchmarks.base import PromptBudget

    return plan.benchmark.prompt(instance, PromptBudget(max_prompt_tokens=2000))
