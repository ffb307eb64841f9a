"""Specs round-trip through JSON and hash stably; the deployment registry resolves like HELM's."""

from __future__ import annotations

import json

import pytest

from medhelm.deployments import DEFAULT_DEPLOYMENT, DeploymentRegistry, resolve_gguf
from medhelm.errors import ConfigError
from medhelm.records import InstanceResult, JudgeScore
from medhelm.specs import (BenchmarkSpec, Completion, FrozenMap, GenerationRequest, Instance, Message, MetricSpec,
                           Prompt, Reference, RunSpec, Usage)


def _spec(**kw) -> RunSpec:
    bench = BenchmarkSpec(name="pubmed_qa", display_name="PubMedQA", description="d",
                          category="Medical Research Assistance", subcategory="Conducting Literature Research",
                          access="public", task_type="multiple_choice",
                          metrics=(MetricSpec("exact_match"),), main_metric="exact_match", max_tokens=1)
    return RunSpec(**{"entry": "pubmed_qa:model=m", "benchmark": bench, "benchmark_args": {"subset": "x"},
                      "model": "qwen/qwen2.5-7b-instruct", "deployment": "vllm/qwen2.5-7b-instruct", **kw})


def test_runspec_json_roundtrip_and_digest_stable():
    spec = _spec()
    again = RunSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.digest() == spec.digest()
    assert _spec(max_tokens=5).digest() != spec.digest()


def test_run_name_is_helm_style_and_hides_local_paths():
    spec = _spec(benchmark_args={"subset": "x", "data_path": "/secure/phi"})
    assert spec.name == "pubmed_qa,subset=x:model=qwen_qwen2.5-7b-instruct,model_deployment=vllm_qwen2.5-7b-instruct"


def test_instance_result_roundtrip():
    rec = InstanceResult(
        run="r", position=3,
        instance=Instance("7", "q?", (Reference("Yes"), Reference("No", False)), choices=("Yes", "No"),
                          extra={"k": [1, {"a": 2}]}),
        prompt=Prompt.user("q?", system="s"), completion=Completion("Yes", "stop", Usage(10, 1, 0.2)),
        stats={"exact_match": 1.0, "jury_score": None},
        judgements=(JudgeScore("j", "accuracy", 4, 1, 5, "ok"), JudgeScore("j", "clarity", None, 1, 5,
                                                                            status="unscored")))
    assert InstanceResult.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    assert rec.judgements[0].normalized == 0.75 and rec.judgements[1].normalized is None


def test_the_judges_question_crosses_the_wire_but_stays_out_of_the_record():
    """Prompt.question (the upstream input text the jury's {QUESTION} gets) round-trips through the services' codec;
    a run's record never keeps it, and a prompt without one writes the JSON it always wrote."""
    from medhelm.rpc import codec
    from medhelm.scoring.base import ScoringItem

    plain = Prompt.user("Summarize:\n\nhi")
    assert plain.to_json() == {"messages": [{"role": "user", "content": "Summarize:\n\nhi"}], "truncated": False}
    asked = Prompt.user("Summarize:\n\nhi", truncated=True, question="Doctor-patient dialogue:\n\nhi there")
    assert Prompt.from_json(json.loads(json.dumps(asked.to_json()))) == asked
    run = _spec()
    item = ScoringItem(run=run, instance=Instance("1", "hi there"), prompt=asked, completion=Completion("ok"))
    assert codec.scoring_item(run, codec.item_message(item, 0)).prompt == asked
    rec = InstanceResult(run="r", instance=item.instance, prompt=asked, completion=item.completion, stats={})
    assert rec.to_json()["prompt"] == {**plain.to_json(), "truncated": True}
    assert InstanceResult.from_json(json.loads(json.dumps(rec.to_json()))).prompt.question is None


def test_cache_key_depends_on_deployment_identity_and_request():
    reg = DeploymentRegistry.load(None)
    a, b = reg.get("vllm/qwen2.5-7b-instruct"), reg.get("vllm/llama-3.1-8b-instruct")
    req = GenerationRequest(messages=(Message("user", "hi"),), max_tokens=4)
    assert req.cache_key(a) != req.cache_key(b)
    assert req.cache_key(a) != GenerationRequest(messages=(Message("user", "hi"),), max_tokens=5).cache_key(a)
    assert req.cache_key(a) == GenerationRequest.from_json(req.to_json()).cache_key(a)


def test_frozen_map_is_hashable_and_immutable():
    m = FrozenMap({"b": [1, 2], "a": {"x": 1}})
    assert hash(m) == hash(FrozenMap({"a": {"x": 1}, "b": [1, 2]}))
    with pytest.raises(TypeError):
        m["a"] = 1  # type: ignore[index]


