"""HELM's own run entries accepted and honoured; prompt_path= (instructions verbatim) marked as a non-default
prompt from the run spec to the leaderboard; `describe` states the expected instance count and `validate`
compares what it loaded with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.benchmarks import LoadContext, PromptBudget, resolve
from medhelm.benchmarks.catalogue import get_entry
from medhelm.cli import main
from medhelm.errors import ConfigError
from medhelm.pipeline import RunOptions, plan_runs
from medhelm.runentries import parse_run_entry
from medhelm.specs import FrozenMap, RunSpec

# Lines exactly as upstream's run_entries_medhelm_gated.conf writes them, and the arguments its run-spec functions
# take (medcalc_bench(version), head_qa(language, category)).
HELM_ENTRIES = [
    "ehrshot:max_length=100000,subject=guo_readmission,model=openai/gpt-4o-2024-05-13,"
    "model_deployment=stanfordhealthcare/gpt-4o-2024-05-13,data_path=/share/pi/nigam/data/medhelm/ehrshot/meds/",
    "ehrshot:num_output_tokens=4000,max_length=100000,subject=lab_anemia,model=deepseek-ai/deepseek-r1,"
    "model_deployment=stanfordhealthcare/deepseek-r1,data_path=/share/pi/nigam/data/medhelm/ehrshot/meds/",
    "medalign:max_length=100000,model=openai/gpt-4o-2024-05-13,model_deployment=stanfordhealthcare/gpt-4o-2024-05-13,"
    "data_path=/share/pi/nigam/datasets/medalign_release_fixes/",
    "medcalc_bench:version=v1.2,model=openai/gpt-4o-2024-05-13",
    "head_qa:language=en,category=None,model=openai/gpt-4o-2024-05-13",
]


@pytest.mark.parametrize("text", HELM_ENTRIES)
def test_helms_own_run_entry_arguments_are_accepted(text):
    entry = parse_run_entry(text)
    args = get_entry(entry.name).check_args(entry.benchmark_args)
    assert set(entry.benchmark_args) <= set(args)


def _plan(tmp_path: Path, text: str, mirror: Path | None = None):
    env = tmp_path / "prod_env"  # none: the built-in embedded deployment
    options = RunOptions(suite="s", output_path=tmp_path / "out", local_path=env, data_dir=mirror, offline=True)
    (plan,) = plan_runs([parse_run_entry(text)], options)
    return plan


def test_prompt_path_replaces_the_instructions_verbatim_and_marks_the_run(mirror, tmp_path):
    helm_words = "Answer A for yes, B for no or C for maybe.\nDo not include any explanation or additional text.\n"
    (tmp_path / "medhelm_pubmed_qa.txt").write_text(helm_words)
    default = _plan(tmp_path, "pubmed_qa:model=local/smollm2-135m-instruct", mirror)
    custom = _plan(tmp_path, f"pubmed_qa:prompt_path={tmp_path / 'medhelm_pubmed_qa.txt'},"
                             "model=local/smollm2-135m-instruct", mirror)
    inst = next(iter(custom.benchmark.instances()))
    text = custom.benchmark.prompt(inst, PromptBudget()).text
    assert text.startswith(helm_words.rstrip("\n") + "\n\n")  # verbatim, the final newline dropped
    assert default.benchmark.prompt(inst, PromptBudget()).text.split("\n\n", 1)[1] == text.split("\n\n", 1)[1]
    # the run spec carries a flag (and a digest of the words), the run name says which prompt
    assert default.spec.prompt == "" and "prompt" not in default.spec.to_json()
    assert custom.spec.prompt.startswith("custom:") and len(custom.spec.prompt) == len("custom:") + 12
    assert custom.spec.name.startswith("pubmed_qa,prompt=medhelm_pubmed_qa:model=")
    assert str(tmp_path) not in custom.spec.name
    assert RunSpec.from_json(custom.spec.to_json()) == custom.spec
    assert custom.spec.digest() != default.spec.digest()


def test_prompt_path_errors_are_one_line_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.txt: prompt file not found \(prompt_path=\)"):
        resolve("pubmed_qa", LoadContext(args=FrozenMap(prompt_path="nope.txt"), base_dir=tmp_path))
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(ConfigError, match="prompt file is empty"):
        resolve("pubmed_qa", LoadContext(args=FrozenMap(prompt_path="empty.txt"), base_dir=tmp_path))


def test_the_leaderboard_marks_cells_with_a_non_default_prompt(tmp_path):
    from medhelm.store.ingest import _custom_prompt

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dashboard"))
    try:
        pytest.importorskip("streamlit")
        from page_leaderboard import custom_prompts
    finally:
        sys.path.pop(0)
    assert _custom_prompt(json.dumps({"prompt": "custom:0123456789ab"}))
    assert not _custom_prompt(json.dumps({"entry": "x"})) and not _custom_prompt(None)
    meta = {"custom_prompts": json.dumps([["pubmed_qa", "m", "d"]])}
    assert custom_prompts(meta) == [("pubmed_qa", "m", "d")] and custom_prompts({}) == []


def test_describe_states_the_published_count_and_what_is_left_out(capsys):
    assert main(["describe", "medec"]) == 0
    out = capsys.readouterr().out
    assert "instances     597 (full published data" in out and "328 trailing empty rows" in out
    assert main(["describe", "medhelm_med_qa"]) == 0
    out = capsys.readouterr().out
    assert "1,273" in out and "the dev split (1,272 questions)" in out
    assert main(["describe", "ehr_sql", "--json"]) == 0
    assert "valid" in json.loads(capsys.readouterr().out)["left_out"]


def test_every_public_benchmark_states_its_count_or_why_not(capsys):
    from medhelm.benchmarks.catalogue import all_entries
    from medhelm.benchmarks.entry import Access
    public = [e for e in all_entries() if e.access is Access.PUBLIC]
    assert len(public) >= 15
    unknown = sorted(e.name for e in public if not e.counts)
    assert all(e.count_note for e in public if not e.counts), unknown
    assert unknown == ["head_qa", "mtsamples_procedures", "race_based_med"]
    assert main(["describe", "ehr_sql"]) == 0
    out = capsys.readouterr().out
    assert "instance_set=leaderboard: 1,000" in out and "other sets not known here: the number of eICU" in out
    assert "not stated" not in out


def test_validate_compares_loaded_and_published_counts(mirror, tmp_path):
    env = tmp_path / "prod_env"
    proc = subprocess.run([sys.executable, "-m", "medhelm", "validate", "--offline", "--data-dir", str(mirror),
                           "--local-path", str(env), "-o", str(tmp_path / "out"), "--run-entries",
                           "aci_bench:subset=clinicalnlp_taskB_test1,model=local/smollm2-135m-instruct",
                           "medec:model=local/smollm2-135m-instruct"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "loaded 40 instances: as published" in out  # the whole real test-1 file
    assert "note: loaded 120 instances; the full published data gives 597" in out  # the 120-row slice


def test_blank_rows_are_one_note_on_stderr_naming_file_and_count(shared_data, tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "medec").mkdir(parents=True)
    text = (shared_data / "medec/MEDEC-MS-TestSet-sample.csv").read_text(encoding="utf-8")
    path = mirror / "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
    path.write_text(text + ",,,,,,,,\n" * 3 + "   \n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "medhelm", "validate", "--offline", "--data-dir", str(mirror),
                           "--local-path", str(tmp_path / "env"), "-o", str(tmp_path / "out"), "--run-entries",
                           "medec:model=local/smollm2-135m-instruct"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"{path}: skipped 4 blank rows\n"
    assert "ok  medec:" in proc.stdout and "loaded 120 instances" in proc.stdout


def test_summarize_records_which_cells_used_a_non_default_prompt(tmp_path):
    """Synthetic finished runs in the documented run-directory format; one run's spec says its instructions
    came from prompt_path= (RunSpec.prompt). `summarize` lists that cell for the dashboard to mark."""
    from medhelm.store import open_store, read
    from medhelm.store.synthetic import catalogue, default_models, write_suite

    runs = write_suite(tmp_path, "s", default_models(2), catalogue(2), 5)
    marked = runs[1]
    spec = json.loads((marked / "run_spec.json").read_text())
    (marked / "run_spec.json").write_text(json.dumps({**spec, "prompt": "custom:0123456789ab"}))
    assert main(["summarize", "--suites", "s", "-o", str(tmp_path), "--bootstrap", "50"]) == 0
    with open_store(str(tmp_path / "results.sqlite")) as store:
        meta = read.meta(store, "s")
    assert json.loads(meta["custom_prompts"]) == [[spec["benchmark"]["name"], spec["model"], spec["deployment"]]]
