"""Choosing the jury at plan time: default jury, per-run-entry override, the seeds' judges, guards."""

from __future__ import annotations

import pytest

from medhelm.deployments import DeploymentRegistry
from medhelm.errors import ConfigError
from medhelm.scoring.jury import FACTORIES
from medhelm.scoring.registry import ResolveContext
from medhelm.specs import FrozenMap, MetricSpec

RESOLVE = FACTORIES["jury_score"].resolve
BUILTIN = DeploymentRegistry.load(None)


def ctx(base_dir=".", evaluated="", warnings=None, **benchmark_args) -> ResolveContext:
    sink = warnings if warnings is not None else []
    return ResolveContext(benchmark_args=FrozenMap(benchmark_args), base_dir=base_dir, deployments=BUILTIN,
                          evaluated_deployment=evaluated, warn=sink.append)


def judges(spec: MetricSpec) -> list[tuple[str, str, float]]:
    return [(j["name"], j["model_name"], j["weight"]) for j in spec.args["judges"]]


def test_default_jury_is_open_weight_and_in_network():
    spec = RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx())
    assert judges(spec) == [("vllm/qwen2.5-7b-instruct", "qwen/qwen2.5-7b-instruct", 1.0),
                            ("vllm/llama-3.1-8b-instruct", "meta/llama-3.1-8b-instruct", 1.0)]
    assert spec.args["rubric"] == "aci_bench" and spec.args["structured_output"] is True
    assert spec.args["max_tokens"] == 1024
    for j in spec.args["judges"]:  # every default judge is reached inside the cluster, never a public API
        assert ".svc" in BUILTIN.get(j["name"]).base_url or "predictor" in BUILTIN.get(j["name"]).base_url


def test_run_entry_override_is_relative_to_the_entry_folder_and_wins(tmp_path):
    (tmp_path / "my_jury.yaml").write_text("judges:\n  - name: local/smollm2-135m-instruct\n    weight: 2\n"
                                           "max_tokens: 300\nstructured_output: false\n")
    seeds_judges = {"prompt_template": "x", "judges": [{"name": "huggingface/qwen2.5-7b-instruct",
                                                        "model_name": "qwen/qwen2.5-7b-instruct"}]}
    spec = RESOLVE(MetricSpec("jury_score", seeds_judges), ctx(tmp_path, jury_config_path="my_jury.yaml"))
    assert judges(spec) == [("local/smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct", 2.0)]
    assert (spec.args["max_tokens"], spec.args["structured_output"]) == (300, False)
    # a built-in jury by name
    assert judges(RESOLVE(MetricSpec("jury_score", {"rubric": "medi_qa"}), ctx(jury_config_path="embedded")))[0][0] \
        == "local/smollm2-135m-instruct"


def test_seeds_judges_are_checked_against_the_registry():
    ok = {"name": "huggingface/qwen2.5-7b-instruct", "model_name": "qwen/qwen2.5-7b-instruct"}
    spec = RESOLVE(MetricSpec("jury_score", {"prompt_template": "x", "judges": [ok]}), ctx())
    assert judges(spec) == [(ok["name"], ok["model_name"], 1.0)]
    with pytest.raises(ConfigError, match="judge 'nowhere/model' is not a known model deployment"):
        RESOLVE(MetricSpec("jury_score", {"prompt_template": "x", "judges": [{"name": "nowhere/model"}]}), ctx())
    wrong = dict(ok, model_name="meta/llama-3.1-8b-instruct")
    with pytest.raises(ConfigError, match="serves model 'qwen/qwen2.5-7b-instruct', not 'meta/llama-3.1-8b"):
        RESOLVE(MetricSpec("jury_score", {"prompt_template": "x", "judges": [wrong]}), ctx())


def test_upstream_judges_yaml_shape_is_accepted(tmp_path):
    (tmp_path / "judges.yaml").write_text(
        "judges:\n  - name: qwen\n    model: qwen/qwen2.5-7b-instruct\n    model_deployment: vllm/qwen2.5-7b-instruct\n")
    spec = RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx(tmp_path, jury_config_path="judges.yaml"))
    assert judges(spec) == [("vllm/qwen2.5-7b-instruct", "qwen/qwen2.5-7b-instruct", 1.0)]


