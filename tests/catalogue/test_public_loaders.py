"""Public loaders on the real data slices, read offline through an air-gapped mirror of symlinks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medhelm.benchmarks import LoadContext, resolve
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.specs import FrozenMap


def test_pubmed_qa_from_the_mirror(load, shared_data):
    bench, instances = load("pubmed_qa")
    raw = json.loads((shared_data / "pubmedqa/ori_pqal_sample.json").read_text())
    assert len(instances) == len(raw) == 200
    first = instances[0]
    item = raw[first.id]
    assert first.choices == ("yes", "no", "maybe")
    assert [r.text for r in first.correct_references] == [item["final_decision"]]
    assert first.extra["question"] == item["QUESTION"]
    assert first.extra["context"].startswith(f"{item['LABELS'][0].title()}. {item['CONTEXTS'][0][:40]}")
    assert bench.spec.main_metric == "exact_match" and bench.spec.max_tokens == 1


def test_medcalc_bench_from_the_mirror_keeps_every_category(load, shared_data):
    _, instances = load("medcalc_bench")
    rows = list(csv.DictReader(open(shared_data / "medcalc_bench/one_shot_data.csv", encoding="utf-8")))
    assert [i.id for i in instances] == [r["Row Number"] for r in rows]
    assert {i.extra["category"] for i in instances} == {"lab test", "risk", "physical", "severity", "date",
                                                        "diagnosis", "dosage"}
    by_id = {r["Row Number"]: r for r in rows}
    for inst in instances:
        row = by_id[inst.id]
        assert inst.references[0].text == row["Ground Truth Answer"]
        assert inst.extra["lower_limit"] == row["Lower Limit"] and inst.extra["upper_limit"] == row["Upper Limit"]
        assert inst.extra["context"] == row["Patient Note"]  # verbatim, as HELM's scenario puts it in the prompt


def test_medec_from_the_mirror_has_parsed_references(load):
    _, instances = load("medec")
    assert len(instances) == 120
    flagged = [i for i in instances if i.extra["error_flag"] == 1]
    assert len(flagged) == 62
    first = flagged[0]  # ms-test-0: sentence 10 holds the error
    assert first.id == "ms-test-0" and first.extra["error_sentence_id"] == 10
    assert first.references[0].text.startswith("10 Patient's symptoms are suspected to be due to Schistosoma")
    assert all(i.references[0].text == "CORRECT" for i in instances if i.extra["error_flag"] == 0)


def test_aci_bench_one_test_set_from_the_mirror(load):
    bench, instances = load("aci_bench", subset="clinicalnlp_taskB_test1")
    assert len(instances) == 40
    assert instances[0].id == "clinicalnlp_taskB_test1:D2N088-virtassist"
    assert instances[0].references[0].text.startswith("CHIEF COMPLAINT")
    assert bench.spec.metrics[0].args["rubric"] == "aci_bench"


def test_all_three_aci_test_sets_are_required_not_silently_fewer(load, mirror):
    with pytest.raises(DataUnavailable) as err:
        load("aci_bench")
    msg = str(err.value)
    assert "clinicalnlp_taskC_test2_full.json" in msg and "clef_taskC_test3_full.json" in msg
    assert "clinicalnlp_taskB_test1_full.json" not in msg.split("copy ")[1].split(" into")[0]
    assert str(mirror / "aci_bench") in msg


def test_offline_without_a_mirror_names_the_files_and_the_option(load):
    with pytest.raises(DataUnavailable, match=r"ori_pqal\.json .*--data-dir / MEDHELM_DATA_DIR"):
        load("pubmed_qa", data_dir=None)


def test_flat_mirror_layout_is_accepted(shared_data, tmp_path):
    (tmp_path / "ori_pqal.json").symlink_to(shared_data / "pubmedqa/ori_pqal_sample.json")
    bench = resolve("pubmed_qa", LoadContext(data_dir=tmp_path, offline=True, cache_dir=tmp_path / "c"))
    assert len(list(bench.instances())) == 200


def test_malformed_mirror_file_is_a_one_line_error_naming_it(tmp_path):
    (tmp_path / "medec").mkdir()
    bad = tmp_path / "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
    bad.write_text("Text ID,Sentences\nx,y\n")
    bench = resolve("medec", LoadContext(data_dir=tmp_path, offline=True))
    with pytest.raises(ConfigError) as err:
        list(bench.instances())
    assert str(bad) in str(err.value) and "'Error Flag'" in str(err.value) and "\n" not in str(err.value)


def test_unknown_medcalc_category_is_refused_not_scored_zero(tmp_path, shared_data):
    (tmp_path / "medcalc_bench").mkdir()
    rows = list(csv.DictReader(open(shared_data / "medcalc_bench/one_shot_data.csv", encoding="utf-8")))
    rows[3]["Category"] = "vital sign"
    out = tmp_path / "medcalc_bench/test_data.csv"
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(out, encoding="utf-8", newline="") as fh:  # notes hold newlines: the record's physical line
        reader = csv.reader(fh)
        for _ in range(4):
            next(reader)
        line = reader.line_num + 1
    bench = resolve("medcalc_bench", LoadContext(data_dir=tmp_path, offline=True))
    with pytest.raises(ConfigError, match=rf"{out}:{line}: field 'Category': unknown MedCalc-Bench category"):
        list(bench.instances())


def test_mtsamples_folder_mirror_uses_the_section_as_reference_and_drops_it_from_the_input(tmp_path):
    notes = tmp_path / "mtsamples_replicate/mtsamples_processed"
    notes.mkdir(parents=True)
    (notes / "a.txt").write_text("HISTORY: cough.\nFINDINGS: clear lungs.\nSummary: viral bronchitis, rest.\n")
    (notes / "b.txt").write_text("HISTORY: no sections here\n")
    bench = resolve("mtsamples_replicate", LoadContext(args=FrozenMap(instance_set="all"), data_dir=tmp_path,
                                                       offline=True))
    (inst,) = bench.instances()
    # SUMMARY is chosen over FINDINGS, and neither it nor anything after it leaks into the input
    assert inst.references[0].text == "viral bronchitis, rest."
    assert "viral bronchitis" not in inst.input and inst.input.startswith("HISTORY: cough.")


def test_ehr_sql_loader_reads_the_test_split_with_the_schema(tmp_path):
    d = tmp_path / "ehr_sql"
    d.mkdir()
    (d / "test.json").write_text(json.dumps([
        {"id": "q1", "question": "how many patients?", "query": "select count(*) from patient", "is_impossible": False},
        {"id": "q2", "question": "what is the weather?", "query": "null", "is_impossible": True}]))
    (d / "eicu.sql").write_text("DROP TABLE IF EXISTS patient;\nCREATE TABLE patient\n(\n uniquepid TEXT\n) ;\n")
    (d / "eicu.sqlite").write_bytes(b"")
    bench = resolve("ehr_sql", LoadContext(data_dir=tmp_path, offline=True))
    q1, q2 = bench.instances()
    assert q1.extra["context"] == "CREATE TABLE patient\n(\nuniquepid TEXT\n) ;"
    assert q1.references[0].text == "select count(*) from patient"
    assert q2.extra["is_impossible"] and q2.references[0].text == "null"  # the gold as published: HELM's reference
    assert Path(q1.extra["db_path"]).name == "eicu.sqlite"
