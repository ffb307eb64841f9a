"""Gated patient-record benchmarks read from the user's ``data_path=``: EHRSHOT (MEDS parquet), MedAlign
(EHR XML + TSVs) and n2c2 2018 cohort selection (XML)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from xml.etree import ElementTree as ET

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import require_files, user_path
from medhelm.benchmarks.loaders.instances import choice_instance, text_instance
from medhelm.benchmarks.loaders.readers import read_arrow_table, read_csv
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.specs import Instance

YES_NO = ("Yes", "No")

# EHRSHOT tasks -> the question asked at prediction time.
EHRSHOT_QUESTIONS = {
    "guo_icu": "Will the patient be transferred to the intensive care unit during this admission?",
    "guo_los": "Will the patient stay in the hospital for 7 days or more?",
    "guo_readmission": "Will the patient be readmitted to the hospital within 30 days after discharge?",
    "lab_anemia": "Will the next hemoglobin result show anemia?",
    "lab_hyperkalemia": "Will the next potassium result show hyperkalemia?",
    "lab_hypoglycemia": "Will the next glucose result show hypoglycemia?",
    "lab_hyponatremia": "Will the next sodium result show hyponatremia?",
    "lab_thrombocytopenia": "Will the next platelet count show thrombocytopenia?",
    "new_acutemi": "Will the patient be diagnosed with an acute myocardial infarction within the next year?",
    "new_celiac": "Will the patient be diagnosed with celiac disease within the next year?",
    "new_hyperlipidemia": "Will the patient be diagnosed with hyperlipidemia within the next year?",
    "new_hypertension": "Will the patient be diagnosed with essential hypertension within the next year?",
    "new_lupus": "Will the patient be diagnosed with lupus within the next year?",
    "new_pancan": "Will the patient be diagnosed with pancreatic cancer within the next year?",
}
EHRSHOT_MAX_EVENTS = 2000  # most recent codes kept per timeline before prompt-level truncation


def load_ehrshot(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Test-split labels of one task; the prompt is the patient's code timeline up to the prediction time."""
    task = ctx.args["subject"]
    root = user_path(ctx, entry.name, entry.expected, entry.access_note)
    labels_p, splits_p = require_files(entry.name, root, (f"labels/{task}/labels.parquet",
                                                          "metadata/subject_splits.parquet"), entry.access_note)
    shards = sorted((root / "data").glob("*.parquet")) if (root / "data").is_dir() else []
    if not shards:
        raise DataUnavailable(f"{entry.name}: no MEDS event files data/*.parquet under {root}; {entry.access_note}")
    test = {r["subject_id"] for r in read_arrow_table(splits_p, ("subject_id", "split"))
            if str(r["split"]).lower() in ("test", "held_out", "tuning_test")}
    labels = [r for r in read_arrow_table(labels_p, ("subject_id", "prediction_time", "boolean_value"))
              if r["subject_id"] in test]
    events: dict[object, list[tuple[object, str]]] = {}
    wanted = {r["subject_id"] for r in labels}
    for shard in shards:
        for e in read_arrow_table(shard, ("subject_id", "time", "code")):
            if e["subject_id"] in wanted and e["time"] is not None:
                events.setdefault(e["subject_id"], []).append((e["time"], str(e["code"])))
    for timeline in events.values():
        timeline.sort(key=lambda te: te[0])
    for r in labels:
        before = [f"{t:%Y-%m-%d} {code}" for t, code in events.get(r["subject_id"], []) if t <= r["prediction_time"]]
        context = "\n".join(before[-EHRSHOT_MAX_EVENTS:])
        yield choice_instance(f"{r['subject_id']}-{r['prediction_time']:%Y%m%d%H%M}", EHRSHOT_QUESTIONS[task],
                              YES_NO, 0 if r["boolean_value"] else 1, context=context)


