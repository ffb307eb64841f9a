"""The differential's benchmarks (``medhelm.devtools.helm_differential``): per public MedHELM benchmark (and a custom
benchmark made of invented rows), one ``Case``
saying where its slice comes from and where each side reads it, what passage names an item in any prompt layout, what
the mock may answer, the leaderboard's main metric on each side, and the differences that are known and why
(``known``, ``excuse``); a benchmark whose real data is not on the machine reads an invented slice in the upstream
format (``synthetic``, under ``SYNTHETIC_DATA``). Also the names both sides use for the candidate model and the jury,
and the judges' keyed verdicts. Owns the table of cases; the running is ``helm_diff_sides``, the comparison ``helm_differential``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medhelm.devtools.mock_openai import collapse

# the invented slices (tests/data/helm_diff/README.md) of the benchmarks whose real data is not on the machine
SYNTHETIC_DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "helm_diff"
DEPLOYMENT, MODEL = "mock/diff-model", "mockorg/diff-model"
JUDGES = ("mock/diff-judge-a", "mock/diff-judge-b")  # the jury of both sides: deployments on the same mock

@dataclass(frozen=True)
class Case:
    """One public benchmark: where its slice comes from and goes, what names an item, what the mock answers."""

    name: str  # the run entry's name, the same on both sides
    shared: str  # the slice under the shared data folder
    mirror: str  # our mirror's path for it: <benchmark>/<upstream file name>
    # HELM's download targets under <helm output>/scenarios/<benchmark>/: name -> None (the slice) or a text
    # (e.g. an empty file of a split the slice does not hold); none when HELM reads ``hf_dataset``
    helm_files: tuple[tuple[str, str | None], ...]
    read: Callable[[Path], list[Any]]  # the file's items, in file order
    write: Callable[[list[Any], Path], None]  # a slice, in the file's own format
    key: Callable[[Any], str]  # a passage of the item that every layout of its prompt carries
    answers: Callable[[Any], list[str]]  # the mock's candidate completions for the item
    main: str  # the leaderboard's main metric (our card's)
    helm_main: str  # the stat HELM's schema ranks the benchmark by
    known: dict[str, str] = field(default_factory=dict)  # kind -> why ours differs on purpose
    # HELM reads it with datasets.load_dataset(<hf_dataset>[-<version>]): the slice is served from a CSV instead
    hf_dataset: str = ""
    hf_int_columns: tuple[str, ...] = ()  # the dataset's integer columns (the others are strings)
    # a per-instance metric difference KNOWN["metrics"] explains: excuse(item, completion, metric, HELM's, ours)
    excuse: Callable[[Any, str, str, float | None, float | None], bool] | None = None
    # known kinds that show only on some items (a slice without such an item has none to show)
    on_some_items: frozenset[str] = frozenset()
    our_args: str = ""  # run-entry arguments medhelm's entry adds (e.g. the one test file of the slice)
    jury: tuple[str, ...] = ()  # the rubric's criteria: a jury benchmark, judged by JUDGES on both sides
    # a custom benchmark (``medhelm_configurable_benchmark``): its YAML, the files it names beside it; both sides
    # run config_path= its copy in the work folder, and ``name`` is the YAML's (the run folders' name)
    custom: Path | None = None
    # the slice is an invented one under SYNTHETIC_DATA (``shared`` relative to it): the real data is not here
    synthetic: bool = False
    # HELM lists the slice's folder (the mirror's last part) through GitHub's contents API: helm-run's requests.get
    # answers that one call with the listing of its download folder (helm_diff_sides.SITECUSTOMIZE)
    github_listing: bool = False
    # what HELM's scenario imports beyond helm-run's dependencies (installed for the case: helm_diff_sides)
    helm_packages: tuple[str, ...] = ()
    entry: str = ""  # the run entry's name when it is not ``name`` (two cases of one benchmark: its subsets)
    args: str = ""  # run-entry arguments both sides take (e.g. subset=icliniq)
    helm_folder: str = ""  # HELM's scenario cache folder under scenarios/ when it is not ``name`` (its class's name)
    split: str = "test"  # the split both sides put the instances in (the aggregates compared are its)

    @property
    def run_entry(self) -> str:
        return self.entry or self.name


def _read_json_items(path: Path) -> list[Any]:
    return list(json.loads(path.read_text(encoding="utf-8")).items())


def _write_json_items(items: list[Any], path: Path) -> None:
    path.write_text(json.dumps(dict(items), ensure_ascii=False), encoding="utf-8")


def _read_csv_rows(path: Path) -> list[Any]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return [dict(zip(header, row)) for row in reader if any(c.strip() for c in row)]


def _write_csv_rows(rows: list[Any], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _medec_key(row: dict) -> str:
    lines = [ln.split(" ", 1)[-1] for ln in row["Sentences"].splitlines() if ln.strip()]
    return max(lines, key=len)


def _medec_answers(row: dict) -> list[str]:
    sid = str(row.get("Error Sentence ID") or "").strip()
    out = ["CORRECT", "correct", "0 The note has no error.", "I am not sure."]
    if sid and sid != "-1":
        out += [f"{sid} {row.get('Corrected Sentence', '').strip()}", f"{sid}"]
    return out


def _medcalc_key(row: dict) -> str:
    return collapse(row["Patient Note"])[:240]


def _medcalc_answers(row: dict) -> list[str]:
    truth, low, high = (str(row.get(k) or "").strip() for k in ("Ground Truth Answer", "Lower Limit", "Upper Limit"))
    out = [truth, f"The answer is {truth}", "0"]
    try:
        out += [low, f"{float(high) * 1.2:g}"] if low and high else []
    except ValueError:
        pass
    return out


# the categories MedCalc-Bench's published data spells otherwise than HELM's MedCalcBenchMetric expects ("lab",
# "dosage conversion"): HELM scores every answer of these 0
MEDCALC_HELM_UNKNOWN_CATEGORIES = ("lab test", "dosage")


def _medcalc_excuse(row: dict, completion: str, metric: str, helm: float | None, ours: float | None) -> bool:
    return (metric == "medcalc_bench_accuracy" and row.get("Category") in MEDCALC_HELM_UNKNOWN_CATEGORIES
            and helm == 0 and ours == 1)


def _aci_answers(record: dict) -> list[str]:
    note = record["tgt"]
    return [note, note[: len(note) // 3], "", "CHIEF COMPLAINT\n\nFollow-up.\n\nASSESSMENT AND PLAN\n\nNo changes."]


def _hash(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:8], 16)


def jury_verdict(criteria: tuple[str, ...]) -> Callable[[dict, str], str | None]:
    """The judges' answer (None for a candidate's request): a score 1-5 per criterion by a hash of (judge, item,
    criterion) as a JSON verdict; the second judge answers prose on about a quarter of the items (unparseable:
    both sides drop that judge for the item)."""

    def verdict(body: dict, key: str) -> str | None:
        model = str(body.get("model", ""))
        if not any(model == j.split("/", 1)[1] for j in JUDGES):
            return None
        if model == JUDGES[1].split("/", 1)[1] and _hash(model, key) % 4 == 0:
            return "I would rather not grade this note."
        return json.dumps({c: {"score": 1 + _hash(model, key, c) % 5, "explanation": "keyed"} for c in criteria})

    return verdict


def _medec_excuse(row: dict, completion: str, metric: str, helm: float | None, ours: float | None) -> bool:
    """HELM's MEDEC bug we do not copy: its gold sentence id is ``int()`` of the whole reference ("3 The ...":
    always fails), so an error note's sentence is never credited (HELM 0 where ours may be 1); and HELM's sentence
    accuracy credits a clean note only on the exact answer ``CORRECT`` (ours reads CORRECT in any case)."""
    if metric != "medec_error_sentence_accuracy":
        return False
    if str(row.get("Error Flag", "")).strip() == "1":
        return helm == 0
    answer = completion.strip()
    return answer != "CORRECT" and re.match(r"^correct\b", answer, re.I) is not None and (helm, ours) == (0, 1)


CASES: tuple[Case, ...] = (
    Case("pubmed_qa", "pubmedqa/ori_pqal_sample.json", "pubmed_qa/ori_pqal.json", (("data/test_set.json", None),),
         _read_json_items, _write_json_items, key=lambda item: item[1]["QUESTION"],
         answers=lambda item: ["A", "B", "C", "B.", "maybe"], main="exact_match", helm_main="exact_match"),
    Case("medcalc_bench", "medcalc_bench/one_shot_data.csv", "medcalc_bench/test_data.csv", (),
         _read_csv_rows, _write_csv_rows, key=_medcalc_key, answers=_medcalc_answers,
         main="medcalc_bench_accuracy", helm_main="medcalc_bench_accuracy", hf_dataset="ncbi/MedCalc-Bench",
         hf_int_columns=("Row Number", "Calculator ID"),
         known={"metrics": "MedCalc ground truth: HELM's MedCalcBenchMetric knows the categories `lab` and `dosage "
                           "conversion`, the data says `lab test` and `dosage`, so HELM scores every answer of "
                           "those 0; ours scores them within the dataset's limits (a right answer 1)",
                "aggregate": "follows from the metrics' difference (HELM's category bug)",
                "main": "follows from the metrics' difference (HELM's category bug)"},
         excuse=_medcalc_excuse, on_some_items=frozenset({"metrics", "aggregate", "main"})),
    Case("aci_bench", "aci_bench/clinicalnlp_taskB_test1_full.json", "aci_bench/clinicalnlp_taskB_test1_full.json",
         (("aci_bench_test_1.json", None), ("aci_bench_train.json", '{"data": []}'),
          ("aci_bench_test_2.json", '{"data": []}'), ("aci_bench_test_3.json", '{"data": []}')),
         lambda path: json.loads(path.read_text(encoding="utf-8"))["data"],
         lambda items, path: path.write_text(json.dumps({"data": items}, ensure_ascii=False), encoding="utf-8"),
         key=lambda record: collapse(record["src"])[:240], answers=_aci_answers,
         main="jury_score_normalized", helm_main="aci_bench_accuracy",
         our_args="subset=clinicalnlp_taskB_test1", jury=("accuracy", "completeness", "clarity"),
         known={"main": "the ranked column: ours is jury_score_normalized (0-1, unscored when no judge is valid), "
                        "HELM ranks aci_bench_accuracy (1-5, 1.0 when no judge is valid), which ours computes "
                        "beside it and which is equal (docs/metrics.md, Two rules, two names)"}),
    Case("medec", "medec/MEDEC-MS-TestSet-sample.csv",
         "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv", (("medec_test.csv", None),),
         _read_csv_rows, _write_csv_rows, key=_medec_key, answers=_medec_answers,
         main="medec_error_flag_accuracy", helm_main="medec_error_flag_accuracy",
         known={"metrics": "medec_error_sentence_accuracy: HELM reads the gold sentence id with int() of the "
                           "whole reference (`3 The causative agent ...`), which always fails, so it never credits "
                           "an error note's sentence (ours reads the id); and it credits a clean note only on the "
                           "exact answer `CORRECT` (ours reads CORRECT in any case)",
                "aggregate": "follows from the metrics' difference (HELM's sentence id bug)"},
         excuse=_medec_excuse, on_some_items=frozenset({"metrics", "aggregate"})),
)


# -- a custom benchmark (crfm-helm's medhelm_configurable_benchmark), from invented rows in the repository --------

CUSTOM_YAML = Path(__file__).resolve().parents[3] / "tests" / "data" / "helm_diff_custom" / "diff_custom.yaml"


def _custom_answers(row: dict) -> list[str]:
    gold = row["correct_answer"]
    return [gold, gold, gold.lower(), f"{gold}.", "Maybe", "No" if gold == "Yes" else "Yes"]


CASES = (*CASES, Case(
    "diff_custom", "", "", (), _read_csv_rows, _write_csv_rows, key=lambda row: collapse(row["note"]),
    answers=_custom_answers, main="exact_match", helm_main="exact_match", custom=CUSTOM_YAML,
    jury=("correctness", "safety")))


# -- the synthetic slices (tests/data/helm_diff): public benchmarks whose real data is not on the machine -------------


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _medhallu_items(path: Path) -> list[Any]:
    """MedHallu's rows as HELM's instances: each row twice, its ground truth (label 0) then its hallucination (1)."""
    return [(row, label) for row in _read_json(path) for label in ("0", "1")]


def _write_hub_parquet(rows: list[dict], path: Path) -> None:
    """Rows as the Hub's parquet conversion holds them (lists stay lists, nested records stay records)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _write_medhallu(items: list[Any], path: Path) -> None:
    rows = list({id(row): row for row, _ in items}.values())  # each row once, in order
    _write_hub_parquet(rows, path)