@pytest.mark.parametrize("text, message", [
    ("judges: [\n  {name: a\n", ":3"),  # YAML error with its line
    ("judges: []\n", ":1: field 'judges': must not be empty"),
    ("jurors: []\n", ":1: field 'jurors': unknown key (allowed: judges, max_tokens, structured_output, builtin_prompts, "
                         "custom_prompts, description)"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\ncustom_prompts: ours\n", "field 'custom_prompts'"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\nbuiltin_prompts: medhelm\n", "field 'builtin_prompts'"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\n    weight: 0\n", ":3: field 'judges[0].weight': input should be "
                                                                    "greater than 0"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\n    weight: .inf\n", "field 'judges[0].weight': must be a finite"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\n    weight: '2'\n", "field 'judges[0].weight': must be a number"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\n  - name: vllm/qwen2.5-7b-instruct\n", ":3: field 'judges[1]': "
                                                                                         "judge 'vllm/qwen2.5-7b-"
                                                                                         "instruct' is listed twice"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\n    temperature: 1\n", ":3: field 'judges[0].temperature': "
                                                                         "unknown key (allowed: name, model_name, "
                                                                         "model, model_deployment, weight)"),
    ("judges:\n  - name: [a]\n", "field 'judges[0].name': must be text"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\nstructured_output: 'yes'\n", "field 'structured_output': must be "
                                                                               "true or false"),
    ("judges:\n  - name: vllm/qwen2.5-7b-instruct\nmax_tokens: -1\n", "max_tokens"),
])
def test_bad_jury_files_are_one_line_errors_naming_the_file(tmp_path, text, message):
    (tmp_path / "j.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx(tmp_path, jury_config_path="j.yaml"))
    assert message in str(err.value) and "j.yaml" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="jury config not found"):
        RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx(tmp_path, jury_config_path="missing.yaml"))


def test_self_preference_guard_warns_for_the_same_deployment_or_model():
    warnings: list[str] = []
    RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx(evaluated="vllm/qwen2.5-7b-instruct",
                                                                   warnings=warnings))
    assert len(warnings) == 1 and "vllm/qwen2.5-7b-instruct" in warnings[0] and "prefer their own" in warnings[0]
    warnings.clear()  # same model behind another deployment
    RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx(evaluated="huggingface/qwen2.5-7b-instruct",
                                                                   warnings=warnings))
    assert len(warnings) == 1
    warnings.clear()
    RESOLVE(MetricSpec("jury_score", {"rubric": "aci_bench"}), ctx(evaluated="local/smollm2-135m-instruct",
                                                                   warnings=warnings))
    assert warnings == []


def test_validate_rejects_bad_specs_before_anything_runs():
    validate = FACTORIES["jury_score"].validate
    validate(MetricSpec("jury_score", {"rubric": "aci_bench"}))
    with pytest.raises(ConfigError, match="exactly one"):
        validate(MetricSpec("jury_score", {}))
    with pytest.raises(ConfigError, match="weight"):
        validate(MetricSpec("jury_score", {"rubric": "aci_bench", "judges": [{"name": "x", "weight": -1}]}))
    assert FACTORIES["jury_score"].stat_names(MetricSpec("jury_score")) == \
        ("jury_score", "jury_score_normalized", "jury_coverage")


@pytest.mark.parametrize("extra,style", [
    ("", "helm"),  # nothing tuned: HELM's request, comparable with MedHELM's column
    ("max_tokens: 300\n", "rubric"),  # the file tuned the judge's request: honoured
    ("structured_output: false\n", "rubric"),
    ("builtin_prompts: helm\nmax_tokens: 300\n", "helm"),  # said outright: kept
    ("builtin_prompts: rubric\n", "rubric"),
])
def test_builtin_prompts_follow_what_the_jury_file_tunes(tmp_path, extra, style):
    from medhelm.scoring.jury import config

    path = tmp_path / "jury.yaml"
    path.write_text("judges:\n  - name: vllm/qwen2.5-7b-instruct\n" + extra)
    assert config.load(path, None).builtin_prompts == style


def test_judges_in_a_benchmarks_own_metric_default_to_the_rubric_style():
    from medhelm.scoring.jury import config

    inline = {"rubric": "aci_bench", "judges": [{"name": "vllm/qwen2.5-7b-instruct"}]}
    assert config.from_mapping(inline, None).builtin_prompts == "rubric"
    assert config.from_mapping({**inline, "builtin_prompts": "helm"}, None).builtin_prompts == "helm"
