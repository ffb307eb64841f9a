"""The configurable benchmark: the user's docs' examples load verbatim; every mistake is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm import benchmarks
from medhelm.benchmarks import LoadContext, PromptBudget
from medhelm.errors import ConfigError
from medhelm.runentries import read_conf
from medhelm.specs import Access, FrozenMap, TaskType

from .seed_examples import FILES

EM_PROMPT_ROW_1 = (
    "You are a clinical assistant. Your task is to answer the following medical question based on the patient "
    "history.\n\nPatient ID: 001\n\nPatient Note:\nPatient with hypertension.\n\nQuestion:\nDoes the patient "
    'have hypertension?\n\nAnswer with a single token: "Yes" or "No"')


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def load_conf(conf: Path) -> benchmarks.Benchmark:
    [entry] = [e for e in read_conf(conf) if not str(e.model).startswith("baseline/")]  # the model's entry
    assert entry.name == benchmarks.CONFIGURABLE
    return benchmarks.resolve(entry.name, LoadContext(args=entry.benchmark_args, base_dir=entry.base_dir))


def load(yaml_path: Path | str, base_dir: Path = Path(".")) -> benchmarks.Benchmark:
    return benchmarks.resolve(benchmarks.CONFIGURABLE,
                              LoadContext(args=FrozenMap(config_path=str(yaml_path)), base_dir=base_dir))


def error_of(yaml_path: Path | str) -> str:
    with pytest.raises(ConfigError) as err:
        load(yaml_path)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.fixture
def em(tmp_path: Path) -> Path:
    """The docs' EXACT-MATCH-DEMO in a folder; returns the folder."""
    return write(tmp_path / "exact_match_demo", FILES["exact_match_demo"])


# ---------------------------------------------------------------------------------------------- the docs


