"""The same task as upstream MedHELM: the same definitions, the same inputs, the same requested output
(wording may be ours). Gated and private data are written here in their published or documented schemas;
each fixture cites where its schema comes from."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from medhelm.benchmarks import LoadContext, PromptBudget, resolve
from medhelm.errors import ConfigError
from medhelm.specs import FrozenMap


def _bench(name: str, tmp_path: Path, **args: str):
    return resolve(name, LoadContext(args=FrozenMap(args), offline=True, base_dir=tmp_path, data_dir=tmp_path,
                                     cache_dir=tmp_path / ".cache"))


def _prompts(name: str, tmp_path: Path, **args: str) -> list[str]:
    bench = _bench(name, tmp_path, **args)
    return [bench.prompt(i, PromptBudget()).text for i in bench.instances()]


# ---------------------------------------------------------------------------------------------- private (SHC)

# medhelm-<X>-dataset_filtered.csv: columns prompt, context, label (upstream shc_*_scenario.py create_benchmark)
SHC_ROW = {"prompt": "Does the note document this?", "context": "Seen for ADHD follow-up.", "label": "A"}


@pytest.mark.parametrize("name,must_say", [
    ("shc_sei_med", ["Side Effects Inquiry (SEI)", "No Side Effects Inquiry (NSEI)", "does *not* include future side "
                                                                                     "effects monitoring"]),
    ("shc_ptbm_med", ["children with attention deficit hyperactivity disorder (ADHD)", "mentions of behavioral "
                                                                                       "therapy"]),
    ("shc_proxy_med", ["sent by a proxy user"]),
    ("shc_privacy_med", ["if any confidential information was included"]),
])
def test_shc_task_preambles_and_definitions_are_upstreams(tmp_path, name, must_say, write_csv):
    write_csv(tmp_path / "d.csv", [SHC_ROW])
    (text,) = _prompts(name, tmp_path, data_path="d.csv")
    for phrase in must_say:
        assert phrase in text, (name, phrase)
    assert "Does the note document this?" in text and "Seen for ADHD follow-up." in text and "A. Yes" in text


def test_shc_ent_template_skips_upstreams_empty_label_rows(tmp_path, repo_root, write_csv):
    conf = (repo_root / "services/medhelm/config/run_entries/run_entries_medhelm_private_template.conf").read_text()
    (line,) = [x for x in conf.splitlines() if "shc_ent_med:" in x]
    assert "skip_unlabelled=true" in line
    write_csv(tmp_path / "medhelm-ENT-dataset_filtered.csv", [
        {"prompt": "Refer to ENT?", "context": "Sinusitis.", "label": "A"},
        {"prompt": "Refer to ENT?", "context": "Otitis.", "label": ""},
        {"prompt": "Refer to ENT?", "context": "Cough.", "label": "NA"},
        {"prompt": "Refer to ENT?", "context": "Hoarse.", "label": "C"}])
    insts = list(_bench("shc_ent_med", tmp_path, data_path=".", skip_unlabelled="true").instances())
    assert [i.extra["context"] for i in insts] == ["Sinusitis.", "Hoarse."]
    # upstream's own line has no skip_unlabelled=: skipping is the ENT default (tests/catalogue/test_instance_sets.py)
    assert len(list(_bench("shc_ent_med", tmp_path, data_path=".").instances())) == 2
    with pytest.raises(ConfigError, match=r"medhelm-ENT-dataset_filtered.csv:3: column 'label' must be one of"):
        list(_bench("shc_ent_med", tmp_path, data_path=".", skip_unlabelled="false").instances())


# ---------------------------------------------------------------------------------------------- NoteExtract

def test_chw_care_plan_asks_upstreams_chief_complaint_and_opqrst_fields(tmp_path, write_csv):
    # CHW_Dataset.csv: column "MO Note" (upstream chw_care_plan_scenario.py); a row without a note is skipped
    write_csv(tmp_path / "CHW_Dataset.csv", [{"MO Note": "Pt reports knee pain x2 weeks, worse on stairs.", "id": "1"},
                                        {"MO Note": "", "id": "2"}])
    (text,) = _prompts("chw_care_plan", tmp_path, data_path=".")
    for field in ("Chief Complaint", "History of Present Illness", "Onset:", "Provoking/Palliating Factors:",
                  "Quality:", "Region/Radiation:", "Severity:", "Timing:", "Related Symptoms:", '"Not mentioned"'):
        assert field in text, field
    assert "Social Needs" not in text and text.rstrip().endswith("worse on stairs.")


# ---------------------------------------------------------------------------------------------- MentalHealth

def test_mental_health_keeps_topic_type_and_the_closing_instruction(tmp_path, write_csv):
    # processed_dialogues.csv: context, gold_counselor_response, topic, dialogue_type (mental_health_scenario.py)
    write_csv(tmp_path / "processed_dialogues.csv", [{
        "context": "counselor: Hi, what brings you in?\nclient: I sleep too much.",
        "gold_counselor_response": "That sounds exhausting.", "topic": "Anxiety", "dialogue_type": "3"}])
    (text,) = _prompts("mental_health", tmp_path, data_path=".")
    assert "Topic: Anxiety\nType: 3\n\nPrevious conversation:\ncounselor: Hi" in text
    assert "Generate an empathetic and appropriate counselor response:" in text
    assert text.endswith("Counselor response:")


# ---------------------------------------------------------------------------------------------- n2c2

N2C2_TEXT = ("\n\nRecord date: 2068-02-04\n\nMI in 2067.\n\n\n\nAspirin daily.\n" + "*" * 100 +
             "\n\nRecord date: 2068-11-20\n\nFollow-up. Creatinine 1.9.\n")


def test_n2c2_notes_keep_their_dates_and_the_current_date(tmp_path):
    # n2c2 2018 track 1 XML: <PatientMatching><TEXT>notes split by 100 '*'</TEXT><TAGS><CRIT met=.../></TAGS>
    (tmp_path / "test").mkdir()
    (tmp_path / "test/101.xml").write_text(
        f'<?xml version="1.0" encoding="UTF-8" ?>\n<PatientMatching>\n<TEXT><![CDATA[{N2C2_TEXT}]]></TEXT>\n'
        '<TAGS>\n<MI-6MOS met="not met" />\n<CREATININE met="met" />\n</TAGS>\n</PatientMatching>\n')
    bench = _bench("n2c2_ct_matching", tmp_path, data_path=".", subject="MI-6MOS")
    (inst,) = bench.instances()
    text = bench.prompt(inst, PromptBudget()).text
    assert "## Note #1\nDate: 2068-02-04\n" in text and "## Note #2\nDate: 2068-11-20\n" in text
    assert "Assume that the current date is: 2068-11-20" in text
    assert 'The definition of the inclusion criterion is: "Myocardial infarction (MI) within the past 6 months"' in text
    assert "MI in 2067.\n\nAspirin daily." in text  # "\n\n\n" collapsed to "\n", as upstream
    assert [r.text for r in inst.correct_references] == ["no"]
    # the date and the criterion stay when the notes are cut to fit a small window
    small = bench.prompt(inst, PromptBudget(max_prompt_tokens=220))
    assert small.truncated and "current date is: 2068-11-20" in small.text and "Note #2" not in small.text


# ---------------------------------------------------------------------------------------------- MedHallu

def test_medhallu_states_the_four_hallucination_types_and_upstreams_input(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    # UTAustin-AIHealth/MedHallu pqa_labeled train parquet: Question, Knowledge (list), Ground Truth,
    # Difficulty Level, Hallucinated Answer, Category of Hallucination
    out = tmp_path / "medhallu/pqa_labeled/train-00000-of-00001.parquet"
    out.parent.mkdir(parents=True)
    pq.write_table(pa.table({"Question": ["Do statins reduce stroke?"], "Knowledge": [["Trial A.", "Trial B."]],
                             "Ground Truth": ["Yes."], "Difficulty Level": ["easy"],
                             "Hallucinated Answer": ["No, they raise it."],
                             "Category of Hallucination": ["Incomplete Information"]}), out)
    bench = _bench("medhallu", tmp_path)
    truth, fake = bench.instances()
    text = bench.prompt(fake, PromptBudget()).text
    for kind in ("Misinterpretation of #Question#", "Incomplete Information", "Mechanism and Pathway Misattribution",
                 "Methodological and Evidence Fabrication"):
        assert f"Type: {kind}" in text
    # upstream's f-string writes the list of passages as Python does
    assert "World Knowledge: ['Trial A.', 'Trial B.']\n\nQuestion: Do statins reduce stroke?\n\nAnswer: No, they raise it." in text
    assert [truth.references[0].text, fake.references[0].text] == ["0", "1"]


# ---------------------------------------------------------------------------------------------- EHRSHOT

def _meds(root: Path, task: str, labels: list[tuple[int, dt.datetime, bool]]) -> None:
    """EHRSHOT in MEDS (Redivis release): data/*.parquet (subject_id, time, code, numeric_value),
    metadata/subject_splits.parquet (subject_id, split), labels/<task>/labels.parquet (subject_id,
    prediction_time, boolean_value, ...)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    for folder in ("data", "metadata", f"labels/{task}"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    t = dt.datetime
    pq.write_table(pa.table({
        "subject_id": [1, 1, 1, 1, 2], "time": [None, t(2019, 1, 1), t(2020, 5, 1), t(2022, 3, 1), t(2021, 1, 1)],
        "code": ["MEDS_BIRTH", "ICD10CM/E11.9", "LOINC/2160-0", "SNOMED/38341003", "ICD10CM/J45"],
        "numeric_value": [None, None, 1.2, None, None]}), root / "data/data.parquet")
    pq.write_table(pa.table({"subject_id": [1, 2], "split": ["train", "held_out"]}),
                   root / "metadata/subject_splits.parquet")
    pq.write_table(pa.table({"subject_id": [s for s, _, _ in labels], "prediction_time": [p for _, p, _ in labels],
                             "boolean_value": [b for _, _, b in labels]}), root / f"labels/{task}/labels.parquet")


def test_ehrshot_asks_upstreams_question_with_codes_only_and_every_split(tmp_path):
    _meds(tmp_path, "new_hypertension", [(1, dt.datetime(2021, 1, 1), True), (2, dt.datetime(2021, 6, 1), False)])
    bench = _bench("ehrshot", tmp_path, data_path=".", subject="new_hypertension", max_length="100000")
    first, second = bench.instances()  # a train-split patient too: upstream evaluates every label
    text = bench.prompt(first, PromptBudget()).text
    assert "You are an expert primary care physician at Stanford Healthcare" in text
    assert "Clinical Definition: Hypertension, or high blood pressure" in text
    assert "Medical Code Definition: In an electronic health record (EHR), hypertension is denoted by" in text
    assert ("please answer the question: Is this patient likely to receive a first-time diagnosis of Hypertension "
            "within the next year?") in text
    assert "Patient EHR:\n- ICD10CM/E11.9\n- LOINC/2160-0\n" in text  # codes only, up to the prediction time
    assert "SNOMED/38341003\n" not in text.split("Medical Code Definition")[0] and "2019" not in text
    assert [r.text for r in first.correct_references] == ["yes"] and [r.text for r in second.correct_references] == ["no"]
    # max_length (upstream's ehrshot:max_length=) drops prompts that are longer
    with pytest.raises(ConfigError, match="holds no instances"):
        list(_bench("ehrshot", tmp_path, data_path=".", subject="new_hypertension", max_length="50").instances())
    kept = list(_bench("ehrshot", tmp_path, data_path=".", subject="new_hypertension", max_length="635").instances())
    assert [i.id for i in kept] == [second.id]  # patient 2 has one code before its prediction time: shorter
    with pytest.raises(ConfigError, match="max_length=lots must be a positive integer"):
        list(_bench("ehrshot", tmp_path, data_path=".", subject="new_hypertension", max_length="lots").instances())


def test_ehrshot_lab_tasks_sample_10000_labels_with_upstreams_draw(tmp_path):
    import numpy as np

    from medhelm.benchmarks.loaders.records import ehrshot_sample

    rows = ehrshot_sample(12_000)
    assert len(rows) == 10_000 == len(set(rows))
    # pandas DataFrame.sample(n=10_000, random_state=1) draws exactly this (RandomState(1).choice without replacement)
    assert rows[:5] == [int(i) for i in np.random.RandomState(1).choice(12_000, 10_000, replace=False)[:5]]
    assert ehrshot_sample(30) == list(range(30))
    base = dt.datetime(2021, 1, 1)
    _meds(tmp_path, "lab_anemia", [(1, base + dt.timedelta(hours=h // 2), h % 2 == 0) for h in range(3)])
    bench = _bench("ehrshot", tmp_path, data_path=".", subject="lab_anemia")
    assert len(list(bench.instances())) == 3
    text = bench.prompt(next(iter(bench.instances())), PromptBudget()).text
    assert "expert hematologist" in text and "Clinical Definition" not in text  # as upstream's config for lab_*


# ---------------------------------------------------------------------------------------------- MedAlign

def test_medalign_max_length_cuts_the_ehr_from_the_left(tmp_path):
    # MedAlign release: clinician-reviewed-model-responses.tsv, clinician-instruction-responses.tsv, medalign_ehr_xml/
    (tmp_path / "medalign_ehr_xml").mkdir()
    (tmp_path / "medalign_ehr_xml/p1.xml").write_text("<ehr>" + "old event. " * 3000 + "LATEST EVENT</ehr>")
    with open(tmp_path / "clinician-reviewed-model-responses.tsv", "w") as fh:
        fh.write("instruction_id\tquestion\tperson_id\tmodel_response\n1\tWhat happened last?\tp1\tx\n")
    with open(tmp_path / "clinician-instruction-responses.tsv", "w") as fh:
        fh.write("instruction_id\tannotator_num\tclinician_response\n1\tAnnotator_1\tThe latest event.\n")
    (inst,) = _bench("medalign", tmp_path, data_path=".", max_length="2000").instances()
    assert inst.extra["context"].endswith("LATEST EVENT</ehr>") and len(inst.extra["context"]) < 33000 / 5
    (full,) = _bench("medalign", tmp_path, data_path=".").instances()  # default 40,000 tokens: all of it fits
    assert full.extra["context"].startswith("<ehr>old event.")


# ---------------------------------------------------------------------------------------------- HeadQA

def test_head_qa_language_and_category_arguments_as_helm_writes_them(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    # dvilares/head_qa parquet (config en, split test): name, year, category, qid, qtext, ra, image, answers
    out = tmp_path / "head_qa/en/test/0000.parquet"
    out.parent.mkdir(parents=True)
    answers = [[{"aid": i, "atext": f"option {i}"} for i in range(1, 5)]] * 3
    pq.write_table(pa.table({"name": ["Cuaderno_2013_1_B"] * 3, "year": ["2013"] * 3,
                             "category": ["biology", "nursing", "biology"], "qid": [1, 2, 3],
                             "qtext": ["q1", "q2", "q3"], "ra": [2, 3, 4], "image": [None, None, "x"],
                             "answers": answers}), out)
    everything = list(_bench("head_qa", tmp_path, language="en", category="None").instances())
    assert [i.extra["question"] for i in everything] == ["q1", "q2"]  # the image question is skipped
    biology = list(_bench("head_qa", tmp_path, language="en", category="biology").instances())
    assert [i.extra["question"] for i in biology] == ["q1"]
    with pytest.raises(Exception, match=r"es/test/0000\.parquet"):
        list(_bench("head_qa", tmp_path, language="es").instances())


def test_ehrshot_code_definitions_cover_every_new_diagnosis_task():
    from medhelm.benchmarks.loaders.ehrshot_defs import TASKS, code_definitions, task_instruction

    defs = code_definitions()
    assert set(defs) == {t for t in TASKS if t.startswith("new_")}
    assert {t: len(c) for t, c in defs.items()} == {"new_acutemi": 171, "new_celiac": 16, "new_hyperlipidemia": 98,
                                                    "new_hypertension": 26, "new_lupus": 53, "new_pancan": 63}
    assert "OMOP Extension/OMOP5166128" in task_instruction("new_lupus")
    assert "Medical Code Definition" not in task_instruction("guo_icu")  # as upstream's config: new_* only


def test_chw_care_plan_jury_scores_structure_against_the_same_fields():
    """The jury's "structure" criterion must know the required structure (upstream's judge saw it inside the
    instance input); the built-in rubric states the same fields the model is asked for."""
    from medhelm.scoring.jury import rubrics

    template = rubrics.builtin("chw_care_plan").template
    for field in ("Chief Complaint", "History of Present Illness", "Onset", "Provoking/Palliating Factors", "Quality",
                  "Region/Radiation", "Severity", "Timing", "Related Symptoms", '"Not mentioned"'):
        assert field in template, field