def test_registry_resolves_model_to_default_deployment_and_user_file_overrides(tmp_path):
    (tmp_path / "model_deployments.yaml").write_text(
        "model_deployments:\n"
        "  - name: kserve/qwen\n    model_name: qwen/qwen2.5-7b-instruct\n    kind: openai\n"
        "    base_url: http://qwen-predictor.ns.svc/openai/v1\n    api_key_env: QWEN_KEY\n")
    reg = DeploymentRegistry.load(tmp_path)
    assert reg.resolve("qwen/qwen2.5-7b-instruct", None).name == "kserve/qwen"
    assert reg.resolve(None, None).name == DEFAULT_DEPLOYMENT
    assert reg.resolve("local/smollm2-135m-instruct", None).kind.value == "llamacpp"
    with pytest.raises(ConfigError, match="serves model"):
        reg.resolve("meta/llama-3.1-8b-instruct", "kserve/qwen")


@pytest.mark.parametrize("body,field", [
    ("model_deployments:\n  - name: a\n    kind: openai\n    base_url: http://x\n", "model_deployments[0].model_name"),
    ("model_deployments:\n  - name: a\n    model_name: m\n    kind: tgi\n", "model_deployments[0].kind"),
    ("model_deployments:\n  - name: a\n    model_name: m\n    kind: openai\n", "model_deployments[0].base_url"),
    ("model_deployments:\n  - {name: a, model_name: m, kind: llamacpp, gguf_path: x, colour: red}\n",
     "model_deployments[0].colour"),
    ("model_deployments: [\n", None),
])
def test_bad_deployment_file_names_file_and_field(tmp_path, body, field):
    (tmp_path / "model_deployments.yaml").write_text(body)
    with pytest.raises(ConfigError) as err:
        DeploymentRegistry.load(tmp_path)
    msg = str(err.value)
    assert "model_deployments.yaml" in msg and "\n" not in msg
    if field:
        assert f"'{field}'" in msg


@pytest.mark.parametrize("value,wanted", [("ZQX-PATIENT-7731", "must be an integer or 'auto'"),
                                          ("0", "must be greater than 0 or 'auto'")])
def test_a_value_that_fits_no_member_of_a_union_names_its_field_and_what_each_wanted(tmp_path, value, wanted):
    """``max_concurrency`` is an integer or ``auto``: pydantic reports each member under a tag of its own
    (``constrained-int``, ``literal['auto']``), which named no field the user wrote and told only of the integer."""
    (tmp_path / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: a\n    model_name: m\n    kind: openai\n    base_url: http://x\n"
        f"    max_concurrency: {value}\n")
    with pytest.raises(ConfigError) as err:
        DeploymentRegistry.load(tmp_path)
    msg = str(err.value)
    assert msg.endswith(f"model_deployments.yaml:6: field 'model_deployments[0].max_concurrency': {wanted}"), msg
    assert "ZQX-PATIENT" not in msg and "constrained" not in msg


@pytest.mark.parametrize("options,field,line", [
    ('{headers: {X-Team: "qa\\r\\nX-Injected: ZQX-PATIENT-7731"}}', "options.headers.X-Team", 5),
    ('{headers: {"Bad ZQX-PATIENT-7731": "v"}}', "options.headers[0]", 5),
    ('{headers: "ZQX-PATIENT-7731"}', "options.headers", 5),
    ('{auth_header: "api-key\\nZQX-PATIENT-7731"}', "options.auth_header", 5),
])
def test_a_header_that_would_break_the_request_line_is_refused_naming_file_line_and_field(tmp_path, options, field,
                                                                                          line):
    (tmp_path / "model_deployments.yaml").write_text(
        f"model_deployments:\n  - name: a\n    model_name: m\n    kind: openai\n    options: {options}\n"
        "    base_url: http://x\n")
    with pytest.raises(ConfigError) as err:
        DeploymentRegistry.load(tmp_path)
    msg = str(err.value)
    assert f"model_deployments.yaml:{line}" in msg and f"'model_deployments[0].{field}'" in msg, msg
    assert "ZQX-PATIENT" not in msg and "\n" not in msg  # the value is never echoed


def test_unknown_deployment_lists_known():
    with pytest.raises(ConfigError, match="unknown model deployment 'nope'.*local/smollm2-135m-instruct"):
        DeploymentRegistry.load(None).get("nope")


def test_packaged_gguf_resolves():
    path = resolve_gguf(DeploymentRegistry.load(None).get(DEFAULT_DEPLOYMENT).gguf_path)
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
