"""End to end on the embedded SmolLM2 model, data read offline from the air-gapped mirror."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp")


@pytest.mark.slow
@pytest.mark.embedded
def test_pubmed_qa_and_medcalc_bench_run_from_the_mirror(mirror, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "medhelm", "run", "--run-entries", "pubmed_qa:model=local/smollm2-135m-instruct",
         "medcalc_bench:model=local/smollm2-135m-instruct", "--data-dir", str(mirror), "--offline",
         "--max-eval-instances", "3", "-o", str(out), "--local-path", str(tmp_path / "env"), "-q"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    runs = {d.name.split(":")[0]: d for d in (out / "runs/default").iterdir()}
    assert set(runs) == {"pubmed_qa", "medcalc_bench"}
    for name, main in (("pubmed_qa", "exact_match"), ("medcalc_bench", "medcalc_bench_accuracy")):
        run = runs[name]
        assert json.loads((run / "run.json").read_text())["status"] == "complete"
        stats = {s["name"]["name"]: s for s in json.loads((run / "stats.json").read_text())}
        assert stats[main]["count"] == 3 and 0.0 <= stats[main]["mean"] <= 1.0
        records = [json.loads(line) for line in (run / "instances.jsonl").read_text().splitlines()]
        assert len(records) == 3 and all(r["completion"] is not None for r in records)
    pubmed = [json.loads(line) for line in (runs["pubmed_qa"] / "instances.jsonl").read_text().splitlines()]
    for r in pubmed:  # every answer was mapped to an option or counted as unparseable
        assert set(r["stats"]) >= {"exact_match", "unparseable_answer"}
        assert r["prompt"]["messages"][-1]["content"].count("A. yes") == 1
    medcalc_stats = {s["name"]["name"] for s in json.loads((runs["medcalc_bench"] / "stats.json").read_text())}
    assert {"medcalc_bench_accuracy_lenient", "medcalc_bench_unparseable"} <= medcalc_stats
