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


# ------------------------------------------------------------------------------------------------------------
# Real HELM output: crfm-helm 0.5.16 helm-run + helm-summarize against our mock server (scripts/helm_fixtures.sh).
# The expected numbers are read from HELM's files here, the plain way, independently of helm_runs.py.

DATA = Path(__file__).resolve().parents[1] / "data" / "helm"
REAL = DATA / "real" / "runs" / "fixtures"
LAYOUT = DATA / "medhelm_layout" / "runs" / "layout"


def _run_dirs(suite: Path) -> list[Path]:
    return sorted(p.parent for p in suite.glob("*/run_spec.json"))


def _helm_instances(run_dir: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for e in json.loads((run_dir / "per_instance_stats.json").read_text()):
        if e.get("perturbation") or e.get("train_trial_index", 0):
            continue
        for s in e["stats"]:
            if s["name"].get("perturbation") or s["name"].get("sub_split"):
                continue
            value = s["mean"] if "mean" in s else (s["sum"] / s["count"] if s.get("count") else None)
            out.setdefault(e["instance_id"], {})[s["name"]["name"]] = value
    return out


def _main_of(suite: Path, run_dir: Path) -> tuple[str, str]:
    groups = json.loads((run_dir / "run_spec.json").read_text())["groups"]
    schema = {g["name"]: g for g in json.loads((suite / "schema.json").read_text())["run_groups"]}
    env = next(schema[g]["environment"] for g in groups if schema.get(g, {}).get("environment"))
    return env["main_name"], env.get("main_split", "test")


def _state(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "scenario_state.json").read_text())["request_states"]


def _failed(run_dir: Path) -> set[str]:
    return {rs["instance"]["id"] for rs in _state(run_dir) if rs["result"]["success"] is False}


def _model_of(run_dir: Path) -> str:
    return json.loads((run_dir / "run_spec.json").read_text())["adapter_spec"]["model"]


def _import(suite: Path, out: Path, *extra: str) -> tuple[str, str]:
    code, stdout, err = run_cli("import-helm", str(suite), "-o", str(out), "--bootstrap", "20", *extra)
    assert code == 0, err
    return stdout, err


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict:
    assert len(_run_dirs(REAL)) == 9, "tests/data/helm/real: run scripts/helm_fixtures.sh"
    out = tmp_path_factory.mktemp("real")
    _, notes = _import(REAL, out / "default")
    _, as_helm_notes = _import(REAL, out / "as_helm", "--failed-as-zero")
    return {"default": out / "default" / "results.sqlite", "as_helm": out / "as_helm" / "results.sqlite",
            "notes": notes, "as_helm_notes": as_helm_notes}


def _instances(store_path: Path, run_name: str) -> dict[str, dict]:
    with open_store(store_path) as store:
        rows = store.query_dicts("SELECT i.* FROM instances i JOIN runs r ON r.run_id = i.run_id WHERE r.run_name = ?",
                                 (run_name,))
    return {r["instance_id"]: r for r in rows}


def test_real_helm_every_instance_value_token_and_latency_equals_helms(real: dict) -> None:
    tokens: dict[str, list[float]] = {}
    for run_dir in _run_dirs(REAL):
        helm = _helm_instances(run_dir)
        main, _ = _main_of(REAL, run_dir)
        failed = _failed(run_dir)
        for mode in ("default", "as_helm"):
            ours = _instances(real[mode], run_dir.name)
            assert set(ours) == set(helm), run_dir.name
            for iid, expected in helm.items():
                stored = json.loads(ours[iid]["stats_json"])
                assert {k: stored[k] for k in expected} == expected  # every stat, exactly
                value = None if (iid in failed and mode == "default") else expected[main]
                assert ours[iid]["main_value"] == value and (ours[iid]["error"] is not None) == (iid in failed)
        t = tokens.setdefault(_model_of(run_dir), [0.0, 0.0, 0.0])
        for expected in helm.values():
            t[0] += expected["num_prompt_tokens"]
            t[1] += expected["num_output_tokens"]
            t[2] += expected.get("inference_runtime") or 0.0  # HELM records none for a failed request
    with open_store(real["default"]) as store:
        models = {m["model"]: m for m in read.models(store, "fixtures")}
    assert set(models) == set(tokens) and len(models) == 3
    for model, (prompt, output, latency) in tokens.items():
        assert models[model]["prompt_tokens"] == prompt and models[model]["completion_tokens"] == output
        assert models[model]["inference_s"] == pytest.approx(latency, rel=1e-12) and latency > 0