def _medhallu_key(item: Any) -> str:
    row, label = item
    return collapse(row["Ground Truth" if label == "0" else "Hallucinated Answer"])


def _medi_qa_answers(row: dict) -> list[str]:
    best = next(a["Answer"]["AnswerText"] for a in row["QUESTION"]["AnswerList"] if a["Answer"]["ReferenceRank"] == 1)
    return [best, best[: len(best) // 3], "", "Please ask your pharmacist.", best[: len(best) // 2] + " Drink water."]


def _write_race_docx(pairs: list[dict], path: Path) -> None:
    """The supplement's layout: a title, then per pair its ``Run N: <question>`` paragraph and the response's
    paragraphs, each run in its colour (red marks problematic content)."""
    import docx
    from docx.shared import RGBColor

    document = docx.Document()
    document.add_paragraph("Supplementary Table 1 (invented for a test).")
    for pair in pairs:
        document.add_paragraph(pair["run"])
        for runs in pair["response"]:
            paragraph = document.add_paragraph()
            for text, colour in runs:
                run = paragraph.add_run(text)
                if colour:
                    run.font.color.rgb = RGBColor.from_string(colour)
    document.save(str(path))


def _race_answers(pair: dict) -> list[str]:
    return ["A", "B", "A.", "b", "Yes", "B\n"]


def _read_notes(folder: Path) -> list[Any]:
    return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.txt"))]


def _write_notes(notes: list[Any], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in notes:
        (folder / name).write_text(text, encoding="utf-8")


def _note_answers(note: Any) -> list[str]:
    plan = re.search(r"(?:PLAN|SUMMARY|FINDINGS):(.*)", note[1])
    line = plan.group(1).strip() if plan else ""
    return [line, line[: len(line) // 2], "", "Continue the current treatment and review in clinic.",
            line + " Review in two weeks."]


def _write_ehr_sql(questions: list[dict], path: Path) -> None:
    """The questions file and, beside it, the schema, an empty valid split (our mirror reads it for the
    leaderboard set) and the eICU database built from the schema and the invented rows."""
    import sqlite3

    source = SYNTHETIC_DATA / "ehr_sql"
    path.write_text(json.dumps(questions, indent=1), encoding="utf-8")
    schema = (source / "eicu.sql").read_text(encoding="utf-8")
    (path.parent / "eicu.sql").write_text(schema, encoding="utf-8")
    if not (path.parent / "valid.json").exists():
        (path.parent / "valid.json").write_text("[]", encoding="utf-8")
    db = path.parent / "eicu.sqlite"
    db.unlink(missing_ok=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(schema + (source / "eicu_rows.sql").read_text(encoding="utf-8"))
    conn.close()


def _gold_rows(query: str) -> list[tuple]:
    """The gold query's rows on the invented database (in memory)."""
    import sqlite3

    source = SYNTHETIC_DATA / "ehr_sql"
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript((source / "eicu.sql").read_text(encoding="utf-8")
                           + (source / "eicu_rows.sql").read_text(encoding="utf-8"))
        return conn.execute(query).fetchall()
    finally:
        conn.close()


EHR_SQL_METRICS = ("ehr_sql_execution_accuracy", "ehr_sql_query_validity")


def _ehr_sql_excuse(item: dict, completion: str, metric: str, helm: float | None, ours: float | None) -> bool:
    """Where HELM's EhrSqlAnnotator/EhrSqlMetric read differently on purpose (docs/metrics.md): HELM runs the
    whole answer, ours its first statement (text after the first ``;``); HELM runs prose as SQL, so a prose
    abstention on an unanswerable question is 0 there; and HELM never credits a query whose gold returns no rows
    (it credits an empty answer there instead), ours compares the two empty results."""
    if metric not in EHR_SQL_METRICS:
        return False
    if re.search(r";\s*\S", completion.strip().replace("`", "")):
        return True
    if item.get("is_impossible"):
        return metric == EHR_SQL_METRICS[0] and bool(completion.strip()) and (helm, ours) == (0, 1)
    return metric == EHR_SQL_METRICS[0] and not _gold_rows(str(item["query"]))


def _ehr_sql_answers(item: dict) -> list[str]:
    gold = str(item["query"])
    if item.get("is_impossible"):
        return ["", "I cannot answer this question.", "select count(*) from patient;", "null"]
    return [gold, f"```sql\n{gold};\n```", "", "select * from nosuchtable;",
            gold.replace("select ", "select distinct ", 1), f"<sql>{gold}</sql>", "select 1; select 2;"]


JURY_CRITERIA = ("accuracy", "completeness", "clarity")

SYNTHETIC_CASES: tuple[Case, ...] = (
    Case("medhallu", "medhallu/pqa_labeled.json", "medhallu/pqa_labeled/train-00000-of-00001.parquet", (),
         _medhallu_items, _write_medhallu, key=_medhallu_key,
         answers=lambda item: ["0", "1", " 1", "0.", "The answer is 1", "1\n"], main="exact_match",
         helm_main="exact_match", hf_dataset="UTAustin-AIHealth/MedHallu", synthetic=True),
    Case("medi_qa", "medi_qa/mediqa_qa_source_test.json", "medi_qa/mediqa_qa_source/test/0000.parquet", (),
         _read_json, _write_hub_parquet, key=lambda row: collapse(row["QUESTION"]["QuestionText"]),
         answers=_medi_qa_answers, main="jury_score_normalized", helm_main="medi_qa_accuracy",
         hf_dataset="bigbio/mediqa_qa", synthetic=True, jury=JURY_CRITERIA,
         known={"main": "the ranked column: ours is jury_score_normalized, HELM ranks medi_qa_accuracy, which ours "
                        "computes beside it and which is equal (docs/metrics.md, Two rules, two names)"}),
    Case("race_based_med", "race_based_med/supplement.json",
         "race_based_med/41746_2023_939_MOESM1_ESM.docx", (("race_based.docx", None),),
         lambda path: _read_json(path)["pairs"], _write_race_docx,
         key=lambda pair: collapse(pair["run"].split(": ", 1)[1]),
         answers=_race_answers, main="exact_match", helm_main="exact_match", synthetic=True,
         helm_packages=("python-docx==1.2.0",)),
    *(Case(name, name, f"{name}/{directory}", ((".", None),), _read_notes, _write_notes,
           key=lambda note: collapse(note[1])[:160], answers=_note_answers, main="jury_score_normalized",
           helm_main=f"{name}_accuracy", synthetic=True, github_listing=True, jury=JURY_CRITERIA,
           known={"main": f"the ranked column: ours is jury_score_normalized, HELM ranks {name}_accuracy, which ours "
                          "computes beside it and which is equal (docs/metrics.md, Two rules, two names)"})
      for name, directory in (("mtsamples_replicate", "mtsamples_processed"),
                              ("mtsamples_procedures", "mtsample_procedure"))),
    Case("ehr_sql", "ehr_sql/test.json", "ehr_sql/test.json",
         (("ehrsql_test.json", None), ("ehrsql_valid.json", "[]"), ("ehrsql_train.json", "[]")),
         _read_json, _write_ehr_sql, key=lambda item: collapse(item["question"]), answers=_ehr_sql_answers,
         main="ehr_sql_execution_accuracy", helm_main="ehr_sql_execution_accuracy", synthetic=True,
         known={"metrics": "EHRSQL: ours reads the answer's first SQL statement (HELM runs the whole text, so a "
                           "second statement fails it), reads a prose answer to an unanswerable question as "
                           "abstaining (HELM runs it as SQL: 0), and compares a query's empty result with the "
                           "gold's empty result (HELM never credits a query there, and credits an empty answer)",
                "aggregate": "follows from the metrics' difference (EHRSQL's reading rules)",
                "main": "follows from the metrics' difference (EHRSQL's reading rules)"},
         excuse=_ehr_sql_excuse, on_some_items=frozenset({"metrics", "aggregate", "main"})),
)
CASES = CASES + SYNTHETIC_CASES


# -- the benchmarks whose real data is not on the machine: invented slices (tests/data/helm_diff), each file in its
# upstream format ---------------------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_jsonl(items: list[Any], path: Path) -> None:
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")


def _read_data_json(path: Path) -> list[Any]:
    return json.loads(path.read_text(encoding="utf-8"))["data"]


def _write_data_json(items: list[Any], path: Path) -> None:
    path.write_text(json.dumps({"data": items}, ensure_ascii=False), encoding="utf-8")


def _read_xlsx_rows(path: Path) -> list[Any]:
    import openpyxl

    sheet = openpyxl.load_workbook(path, read_only=True).active
    header, *rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    return [dict(zip(header, row)) for row in rows]


def _write_xlsx_rows(rows: list[Any], path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(list(rows[0]))
    for row in rows:
        book.active.append(list(row.values()))
    book.save(path)


def _read_parquet_rows(path: Path) -> list[Any]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _write_head_qa(rows: list[Any], path: Path) -> None:
    """HEAD-QA's parquet conversion's columns and types (image: the Hub's Image struct, null for a text question)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    answer = pa.struct([("aid", pa.int32()), ("atext", pa.string())])
    schema = pa.schema([("name", pa.string()), ("year", pa.string()), ("category", pa.string()),
                        ("qid", pa.int32()), ("qtext", pa.string()), ("ra", pa.int32()),
                        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("answers", pa.list_(answer))])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _choice_answers(letters: str) -> Callable[[Any], list[str]]:
    """Every letter, a letter with a space before it, one with a period after it and a word: what MC scoring reads."""
    return lambda item: [*letters, f" {letters[1]}", f"{letters[0]}.", "Answer"]


def _text_answers(reference: str) -> list[str]:
    return [reference, reference[: len(reference) // 3], "", "Please ask your doctor or pharmacist about it."]


def _answered(row: dict) -> bool:
    """A MedicationQA row HELM evaluates: pandas reads its answer as present (not empty, not an NA spelling)."""
    answer = row.get("Answer")
    return answer is not None and str(answer).strip() not in ("", "n/a", "N/A", "NA", "NaN", "nan", "null", "None")


# the medication_qa and med_dialog ranked column: ours normalised, HELM's the 1-5 mean (as aci_bench)
_JURY_MAIN = {"main": "the ranked column: ours is jury_score_normalized (0-1, unscored when no judge is valid), HELM "
                      "ranks <benchmark>_accuracy (1-5, 1.0 when no judge is valid), which ours computes beside it "
                      "and which is equal (docs/metrics.md, Two rules, two names)"}
_MEDQA_FILES = "data/data_clean/questions/US/4_options/phrases_no_exclude_"

CASES_SYNTHETIC: tuple[Case, ...] = (
    Case("medbullets", "medbullets/medbullets_op5.csv", "medbullets/medbullets_op5.csv",
         (("medbullets_op5.csv", None),), _read_csv_rows, _write_csv_rows, key=lambda row: row["question"],
         answers=_choice_answers("ABCDE"), main="exact_match", helm_main="exact_match", synthetic=True),
    Case("medication_qa", "medication_qa/MedInfo2019-QA-Medications.xlsx",
         "medication_qa/MedInfo2019-QA-Medications.xlsx", (("MedInfo2019-QA-Medications.xlsx", None),),
         _read_xlsx_rows, _write_xlsx_rows, key=lambda row: row["Question"] if _answered(row) else "",
         answers=lambda row: _text_answers(str(row["Answer"])), main="jury_score_normalized",
         helm_main="medication_qa_accuracy", jury=("accuracy", "completeness", "clarity"), known=_JURY_MAIN,
         synthetic=True),
    *(Case(f"med_dialog_{subset}", f"med_dialog/{subset}/test.json", f"med_dialog/{subset}/test.json",
           ((f"{subset}/test.json", None),), _read_data_json, _write_data_json,
           key=lambda record: collapse(record["src"])[:240], answers=lambda record: _text_answers(record["tgt"]),
           main="jury_score_normalized", helm_main="med_dialog_accuracy", jury=("accuracy", "completeness", "clarity"),
           known=_JURY_MAIN, synthetic=True, entry="med_dialog", args=f"subset={subset}", helm_folder="med_dialog")
      for subset in ("healthcaremagic", "icliniq")),
    Case("head_qa", "head_qa/en/test/0000.parquet", "head_qa/en/test/0000.parquet", (), _read_parquet_rows,
         _write_head_qa, key=lambda row: "" if row["image"] else row["qtext"], answers=_choice_answers("ABCD"),
         main="exact_match", helm_main="exact_match", hf_dataset="dvilares/head_qa", synthetic=True),
    Case("medhelm_med_qa", "medhelm_med_qa/phrases_no_exclude_test.jsonl",
         "medhelm_med_qa/phrases_no_exclude_test.jsonl",
         ((f"{_MEDQA_FILES}test.jsonl", None), (f"{_MEDQA_FILES}train.jsonl", ""), (f"{_MEDQA_FILES}dev.jsonl", "")),
         _read_jsonl, _write_jsonl, key=lambda row: row["question"], answers=_choice_answers("ABCD"),
         main="exact_match", helm_main="exact_match", synthetic=True, helm_folder="med_qa"),
    Case("medhelm_med_mcqa", "medhelm_med_mcqa/dev.json", "medhelm_med_mcqa/dev.json",
         (("data/dev.json", None), ("data/train.json", "")), _read_jsonl, _write_jsonl,
         key=lambda row: row["question"], answers=_choice_answers("ABCD"), main="exact_match",
         helm_main="exact_match", synthetic=True, helm_folder="med_mcqa", split="valid"),
)
CASES += CASES_SYNTHETIC


def select(names: Iterable[str] | None = None) -> list[Case]:
    by_name = {c.name: c for c in CASES}
    if names is None:
        return list(CASES)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"no differential case for {', '.join(unknown)} (known: {', '.join(by_name)})")
    return [by_name[n] for n in names]
