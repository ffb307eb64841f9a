"""Run-entry syntax and HELM .conf files, as the seeds write them."""

from __future__ import annotations

import pytest

from medhelm.errors import ConfigError
from medhelm.runentries import parse_run_entry, read_conf, select


def test_seed_run_entry_parses():
    e = parse_run_entry("pubmed_qa:model=qwen/qwen2.5-7b-instruct,model_deployment=huggingface/qwen2.5-7b-instruct")
    assert e.name == "pubmed_qa"
    assert e.model == "qwen/qwen2.5-7b-instruct"
    assert e.deployment == "huggingface/qwen2.5-7b-instruct"
    assert dict(e.benchmark_args) == {}


def test_benchmark_args_are_separated_and_kept_as_strings():
    e = parse_run_entry("med_dialog:subset=icliniq,model=m,max_eval_instances=5,num_output_tokens=007")
    assert dict(e.benchmark_args) == {"subset": "icliniq"}
    assert dict(e.run_args) == {"max_eval_instances": "5", "num_output_tokens": "007"}


def test_helm_comma_quirk_in_name():
    e = parse_run_entry("med_dialog,subset=healthcaremagic:model=m")
    assert e.name == "med_dialog" and e.benchmark_args["subset"] == "healthcaremagic" and e.model == "m"


@pytest.mark.parametrize("bad", ["", ":model=x", "pubmed qa:model=x", "pubmed_qa:model", "x:model=a,model=b"])
def test_bad_run_entries_are_one_line_errors(bad):
    with pytest.raises(ConfigError) as err:
        parse_run_entry(bad)
    assert "\n" not in str(err.value)


def test_seed_conf_file(tmp_path):
    conf = tmp_path / "exact_match_demo.conf"
    conf.write_text('entries: [\n  {description: "medhelm_configurable_benchmark:model=qwen/qwen2.5-7b-instruct,'
                    'model_deployment=huggingface/qwen2.5-7b-instruct,config_path=exact_match_demo.yaml", '
                    'priority: 1},\n]\n')
    [e] = read_conf(conf)
    assert e.name == "medhelm_configurable_benchmark"
    assert e.benchmark_args["config_path"] == "exact_match_demo.yaml"
    assert e.base_dir == tmp_path.resolve()
    assert e.priority == 1


def test_conf_with_comments_groups_and_priorities(tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("""
# Subcategory: Conducting Literature Research
entries = [
  {description: "pubmed_qa:model=a", priority: 1, groups: ["x", "y"]}
  // second
  {"description": "medcalc_bench:model=b", "priority": 2},
]
""")
    entries = read_conf(conf)
    assert [e.name for e in entries] == ["pubmed_qa", "medcalc_bench"]
    assert [e.name for e in select(entries, priority=1)] == ["pubmed_qa"]
    assert [e.name for e in select(entries, models_to_run=["b"])] == ["medcalc_bench"]


@pytest.mark.parametrize("text,line", [
    ('entries: [\n {description: "a:model=b", priority: 1}\n', 3),  # missing ]
    ('entries: [\n {description: "a:model=b" priority: x}]\n', None),
    ('entries: [\n {description: "a:model=b",\n priority: 1}}]\n', 3),
])
def test_bad_conf_names_file_and_line(tmp_path, text, line):
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_conf(conf)
    msg = str(err.value)
    assert msg.startswith(str(conf)) and "\n" not in msg
    if line:
        assert f"bad.conf:{line}" in msg


def test_missing_conf_file(tmp_path):
    with pytest.raises(ConfigError, match="missing.conf: file not found"):
        read_conf(tmp_path / "missing.conf")
