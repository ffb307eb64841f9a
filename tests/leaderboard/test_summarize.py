"""`medhelm summarize` on finished suites: the store's content, the leaderboard, redaction, prices, errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medhelm.access import Principal
from medhelm.store import open_store, read
from medhelm.store.read import RedactedError
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.helpers import run_cli


def _stats_mean(run_dir: Path, stat: str) -> float:
    return next(s["mean"] for s in json.loads((run_dir / "stats.json").read_text()) if s["name"]["name"] == stat)


def test_leaderboard_follows_skill_and_cells_equal_run_means(small_output: Path) -> None:
    with open_store(small_output / "results.sqlite") as store:
        board = read.stored_leaderboard(store, "local")
        assert [r["model"] for r in board] == [f"org/model-0{i}" for i in (3, 2, 1, 0)]
        assert [r["rank"] for r in board] == [1, 2, 3, 4]
        assert board[0]["win_rate_low"] <= board[0]["win_rate"] <= board[0]["win_rate_high"]
        cells = {(c["benchmark"], c["deployment"]): c for c in read.cells(store, "local")}
        benches = {b["benchmark"]: b for b in read.benchmarks(store, "local")}
    assert len(cells) == 4 * 6
    for run_dir in (small_output / "runs" / "local").iterdir():
        spec = json.loads((run_dir / "run_spec.json").read_text())
        jury = spec["benchmark"]["main_metric"] == "jury_score"
        stat = "jury_score_normalized" if jury else "exact_match"
        assert benches[spec["benchmark"]["name"]]["main_metric"] == stat  # jury column on the 0-1 scale
        cell = cells[(spec["benchmark"]["name"], spec["deployment"])]
        assert cell["value"] == pytest.approx(_stats_mean(run_dir, stat))
        assert cell["ci_low"] <= cell["value"] <= cell["ci_high"] and cell["n_instances"] == 30


def test_category_scores_are_macro_averages_of_cells(small_output: Path) -> None:
    with open_store(small_output / "results.sqlite") as store:
        cells = read.cells(store, "local")
        benches = {b["benchmark"]: b for b in read.benchmarks(store, "local")}
        groups = store.query_dicts("SELECT * FROM group_scores WHERE release = 'local' AND level = 'subcategory'")
    for g in groups:
        mine = [c["value"] for c in cells if c["deployment"] == g["deployment"]
                and benches[c["benchmark"]]["subcategory"] == g["grp"]]
        assert g["value"] == pytest.approx(sum(mine) / len(mine)) and g["n_benchmarks"] == len(mine)


def test_later_suite_wins_partial_runs_are_skipped_and_compat_flags_noted(tmp_path: Path) -> None:
    models = default_models(2)
    write_suite(tmp_path, "old", models, catalogue(2), 10, seed=1)
    write_suite(tmp_path, "new", models[:1], catalogue(1), 10, seed=2)
    write_suite(tmp_path, "wip", models, catalogue(1), 5, status="partial")
    code, out, err = run_cli("summarize", "--suite", "old", "--suites", "new", "wip", "--release", "r",
                             "-o", str(tmp_path), "--schema", "schema_medhelm.yaml", "--auto-generate-schema")
    assert code == 0, err
    assert "no schema file is needed" in err
    assert err.count("status 'partial'") == 2 and "which is listed later and wins" in err
    first = catalogue(1)[0].name
    new_run = next((tmp_path / "runs" / "new").iterdir())
    with open_store(tmp_path / "results.sqlite") as store:
        cell = store.query_dicts("SELECT * FROM cells WHERE benchmark = ? AND deployment = ?",
                                 (first, models[0].deployment))[0]
        assert cell["suites"] == "new" and cell["value"] == pytest.approx(_stats_mean(new_run, "exact_match"))
        assert read.meta(store, "r")["runs"] == "4"
    assert "release 'r': 4 runs" in out


def test_redacted_deployment_and_redact_flag_keep_no_text(tmp_path: Path, refused_url: str) -> None:
    models = default_models(2)
    write_suite(tmp_path, "s", models, catalogue(2), 8)
    local = tmp_path / "prod_env"
    local.mkdir()
    (local / "model_deployments.yaml").write_text(
        "model_deployments:\n"
        f"  - name: {models[0].deployment}\n    model_name: {models[0].model}\n    kind: openai\n"
        f"    base_url: {refused_url}/v1\n    redacted: true\n")
    assert run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--local-path", str(local))[0] == 0
    with open_store(tmp_path / "results.sqlite") as store:
        runs = {r["deployment"]: r for r in read.runs(store, "s", catalogue(2)[0].name)}
        hidden, shown = runs[models[0].deployment], runs[models[1].deployment]
        assert hidden["redacted"] == 1 and shown["redacted"] == 0
        assert store.query("SELECT COUNT(*) FROM instances WHERE run_id = ? AND record_json IS NOT NULL",
                           (hidden["run_id"],))[0][0] == 0
        with pytest.raises(RedactedError):
            read.instances_page(store, hidden["run_id"], principal=Principal.local())
        page = read.instances_page(store, shown["run_id"], principal=Principal.local(), limit=3)
        assert len(page) == 3 and page[0]["prompt"].startswith("Synthetic question 0")
        assert page[0]["references"][0]["text"] == "B"
    assert run_cli("summarize", "--suites", "s", "--release", "red", "-o", str(tmp_path), "--redact")[0] == 0
    with open_store(tmp_path / "results.sqlite") as store:
        n = store.query("SELECT COUNT(*) FROM instances i JOIN runs r ON r.run_id = i.run_id "
                        "WHERE r.release = 'red' AND i.record_json IS NOT NULL")[0][0]
        assert n == 0
        assert store.query("SELECT COUNT(*) FROM instances i JOIN runs r ON r.run_id = i.run_id "
                           "WHERE r.release = 'red'")[0][0] == 2 * 2 * 8  # scores kept for the CIs


def test_costs_from_prices_yaml(tmp_path: Path) -> None:
    models = default_models(2)
    write_suite(tmp_path, "s", models, catalogue(2), 10)
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n"
                      f"  - deployment: {models[0].deployment}\n    input_per_million: 2.0\n"
                      "    output_per_million: 8.0\n"
                      f"  - model: {models[1].model}\n    gpu_hour: 3.6\n    gpus: 2\n")
    assert run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--prices", str(prices))[0] == 0
    with open_store(tmp_path / "results.sqlite") as store:
        m = {r["deployment"]: r for r in read.models(store, "s")}
        board = {r["deployment"]: r for r in read.stored_leaderboard(store, "s")}
    api, gpu = m[models[0].deployment], m[models[1].deployment]
    assert api["cost_basis"] == "api tokens"
    assert api["cost_usd"] == pytest.approx((api["prompt_tokens"] * 2.0 + api["completion_tokens"] * 8.0) / 1e6)
    walls = [json.loads((d / "run.json").read_text())["wall_time_s"] for d in (tmp_path / "runs" / "s").iterdir()
             if models[1].deployment.replace("/", "_") in d.name]
    assert gpu["cost_basis"] == "gpu time" and gpu["gpu_s"] == pytest.approx(sum(walls))
    assert gpu["cost_usd"] == pytest.approx(3.6 * 2 * sum(walls) / 3600)
    row = board[models[0].deployment]
    assert row["cost_per_point"] == pytest.approx(api["cost_usd"] / (row["mean_score"] * 100))


def test_judge_tokens_are_priced_as_the_models_jury_cost_and_shown_apart(tmp_path: Path) -> None:
    from medhelm.store.synthetic import JUDGES

    models = default_models(2)
    benchmarks = [b for b in catalogue() if b.main_metric == "jury_score"][:1] + catalogue(1)
    write_suite(tmp_path, "s", models, benchmarks, 10)
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n" + "".join(f"  - deployment: {m.deployment}\n    input_per_million: 1.0\n"
                                            f"    output_per_million: 2.0\n" for m in models)
                      + "".join(f"  - deployment: {j}\n    input_per_million: {3.0 * (i + 1)}\n"
                                f"    output_per_million: {10.0 * (i + 1)}\n" for i, j in enumerate(JUDGES)))
    code, out, err = run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--prices", str(prices),
                             "--bootstrap", "0")
    assert code == 0, err
    with open_store(tmp_path / "results.sqlite") as store:
        m = {r["deployment"]: r for r in read.models(store, "s")}
        board = {r["deployment"]: r for r in read.stored_leaderboard(store, "s")}
    for model in models:
        row = m[model.deployment]
        assert row["judge_prompt_tokens"] > 0
        own = (row["prompt_tokens"] * 1.0 + row["completion_tokens"] * 2.0) / 1e6
        # the judges share each record's jury usage equally, each at its own price
        jury = sum((row["judge_prompt_tokens"] * 3.0 * (i + 1) + row["judge_completion_tokens"] * 10.0 * (i + 1))
                   / len(JUDGES) / 1e6 for i in range(len(JUDGES)))
        assert row["cost_usd"] == pytest.approx(own) and row["jury_cost_usd"] == pytest.approx(jury, rel=1e-3)
        lb = board[model.deployment]
        assert lb["cost_per_point"] == pytest.approx((own + jury) / (lb["mean_score"] * 100), rel=1e-3)
        assert f"{own:.4f} {jury:.4f}".replace(" ", "") in out.replace(" ", "")
    assert "candidate USD" in out and "jury USD" in out
    # a judge without a price: the jury cost is unknown, never 0, and the candidate cost still counts
    prices.write_text("prices:\n" + "".join(f"  - deployment: {m.deployment}\n    input_per_million: 1.0\n"
                                            for m in models))
    code, out, err = run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--prices", str(prices),
                             "--bootstrap", "0")
    assert code == 0, err
    with open_store(tmp_path / "results.sqlite") as store:
        assert all(r["jury_cost_usd"] is None and r["cost_usd"] > 0 for r in read.models(store, "s"))
    assert "no price" in out


def test_an_older_store_gains_the_jury_cost_column_on_its_next_summarize(tmp_path: Path) -> None:
    import sqlite3

    write_suite(tmp_path, "s", default_models(2), catalogue(2), 5)
    assert run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--bootstrap", "0")[0] == 0
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    conn.execute("ALTER TABLE models DROP COLUMN jury_cost_usd")  # as written before the column existed
    conn.execute("UPDATE meta SET value = '1' WHERE release = '' AND key = 'schema_version'")  # (schema v1)
    conn.commit()
    conn.close()
    with open_store(tmp_path / "results.sqlite") as store:
        assert "jury_cost_usd" not in store.columns("models")
    assert run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--bootstrap", "0")[0] == 0
    with open_store(tmp_path / "results.sqlite") as store:
        assert "jury_cost_usd" in store.columns("models")


@pytest.mark.parametrize("content, message", [
    ("prices: [{deployment: x}]\n", "needs input_per_million"),
    ("prices: [{deployment: x, gpu_hour: -1}]\n", ":1: field 'prices[0].gpu_hour': input should be greater than or "
                                                  "equal to 0"),
    ("prices: {a: 1}\n", ":1: field 'prices': must be a list"),
    ("prices:\n  - deployment: x\n    gpu_hour: .nan\n", ":3: field 'prices[0].gpu_hour': must be a finite number"),
    ("prices:\n  - deployment: x\n    gpu_hour: '2'\n", ":3: field 'prices[0].gpu_hour': must be a number"),
    ("prices:\n  - deployment: x\n    gpu_hours: 2\n", ":3: field 'prices[0].gpu_hours': unknown key (allowed: "
                                                    "deployment, model, input_per_million"),
    ("prices:\n  - {deployment: x, gpu_hour: 1}\n  - {deployment: x, gpu_hour: 2}\n", ":3: field 'prices[1]': a "
                                                                                      "second price for 'x'"),
    ("", "expected a list under the key 'prices'"),
])
def test_bad_prices_are_one_line_errors(tmp_path: Path, content: str, message: str) -> None:
    write_suite(tmp_path, "s", default_models(2), catalogue(1), 3)
    (tmp_path / "p.yaml").write_text(content)
    code, out, err = run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--prices", str(tmp_path / "p.yaml"))
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "results.sqlite").exists()  # inputs are checked before the store is touched


def test_bad_inputs_exit_2_and_leave_the_previous_release_intact(tmp_path: Path) -> None:
    write_suite(tmp_path, "s", default_models(3), catalogue(2), 12)
    assert run_cli("summarize", "--suites", "s", "-o", str(tmp_path))[0] == 0
    with open_store(tmp_path / "results.sqlite") as store:
        before = read.stored_leaderboard(store, "s")
    code, _, err = run_cli("summarize", "--suites", "missing", "-o", str(tmp_path))
    assert code == 2 and "runs/missing: suite folder not found" in err
    code, _, err = run_cli("summarize", "-o", str(tmp_path))
    assert code == 2 and "--suites" in err
    victim = sorted((tmp_path / "runs" / "s").iterdir())[-1] / "instances.jsonl"
    lines = victim.read_text().splitlines()
    victim.write_text("\n".join(lines[:5] + ['{"run": "torn', *lines[6:]]) + "\n")
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(tmp_path))
    assert code == 2 and f"{victim}:6: bad instance record" in err and err.count("\n") == 1
    assert "Synthetic" not in err  # never instance text in an error
    with open_store(tmp_path / "results.sqlite") as store:
        assert read.stored_leaderboard(store, "s") == before  # rolled back: nothing half-written
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--store", "postgresql://nobody@127.0.0.1:1/x")
    assert code == 2 and "cannot connect to the results store" in err and err.count("\n") == 1


def test_export_redacted_bundle_has_aggregates_only(small_output: Path, tmp_path: Path) -> None:
    code, out, err = run_cli("export", str(tmp_path / "bundle"), "--redact", "-o", str(small_output))
    assert code == 0 and "aggregates only" in out and "warning" not in err
    files = {p.name for p in (tmp_path / "bundle").iterdir()}
    assert {"results.sqlite", "leaderboard.csv", "cells.csv", "group_scores.csv", "models.csv",
            "manifest.json"} <= files
    raw = b"".join(p.read_bytes() for p in (tmp_path / "bundle").iterdir())
    assert b"Synthetic question" not in raw and b"id00001" not in raw and b"judge-a found" not in raw
    with open_store(tmp_path / "bundle" / "results.sqlite") as bundle, \
            open_store(small_output / "results.sqlite") as store:
        assert bundle.query("SELECT COUNT(*) FROM instances")[0][0] == 0
        assert read.stored_leaderboard(bundle, "local") == read.stored_leaderboard(store, "local")
        assert read.load_cells(bundle, "local").replicates.shape == read.load_cells(store, "local").replicates.shape
    rows = list(csv.DictReader(open(tmp_path / "bundle" / "leaderboard.csv")))
    assert [r["model"] for r in rows][:1] and len(rows) == 4


def test_export_with_instances_warns_and_zip(small_output: Path, tmp_path: Path) -> None:
    code, out, err = run_cli("export", str(tmp_path / "full.zip"), "-o", str(small_output))
    assert code == 0 and "warning: without --redact" in err and "720 instances included" in out
    assert (tmp_path / "full.zip").is_file() and not (tmp_path / "full").exists()
    code, _, err = run_cli("export", str(tmp_path / "x"), "--release", "nope", "-o", str(small_output))
    assert code == 2 and "unknown release 'nope'" in err


def test_no_bootstrap_gives_point_estimates_without_intervals(tmp_path: Path) -> None:
    write_suite(tmp_path, "s", default_models(3), catalogue(3), 10)
    assert run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--bootstrap", "0")[0] == 0
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(tmp_path), "--bootstrap", "-1")
    assert code == 2 and "argument --bootstrap: expected an integer from 0 to 100000" in err and err.count("\n") == 1
    with open_store(tmp_path / "results.sqlite") as store:
        board = read.stored_leaderboard(store, "s")
        cells = read.cells(store, "s")
    assert [r["rank"] for r in board] == [1, 2, 3] and board[0]["win_rate"] == 1.0
    assert all(r["win_rate_low"] is None and r["rank_low"] is None for r in board)
    assert all(c["value"] is not None and c["ci_low"] is None for c in cells)