def test_real_helm_run_means_equal_stats_json(real: dict) -> None:
    with open_store(real["default"]) as store:
        default = {(c["benchmark"], c["model"]): c for c in read.cells(store, "fixtures")}
        benches = {b["benchmark"]: b for b in read.benchmarks(store, "fixtures")}
    with open_store(real["as_helm"]) as store:
        as_helm = {(c["benchmark"], c["model"]): c for c in read.cells(store, "fixtures")}
    for run_dir in _run_dirs(REAL):
        main, split = _main_of(REAL, run_dir)
        [stat] = [s for s in json.loads((run_dir / "stats.json").read_text())
                  if s["name"] == {"name": main, "split": split}]
        values = {iid: s[main] for iid, s in _helm_instances(run_dir).items()}
        assert stat["mean"] == pytest.approx(sum(values.values()) / len(values), abs=1e-12)
        group = json.loads((run_dir / "run_spec.json").read_text())["groups"][0]
        key = (group, _model_of(run_dir))
        assert as_helm[key]["value"] == pytest.approx(stat["mean"], abs=1e-12)  # HELM's number, exactly
        kept = [v for iid, v in values.items() if iid not in _failed(run_dir)]
        assert default[key]["value"] == pytest.approx(sum(kept) / len(kept), abs=1e-12)
        assert default[key]["n_unscored"] == len(values) - len(kept)
        assert benches[group]["main_metric"] == main
    assert benches["note_summary_jury"]["task_type"] == "generation"
    assert benches["followup_yesno"]["task_type"] == "classification"
    assert benches["shc_conf_med"]["category"] == "Patient Communication and Education"
    assert benches["followup_yesno"]["access"] == benches["shc_conf_med"]["access"] == "private"


def _helm_main_table(suite: Path, group_file: str) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """(display model -> mean win rate, (display model, group) -> value) from helm-summarize's groups JSON."""
    schema = json.loads((suite / "schema.json").read_text())
    by_display = {g.get("display_name", g["name"]): g["name"] for g in schema["run_groups"]}
    tables = json.loads((suite / "groups" / group_file).read_text())
    table = next(t for t in tables if any(h["value"] == "Mean win rate" for h in t["header"]))
    header = [h["value"] for h in table["header"]]
    win, cells = {}, {}
    for row in table["rows"]:
        model = row[0]["value"]
        win[model] = row[header.index("Mean win rate")]["value"]
        for h, c in zip(header[2:], row[2:]):
            if c.get("value") is not None:
                cells[(model, by_display[h.rsplit(" - ", 1)[0]])] = c["value"]
    return win, cells


def _display(model: str) -> str:
    return "Mock " + model.split("/", 1)[1]  # as scripts/helm_fixtures.sh's model_metadata.yaml names them


def test_real_helm_win_rates_and_scores_equal_helm_summarize(real: dict) -> None:
    win, cells = _helm_main_table(REAL, "all_scenarios.json")
    with open_store(real["as_helm"]) as store:
        board = read.stored_leaderboard(store, "fixtures")
        ours = {(_display(c["model"]), c["benchmark"]): c["value"] for c in read.cells(store, "fixtures")}
    assert {_display(r["model"]): r["win_rate"] for r in board} == pytest.approx(win, abs=1e-12)
    assert ours == pytest.approx(cells, abs=1e-12) and len(cells) == 9
    assert sorted(set(win.values())) != [win[next(iter(win))]]  # the fixture separates the models