def test_docs_exact_match_demo_loads_verbatim(em: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # config_path=exact_match_demo.yaml is found next to the .conf, not in the CWD
    bench = load_conf(em / "exact_match_demo.conf")
    spec = bench.spec
    assert (spec.name, spec.main_metric, spec.max_tokens) == ("EXACT-MATCH-DEMO", "exact_match", 1)
    assert spec.description.startswith("EXACT-MATCH-DEMO measures LLMs performance")
    assert (spec.category, spec.subcategory, spec.access) == ("", "", Access.PRIVATE)
    assert spec.task_type is TaskType.CLASSIFICATION and [m.name for m in spec.metrics] == ["exact_match"]
    first, second = bench.instances()
    assert (first.id, second.id) == ("1", "2")
    assert first.input == EM_PROMPT_ROW_1 + "\n"  # the template file whole, its final newline kept (HELM's input)
    assert [(r.text, r.correct) for r in first.references] == [("Yes", True), ("No", False)]
    assert [(r.text, r.correct) for r in second.references] == [("No", True), ("Yes", False)]
    assert dict(first.extra) == {"patient_id": "001", "note": "Patient with hypertension.",
                                 "question": "Does the patient have hypertension?"}
    prompt = bench.prompt(first, PromptBudget(max_prompt_tokens=8000))
    # HELM's prompt: the filled template, then the generation adapter's input suffix "\n"
    assert prompt.text == EM_PROMPT_ROW_1 + "\n\n" and not prompt.truncated and len(prompt.messages) == 1


def test_docs_jury_demo_loads_verbatim(tmp_path: Path) -> None:
    folder = write(tmp_path / "llm_jury_score_demo", FILES["llm_jury_score_demo"])
    bench = load_conf(folder / "llm_jury_score_demo.conf")
    spec = bench.spec
    assert (spec.name, spec.main_metric, spec.max_tokens) == ("LLM-JURY-SCORE-DEMO", "jury_score", 1024)
    assert spec.task_type is TaskType.GENERATION
    [jury] = spec.metrics
    assert jury.name == "jury_score"
    assert jury.args["prompt_template"] == FILES["llm_jury_score_demo"]["llm_jury_score_demo_judge_prompt.txt"]
    assert jury.args["judges"] == ({"name": "huggingface/qwen2.5-7b-instruct",
                                    "model_name": "qwen/qwen2.5-7b-instruct"},)
    rows = bench.instances()
    assert [r.id for r in rows] == ["1", "2"] and all(r.references == () for r in rows)  # no correct_answer
    assert "58-year-old with CKD stage 3." in rows[1].input and rows[1].input.endswith("response below:\n")


def test_shipped_examples_load(repo_root: Path) -> None:
    names = {}
    for conf in sorted(c for c in (repo_root / "examples").glob("*/*.conf") if not c.name.startswith("credentials")):
        bench = load_conf(conf)
        assert len(bench.instances()) >= 8, conf
        names[bench.spec.name] = bench.spec
    assert set(names) == {"EXACT-MATCH-DEMO", "LLM-JURY-SCORE-DEMO", "SUMMARIZATION-DEMO"}
    assert names["LLM-JURY-SCORE-DEMO"].metrics[0].args["judges"] == (
        {"name": "local/smollm2-135m-instruct", "model_name": "huggingfacetb/smollm2-135m-instruct"},)
    summary = names["SUMMARIZATION-DEMO"]
    assert summary.main_metric == "rouge_l" and [m.name for m in summary.metrics] == ["rouge_l", "BERTScore-F"]
    assert (summary.category, summary.subcategory) == ("Clinical Note Generation", "Documenting Patient Visits")
    # every shipped example is placed in the taxonomy (the demo's category heatmap is filled)
    assert all(spec.category and spec.subcategory for spec in names.values())


# ---------------------------------------------------------------------------------------------- paths


def test_files_fall_back_to_the_working_directory(em: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # upstream resolved prompt/dataset against the CWD: a YAML elsewhere still finds them there
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "demo.yaml").write_text((em / "exact_match_demo.yaml").read_text())
    monkeypatch.chdir(em)
    assert len(load(configs / "demo.yaml").instances()) == 2
    monkeypatch.chdir(tmp_path)
    message = error_of(configs / "demo.yaml")
    assert message.startswith(f"{configs / 'demo.yaml'}:8: field 'prompt_file': file 'exact_match_demo_prompt.txt'")
    assert str(configs / "exact_match_demo_prompt.txt") in message and str(tmp_path / "exact_match_demo_prompt.txt") in message


def test_missing_config_file_names_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load("nope.yaml", base_dir=tmp_path)
    assert "field 'config_path'" in str(err.value) and str(tmp_path / "nope.yaml") in str(err.value)


# ---------------------------------------------------------------------------------------------- errors


def edit(folder: Path, name: str, old: str, new: str) -> None:
    path = folder / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("judges", ["", "\n    judges: [{name: mock/j, model_name: test/j}]"])
def test_a_bad_judge_prompt_names_its_file_and_a_bad_scale_the_yaml_line(em: Path, judges: str) -> None:
    # without judges in the YAML they join at planning, where the judge prompt's file was not known
    (em / "judge.txt").write_text("Rate the answer {RESPONSE} from 0 to 5.\n<rubric_criteria>{\"a\": {}}"
                                  "</rubric_criteria>\n")
    edit(em, "exact_match_demo.yaml", "- name: exact_match", "- name: jury_score\n    prompt_file: judge.txt" + judges)
    assert error_of(em / "exact_match_demo.yaml") == f"{em / 'judge.txt'}: the judge prompt has no {{QUESTION}} placeholder"
    (em / "judge.txt").write_text("{QUESTION} {RESPONSE} from 0 to 5.\n<rubric_criteria>{\"a\": {}}</rubric_criteria>")
    edit(em, "exact_match_demo.yaml", "prompt_file: judge.txt", "prompt_file: judge.txt\n    min_score: 7")
    assert error_of(em / "exact_match_demo.yaml") == (f"{em / 'exact_match_demo.yaml'}: "
                                                      "field 'metrics[0].max_score': score scale 7-5 is empty")


def test_unknown_placeholder_names_the_prompt_file_and_line(em: Path) -> None:
    edit(em, "exact_match_demo_prompt.txt", "{question}", "{questoin}")
    message = error_of(em / "exact_match_demo.yaml")
    assert message.startswith(f"{em / 'exact_match_demo_prompt.txt'}:9: field 'questoin': placeholder {{questoin}} "
                              f"has no column in {em / 'exact_match_demo_dataset.csv'}")


def test_literal_braces_are_escaped_and_bad_braces_are_an_error(em: Path) -> None:
    edit(em, "exact_match_demo_prompt.txt", "Question:", 'Reply as JSON {{"answer": ...}}. Question:')
    row = load(em / "exact_match_demo.yaml").instances()[0]
    assert 'Reply as JSON {"answer": ...}. Question:' in row.input
    edit(em, "exact_match_demo_prompt.txt", "{{", "{")
    assert error_of(em / "exact_match_demo.yaml").startswith(f"{em / 'exact_match_demo_prompt.txt'}: bad placeholder")


def test_csv_without_correct_answer(em: Path) -> None:
    csv = em / "exact_match_demo_dataset.csv"
    csv.write_text(csv.read_text().replace("correct_answer,", "answer,"))
    assert error_of(em / "exact_match_demo.yaml") == (
        f"{csv}:1: field 'correct_answer': no 'correct_answer' column; it holds the gold answer and is required "
        "unless jury_score is the only metric")


def test_bad_incorrect_answers_json_names_the_line(em: Path) -> None:
    csv = em / "exact_match_demo_dataset.csv"
    # a note spanning three physical lines comes first: the error names the line where the bad row starts
    csv.write_text(csv.read_text() + '003,"Line one\nline two\nline three","Q?","Yes","[No]"\n'
                   + '004,"Note.","Q?","No","[""Yes"""\n')
    message = error_of(em / "exact_match_demo.yaml")
    assert message.startswith(f"{csv}:4: field 'incorrect_answers': not valid JSON")
    assert "Line one" not in message  # never the cell's content


def test_unknown_metric_names_the_yaml_line(em: Path) -> None:
    edit(em, "exact_match_demo.yaml", "- name: exact_match", "- name: exact_match\n  - name: f1_score")
    message = error_of(em / "exact_match_demo.yaml")
    assert message.startswith(f"{em / 'exact_match_demo.yaml'}:20: field 'metrics[1].name': unknown metric 'f1_score' "
                              "(known: ")
    assert "rouge_l" in message


def test_unknown_yaml_key(em: Path) -> None:
    edit(em, "exact_match_demo.yaml", "max_tokens: 1", "max_token: 1")
    assert error_of(em / "exact_match_demo.yaml").startswith(
        f"{em / 'exact_match_demo.yaml'}:14: field 'max_token': unknown key (allowed: name, description")


@pytest.mark.parametrize("csv_text, expected", [
    ("", "the dataset is empty"),
    ("patient_id,note,question,correct_answer,incorrect_answers\n", ":1: the dataset has a header but no data rows"
     .replace(":1", "")),
    ("patient_id,note,question,correct_answer\n1,a,b\n", ":2: expected 4 fields (as in the header), found 3"),
    ("patient_id,note,question,correct_answer\n1,a,b,\n", ":2: field 'correct_answer': empty gold answer"),
    ("id,patient_id,note,question,correct_answer\n7,1,a,b,Yes\n7,2,a,b,No\n",
     ":3: field 'id': duplicate id (first used on line 2)"),
    ("patient_id,note,question,correct_answer,incorrect_answers\n1,a,b,Yes,\"{\"\"x\"\": 1}\"\n",
     ":2: field 'incorrect_answers': expected a JSON list"),
])
def test_dataset_errors(em: Path, csv_text: str, expected: str) -> None:
    csv = em / "exact_match_demo_dataset.csv"
    csv.write_text(csv_text)
    message = error_of(em / "exact_match_demo.yaml")
    assert message.startswith(str(csv)) and expected in message


def test_not_utf8_names_the_line(em: Path) -> None:
    csv = em / "exact_match_demo_dataset.csv"
    csv.write_bytes(csv.read_bytes() + "003,caf\xe9,Q?,Yes,[]\n".encode("latin-1"))
    assert error_of(em / "exact_match_demo.yaml").startswith(f"{csv}:4: not UTF-8")


@pytest.mark.parametrize("old, new, expected", [
    ("max_tokens: 1", "max_tokens: lots", ":14: field 'max_tokens': must be an integer"),
    ("max_tokens: 1", "max_tokens: 1\ncategory: Billing", ":15: field 'category': unknown category 'Billing'"),
    ("max_tokens: 1", "max_tokens: 1\ncategory: Clinical Note Generation\nsubcategory: Planning Treatments",
     ":16: field 'subcategory': subcategory 'Planning Treatments' is not in category 'Clinical Note Generation'"),
    ("max_tokens: 1", "max_tokens: 1\nsubcategory: Triage", ":15: field 'subcategory': unknown subcategory"),
    ("max_tokens: 1", "max_tokens: 1\naccess: secret",
         ":15: field 'access': input should be 'public', 'gated' or 'private'"),
    ("name: EXACT-MATCH-DEMO", "name: a/b", ":2: field 'name': must be text without"),
    ("metrics:\n  - name: exact_match", "metrics: []", ":18: field 'metrics': must not be empty"),
    ("- name: exact_match", "- name: jury_score\n    prompt_file: judge.txt",
     ":20: field 'metrics[0].prompt_file': file 'judge.txt' not found"),
    ("- name: exact_match", "- name: jury_score\n    prompt_file: exact_match_demo_prompt.txt\n    judges: [x]",
     ":21: field 'metrics[0].judges[0]': must be a mapping"),
    ("- name: exact_match", "- name: rouge_l\n    stemmer: false", ":19: field 'metrics[0]': metric 'rouge_l' takes no"),
    ("name: EXACT-MATCH-DEMO\n", "", ": field 'name': is required"),
        ("max_tokens: 1", "max_tokens: 0", ":14: field 'max_tokens': input should be greater than 0"),
        ("max_tokens: 1", "max_token: 1",
         ":14: field 'max_token': unknown key (allowed: name, description, prompt_file,"),
        ("- name: exact_match", "- 5", ":19: field 'metrics[0]': must be a mapping"),
        ("- name: exact_match", "- name: jury_score\n    judges: [{name: a, model_name: b, weight: 2}]",
         ":20: field 'metrics[0].judges[0].weight': unknown key (allowed: name, model_name)"),
        ("- name: exact_match", "- name: jury_score\n    rubric: aci_bench\n    judge_prompt: j.txt",
         ":21: field 'metrics[0].judge_prompt': unknown key (allowed: name, prompt_file, rubric, judges,"),
        ("- name: exact_match", "- name: jury_score\n    rubric: aci_bench\n    max_score: ten",
         ":21: field 'metrics[0].max_score': must be an integer"),
])
def test_yaml_errors(em: Path, old: str, new: str, expected: str) -> None:
    edit(em, "exact_match_demo.yaml", old, new)
    message = error_of(em / "exact_match_demo.yaml")
    assert message.startswith(str(em / "exact_match_demo.yaml") + expected), message


def test_subcategory_implies_its_category(em: Path) -> None:
    edit(em, "exact_match_demo.yaml", "max_tokens: 1", "max_tokens: 1\nsubcategory: Patient-Provider Messaging\n"
         "access: public")
    spec = load(em / "exact_match_demo.yaml").spec
    assert (spec.category, spec.access) == ("Patient Communication and Education", Access.PUBLIC)


def test_unknown_run_entry_argument(em: Path) -> None:
    with pytest.raises(ConfigError, match="field 'subset'"):
        benchmarks.resolve(benchmarks.CONFIGURABLE, LoadContext(
            args=FrozenMap(config_path=str(em / "exact_match_demo.yaml"), subset="x")))


def test_cli_prints_one_line_and_exits_2(em: Path, tmp_path: Path) -> None:
    edit(em, "exact_match_demo_prompt.txt", "{note}", "{notes}")
    entry = f"medhelm_configurable_benchmark:model=local/smollm2-135m-instruct,config_path={em / 'exact_match_demo.yaml'}"
    proc = subprocess.run([sys.executable, "-m", "medhelm", "validate", "--run-entries", entry,
                           "--output-path", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "MEDHELM_OFFLINE": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"medhelm: error: {em / 'exact_match_demo_prompt.txt'}:6: field 'notes': placeholder {{notes}} has no column in "
        f"{em / 'exact_match_demo_dataset.csv'} (the header has 5 column(s); expected: patient_id, notes, question, correct_answer; "
        "is the header row missing or misspelt?)"]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- truncation


def test_truncation_cuts_the_longest_value_never_the_template(tmp_path: Path, aci_notes: list[dict[str, str]]) -> None:
    dialogue = aci_notes[0]["src"]  # a real ~8,000-character doctor-patient conversation
    write(tmp_path, {
        "b.yaml": "name: T\nprompt_file: p.txt\ndataset_file: d.csv\nmetrics: [exact_match]\n",
        "p.txt": "Read the visit.\n\n{dialogue}\n\nQuestion: {question}\nAnswer yes or no.",
        "d.csv": "",
    })
    import csv

    with (tmp_path / "d.csv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["dialogue", "question", "correct_answer"],
                                 [dialogue, "Does the patient have hypertension?", "yes"]])
    bench = load(tmp_path / "b.yaml")
    [row] = bench.instances()
    assert row.input.count(dialogue) == 1
    budget = PromptBudget(max_prompt_tokens=500)
    prompt = bench.prompt(row, budget)
    assert prompt.truncated and budget.count_tokens(prompt.text) <= 500
    assert prompt.text.startswith("Read the visit.\n\n[doctor] hi , andrew")
    assert prompt.text.endswith("\n\nQuestion: Does the patient have hypertension?\nAnswer yes or no.\n")  # + HELM's \n
    kept = prompt.text.removeprefix("Read the visit.\n\n").split("\n\nQuestion:")[0]
    assert dialogue.startswith(kept) and len(kept) > 1000  # cut from the end, and only as much as needed
    assert budget.count_tokens(prompt.text.replace(kept, dialogue[: len(kept) + 6])) > 500


@pytest.mark.parametrize("template, expected_input", [
    ("Note: {note}\nAnswer yes or no.\n", "Note: n1\nAnswer yes or no.\n"),  # the editor's final newline kept
    ("Note: {note}\r\nAnswer yes or no.  \r\n\r\n", "Note: n1\nAnswer yes or no.  \n\n"),  # read as text mode reads
    ("Note: {note}\rAnswer yes or no.", "Note: n1\nAnswer yes or no."),
])
def test_the_prompt_is_helms_layout_the_template_whole_then_one_newline(tmp_path: Path, template: str,
                                                                         expected_input: str) -> None:
    """HELM's configurable scenario fills the file's text whole (Python's text mode: universal newlines) and its
    generation adapter adds one "\\n"; the instance's input (the jury's {QUESTION}) is the filled text alone.
    tests/providers/test_helm_run_differential.py proves it against crfm-helm itself."""
    write(tmp_path, {"b.yaml": "name: NL\nprompt_file: p.txt\ndataset_file: d.csv\nmetrics: [exact_match]\n",
                     "d.csv": "note,correct_answer\nn1,yes\n"})
    (tmp_path / "p.txt").write_bytes(template.encode())
    bench = load(tmp_path / "b.yaml")
    [row] = bench.instances()
    assert row.input == expected_input
    assert bench.prompt(row, PromptBudget(max_prompt_tokens=8000)).text == expected_input + "\n"
    assert bench.prompt(row, PromptBudget(max_prompt_tokens=None)).text == expected_input + "\n"
