"""Gated and private loaders read the user's data_path= in the documented formats; missing or malformed
data is one clear line naming the files expected and where access is requested. The files are written here
in the documented shapes (the real data is credentialed/private)."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from medhelm.benchmarks import LoadContext, resolve
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.specs import FrozenMap


def _load(name, tmp_path, **args):
    bench = resolve(name, LoadContext(args=FrozenMap(args), offline=True, base_dir=tmp_path))
    return list(bench.instances())


def _csv(path: Path, rows: list[dict], gz: bool = False) -> Path:
    opener = (lambda: gzip.open(path, "wt", newline="", encoding="utf-8")) if gz else \
        (lambda: open(path, "w", newline="", encoding="utf-8"))
    with opener() as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_shc_csv_relative_to_the_conf_folder_with_options_listed_once(tmp_path):
    _csv(tmp_path / "medhelm-ENT-dataset_filtered.csv", [
        {"prompt": "Refer to ENT?", "context": "Chronic sinusitis.", "label": "A"},
        {"prompt": "Refer to ENT?", "context": "Chronic sinusitis.", "label": "C"}])  # duplicates are kept
    a, c = _load("shc_ent_med", tmp_path, data_path=".")
    assert a.choices == ("Yes", "No", "No mention")
    assert [r.text for r in a.correct_references] == ["Yes"] and [r.text for r in c.correct_references] == ["No mention"]
    bench = resolve("shc_ent_med", LoadContext(args=FrozenMap(data_path="."), base_dir=tmp_path))
    text = bench.prompt(a, __import__("medhelm.benchmarks", fromlist=["PromptBudget"]).PromptBudget()).text
    assert text.count("A. Yes") == 1 and "A. A" not in text and "\n: " not in text


def test_shc_bad_label_names_file_and_line(tmp_path):
    f = _csv(tmp_path / "b.csv", [{"prompt": "q", "context": "c", "label": "A"},
                                  {"prompt": "q", "context": "c", "label": "yes"}])
    with pytest.raises(ConfigError, match=rf"{f}:3: column 'label' must be one of A, B"):
        _load("shc_bmt_med", tmp_path, data_path=str(f))


def test_missing_data_path_file_lists_what_is_expected_and_where_access_is_requested(tmp_path):
    with pytest.raises(DataUnavailable) as err:
        _load("mimic_rrs", tmp_path, data_path=str(tmp_path))
    msg = str(err.value)
    assert "test.findings.tok" in msg and "test.impression.tok" in msg and "physionet.org" in msg


def test_template_placeholder_is_caught(tmp_path):
    with pytest.raises(ConfigError, match="template placeholder"):
        _load("shc_cdi_med", tmp_path, data_path="<YOUR_DATA_DIR>/medhelm-CDI-dataset_filtered.csv")


def test_mimic_rrs_line_aligned_files(tmp_path):
    (tmp_path / "test.findings.tok").write_text("no focal consolidation .\nsmall effusion .\n")
    (tmp_path / "test.impression.tok").write_text("no acute process .\nsmall effusion .\n")
    insts = _load("mimic_rrs", tmp_path, data_path=str(tmp_path))
    assert [i.references[0].text for i in insts] == ["no acute process .", "small effusion ."]
    (tmp_path / "test.impression.tok").write_text("only one\n")
    with pytest.raises(ConfigError, match="2 findings but 1 impressions"):
        _load("mimic_rrs", tmp_path, data_path=str(tmp_path))


def test_dischargeme_from_the_physionet_layout_joins_the_six_files_as_upstream(tmp_path):
    """Columns as published in PhysioNet discharge-me 1.3 test_phase_1 (the six .csv.gz files upstream joins)."""
    d = tmp_path / "physionet.org/files/discharge-me/1.3/test_phase_1"
    d.mkdir(parents=True)
    note = {"note_type": "DS", "note_seq": "21", "charttime": "2180-05-07 00:00:00", "storetime": ""}
    _csv(d / "discharge.csv.gz", [
        {"note_id": "n1", "subject_id": "1", "hadm_id": "7", **note, "text": "Chief complaint: fall.\nBHC: fixed hip."},
        {"note_id": "n2", "subject_id": "2", "hadm_id": "8", **note, "text": "No triage for this patient."},
        {"note_id": "n3", "subject_id": "1", "hadm_id": "9", **note, "text": "No ED stay for this admission."}],
        gz=True)
    _csv(d / "discharge_target.csv.gz", [
        {"note_id": f"n{i}", "hadm_id": h, "discharge_instructions": "Walk daily.",
         "brief_hospital_course": "BHC: fixed hip.", "discharge_instructions_word_count": "2",
         "brief_hospital_course_word_count": "3"} for i, h in ((1, "7"), (2, "8"), (3, "9"))], gz=True)
    _csv(d / "radiology.csv.gz", [
        {"note_id": f"r{i}", "subject_id": s, "hadm_id": h, "note_type": "RR", "note_seq": str(i), "charttime": "",
         "storetime": "", "text": t} for i, (s, h, t) in enumerate(
            (("1", "7", "Hip fracture."), ("1", "7", "Second film."), ("2", "8", "CXR."), ("1", "9", "CT.")))], gz=True)
    _csv(d / "edstays.csv.gz", [
        {"subject_id": s, "hadm_id": h, "stay_id": st, "intime": "", "outtime": "", "gender": "F", "race": "",
         "arrival_transport": "", "disposition": "ADMITTED"} for s, h, st in (("1", "7", "30"), ("2", "8", "31"))],
        gz=True)
    _csv(d / "diagnosis.csv.gz", [
        {"subject_id": s, "stay_id": st, "seq_num": "1", "icd_code": "S72", "icd_version": "10", "icd_title": "Fx"}
        for s, st in (("1", "30"), ("2", "31"))], gz=True)
    _csv(d / "triage.csv.gz", [
        {"subject_id": "1", "stay_id": "30", "temperature": "98", "heartrate": "80", "resprate": "16", "o2sat": "98",
         "sbp": "120", "dbp": "80", "pain": "5", "acuity": "2", "chiefcomplaint": "Fall"}], gz=True)
    bhc, di = _load("dischargeme", tmp_path, data_path=str(tmp_path / "physionet.org"))
    # only admission 7 survives upstream's inner joins (8: no triage; 9: no ED stay)
    assert bhc.id == "7-brief_hospital_course" and di.id == "7-discharge_instructions"
    assert bhc.references[0].text == "BHC: fixed hip." and "fixed hip" not in bhc.extra["context"]
    assert bhc.extra["context"].endswith("Radiology Report:\nHip fracture.")  # the first report only
    assert di.references[0].text == "Walk daily." and "Walk daily" not in di.extra["context"]
    (d / "triage.csv.gz").unlink()
    with pytest.raises(DataUnavailable, match="missing triage.csv.gz"):
        _load("dischargeme", tmp_path, data_path=str(tmp_path / "physionet.org"))


def test_n2c2_xml_per_criterion(tmp_path):
    (tmp_path / "test").mkdir()
    (tmp_path / "test/100.xml").write_text(
        '<?xml version="1.0"?><PatientMatching><TEXT><![CDATA[Record date: 2090-01-01\nCr 2.1]]></TEXT>'
        '<TAGS><CREATININE met="met"/><ABDOMINAL met="not met"/></TAGS></PatientMatching>')
    (inst,) = _load("n2c2_ct_matching", tmp_path, data_path=str(tmp_path), subject="CREATININE")
    assert [r.text for r in inst.correct_references] == ["yes"] and "Cr 2.1" in inst.extra["context"]
    (inst,) = _load("n2c2_ct_matching", tmp_path, data_path=str(tmp_path), subject="ABDOMINAL")
    assert [r.text for r in inst.correct_references] == ["no"]
    with pytest.raises(ConfigError, match="HBA1C"):
        _load("n2c2_ct_matching", tmp_path, data_path=str(tmp_path), subject="HBA1C")


def _xlsx(path: Path, rows: list[list[object]]) -> None:
    """CLEAR's <condition>.xlsx as written by Excel/openpyxl: one sheet, header row, numbers as numbers."""
    openpyxl = pytest.importorskip("openpyxl")
    wb = openpyxl.Workbook()
    for row in rows:
        wb.active.append(row)
    wb.save(path)


