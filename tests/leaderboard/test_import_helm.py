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


def _one_line_error(*argv: str) -> str:
    code, out, err = run_cli("import-helm", *argv)
    assert code == 2 and err.count("\n") == 1 and err.startswith("medhelm: error: ") and "Traceback" not in err, err
    return err


def test_import_errors_are_one_line_and_nothing_is_half_imported(tmp_path: Path, helm_suite: Path) -> None:
    out = str(tmp_path / "o")
    assert run_cli("import-helm", str(helm_suite), "-o", out, "--release", "kept", "--bootstrap", "10")[0] == 0
    assert "not found" in _one_line_error(str(tmp_path / "nope"), "-o", out)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no HELM run directories" in _one_line_error(str(empty), "-o", out)
    run = sorted(helm_suite.iterdir())[0]
    stats, per_instance = run / "stats.json", run / "per_instance_stats.json"
    original_stats, original_pi = stats.read_text(), per_instance.read_text()

    per_instance.write_text("[{not json")
    assert f"{per_instance}: corrupt JSON" in _one_line_error(str(helm_suite), "-o", out, "--release", "kept")
    per_instance.write_text(json.dumps({"instance_id": "x"}))
    assert "not a list of per-instance stats" in _one_line_error(str(helm_suite), "-o", out, "--release", "kept")
    per_instance.write_text(original_pi)

    stats.write_text(json.dumps({"name": {"name": "exact_match"}}))
    assert f"{stats}: expected a list of stats, found a JSON dict" in _one_line_error(str(helm_suite), "-o", out)
    stats.write_text(json.dumps([{"count": 1, "sum": 1.0}]))
    assert f"{stats}: stat #0 has no name.name" in _one_line_error(str(helm_suite), "-o", out)
    stats.write_text(json.dumps([_stat("num_prompt_tokens", 1.0)]))
    per_instance.unlink()
    assert "_accuracy' stat (the main metric" in _one_line_error(str(helm_suite), "-o", out)
    stats.unlink()
    assert "not a finished HELM run" in _one_line_error(str(helm_suite), "-o", out)
    # the release imported first is untouched by every failed attempt
    with open_store(tmp_path / "o" / "results.sqlite") as store:
        assert store.releases() == ["kept"] and len(read.cells(store, "kept")) == 5
    stats.write_text(original_stats)
    per_instance.write_text(original_pi)


def test_benchmark_output_root_with_several_suites_asks_which(tmp_path: Path, helm_suite: Path) -> None:
    other = helm_suite.parent / "v1.0.0"
    _helm_run(other, "pubmed_qa", "openai/gpt-4o", [1, 0], "exact_match", ["pubmed_qa"])
    err = _one_line_error(str(helm_suite.parent.parent), "-o", str(tmp_path / "o"))
    assert "several releases/suites here (v1.0.0, v2.0.0)" in err
    code, out, err = run_cli("import-helm", str(helm_suite.parent.parent), "--release", "v1.0.0", "-o",
                             str(tmp_path / "o"), "--bootstrap", "10")
    assert code == 0 and "release 'v1.0.0': 1 runs" in out, err


def test_jury_run_with_summarization_metrics_listed_first(tmp_path: Path) -> None:
    """MedHELM's jury run specs list SummarizationMetric before the jury metric: HELM's runner then writes one
    per-instance entry per metric group, the jury value in the last one. Every entry is read."""
    suite = tmp_path / "runs" / "s"
    name = "med_dialog,subset=icliniq:model=openai_gpt-4o,model_deployment=openai_gpt-4o"
    d = suite / name
    d.mkdir(parents=True)
    (d / "run_spec.json").write_text(json.dumps({
        "name": name, "adapter_spec": {"method": "generation", "model": "openai/gpt-4o",
                                       "model_deployment": "openai/gpt-4o", "max_tokens": 80},
        "metric_specs": [{"class_name": "helm.benchmark.metrics.summarization_metrics.SummarizationMetric",
                          "args": {"task": "med_dialog"}},
                         {"class_name": "helm.benchmark.metrics.med_dialog_metrics.MedDialogMetric", "args": {}}],
        "groups": ["med_dialog"]}))
    scores = [3.0, 5.0, 4.0]
    (d / "stats.json").write_text(json.dumps([_stat("med_dialog_accuracy", 4.0) | {"count": 3, "sum": 12.0}]))
    entries = [{"instance_id": f"id{i}", "train_trial_index": 0,
                "stats": [_stat("rouge_l", 0.2), _stat("num_prompt_tokens", 50.0 + i)]} for i in range(3)]
    entries += [{"instance_id": f"id{i}", "train_trial_index": 0, "stats": [_stat("med_dialog_accuracy", v)]}
                for i, v in enumerate(scores)]
    (d / "per_instance_stats.json").write_text(json.dumps(entries))
    code, out, err = run_cli("import-helm", str(suite), "-o", str(tmp_path / "o"), "--bootstrap", "50")
    assert code == 0, err
    with open_store(tmp_path / "o" / "results.sqlite") as store:
        [cell] = read.cells(store, "s")
        [bench] = read.benchmarks(store, "s")
        [model] = read.models(store, "s")
    assert cell["value"] == pytest.approx(((3 - 1) / 4 + (5 - 1) / 4 + (4 - 1) / 4) / 3)
    assert cell["n_instances"] == 3 and cell["n_unscored"] == 0 and cell["ci_low"] < cell["value"] < cell["ci_high"]
    assert model["prompt_tokens"] == 50 + 51 + 52
    assert bench["task_type"] == "generation"
