"""The 14 private MedHELM benchmarks (upstream run_entries_medhelm_private_stanford.conf). The data never
left Stanford / Stanford Health Care; an organisation with an equivalent dataset points ``data_path=`` at it
in the documented columns (see docs/catalogue.md and the private run-entry template)."""

from __future__ import annotations

from medhelm.benchmarks.catalogue_common import CHOICE, DATA_PATH, JURY_ARGS, card, jury
from medhelm.benchmarks.entry import SUBGROUPS, Arg, CatalogueEntry
from medhelm.benchmarks.loaders import private
from medhelm.benchmarks.prompts import PromptStyle
from medhelm.specs import TaskType

# NoteExtract: upstream's extraction task — the Chief Complaint and the History of Present Illness as the
# OPQRST-style fields below, "Not mentioned" when the note does not say, the patient's own wording.
CHW_INSTRUCTIONS = """You are provided with a clinical note regarding a physician-patient interaction. Your task \
is to extract specific information based solely on the content provided. Do not hallucinate or infer details that \
are not explicitly stated in the text. Any information you include must be directly entailed by the text.

Instructions:
Extract the required information precisely as presented in the source text.
If the text does not contain specific information, clearly state "Not mentioned".
Maintain the patient's original wording whenever possible.

Response Format:

Chief Complaint
[ENTER CHIEF COMPLAINT]

History of Present Illness

Onset: When did it start? Did it begin suddenly or gradually? [ENTER ONSET INFORMATION]

Provoking/Palliating Factors: What makes the symptoms better or worse? [ENTER PROVOKING/PALLIATING FACTORS]

Quality: Describe the symptoms, e.g., sharp pain, dull pain, stabbing pain. [ENTER QUALITY INFORMATION]

Region/Radiation: Where are your symptoms located? Do they move? [ENTER REGION/RADIATION INFORMATION]

Severity: On a scale of 1 to 10, how severe are your symptoms? [ENTER SEVERITY INFORMATION]

Timing: When do you experience the symptoms? What times of day? [ENTER TIMING INFORMATION]

Related Symptoms: Are there any other symptoms related to the main complaint? [ENTER RELATED SYMPTOMS INFORMATION]

Ensure your responses are concise, accurate, and entirely supported by the provided text. Do not introduce \
external knowledge or assumptions."""

PRIVATE_NOTE = ("private dataset: not distributed; use your organisation's equivalent data in the documented "
                "columns (docs/catalogue.md)")
YES_NO = ("Yes", "No")

# The ten SHC classifiers: one loader, one row each (upstream had ten copy-pasted classes).
# (name, upstream file, options, what is asked); the name's card (medhelm/cards.py) says the rest
_SHC = (
    ("shc_ptbm_med", "medhelm-PTBM-dataset_filtered.csv",
     YES_NO, "whether a clinician recommended parent training in behavior management (PTBM) for a child with ADHD, "
             "from the visit note"),
    ("shc_sei_med", "medhelm-SEI-dataset_filtered.csv",
     YES_NO, "whether a clinician documented side-effect inquiry for a child's ADHD medication, from the visit note"),
    ("shc_conf_med", "medhelm-CONF-dataset_filtered.csv",
     YES_NO, "whether a clinical note contains confidential information (e.g. for adolescents) that should not be "
             "shared with a guardian"),
    ("shc_proxy_med", "medhelm-PROXY-dataset_filtered.csv",
     ("Yes", "No", "Unclear"), "whether a patient-portal message was written by someone other than the patient "
                               "(a proxy); upstream's third label has no documented meaning and is shown as "
                               "'Unclear'"),
    ("shc_privacy_med", "medhelm-PRIVACY-dataset_filtered.csv",
     YES_NO, "whether a patient-portal message contains private or sensitive information"),
    ("shc_bmt_med", "medhelm-BMT-dataset_filtered.csv",
     YES_NO, "whether a patient received a bone marrow transplant, from the clinical notes"),
    ("shc_gip_med", "medhelm-GIP-dataset_filtered.csv",
     YES_NO, "whether a patient meets the criteria for general inpatient (GIP) hospice care"),
    ("shc_sequoia_med", "medhelm-sequoia-dataset_filtered.csv",
     YES_NO, "whether a referral to a specialty clinic is appropriate, from the referral's clinical context"),
    ("shc_cdi_med", "medhelm-CDI-dataset_filtered.csv",
     YES_NO, "clinical documentation integrity (CDI) verification questions answered from previous notes"),
    ("shc_ent_med", "medhelm-ENT-dataset_filtered.csv",
     ("Yes", "No", "No mention"), "whether a patient should be referred to the Ear, Nose and Throat department"),
)


# What upstream's scenario tells the model before the question, per classifier: the task and, for
# ADHD-MedEffects, the definitions of side-effects inquiry (SEI) and no side-effects inquiry (NSEI).
PREAMBLES = {
    "shc_ptbm_med": "You are reviewing a clinical note from health records of children with attention deficit "
                    "hyperactivity disorder (ADHD) and classifying mentions of behavioral therapy.",
    "shc_sei_med": "You are reviewing a clinical note from health records of children with attention deficit "
                   "hyperactivity disorder (ADHD). Use the following definitions. Side Effects Inquiry (SEI): "
                   "explicit documentation by the clinician asking about current side effects related to ADHD "
                   "medications that the child is taking, or documentation of specific ADHD medication side "
                   "effects experienced by the patient. SEI does *not* include future side effects monitoring, "
                   "such as documentation of potential ADHD medication side effects, including planning to follow "
                   "patients to monitor side effects, or explaining potential side effects of an ADHD medication: "
                   "these are not SEI because they are a plan or an explanation about side effects without actual "
                   "side effect monitoring taking place. No Side Effects Inquiry (NSEI): no evidence of side "
                   "effects monitoring.",
    "shc_proxy_med": "You are reviewing clinical messages in order to determine if they have been sent by a proxy "
                     "user.",
    "shc_privacy_med": "You are reviewing clinical messages in order to determine if any confidential information "
                       "was included.",
}


