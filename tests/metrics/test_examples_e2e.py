"""The shipped examples through the real pipeline on the real embedded model (SmolLM2-135M, llama.cpp)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from medhelm.pipeline import RunOptions, plan_runs, run_suite
from medhelm.rundir import RunDir
from medhelm.runentries import read_conf

pytestmark = pytest.mark.embedded


def test_exact_match_demo_end_to_end(repo_root: Path, tmp_path: Path) -> None:
    options = RunOptions(suite="DEMO", output_path=tmp_path / "out", local_path=tmp_path / "prod_env",
                         max_eval_instances=3, progress=False)
    plans = plan_runs(read_conf(repo_root / "examples/exact_match_demo/exact_match_demo.conf"), options)
    assert sorted(p.deployment.name for p in plans) == ["baseline/majority", "baseline/random",
                                                        "local/smollm2-135m-instruct"]  # the demo's baselines
    [plan] = [p for p in plans if p.deployment.name == "local/smollm2-135m-instruct"]
    [outcome] = asyncio.run(run_suite([plan], options, progress=False))
    run = RunDir(plan.run_dir)
    records = list(run.iter_records())
    assert run.status()["status"] == "complete" and len(records) == 3
    for record in records:
        assert record.error is None and record.completion is not None
        assert record.prompt.text == record.instance.input + "\n" and not record.prompt.truncated
        assert set(record.stats) >= {"exact_match", "quasi_exact_match", "prefix_exact_match",
                                     "quasi_prefix_exact_match"}
        gold = record.instance.correct_references[0].text
        assert record.stats["exact_match"] == float(record.completion.text.strip() == gold)
    stats = {s.name: s for s in run.stats()}
    assert stats["exact_match"].count == 3
    assert stats["exact_match"].mean == pytest.approx(sum(r.stats["exact_match"] for r in records) / 3)


@pytest.mark.slow  # generation on a shared 2-core CPU
def test_rouge_benchmark_end_to_end(repo_root: Path, tmp_path: Path) -> None:
    # the summarisation example with ROUGE only (BERTScore is covered against the library in test_bertscore)
    folder = tmp_path / "summary"
    shutil.copytree(repo_root / "examples/summarization_demo", folder)
    yaml_path = folder / "summarization_demo.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("  - name: BERTScore-F\n", ""))
    options = RunOptions(suite="DEMO", output_path=tmp_path / "out", local_path=tmp_path / "prod_env",
                         max_eval_instances=2, num_output_tokens=32, progress=False)
    [plan] = plan_runs(read_conf(folder / "summarization_demo.conf"), options)
    assert plan.spec.benchmark.main_metric == "rouge_l"
    asyncio.run(run_suite([plan], options, progress=False))
    records = list(RunDir(plan.run_dir).iter_records())
    assert len(records) == 2
    for record in records:
        assert record.completion is not None and record.completion.text.strip()
        assert all(0.0 <= record.stats[s] <= 1.0 for s in ("rouge_1", "rouge_2", "rouge_l"))
        assert record.stats["rouge_1"] > 0.0  # a summary of the note shares words with the reference