def test_real_helm_errors_are_counted_apart_from_real_zeros(real: dict) -> None:
    failed_runs = {d.name: _failed(d) for d in _run_dirs(REAL) if _failed(d)}
    assert len(failed_runs) == 1 and 2 <= len(next(iter(failed_runs.values()))) < 20
    [(name, failed)] = failed_runs.items()
    with open_store(real["default"]) as store:
        errors = {r["run_name"]: r["errors"] for r in store.query_dicts("SELECT run_name, errors FROM runs")}
    assert errors[name] == len(failed) and sum(errors.values()) == len(failed)
    assert f"{len(failed)} of 20 requests failed" in real["notes"] and "--failed-as-zero" in real["notes"]
    assert all(e.startswith("HELM request failed: Content blocked") for e in
               (r["error"] for r in _instances(real["default"], name).values()) if e)
    # judges: HELM drops a judge whose verdict it cannot parse; the import counts each miss
    for run_dir in _run_dirs(REAL):
        spec = json.loads((run_dir / "run_spec.json").read_text())
        if "note_summary_jury" not in spec["groups"]:
            continue
        missing = sum(2 - sum(1 for k, v in rs["annotations"]["note_summary_jury"].items()
                              if k.startswith("mock/") and v) for rs in _state(run_dir))
        stored = sum(json.loads(r["stats_json"])["helm_judges_failed"]
                     for r in _instances(real["default"], run_dir.name).values())
        assert stored == missing
    assert "judges failed" in real["notes"]


def test_builtin_medhelm_jury_layout_imports_with_helms_numbers(tmp_path: Path) -> None:
    """crfm-helm 0.5.16's med_dialog layout (summarization metrics first, LLMJuryMetric last) and the MedHELM
    schema's helm-summarize output: values on 0-1, win rates as HELM's."""
    runs = _run_dirs(LAYOUT)
    assert len(runs) == 3
    _import(LAYOUT, tmp_path)
    with open_store(tmp_path / "results.sqlite") as store:
        cells = {(_display(c["model"]), c["benchmark"]): c for c in read.cells(store, "layout")}
        board = read.stored_leaderboard(store, "layout")
        [bench] = read.benchmarks(store, "layout")
        models = {m["model"]: m for m in read.models(store, "layout")}
    win, helm_cells = _helm_main_table(LAYOUT, "medhelm_scenarios.json")
    assert {_display(r["model"]): r["win_rate"] for r in board} == pytest.approx(win, abs=1e-12)
    for key, value in helm_cells.items():
        assert cells[key]["value"] == pytest.approx((value - 1) / 4, abs=1e-12)  # 1-5 -> 0-1
        assert cells[key]["n_unscored"] == 0 and cells[key]["ci_low"] is not None
    assert bench["main_metric"] == "jury_score_normalized" and bench["task_type"] == "generation"
    for run_dir in runs:
        helm = _helm_instances(run_dir)
        ours = _instances(tmp_path / "results.sqlite", run_dir.name)
        for iid, expected in helm.items():
            assert ours[iid]["main_value"] == pytest.approx((expected["med_dialog_accuracy"] - 1) / 4, abs=1e-12)
            assert {k: json.loads(ours[iid]["stats_json"])[k] for k in expected} == expected
        prompt = sum(s["num_prompt_tokens"] for s in helm.values())
        assert models[_model_of(run_dir)]["prompt_tokens"] == prompt > 0


def test_real_helm_release_folder_imports_with_one_command(tmp_path: Path) -> None:
    """HELM's release layout (benchmark_output/{runs/<suite>, releases/<release>}) from helm-summarize --release:
    the root, or the release folder itself, is one command; numbers as the release's groups JSON."""
    root = DATA / "real"
    stdout, _ = _import(root, tmp_path / "a", "--release", "fixtures-release", "--failed-as-zero")
    assert "release 'fixtures-release': 9 runs, 120 instances" in stdout
    _import(root / "releases" / "fixtures-release", tmp_path / "b", "--failed-as-zero")
    win, cells = _helm_main_table(root / "releases" / "fixtures-release", "all_scenarios.json")
    for out in (tmp_path / "a", tmp_path / "b"):
        with open_store(out / "results.sqlite") as store:
            board = read.stored_leaderboard(store, "fixtures-release")
            ours = {(_display(c["model"]), c["benchmark"]): c["value"] for c in read.cells(store, "fixtures-release")}
        assert {_display(r["model"]): r["win_rate"] for r in board} == pytest.approx(win, abs=1e-12)
        assert ours == pytest.approx(cells, abs=1e-12)
    err = _one_line_error(str(root), "-o", str(tmp_path / "c"), "--release", "v9")
    assert "no release or suite 'v9' here (releases: fixtures-release; suites: fixtures)" in err


