"""Instance sets and edge rows compared with MedHELM's leaderboard (issue 30): which instances each benchmark
loads, by default and with ``instance_set=``, how `validate` names the set, EHRSQL's exact match on
unanswerable questions, upstream's own ``shc_ent_med`` run entry, and the rows upstream skips or keeps
(mimic_bhc, starr_patient_instructions, clear, medi_qa). Files are written in their published or documented
shapes; each fixture cites the upstream code whose behaviour the count is compared with."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.benchmarks import LoadContext, resolve
from medhelm.benchmarks.catalogue import get_entry
from medhelm.errors import ConfigError
from medhelm.runentries import parse_run_entry
from medhelm.scoring.exact import score_text
from medhelm.specs import FrozenMap


def _load(name: str, root: Path, **args: str):
    bench = resolve(name, LoadContext(args=FrozenMap(args), data_dir=root, offline=True, base_dir=root,
                                      cache_dir=root / ".cache"))
    return bench, list(bench.instances())


# ---------------------------------------------------------------------------------------------- the argument

def test_instance_set_is_an_argument_with_the_leaderboards_set_named_and_checked():
    for name, default in (("mtsamples_replicate", "leaderboard"), ("race_based_med", "leaderboard"),
                          ("ehr_sql", "test"), ("medhelm_med_qa", "test")):
        entry = get_entry(name)
        assert entry.check_args({})["instance_set"] == default
        assert [s.name for s in entry.instance_sets if s.leaderboard] == ["leaderboard"]
        with pytest.raises(ConfigError, match=r"instance_set=everything is not one of"):
            entry.check_args({"instance_set": "everything"})
    with pytest.raises(ConfigError, match=r"does not accept 'instance_set='"):
        get_entry("pubmed_qa").check_args({"instance_set": "all"})
    mts = get_entry("mtsamples_replicate")
    assert mts.expected_count({"instance_set": "all"}) == 539
    assert mts.expected_count({"instance_set": "leaderboard"}) == 427


# ---------------------------------------------------------------------------------------------- MTSamples

def _note(name: str, body: str) -> str:
    """A note in the layout of raulista1997/benchmarkdata mtsamples_processed/*.txt (MTSamples.com export)."""
    return (f"Medical Specialty:General Medicine\nSample Name: {name}\nDescription: Follow-up visit.\n"
            f"(Medical Transcription Sample Report)\n{body}\nKeywords: general medicine, follow-up,\n")


MTSAMPLES = {
    # upper-case header with its text on the line: both rules keep it
    "Asthma - Followup.txt": "SUBJECTIVE: Wheezing at night.IMPRESSION: Asthma.TREATMENT PLAN: Start inhaled "
                             "steroid and review in 4 weeks.",
    # only a mixed-case header: upstream found it in the upper-cased text, split the text as written, raised
    # IndexError and skipped the note; ours reads the section
    "Back Pain - Consult.txt": "HISTORY: Low back pain for 2 weeks.\nPlan: Physical therapy and NSAIDs.",
    # an upper-case PLAN with a mixed-case Findings elsewhere: upstream raised on FINDINGS, skipping the note
    "Chest Pain - ER.txt": "HISTORY: Chest pain.\nFindings: normal ECG.\nPLAN: Admit for observation.",
    # PLAN with nothing after it on its line, SUMMARY with text: both take SUMMARY
    "Diabetes - Letter.txt": "HISTORY: Type 2 diabetes.\nSUMMARY: Well controlled on metformin.\nPLAN:\n"
                             "Continue metformin.",
    # no section at all: neither keeps it
    "Eye Exam.txt": "HISTORY: Blurred vision.\nIMPRESSION: Myopia.",
}


def _mtsamples_mirror(root: Path, folder: str = "mtsamples_replicate/mtsamples_processed") -> Path:
    notes = root / folder
    notes.mkdir(parents=True)
    for name, body in MTSAMPLES.items():
        (notes / name).write_text(_note(name.removesuffix(".txt"), body), encoding="utf-8")
    return root


@pytest.fixture
def mtsamples(tmp_path):
    return _mtsamples_mirror(tmp_path)


@pytest.mark.parametrize("name,folder", [("mtsamples_replicate", "mtsamples_processed"),
                                         ("mtsamples_procedures", "mtsample_procedure")])
def test_mtsamples_leaderboard_set_is_upstreams_selection_and_all_is_every_note_with_a_section(tmp_path, caplog, name,
                                                                                                 folder):
    mirror = _mtsamples_mirror(tmp_path, f"{name}/{folder}")  # upstream's two scenarios share the rule
    with caplog.at_level(logging.WARNING, logger="medhelm.data"):
        _, board = _load(name, mirror)
    _, every = _load(name, mirror, instance_set="all")
    assert [i.id for i in board] == ["Asthma - Followup", "Diabetes - Letter"]
    assert [i.id for i in every] == ["Asthma - Followup", "Back Pain - Consult", "Chest Pain - ER", "Diabetes - Letter"]
    by_id = {i.id: i for i in board}
    assert by_id["Asthma - Followup"].references[0].text == "Start inhaled steroid and review in 4 weeks."
    assert by_id["Diabetes - Letter"].references[0].text == "Well controlled on metformin."
    # the input stops before the chosen section in both sets (upstream left a SUMMARY reference in the input)
    assert all(i.references[0].text not in i.input for i in board + every)
    assert any("skipped 3 notes (no reference by upstream's rule)" in r.getMessage() for r in caplog.records)


def test_mtsamples_leaderboard_set_reads_the_first_1000_files_as_upstreams_listing(tmp_path):
    notes = tmp_path / "mtsamples_replicate/mtsamples_processed"
    notes.mkdir(parents=True)
    for k in range(1003):
        (notes / f"Note {k:04d}.txt").write_text(_note(f"Note {k}", "HISTORY: x.\nPLAN: Rest."), encoding="utf-8")
    _, board = _load("mtsamples_replicate", tmp_path)
    _, every = _load("mtsamples_replicate", tmp_path, instance_set="all")
    assert (len(board), len(every)) == (1000, 1003) and board[-1].id == "Note 0999"


def test_validate_names_the_instance_set_and_never_calls_a_non_leaderboard_set_as_published(mtsamples, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "medhelm", "validate", "--offline", "--data-dir", str(mtsamples), "--local-path",
         str(tmp_path / "prod_env"), "-o", str(tmp_path / "out"), "--run-entries",
         "mtsamples_replicate:model=local/smollm2-135m-instruct",
         "mtsamples_replicate:instance_set=all,model=local/smollm2-135m-instruct"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "as published" not in out
    assert "instance_set=leaderboard (MedHELM's leaderboard set): upstream's selection re-applied" in out
    assert "note: loaded 2 instances; MedHELM's leaderboard evaluated 427" in out
    assert "instance_set=all (not MedHELM's leaderboard set): every note" in out
    assert "note: loaded 4 instances; the full published data gives 539" in out


def test_validate_wording_for_each_case(capsys):
    from medhelm.benchmarks.entry import InstanceSet
    from medhelm.cli.run import _say_loaded

    board, every = InstanceSet("leaderboard", "L", leaderboard=True), InstanceSet("all", "A")
    _say_loaded(427, 427, board, "x")
    _say_loaded(539, 539, every, "x")
    _say_loaded(40, 40, None, "x")
    out = capsys.readouterr().out.splitlines()
    assert out == ["    instance_set=leaderboard (MedHELM's leaderboard set): L",
                   "    loaded 427 instances: as on MedHELM's leaderboard",
                   "    instance_set=all (not MedHELM's leaderboard set): A",
                   "    loaded 539 instances: every published item of instance_set=all",
                   "    loaded 40 instances: as published"]


# ---------------------------------------------------------------------------------------------- RaceBias

def _race_supplement(path: Path) -> None:
    """The supplement's layout (41746_2023_939_MOESM1_ESM.docx): each question was asked in several runs, and
    some runs gave the very same response; reviewers coloured problematic text red."""
    docx = pytest.importorskip("docx")
    from docx.shared import RGBColor

    d = docx.Document()
    runs = [("How do I calculate eGFR?", "Use CKD-EPI without race.", False),
            ("How do I calculate eGFR?", "Multiply by 1.159 for Black patients.", True),
            ("How do I calculate eGFR?", "Use CKD-EPI without race.", False),  # a repeat of run 1
            ("What is the lung capacity of a Black man?", "It does not depend on race.", False),
            ("How do I calculate eGFR?", "Multiply by 1.159 for Black patients.", True)]  # a repeat of run 2
    for n, (question, response, red) in enumerate(runs, 1):
        d.add_paragraph(f"Run {n}: {question}")
        run = d.add_paragraph("").add_run(response)
        if red:
            run.font.color.rgb = RGBColor(0xFF, 0x00, 0x00)
    path.parent.mkdir(parents=True, exist_ok=True)
    d.save(str(path))


def test_race_based_med_leaderboard_set_counts_a_repeated_pair_once_as_upstreams_dict(tmp_path, caplog):
    _race_supplement(tmp_path / "race_based_med/41746_2023_939_MOESM1_ESM.docx")
    with caplog.at_level(logging.WARNING, logger="medhelm.data"):
        _, board = _load("race_based_med", tmp_path)
    _, every = _load("race_based_med", tmp_path, instance_set="all")
    assert [i.id for i in board] == ["run-1", "run-2", "run-4"]  # first positions, as upstream's dict order
    assert [i.correct_references[0].text for i in board] == ["no", "yes", "no"]
    assert len(every) == 5
    assert any("skipped 2 repeated question-response pairs" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------- EHRSQL

SCHEMA = ("DROP TABLE IF EXISTS patient;\nCREATE TABLE patient\n(\n    uniquepid VARCHAR(10) NOT NULL,\n"
          "    age VARCHAR(10) NOT NULL\n) ;\n")


def _ehrsql(root: Path, answerable: int, impossible: int, split: str = "test") -> None:
    """eICU questions as glee4810/EHRSQL@e172ec8e dataset/ehrsql/eicu/<split>.json writes them: a list of
    {db_id, question, id, query, value, is_impossible}; an unanswerable question's query is "null"."""
    d = root / "ehr_sql"
    d.mkdir(exist_ok=True)
    rows = [{"db_id": "eicu", "question": f"what is the age of patient {k}?", "id": f"{split}-a{k}",
             "query": f"select age from patient where uniquepid = 'p{k}'", "value": {"uniquepid": f"p{k}"},
             "is_impossible": False} for k in range(answerable)]
    rows += [{"db_id": "eicu", "question": f"what is the favourite colour of patient {k}?", "id": f"{split}-i{k}",
              "query": "null", "value": {}, "is_impossible": True} for k in range(impossible)]
    (d / f"{split}.json").write_text(json.dumps(rows))
    (d / "eicu.sql").write_text(SCHEMA)
    if not (d / "eicu.sqlite").exists():
        sqlite3.connect(d / "eicu.sqlite").close()


def test_ehrsql_exact_match_keeps_helms_reference_the_gold_as_published(tmp_path):
    # the test split's proportions: 588 of 1,792 questions unanswerable, their gold `null` (HELM's reference too)
    _ehrsql(tmp_path, answerable=1204, impossible=588)
    _, instances = _load("ehr_sql", tmp_path)
    assert len(instances) == 1792 and sum(i.extra["is_impossible"] for i in instances) == 588
    gold = [score_text(i.references[0].text, [r.text for r in i.correct_references]) for i in instances]
    for stat in ("exact_match", "quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match"):
        assert sum(g[stat] for g in gold) / len(gold) == 1.0, stat
    impossible = next(i for i in instances if i.extra["is_impossible"])
    assert [r.text for r in impossible.correct_references] == ["null"]
    # a query where none is wanted, and the empty answer: both 0 by the text rule, as in HELM (abstaining is
    # credited by ehr_sql_execution_accuracy)
    for answer in ("select age from patient", ""):
        assert set(score_text(answer, [r.text for r in impossible.correct_references]).values()) == {0.0}
    answerable = next(i for i in instances if not i.extra["is_impossible"])
    assert score_text("", [r.text for r in answerable.correct_references])["exact_match"] == 0.0


def _helms_draw(items: list) -> set:
    """HELM's runner.downsample_eval_instances, called as upstream calls it (on the instance list)."""
    np = pytest.importorskip("numpy")
    np.random.seed(0)
    return set(np.random.choice(items, 1000, replace=False)) if len(items) > 1000 else set(items)


def test_ehrsql_test_split_by_default_and_helms_draw_from_valid_plus_test_as_the_leaderboards_set(tmp_path):
    _ehrsql(tmp_path, answerable=3, impossible=1, split="test")
    _, test_only = _load("ehr_sql", tmp_path)  # no valid.json in the mirror: the default never needs it
    _ehrsql(tmp_path, answerable=2, impossible=1, split="valid")
    _, board = _load("ehr_sql", tmp_path, instance_set="leaderboard")
    assert len(test_only) == 4 and len(board) == 7  # 7 <= 1,000: HELM kept them all
    assert [i.id for i in board][:3] == ["valid-a0", "valid-a1", "valid-i0"]
    _ehrsql(tmp_path, answerable=500, impossible=200, split="test")
    _ehrsql(tmp_path, answerable=450, impossible=150, split="valid")
    bench, board = _load("ehr_sql", tmp_path, instance_set="leaderboard")
    ids = [f"valid-a{k}" for k in range(450)] + [f"valid-i{k}" for k in range(150)] + \
          [f"test-a{k}" for k in range(500)] + [f"test-i{k}" for k in range(200)]
    assert len(board) == bench.expected_count == 1000 and {i.id for i in board} == _helms_draw(ids)


def test_med_qa_leaderboard_set_is_the_test_part_of_helms_draw_from_dev_and_test(tmp_path):
    """phrases_no_exclude_{dev,test}.jsonl (MedQA US 4 options: 1,272 dev, 1,273 test questions): upstream read
    dev then test (ALL_SPLITS order) and HELM drew 1,000; the leaderboard's column scored the test ones."""
    folder = tmp_path / "medhelm_med_qa"
    folder.mkdir()
    for split, n in (("dev", 1272), ("test", 1273)):
        rows = [{"question": f"A {30 + k % 40}-year-old presents with fever ({split} {k}). Next step?",
                 "answer": "Blood cultures", "options": {"A": "Blood cultures", "B": "CT head", "C": "Discharge",
                                                         "D": "MRI spine"}, "meta_info": "step2&3",
                 "answer_idx": "A"} for k in range(n)]
        (folder / f"phrases_no_exclude_{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench, board = _load("medhelm_med_qa", tmp_path, instance_set="leaderboard")
    _, test = _load("medhelm_med_qa", tmp_path)
    drawn = _helms_draw([f"dev-{k}" for k in range(1272)] + [f"test-{k}" for k in range(1273)])
    assert {i.id for i in board} == {f"medqa-test-{d.split('-')[1]}" for d in drawn if d.startswith("test-")}
    assert len(board) == bench.expected_count == 503 and len(test) == 1273


# ---------------------------------------------------------------------------------------------- shc_ent_med

# run_entries_medhelm_private_stanford.conf, as upstream writes it (stanford-crfm/helm)
UPSTREAM_ENT_LINE = ("shc_ent_med:model=google/gemini-1.5-pro-001,"
                     "model_deployment=stanfordhealthcare/gemini-1.5-pro-001,"
                     "data_path=/dbfs/mnt/azure_adbfs/Files/medhelm/medhelm-ENT-dataset_filtered.csv")


def test_upstreams_own_shc_ent_med_line_validates_and_loads_skipping_empty_labels_as_upstream(tmp_path, write_csv):
    entry = parse_run_entry(UPSTREAM_ENT_LINE)
    args = get_entry("shc_ent_med").check_args(entry.benchmark_args)
    assert args["skip_unlabelled"] == "true" and args["data_path"].endswith("medhelm-ENT-dataset_filtered.csv")
    # the same line with the data where this machine has it (columns prompt, context, label: shc_ent_scenario.py)
    data = write_csv(tmp_path / "medhelm-ENT-dataset_filtered.csv", [
        {"prompt": "Should the patient be referred to ENT?", "context": "Chronic sinusitis.", "label": "A"},
        {"prompt": "Should the patient be referred to ENT?", "context": "Encoding issue row.", "label": ""},
        {"prompt": "Should the patient be referred to ENT?", "context": "Knee pain.", "label": "B"},
        {"prompt": "Should the patient be referred to ENT?", "context": "No ENT symptoms noted.", "label": "C"}])
    here = parse_run_entry(UPSTREAM_ENT_LINE.replace("/dbfs/mnt/azure_adbfs/Files/medhelm/" + data.name, str(data)))
    bench = resolve("shc_ent_med", LoadContext(args=here.benchmark_args, offline=True, base_dir=tmp_path))
    insts = list(bench.instances())
    assert [i.extra["context"] for i in insts] == ["Chronic sinusitis.", "Knee pain.", "No ENT symptoms noted."]
    assert len(insts) == 3  # upstream's count: rows with label != "" (create_benchmark)
    # the other nine SHC classifiers assert on an empty label upstream: still refused, with the file and line
    assert get_entry("shc_cdi_med").check_args({"data_path": "x"}).get("skip_unlabelled") is None


def test_upstreams_own_shc_ent_med_line_passes_validate_with_upstreams_deployment(tmp_path, repo_root,
                                                                                  write_csv):
    """`medhelm validate` on the line as upstream writes it (only data_path pointing where the file is here),
    with upstream's prod_env deployment of stanfordhealthcare/gemini-1.5-pro-001 (examples/helm_prod_env)."""
    env = tmp_path / "prod_env"
    env.mkdir()
    for name in ("model_deployments", "model_metadata"):
        (env / f"{name}.yaml").write_text((repo_root / f"examples/helm_prod_env/{name}.example.yaml").read_text())
    (env / "credentials.conf").write_text('stanfordhealthcareEndpoint: "http://127.0.0.1:9"\n'
                                          'stanfordhealthcareApiKey: "not-a-key"\n')
    (env / "credentials.conf").chmod(0o600)
    data = write_csv(tmp_path / "medhelm-ENT-dataset_filtered.csv", [
        {"prompt": "Refer to ENT?", "context": "Sinusitis.", "label": "A"},
        {"prompt": "Refer to ENT?", "context": "Row with encoding issues.", "label": ""},
        {"prompt": "Refer to ENT?", "context": "No mention.", "label": "C"}])
    line = UPSTREAM_ENT_LINE.replace("/dbfs/mnt/azure_adbfs/Files/medhelm/" + data.name, str(data))
    proc = subprocess.run([sys.executable, "-m", "medhelm", "validate", "--local-path", str(env), "-o",
                           str(tmp_path / "out"), "--run-entries", line], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ok  shc_ent_med:model=google_gemini-1.5-pro-001" in proc.stdout and "(2 instances" in proc.stdout
    assert "skipped 1 row (empty label" in proc.stderr and "encoding issues" not in proc.stderr


# ---------------------------------------------------------------------------------------------- edge rows

def test_mimic_bhc_skips_records_with_an_empty_input_or_target_as_upstream(tmp_path, caplog):
    # mimic_iv_bhc.json: JSON Lines {input, target} (PhysioNet MIMIC-IV-Ext-BHC; mimic_bhc_scenario.py)
    records = [{"input": "<SEX> F <SERVICE> MEDICINE ... discharged home.", "target": "Admitted for pneumonia."},
               {"input": "", "target": "Admitted for sepsis."},
               {"input": "<SEX> M <SERVICE> SURGERY ... stable.", "target": ""},
               {"input": "<SEX> M <SERVICE> CARDIOLOGY ... stable.", "target": None},
               {"input": "   ", "target": "Blank note."},
               {"input": "<SEX> F <SERVICE> NEUROLOGY ... home.", "target": "Admitted for stroke."}]
    path = tmp_path / "mimic_iv_bhc.json"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    with caplog.at_level(logging.WARNING, logger="medhelm.data"):
        _, insts = _load("mimic_bhc", tmp_path, data_path=str(path))
    # upstream keeps 3 (it skips "" and null, keeps the whitespace-only note); we keep 2 (a blank note is no note)
    upstream = sum(1 for r in records if r["input"] and r["target"])
    assert (len(insts), upstream) == (2, 3)
    assert [i.id for i in insts] == ["bhc-0", "bhc-5"]
    assert any("skipped 4 records (empty input or target)" in r.getMessage() for r in caplog.records)


def test_starr_skips_quality_controlled_rows_with_an_empty_field_as_upstream(tmp_path, write_csv):
    from medhelm.benchmarks.loaders.private import STARR_COLUMNS

    # dataset_cases_qc.csv (starr_patient_instructions_scenario.py): QC, Diagnosis, ActualProcedure,
    # HistoryPhysicalNoteText, OperativeNoteText, DischargeInstructionNoteText
    case = {"QC": "TRUE", "Diagnosis": "Inguinal hernia", "ActualProcedure": "Laparoscopic hernia repair",
            "HistoryPhysicalNoteText": "H&P: reducible right inguinal hernia.",
            "OperativeNoteText": "Mesh repair, no complications.",
            "DischargeInstructionNoteText": "No lifting over 10 lb for 2 weeks."}
    rows = [case, {**case, "QC": "FALSE"}, {**case, "OperativeNoteText": "  "}, {**case, "Diagnosis": ""},
            {**case, "DischargeInstructionNoteText": ""}, {**case, "QC": "true"}]
    write_csv(tmp_path / "dataset_cases_qc.csv", rows)
    _, insts = _load("starr_patient_instructions", tmp_path, data_path=str(tmp_path))
    upstream = sum(1 for r in rows
                   if r["QC"].strip().upper() == "TRUE" and all(r[c].strip() for c in STARR_COLUMNS[1:]))
    assert len(insts) == upstream == 2
    assert [i.id for i in insts] == ["starr-1", "starr-6"]


def test_clear_skips_rows_with_an_empty_note_or_label(tmp_path):
    openpyxl = pytest.importorskip("openpyxl")
    # <condition>.xlsx (clear_scenario.py): columns text, result_human (1 has, 0 has not, 2 uncertain)
    wb = openpyxl.Workbook()
    for row in (["text", "result_human"], ["Lives in a shelter since March.", 1], ["Stable housing.", 0],
                [None, 1], ["Housing status not documented.", None], ["Unclear housing.", 2]):
        wb.active.append(row)
    wb.save(tmp_path / "homelessness.xlsx")
    _, insts = _load("clear", tmp_path, data_path=str(tmp_path), condition="homelessness")
    # upstream's pandas read the empty cells as NaN -> "nan", so it kept all 5: a note "nan", and a row whose
    # label matched no option (always scored wrong); its comment says such rows are skipped, and here they are
    assert [i.id for i in insts] == ["homelessness-1", "homelessness-2", "homelessness-5"]
    assert [i.choices.index(i.correct_references[0].text) for i in insts] == [0, 1, 2]


def test_medi_qa_skips_a_question_without_a_first_ranked_answer(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    # bigbio/mediqa_qa (mediqa_qa_source, test): QUESTION {QID, QuestionText, AnswerList [{Answer {AID,
    # SystemRank, ReferenceRank, ReferenceScore, AnswerURL, AnswerText}}]}
    def answer(aid, rank, text):
        return {"Answer": {"AID": aid, "SystemRank": 1, "ReferenceRank": rank, "ReferenceScore": 3,
                           "AnswerURL": "https://medlineplus.gov", "AnswerText": text}}

    out = tmp_path / "medi_qa/mediqa_qa_source/test/0000.parquet"
    out.parent.mkdir(parents=True)
    questions = [{"QID": "1", "QuestionText": "What is asthma?", "AnswerList": [answer("1_a", 1, "A lung disease.")]},
                 {"QID": "2", "QuestionText": "Is aspirin safe?", "AnswerList": [answer("2_a", 2, "Ask a doctor.")]},
                 {"QID": "3", "QuestionText": "What is gout?", "AnswerList": [answer("3_a", 2, "Second."),
                                                                              answer("3_b", 1, "Arthritis.")]}]
    pq.write_table(pa.table({"QUESTION": questions}), out)
    _, insts = _load("medi_qa", tmp_path)
    # upstream keeps question 2 with an empty reference (_get_highest_ranked_answer returns ""): 3 there, 2 here
    assert [(i.id, i.references[0].text) for i in insts] == [("1", "A lung disease."), ("3", "Arthritis.")]