def test_clear_xlsx_maps_labels_to_three_options(tmp_path):
    _xlsx(tmp_path / "homelessness.xlsx", [["text", "result_human"], ["Lives in shelter.", 1],
                                           ["Stable housing.", 0.0], ["Unclear.", "2"]])
    insts = _load("clear", tmp_path, data_path=str(tmp_path), condition="homelessness")
    assert [i.choices.index(i.correct_references[0].text) for i in insts] == [0, 1, 2]
    assert insts[0].choices[0] == "Has a history of homelessness"
    _xlsx(tmp_path / "homelessness.xlsx", [["text", "result_human"], ["x", "5"]])
    with pytest.raises(ConfigError, match=r"homelessness.xlsx:2: column 'result_human'"):
        _load("clear", tmp_path, data_path=str(tmp_path), condition="homelessness")


def test_starr_keeps_quality_controlled_rows(tmp_path):
    from medhelm.benchmarks.loaders.private import STARR_COLUMNS

    row = dict.fromkeys(STARR_COLUMNS, "x")
    _csv(tmp_path / "dataset_cases_qc.csv", [{**row, "QC": "TRUE", "DischargeInstructionNoteText": "Rest."},
                                             {**row, "QC": "FALSE"}])
    (inst,) = _load("starr_patient_instructions", tmp_path, data_path=str(tmp_path))
    assert inst.references[0].text == "Rest."


def test_parquet_needs_pyarrow_or_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    (tmp_path / "mimiciv_icd10.feather").write_bytes(b"x")
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ConfigError, match=r"needs pyarrow: pip install 'medhelm-k8s\[data\]'"):
        _load("mimiciv_billing_code", tmp_path, data_path=str(tmp_path))


def test_mimiciv_feather_codes(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather

    feather.write_feather(pa.table({"text": ["note"], "target": [["E11.9", "I10"]]}), tmp_path / "mimiciv_icd10.feather")
    (inst,) = _load("mimiciv_billing_code", tmp_path, data_path=str(tmp_path))
    assert inst.extra["codes"] == ("E11.9", "I10")
