"""Gated patient-record benchmarks read from the user's ``data_path=``: EHRSHOT (MEDS parquet), MedAlign
(EHR XML + TSVs) and n2c2 2018 cohort selection (XML)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from xml.etree import ElementTree as ET

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders import ehrshot_defs
from medhelm.benchmarks.loaders.fetch import require_files, user_path
from medhelm.benchmarks.loaders.instances import choice_instance, text_instance
from medhelm.benchmarks.loaders.readers import read_arrow_table, read_csv
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.specs import Instance

YES_NO = ("yes", "no")  # upstream's reference texts

EHRSHOT_TASKS = tuple(ehrshot_defs.TASKS)
EHRSHOT_MAX_LABELS = 10_000  # upstream samples the lab_* tasks (up to ~300k labels) down to this, seed 1
EHRSHOT_MAX_LENGTH = 100_000  # upstream's default max_length (prompt tokens; longer prompts are dropped)


def ehrshot_sample(n: int, k: int = EHRSHOT_MAX_LABELS, seed: int = 1) -> list[int]:
    """The label rows upstream keeps for a lab_* task: ``DataFrame.sample(n=k, random_state=seed)`` draws
    ``RandomState(seed).choice(n, k, replace=False)``; the same draw here gives the same rows."""
    import numpy as np

    if n <= k:
        return list(range(n))
    return [int(i) for i in np.random.RandomState(seed).choice(n, size=k, replace=False)]


def load_ehrshot(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Upstream's instance set: every label of the task (all splits: upstream evaluates them all), the lab_*
    tasks sampled to 10,000 labels (seed 1); the record is the patient's codes up to the prediction time,
    oldest first, one ``- CODE`` line each (upstream's ``codes_only``: no dates); prompts longer than
    ``max_length`` tokens are dropped (upstream counts GPT-4 tokens with tiktoken; here tiktoken is used when
    installed, else the generous 3-characters-per-token estimate)."""
    task = ctx.args["subject"]
    max_length = _positive_int(ctx.args.get("max_length"), EHRSHOT_MAX_LENGTH, "max_length", entry.name)
    root = user_path(ctx, entry.name, entry.expected, entry.access_note)
    (labels_p,) = require_files(entry.name, root, (f"labels/{task}/labels.parquet",), entry.access_note)
    shards = sorted((root / "data").glob("*.parquet")) if (root / "data").is_dir() else []
    if not shards:
        raise DataUnavailable(f"{entry.name}: no MEDS event files data/*.parquet under {root}; {entry.access_note}")
    labels = list(read_arrow_table(labels_p, ("subject_id", "prediction_time", "boolean_value")))
    if task.startswith("lab_"):
        labels = [labels[i] for i in ehrshot_sample(len(labels))]
    events: dict[object, list[tuple[object, str]]] = {}
    wanted = {r["subject_id"] for r in labels}
    for shard in shards:
        for e in read_arrow_table(shard, ("subject_id", "time", "code")):
            if e["subject_id"] in wanted and e["time"] is not None:
                events.setdefault(e["subject_id"], []).append((e["time"], str(e["code"])))
    for timeline in events.values():
        timeline.sort(key=lambda te: te[0])
    count = token_counter(ctx.offline)
    instruction = ehrshot_defs.task_instruction(task)
    seen: dict[str, int] = {}
    for r in labels:
        codes = [code for t, code in events.get(r["subject_id"], []) if t <= r["prediction_time"]]
        context = "Patient EHR:\n" + "\n".join(f"- {c}" for c in codes)
        if count(f"{instruction}\n\n{context}") > max_length:
            continue
        key = f"{r['subject_id']}-{r['prediction_time']:%Y%m%d%H%M%S}"
        seen[key] = seen.get(key, 0) + 1  # two labels at the same second (lab tasks) stay two instances
        yield choice_instance(key if seen[key] == 1 else f"{key}-{seen[key]}", instruction, YES_NO,
                              0 if r["boolean_value"] else 1, context=context)


