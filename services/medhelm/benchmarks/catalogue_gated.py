"""The 7 gated MedHELM benchmarks (upstream run_entries_medhelm_gated.conf): credentialed access
(PhysioNet, Redivis, n2c2 DUA); the user points ``data_path=`` at their own copy."""

from __future__ import annotations

from medhelm.benchmarks.catalogue_common import CHOICE, DATA_PATH, JURY_ARGS, card, jury
from medhelm.benchmarks.entry import Arg, CatalogueEntry
from medhelm.benchmarks.loaders import physionet, records
from medhelm.benchmarks.prompts import PromptStyle
from medhelm.specs import MetricSpec, TaskType

PHYSIONET = "request access at https://physionet.org (credentialed user + the dataset's data use agreement)"
YES_NO_ONLY = "Answer A for yes, B for no. Respond with only the letter."

GATED: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        **card("ehrshot"),
        description="Predict a clinical outcome (readmission, ICU transfer, length of stay, an abnormal lab, a new "
                    "diagnosis) from a patient's coded longitudinal record up to the prediction time (EHRSHOT, "
                    "Wornow et al., 2023, Stanford; MEDS format). subject= picks the task; each task is asked as "
                    "upstream asks it (specialist persona, the question, and for new diagnoses the clinical and "
                    "code definitions); lab tasks are sampled to 10,000 labels (seed 1) and prompts over "
                    "max_length tokens are dropped, as upstream.",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="user data_path (EHRSHOT MEDS release)", loader=records.load_ehrshot,
        args=(DATA_PATH, Arg("subject", "the prediction task", choices=records.EHRSHOT_TASKS, required=True),
              Arg("max_length", "drop prompts longer than this many tokens (upstream's ehrshot:max_length=; "
                                "default 100000)")),
        expected="a MEDS folder: data/*.parquet (subject_id, time, code), labels/<subject>/labels.parquet "
                 "(subject_id, prediction_time, boolean_value)",
        access_note="request access to EHRSHOT on Redivis (Stanford data use agreement)",
        prompt=PromptStyle("Answer A for yes, B for no. Respond with only 'A' for yes or 'B' for no.",
                           keep_end=True),
    ),
    CatalogueEntry(
        **card("medalign"),
        description="Follow a clinician's instruction over a patient's full electronic health record "
                    "(MedAlign, Fleming et al., 2024; 983 instructions with clinician-written responses). The "
                    "oldest part of the record is truncated first. Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION, metrics=jury("medalign"), max_tokens=256,
        source="user data_path (MedAlign release)", loader=records.load_medalign,
        args=(DATA_PATH, Arg("max_length", "prompt tokens the EHR is cut to, from the left (upstream's "
                                           "medalign:max_length=; default 40000)")) + JURY_ARGS,
        expected="a folder with clinician-reviewed-model-responses.tsv (instruction_id, question, person_id), "
                 "clinician-instruction-responses.tsv (instruction_id, annotator_num, clinician_response) and "
                 "medalign_ehr_xml/<person_id>.xml",
        access_note="request access to MedAlign via Stanford (research data use agreement)",
        prompt=PromptStyle("Answer the following question based on the EHR.", context_label="EHR",
                           question_label="Question", keep_end=True),
    ),
    CatalogueEntry(
        **card("dischargeme"),
        description="Write the brief hospital course and the discharge instructions of an admission from its "
                    "discharge note (target section removed) and first radiology report (Discharge Me!, BioNLP 2024, "
                    "MIMIC-IV, phase-1 test set; two instances per admission). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION,
        metrics=jury("dischargeme"), max_tokens=300,
        source="user data_path (PhysioNet discharge-me 1.3, test_phase_1)", loader=physionet.load_dischargeme,
        args=(DATA_PATH,) + JURY_ARGS,
        expected="the PhysioNet download root, or its files/discharge-me/1.3/test_phase_1/ folder, with "
                 + ", ".join(physionet.DISCHARGEME_FILES),
        access_note=PHYSIONET,
        left_out="admissions without an ED diagnosis, triage record, radiology report or ED stay (upstream's "
                 "inner joins)",
        prompt=PromptStyle("Given a discharge text, a radiology report text, and a target document of either "
                           "discharge instructions or a brief hospital course, return the generated target "
                           "document from the context provided."),
    ),
    CatalogueEntry(
        **card("mimic_rrs"),
        description="Write the impression of a radiology report from its findings (MIMIC-III radiology report "
                    "summarisation, test split). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION, metrics=jury("mimic_rrs"), max_tokens=128,
        source="user data_path (MIMIC-III radiology report summarisation split)", loader=physionet.load_mimic_rrs,
        args=(DATA_PATH,) + JURY_ARGS, expected="a folder with test.findings.tok and test.impression.tok "
                                                "(line-aligned)", access_note=PHYSIONET,
        prompt=PromptStyle("Generate the impression section of the radiology report based on its findings. "
                           "This will not be used to diagnose nor treat any patients. Be as concise as possible.",
                           context_label="Findings", answer_label="Impression"),
    ),
    CatalogueEntry(
        **card("mimic_bhc"),
        description="Summarise a MIMIC-IV discharge note into its brief hospital course (Aali et al., 2024). "
                    "Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION,
        metrics=jury("mimic_bhc"), max_tokens=1024,
        source="user data_path (PhysioNet labelled-notes-hospital-course)", loader=physionet.load_mimic_bhc,
        args=(DATA_PATH,) + JURY_ARGS, expected="mimic_iv_bhc.json (JSON Lines with input, target) or its folder",
        access_note=PHYSIONET,
        prompt=PromptStyle("Summarize the clinical note into a brief hospital course.", context_label="Clinical Note",
                           answer_label="Brief Hospital Course"),
    ),
    CatalogueEntry(
        **card("mimiciv_billing_code"),
        description="List the ICD-10 codes that apply to a MIMIC-IV discharge note. Scored per instance by "
                    "set precision, recall and F1 against the admission's billed codes.",
        task_type=TaskType.GENERATION, metrics=(MetricSpec("mimiciv_billing_code_f1"),),
        max_tokens=256,
        source="user data_path (MIMIC-IV notes + hosp/diagnoses_icd, prepared as a feather file)",
        loader=physionet.load_mimiciv_billing_code, args=(DATA_PATH,),
        expected="mimiciv_icd10.feather (columns text, target = list of ICD-10 codes; needs pyarrow) or its folder",
        access_note=PHYSIONET,
        prompt=PromptStyle("Given the following clinical note, identify all relevant ICD-10 codes.",
                           context_label="Note", answer_label="Predicted ICD-10 Codes"),
    ),
    CatalogueEntry(
        **card("n2c2_ct_matching"),
        description="Decide whether a patient's longitudinal notes meet a clinical-trial inclusion criterion "
                    "(n2c2 2018 track 1 cohort selection, 86 test patients; subject= picks the criterion).",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="user data_path (n2c2 2018 track 1 test XML)", loader=records.load_n2c2_ct_matching,
        args=(DATA_PATH, Arg("subject", "the inclusion criterion", choices=tuple(records.N2C2_CRITERIA),
                             required=True)),
        expected="a folder with test/*.xml (or *.xml): <TEXT> and <TAGS><CRITERION met=\"met|not met\"/>",
        access_note="request access at https://portal.dbmi.hms.harvard.edu (n2c2 data use agreement)",
        counts={f"subject={c}": 86 for c in records.N2C2_CRITERIA},
        left_out="the 202 training patients (zero-shot), as upstream",
        prompt=PromptStyle("Your job is to decide whether the given patient meets the inclusion criterion for a "
                           "clinical trial. " + YES_NO_ONLY, question_label="Question"),
    ),
)