def test_group_scores_have_no_empty_rows_and_export_counts_text(tmp_path: Path, helm_suite: Path) -> None:
    _import(helm_suite, tmp_path)
    with open_store(tmp_path / "results.sqlite") as store:
        rows = store.query_dicts("SELECT * FROM group_scores WHERE release = 'v2.0.0'")
    assert rows and all(r["n_benchmarks"] > 0 and r["value"] is not None for r in rows)
    # llama has no medhelm_med_qa run: no "Providing Clinical Knowledge Support" row for it
    assert not any(r["model"] == "meta/llama-3.3-70b" and r["grp"] == "Providing Clinical Knowledge Support"
                   for r in rows)
    code, out, err = run_cli("export", str(tmp_path / "bundle"), "-o", str(tmp_path))
    assert code == 0 and "warning" not in err, err
    assert "18 instance scores included, 0 with prompt and output (imported HELM runs carry scores only)" in out


def test_suite_folder_summarized_with_helm_summarize_suite_imports_wherever_it_sits(tmp_path: Path) -> None:
    """helm-summarize --suite writes runs_to_run_suites.json into the suite folder: it stays a suite folder (its
    runs are here), also outside a runs/ folder; numbers as when imported from its place."""
    import shutil

    suite = tmp_path / "copied" / "fixtures"
    shutil.copytree(DATA / "real" / "runs" / "fixtures", suite)
    runs = sorted(p.name for p in suite.iterdir() if (p / "run_spec.json").is_file())
    (suite / "runs_to_run_suites.json").write_text(json.dumps(dict.fromkeys(runs, "fixtures")))
    stdout, _ = _import(suite, tmp_path / "a")
    assert "release 'fixtures': 9 runs, 120 instances" in stdout
    _import(DATA / "real" / "runs" / "fixtures", tmp_path / "b")
    values = []
    for out in (tmp_path / "a", tmp_path / "b"):
        with open_store(out / "results.sqlite") as store:
            values.append({(c["model"], c["benchmark"]): c["value"] for c in read.cells(store, "fixtures")})
    assert values[0] == values[1] and len(values[0]) == 9


def test_judge_usage_helm_never_recorded_is_unknown_not_zero(tmp_path: Path, helm_suite: Path) -> None:
    _import(helm_suite, tmp_path)
    with open_store(tmp_path / "results.sqlite") as store:
        models = {m["model"]: m for m in read.models(store, "v2.0.0")}
        raw = {r[0]: r[1:] for r in store.query("SELECT model, judge_prompt_tokens, judge_completion_tokens, "
                                                "jury_cost_usd FROM models WHERE release = 'v2.0.0'")}
    assert raw["openai/gpt-4o"] == (None, None, None)  # med_dialog is judged: HELM kept no judge usage
    assert models["openai/gpt-4o"]["prompt_tokens"] == 100 * (4 + 3 + 2)  # the candidate's own usage is known


def test_a_one_benchmark_group_interval_is_that_benchmarks_own(tmp_path: Path) -> None:
    """Replicates are kept as float64: a category of one benchmark has exactly that benchmark's interval."""
    out = tmp_path / "out"
    write_suite(out, "s", default_models(3), catalogue(names=("pubmed_qa", "med_dialog", "medcalc_bench")), 40)
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(out), "--bootstrap", "200")
    assert code == 0, err
    with open_store(out / "results.sqlite") as store:
        cells = {(c["benchmark"], c["model"]): c for c in read.cells(store, "s")}
        category = {b["benchmark"]: b["category"] for b in read.benchmarks(store, "s")}
        groups = store.query_dicts("SELECT * FROM group_scores WHERE release = 's' AND level = 'category' "
                                   "AND n_benchmarks = 1")
    assert groups
    for g in groups:
        (bench,) = [b for b, c in category.items() if c == g["grp"]]
        cell = cells[(bench, g["model"])]
        assert (g["value"], g["ci_low"], g["ci_high"]) == (cell["value"], cell["ci_low"], cell["ci_high"])