def token_counter(offline: bool = False):
    """GPT-4's tokenizer when tiktoken is installed (upstream's count), else ``approx_tokens``. Offline, the
    estimate is used: tiktoken fetches its vocabulary file on first use, which an air-gapped network cannot."""
    if offline:
        from medhelm.tokens import approx_tokens

        return approx_tokens
    try:
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base")
        return lambda text: len(enc.encode(text, disallowed_special=()))
    except Exception:  # not installed, or its encoding file cannot be fetched offline
        from medhelm.tokens import approx_tokens

        return approx_tokens


def _positive_int(raw, default: int, name: str, benchmark: str) -> int:
    if raw in (None, ""):
        return default
    try:
        value = int(str(raw))
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"benchmark '{benchmark}': {name}={raw} must be a positive integer", field=name)
    return value


MEDALIGN_MAX_LENGTH = 40_000  # upstream's default max_length for medalign (prompt tokens)
MEDALIGN_RESERVED = 256  # upstream keeps room for the 256-token answer


def load_medalign(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Instructions (``clinician-reviewed-model-responses.tsv``) answered over the patient's EHR XML; the
    reference is Annotator_1's response in ``clinician-instruction-responses.tsv``. The EHR is cut from the
    left so that the prompt fits ``max_length`` tokens (default 40,000, as upstream's run spec)."""
    max_length = _positive_int(ctx.args.get("max_length"), MEDALIGN_MAX_LENGTH, "max_length", entry.name)
    count = token_counter(ctx.offline)
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
        record = ehr.read_text(encoding="utf-8", errors="replace")
        budget = max_length - MEDALIGN_RESERVED - count(r["question"]) - 64  # 64: the instruction and labels
        if count(record) > budget:
            record = _keep_end(record, budget, count)
        yield text_instance(iid, answers[iid], context=record, question=r["question"])


def _keep_end(text: str, budget: int, count) -> str:
    """The longest end of ``text`` within ``budget`` tokens (binary search on characters): the EHR is cut
    from the left, as upstream does, so the most recent events stay."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[len(text) - mid:]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[len(text) - lo:]


# n2c2 2018 track 1 (cohort selection for clinical trials): the 13 criteria with the definitions upstream
# MedHELM gives the model (its LONG_DEFINITIONS, after Wornow et al. 2024: the official definition plus how
# to apply it). The definition is the task, so it is the same here.
N2C2_CRITERIA = {
    "ABDOMINAL": "History of intra-abdominal surgery. This could include any form of intra-abdominal surgery, "
                 "including but not limited to small/large intestine resection or small bowel obstruction",
    "ADVANCED-CAD": "Advanced cardiovascular disease (CAD). For the purposes of this annotation, we define "
                    "\u201cadvanced\u201d as having 2 or more of the following: (a) Taking 2 or more medications to "
                    "treat CAD (b) History of myocardial infarction (MI) (c) Currently experiencing angina (d) "
                    "Ischemia, past or present. The patient must have at least 2 of these categories (a,b,c,d) to "
                    "meet this criterion, otherwise the patient does not meet this criterion. For ADVANCED-CAD, be "
                    "strict in your evaluation of the patient -- if they just have cardiovascular disease, then "
                    "they do not meet this criterion.",
    "ALCOHOL-ABUSE": "Current alcohol use over weekly recommended limits",
    "ASP-FOR-MI": "Use of aspirin for preventing myocardial infarction (MI).",
    "CREATININE": "Serum creatinine level above the upper normal limit",
    "DIETSUPP-2MOS": "Consumption of a dietary supplement (excluding vitamin D) in the past 2 months. To assess "
                     "this criterion, go through the list of medications_and_supplements taken from the note. If a "
                     "substance could potentially be used as a dietary supplement (i.e. it is commonly used as a "
                     "dietary supplement, even if it is not explicitly stated as being used as a dietary "
                     "supplement), then the patient meets this criterion. Be lenient and broad in what is "
                     "considered a dietary supplement. For example, a 'multivitamin' and 'calcium carbonate' should "
                     "always be considered a dietary supplement if they are included in this list.",
    "DRUG-ABUSE": "Current or past history of drug abuse",
    "ENGLISH": "Patient speaks English. Assume that the patient speaks English, unless otherwise explicitly noted. "
               "If the patient's language is not mentioned in the note, then assume they speak English and thus "
               "meet this criteria.",
    "HBA1C": "Any hemoglobin A1c (HbA1c) value between 6.5% and 9.5%",
    "KETO-1YR": "Diagnosis of ketoacidosis within the past year",
    "MAJOR-DIABETES": "Major diabetes-related complication. Examples of \u201cmajor complication\u201d (as opposed to "
                      "\u201cminor complication\u201d) include, but are not limited to, any of the following that "
                      "are a result of (or strongly correlated with) uncontrolled diabetes: \u2022 Amputation "
                      "\u2022 Kidney damage \u2022 Skin conditions \u2022 Retinopathy \u2022 nephropathy \u2022 "
                      "neuropathy. Additionally, if multiple conditions together imply a severe case of diabetes, "
                      "then count that as a major complication.",
    "MAKES-DECISIONS": "Patient must make their own medical decisions. Assume that the patient makes their own "
                       "medical decisions, unless otherwise explicitly noted. There is no information provided "
                       "about the patient's ability to make their own medical decisions, then assume they do make "
                       "their own decisions and therefore meet this criteria.",
    "MI-6MOS": "Myocardial infarction (MI) within the past 6 months",
}
_RECORD_DATE = re.compile(r"Record date: (\d{4}-\d{2}-\d{2})")
NOTE_SEPARATOR = "\n" + "*" * 50 + "\n\n"


def n2c2_notes(text: str) -> list[str]:
    """A patient's notes as upstream splits them: on 100 asterisks, after turning triple newlines into one."""
    text = text.replace("\n\n\n", "\n")
    return [r.strip() for r in text.split("*" * 100) if r.strip()]


def load_n2c2_ct_matching(ctx: LoadContext, entry) -> Iterator[Instance]:
    """One instance per test patient: every note headed by its number and date (``Record date:``), the
    criterion and its definition, and the current date = the patient's latest note date, which time-bound
    criteria (MI-6MOS, KETO-1YR, DIETSUPP-2MOS) are measured from."""
    criterion = ctx.args["subject"]
    root = user_path(ctx, entry.name, entry.expected, entry.access_note)
    folder = root / "test" if (root / "test").is_dir() else root
    files = sorted(folder.glob("*.xml"))
    if not files:
        raise DataUnavailable(f"{entry.name}: no *.xml patient files in {folder} "
                              f"(expected {entry.expected}); {entry.access_note}")
    for path in files:
        try:
            doc = ET.parse(path).getroot()
        except ET.ParseError as err:
            raise ConfigError(f"invalid XML ({err})", path=path) from None
        text, tag = doc.findtext("TEXT"), doc.find(f"TAGS/{criterion}")
        if text is None or tag is None or tag.get("met") not in ("met", "not met"):
            raise ConfigError(f"expected <TEXT> and <TAGS><{criterion} met=\"met|not met\"/>", path=path)
        notes = n2c2_notes(text)
        dates = [m.group(1) if (m := _RECORD_DATE.search(n)) else "" for n in notes]
        current = next((d for d in reversed(dates) if d), "")
        body = NOTE_SEPARATOR.join(f"## Note #{i}\nDate: {d}\n{n}" for i, (n, d) in enumerate(zip(notes, dates), 1))
        context = (f"Below is a set of {len(notes)} clinical notes describing the patient's current health status. "
                   f"Each note is separated by a header with the date that the note was written, as well as a long "
                   f"list of asterisks.\n\n{body}")
        question = (f"The inclusion criterion being assessed is: \"{criterion}\".\n"
                    f"The definition of the inclusion criterion is: \"{N2C2_CRITERIA[criterion]}\".\n"
                    f"Assume that the current date is: {current}\n"
                    f"Does the patient meet the inclusion criterion \"{criterion}\"?")
        yield choice_instance(path.stem, question, YES_NO, 0 if tag.get("met") == "met" else 1, context=context,
                              extra={"current_date": current})