# upstream's scenario skips rows with an empty label (the ENT file has such rows); the other nine assert on them
SKIPS_UNLABELLED = frozenset({"shc_ent_med"})


def _shc_entry(name, file, options, what) -> CatalogueEntry:
    letters = ", ".join("ABC"[: len(options)])
    qcol = "question" if name == "shc_sequoia_med" else "prompt"
    return CatalogueEntry(
        **card(name),
        description=f"Stanford Health Care private benchmark: decide {what}. Multiple choice "
                    f"({' / '.join(options)}).",
        task_type=TaskType.MULTIPLE_CHOICE,
        metrics=CHOICE, max_tokens=1, source=f"user data_path (SHC {file})",
        loader=private.load_shc,
        args=(DATA_PATH, SUBGROUPS, Arg("skip_unlabelled", "skip (and count) rows whose label is empty instead of failing"
                                        + (" (default true: upstream's ENT scenario always skipped them, so its own "
                                           "run entries work as written)" if name in SKIPS_UNLABELLED else ""),
                                        choices=("true", "false"),
                                        default="true" if name in SKIPS_UNLABELLED else None)),
        data_file=private.data_file,
        expected=f"{file} (CSV columns {qcol}, context, label = {letters}) or its folder",
        access_note=PRIVATE_NOTE, options={"file": file, "question_column": qcol, "choices": list(options)},
        prompt=PromptStyle(" ".join(p for p in (PREAMBLES.get(name, ""), "Answer the question using the context. "
                           f"Respond with only the letter ({letters}).") if p),
                           context_label="Context", question_label="Question"),
    )


PRIVATE: tuple[CatalogueEntry, ...] = tuple(_shc_entry(*row) for row in _SHC) + (
    CatalogueEntry(
        **card("clear"),
        description="Decide from a clinical note whether a patient has a history of a condition (13 "
                    "conditions, e.g. alcohol dependence, chronic pain, homelessness; condition= picks one): has, "
                    "has not, or uncertain (Stanford, human-labelled).",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="user data_path (Stanford CLEAR human_labeled/<condition>.xlsx)", loader=private.load_clear,
        args=(DATA_PATH, Arg("condition", "the condition", choices=private.CLEAR_CONDITIONS, required=True),
              SUBGROUPS), data_file=private.clear_file,
        expected="a folder with <condition>.xlsx (columns text, result_human = 1 has, 0 has not, 2 uncertain)",
        access_note=PRIVATE_NOTE,
        prompt=PromptStyle("Read the clinical note and answer the question. Respond with only the letter (A, B or C).",
                           context_label="Clinical note", question_label="Question"),
    ),
    CatalogueEntry(
        **card("chw_care_plan"),
        description="Extract, without inference, the chief complaint and the history of present illness (onset, "
                    "provoking/palliating factors, quality, region/radiation, severity, timing, related symptoms; "
                    "'Not mentioned' when absent) from a community health worker's free-text note (Stanford). The "
                    "jury checks accuracy against the note, structure and clarity.",
        task_type=TaskType.GENERATION,
        metrics=jury("chw_care_plan"), max_tokens=768,
        source="user data_path (Stanford CHW_Dataset.csv)", loader=private.load_chw_care_plan,
        args=(DATA_PATH, SUBGROUPS) + JURY_ARGS, data_file=private.data_file,
        expected="CHW_Dataset.csv (column 'MO Note') or its folder",
        access_note=PRIVATE_NOTE, options={"file": "CHW_Dataset.csv"},
        prompt=PromptStyle(CHW_INSTRUCTIONS, context_label="Clinical Note", answer_label=""),
    ),
    CatalogueEntry(
        **card("starr_patient_instructions"),
        description="Write personalised post-procedure instructions for a patient from the diagnosis, the "
                    "procedure, the history & physical and the operative report (Stanford STARR-OMOP, "
                    "quality-controlled cases). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION, metrics=jury("starr_patient_instructions"),
        max_tokens=256, source="user data_path (Stanford dataset_cases_qc.csv)",
        loader=private.load_starr_patient_instructions, args=(DATA_PATH, SUBGROUPS) + JURY_ARGS,
        data_file=private.data_file,
        expected="dataset_cases_qc.csv (columns " + ", ".join(private.STARR_COLUMNS) + ") or its folder",
        access_note=PRIVATE_NOTE, options={"file": "dataset_cases_qc.csv"},
        prompt=PromptStyle("You are a medical professional writing personalized post-procedure instructions. Given "
                           "the case details, generate clear and actionable instructions for the patient to follow "
                           "after the procedure. This will not be used to diagnose nor treat any patients.",
                           context_label="Case Details", answer_label="Patient Instructions"),
    ),
    CatalogueEntry(
        **card("mental_health"),
        description="Write the counselor's next turn in a mental-health counselling conversation (Stanford, "
                    "processed dialogues). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION, metrics=jury("mental_health"), max_tokens=512,
        source="user data_path (Stanford processed_dialogues.csv)", loader=private.load_mental_health,
        args=(DATA_PATH, SUBGROUPS) + JURY_ARGS, data_file=private.data_file,
        expected="processed_dialogues.csv (columns context, gold_counselor_response, topic, dialogue_type) "
                 "or its folder", access_note=PRIVATE_NOTE, options={"file": "processed_dialogues.csv"},
        prompt=PromptStyle("Given a mental health conversation history, generate an empathetic and appropriate "
                           "counselor response.", answer_label="Counselor response"),
    ),
)
