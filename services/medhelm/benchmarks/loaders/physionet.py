"""Gated PhysioNet data read from the user's ``data_path=``: DischargeMe, MIMIC-RRS, MIMIC-IV-BHC,
MIMIC-IV billing codes. Each file's expected shape is in the catalogue row (``medhelm describe``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import require_files, user_path
from medhelm.benchmarks.loaders.instances import text_instance
from medhelm.benchmarks.loaders.readers import iter_csv, note_skipped, read_arrow_table, read_jsonl
from medhelm.errors import ConfigError
from medhelm.specs import Instance

DISCHARGEME_DIR = Path("files/discharge-me/1.3/test_phase_1")
DISCHARGEME_FILES = ("diagnosis.csv.gz", "discharge.csv.gz", "discharge_target.csv.gz", "radiology.csv.gz",
                     "edstays.csv.gz", "triage.csv.gz")
TARGETS = (("brief_hospital_course", "Brief Hospital Course"), ("discharge_instructions", "Discharge Instructions"))


def _folder(ctx: LoadContext, entry) -> Path:
    return user_path(ctx, entry.name, entry.expected, entry.access_note)


def load_dischargeme(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Upstream's instance set and inputs: the phase-1 test admissions whose patient has an ED diagnosis and
    a triage record, and whose admission has a radiology report and an ED stay (upstream's inner joins of
    the six files); the input is the discharge note with the target section removed plus the admission's
    first radiology report (upstream kept the first row per admission after the joins). Two instances per
    admission: brief hospital course and discharge instructions."""
    root = _folder(ctx, entry)
    if (root / DISCHARGEME_DIR).is_dir():  # the PhysioNet download root was given
        root = root / DISCHARGEME_DIR
    diag_p, discharge_p, target_p, radiology_p, ed_p, triage_p = require_files(
        entry.name, root, DISCHARGEME_FILES, entry.access_note)
    with_diagnosis = {r["subject_id"] for _, r in iter_csv(diag_p, ("subject_id",))}
    with_triage = {r["subject_id"] for _, r in iter_csv(triage_p, ("subject_id",))}
    with_ed = {r["hadm_id"] for _, r in iter_csv(ed_p, ("hadm_id",))}
    notes = {r["hadm_id"]: r for _, r in iter_csv(discharge_p, ("subject_id", "hadm_id", "text"))
             if r["subject_id"] in with_diagnosis and r["subject_id"] in with_triage and r["hadm_id"] in with_ed}
    radiology: dict[str, str] = {}
    for _, r in iter_csv(radiology_p, ("hadm_id", "text")):
        if r["hadm_id"] in notes and r["hadm_id"] not in radiology:
            radiology[r["hadm_id"]] = r["text"]
    for line, r in iter_csv(target_p, ("hadm_id",) + tuple(t for t, _ in TARGETS)):
        hadm = r["hadm_id"]
        if hadm not in notes or hadm not in radiology:
            continue  # not in upstream's joined set
        for column, title in TARGETS:
            target = r[column].strip()
            if not target:
                raise ConfigError("empty target", path=target_p, line=line, field=column)
            note = notes[hadm]["text"].replace(r[column], "")
            context = f"Discharge Text:\n{note.strip()}\n\nRadiology Report:\n{radiology[hadm].strip()}"
            yield text_instance(f"{hadm}-{column}", target, context=context,
                                question=f"Generate the {title} from the patient discharge text and radiology "
                                         f"report text above.", extra={"target": title})


def load_mimic_rrs(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Line i of ``test.findings.tok`` is the findings of report i; the same line of
    ``test.impression.tok`` is its impression (the reference)."""
    findings_p, impression_p = require_files(entry.name, _folder(ctx, entry),
                                             ("test.findings.tok", "test.impression.tok"), entry.access_note)
    findings = findings_p.read_text(encoding="utf-8").splitlines()
    impressions = impression_p.read_text(encoding="utf-8").splitlines()
    if len(findings) != len(impressions):
        raise ConfigError(f"{len(findings)} findings but {len(impressions)} impressions (files must be "
                          f"line-aligned with {impression_p.name})", path=findings_p)
    skipped = 0
    for i, (f, imp) in enumerate(zip(findings, impressions)):
        if f.strip() and imp.strip():
            yield text_instance(f"rrs-{i}", imp.strip(), context=f.strip())
        else:
            skipped += 1
    note_skipped(findings_p, skipped, "blank line pair")


def _file(ctx: LoadContext, entry, name: str) -> Path:
    path = _folder(ctx, entry)
    if path.is_dir():
        (path,) = require_files(entry.name, path, (name,), entry.access_note)
    elif not path.is_file():
        raise ConfigError(f"not found (expected {entry.expected}); {entry.access_note}", path=path)
    return path


def _blank(value: object) -> bool:
    """JSON null or an empty/whitespace-only string (a JSON "NA" is text, as upstream's json.loads reads it)."""
    return value is None or not str(value).strip()


def load_mimic_bhc(ctx: LoadContext, entry) -> Iterator[Instance]:
    """One instance per record; a record with an empty ``input`` or ``target`` is skipped and counted, as
    upstream skips it (``if not clinical_note or not bhc_summary``). Whitespace-only counts as empty here
    (upstream kept such a record: a note of blanks, or a blank reference for the judges)."""
    path = _file(ctx, entry, "mimic_iv_bhc.json")
    skipped = 0
    for n, row in enumerate(read_jsonl(path, ("input", "target"))):
        if _blank(row["input"]) or _blank(row["target"]):
            skipped += 1
            continue
        yield text_instance(f"bhc-{n}", str(row["target"]), context=str(row["input"]))
    note_skipped(path, skipped, "record", "empty input or target")


def load_mimiciv_billing_code(ctx: LoadContext, entry) -> Iterator[Instance]:
    """The reference is the admission's ICD-10 code set (list column ``target``)."""
    path = _file(ctx, entry, "mimiciv_icd10.feather")
    for n, row in enumerate(read_arrow_table(path, ("text", "target"))):
        codes = row["target"]
        if isinstance(codes, str):
            codes = [c.strip() for c in codes.replace(";", ",").split(",") if c.strip()]
        if not codes:
            raise ConfigError(f"row {n}: empty ICD-10 code list in column 'target'", path=path)
        yield text_instance(str(row.get("hadm_id", row.get("note_id", n))), ", ".join(map(str, codes)),
                            context=str(row["text"]), extra={"codes": [str(c) for c in codes]})