def load_medalign(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Instructions (``clinician-reviewed-model-responses.tsv``) answered over the patient's EHR XML; the
    reference is Annotator_1's response in ``clinician-instruction-responses.tsv``."""
    root = user_path(ctx, entry.name, entry.expected, entry.access_note)
    instr_p, resp_p = require_files(entry.name, root, ("clinician-reviewed-model-responses.tsv",
                                                       "clinician-instruction-responses.tsv"), entry.access_note)
    ehr_dir = root / "medalign_ehr_xml"
    if not ehr_dir.is_dir():
        raise DataUnavailable(f"{entry.name}: missing folder medalign_ehr_xml/ under {root}; {entry.access_note}")
    answers = {r["instruction_id"]: r["clinician_response"]
               for r in read_csv(resp_p, ("instruction_id", "annotator_num", "clinician_response"))
               if r["annotator_num"] == "Annotator_1"}
    seen: set[str] = set()
    for r in read_csv(instr_p, ("instruction_id", "question", "person_id")):
        iid = r["instruction_id"]
        if iid in seen or iid not in answers:
            continue  # one row per reviewed model response; only instructions with a clinician answer count
        seen.add(iid)
        ehr = ehr_dir / f"{r['person_id']}.xml"
        if not ehr.is_file():
            raise DataUnavailable(f"{entry.name}: EHR file {ehr.name} (person_id of instruction {iid}) "
                                  f"not found in {ehr_dir}")
        yield text_instance(iid, answers[iid], context=ehr.read_text(encoding="utf-8", errors="replace"),
                            question=r["question"])


# n2c2 2018 track 1 (cohort selection for clinical trials): the 13 criteria and their definitions.
N2C2_CRITERIA = {
    "ABDOMINAL": "History of intra-abdominal surgery, small or large intestine resection, or small bowel "
                 "obstruction.",
    "ADVANCED-CAD": "Advanced cardiovascular disease, defined as two or more of: taking two or more medications "
                    "to treat CAD; history of myocardial infarction; currently experiencing angina; ischemia, "
                    "past or present.",
    "ALCOHOL-ABUSE": "Current alcohol use over weekly recommended limits.",
    "ASP-FOR-MI": "Use of aspirin to prevent myocardial infarction.",
    "CREATININE": "Serum creatinine above the upper limit of normal.",
    "DIETSUPP-2MOS": "Taken a dietary supplement (excluding vitamin D) in the past 2 months.",
    "DRUG-ABUSE": "Drug abuse, current or past.",
    "ENGLISH": "Patient must speak English.",
    "HBA1C": "Any hemoglobin A1c (HbA1c) value between 6.5% and 9.5%.",
    "KETO-1YR": "Diagnosis of ketoacidosis in the past year.",
    "MAJOR-DIABETES": "Major diabetes-related complication (amputation, kidney damage, skin conditions, "
                      "retinopathy, nephropathy, neuropathy).",
    "MAKES-DECISIONS": "Patient must make their own medical decisions.",
    "MI-6MOS": "Myocardial infarction in the past 6 months.",
}


def load_n2c2_ct_matching(ctx: LoadContext, entry) -> Iterator[Instance]:
    criterion = ctx.args["subject"]
    root = user_path(ctx, entry.name, entry.expected, entry.access_note)
    folder = root / "test" if (root / "test").is_dir() else root
    files = sorted(folder.glob("*.xml"))
    if not files:
        raise DataUnavailable(f"{entry.name}: no *.xml patient files in {folder} "
                              f"(expected {entry.expected}); {entry.access_note}")
    question = (f"Does the patient meet the inclusion criterion {criterion}: {N2C2_CRITERIA[criterion]}")
    for path in files:
        try:
            doc = ET.parse(path).getroot()
        except ET.ParseError as err:
            raise ConfigError(f"invalid XML ({err})", path=path) from None
        text, tag = doc.findtext("TEXT"), doc.find(f"TAGS/{criterion}")
        if text is None or tag is None or tag.get("met") not in ("met", "not met"):
            raise ConfigError(f"expected <TEXT> and <TAGS><{criterion} met=\"met|not met\"/>", path=path)
        records = [r.strip() for r in re.split(r"\*{100}", text) if r.strip()]
        yield choice_instance(path.stem, question, YES_NO, 0 if tag.get("met") == "met" else 1,
                              context="\n\n".join(records))
