"""`medhelm import-helm` on a small HELM-shaped suite written here (HELM's file shapes, not ours)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm.store import open_store, read
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli


def _stat(name: str, value: float, **name_extra: str) -> dict:
    return {"name": {"name": name, "split": "test", **name_extra}, "count": 1, "sum": value,
            "sum_squared": value * value, "min": value, "max": value, "mean": value}


def _helm_run(suite_dir: Path, head: str, model: str, values: list[float], main: str, groups: list[str],
              per_instance: bool = True) -> None:
    dep = model
    name = f"{head}:model={model.replace('/', '_')},model_deployment={dep.replace('/', '_')}"
    d = suite_dir / name
    d.mkdir(parents=True)
    (d / "run_spec.json").write_text(json.dumps({
        "name": name, "scenario_spec": {"class_name": "helm.benchmark.scenarios.X", "args": {}},
        "adapter_spec": {"method": "generation", "model": model, "model_deployment": dep, "max_tokens": 1},
        "metric_specs": [], "groups": groups}))
    mean = sum(values) / len(values)
    (d / "stats.json").write_text(json.dumps([
        {**_stat(main, mean), "count": 1},
        _stat(main, 0.0, perturbation={"name": "typos"}),  # robustness variant: not a leaderboard value
        _stat("num_prompt_tokens", 100.0 * len(values)), _stat("num_output_tokens", 2.0 * len(values))]))
    if per_instance:
        (d / "per_instance_stats.json").write_text(json.dumps([
            {"instance_id": f"id{i}", "train_trial_index": 0,
             "stats": [_stat(main, v), _stat("num_prompt_tokens", 100.0), _stat("num_output_tokens", 2.0)]}
            for i, v in enumerate(values)] + [
            {"instance_id": "id0", "train_trial_index": 0, "perturbation": {"name": "typos"},
             "stats": [_stat(main, 0.0)]}]))


@pytest.fixture
def helm_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "helm_output" / "runs" / "v2.0.0"
    _helm_run(suite, "pubmed_qa", "openai/gpt-4o", [1, 1, 0, 1], "exact_match", ["pubmed_qa"])
    _helm_run(suite, "pubmed_qa", "meta/llama-3.3-70b", [0, 1, 0, 0], "exact_match", ["pubmed_qa"])
    for subset, (a, b) in {"healthcaremagic": ([5, 4, 4], [2, 3, 1]), "icliniq": ([3, 5], [1, 1])}.items():
        _helm_run(suite, f"med_dialog,subset={subset}", "openai/gpt-4o", a, "med_dialog_accuracy", ["med_dialog"])
        _helm_run(suite, f"med_dialog,subset={subset}", "meta/llama-3.3-70b", b, "med_dialog_accuracy",
                  ["med_dialog"])
    _helm_run(suite, "med_qa", "openai/gpt-4o", [1, 0, 1, 1, 1], "exact_match", ["med_qa"], per_instance=False)
    return suite


def test_import_maps_names_normalises_jury_and_macro_averages_subsets(helm_suite: Path, tmp_path: Path) -> None:
    code, out, err = run_cli("import-helm", str(helm_suite), "-o", str(tmp_path / "out"), "--bootstrap", "100")
    assert code == 0, err
    assert "release 'v2.0.0': 7 runs" in out
    with open_store(tmp_path / "out" / "results.sqlite") as store:
        cells = {(c["benchmark"], c["model"]): c for c in read.cells(store, "v2.0.0")}
        benches = {b["benchmark"]: b for b in read.benchmarks(store, "v2.0.0")}
        board = read.stored_leaderboard(store, "v2.0.0")
        models = {m["model"]: m for m in read.models(store, "v2.0.0")}
    assert cells[("pubmed_qa", "openai/gpt-4o")]["value"] == pytest.approx(0.75)
    # jury 1-5 -> 0-1, then the mean of the two subsets' means (HELM: unweighted mean of run means)
    gpt = ((13 / 3 - 1) / 4 + (4 - 1) / 4) / 2
    llama = ((2 - 1) / 4 + (1 - 1) / 4) / 2
    assert cells[("med_dialog", "openai/gpt-4o")]["value"] == pytest.approx(gpt)
    assert cells[("med_dialog", "meta/llama-3.3-70b")]["value"] == pytest.approx(llama)
    assert cells[("med_dialog", "openai/gpt-4o")]["n_runs"] == 2
    assert benches["med_dialog"]["main_metric"] == "jury_score_normalized"
    assert benches["med_dialog"]["category"] == "Patient Communication and Education"
    assert benches["medhelm_med_qa"]["subcategory"] == "Providing Clinical Knowledge Support"  # HELM alias mapped
    no_instances = cells[("medhelm_med_qa", "openai/gpt-4o")]
    assert no_instances["value"] == pytest.approx(0.8) and no_instances["ci_low"] is None  # stats only: no CI
    assert [r["model"] for r in board] == ["openai/gpt-4o", "meta/llama-3.3-70b"]
    assert board[0]["win_rate"] == pytest.approx(1.0)  # med_qa has one model: not counted
    assert models["openai/gpt-4o"]["prompt_tokens"] == 100 * (4 + 3 + 2)  # per-instance stats, not perturbed


def test_local_runs_rank_beside_imported_models(helm_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_suite(out, "local", default_models(2), catalogue(names=("pubmed_qa", "med_dialog")), 20)
    code, stdout, err = run_cli("import-helm", str(helm_suite), "--suites", "local", "--release", "mine-vs-public",
                                "-o", str(out), "--bootstrap", "100")
    assert code == 0, err
    with open_store(out / "results.sqlite") as store:
        board = read.stored_leaderboard(store, "mine-vs-public")
        cells = read.cells(store, "mine-vs-public")
    assert {r["model"] for r in board} == {"openai/gpt-4o", "meta/llama-3.3-70b", "org/model-00", "org/model-01"}
    assert {c["suites"] for c in cells} == {"local", "v2.0.0"}
    assert all(r["win_rate"] is not None for r in board)


def test_import_errors_are_one_line(tmp_path: Path, helm_suite: Path) -> None:
    code, _, err = run_cli("import-helm", str(helm_suite.parent.parent), "-o", str(tmp_path / "o"))
    assert code == 2 and "benchmark_output root" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli("import-helm", str(empty), "-o", str(tmp_path / "o"))
    assert code == 2 and "no run directories" in err
    bad = next(helm_suite.iterdir()) / "per_instance_stats.json"
    bad.write_text("{not json")
    code, _, err = run_cli("import-helm", str(helm_suite), "-o", str(tmp_path / "o"))
    assert code == 2 and f"{bad}:1: corrupt JSON" in err and err.count("\n") == 1
