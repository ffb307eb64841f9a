"""Real `medhelm run` output (the lead's pipeline, models and judges on the mock OpenAI server) through
`medhelm summarize` and the dashboard's drill-down: our reader against the writer, not against our own
synthetic generator."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medhelm.access import Principal
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.store import open_store, read
from tests.leaderboard.helpers import run_cli

EXAMPLES = Path(__file__).parents[2] / "examples"
CRITERIA = ("faithfulness", "completeness", "safety", "clarity", "conciseness")
JUDGE_SCORES = {"judge-a": 4, "judge-b": 2}


def responder(body: dict) -> str:
    model = body["model"]
    if model in JUDGE_SCORES:
        s = JUDGE_SCORES[model]
        verdict = {c: {"score": s, "explanation": f"{model} gives {s}"} for c in CRITERIA}
        return f"<rubric_criteria>{json.dumps(verdict)}</rubric_criteria>"
    if model == "yes-model":
        return "Yes"
    if model == "no-model":
        return "No"
    return "Take your medicines and come back in a week."


@pytest.fixture(scope="module")
def pipeline_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pipe")
    local = root / "prod_env"
    local.mkdir()
    with MockOpenAIServer(responder=responder) as srv:
        deps = "".join(f"  - name: mock/{m}\n    model_name: test/{m}\n    kind: openai\n    base_url: {srv.base_url}\n"
                       f"    served_model_name: {m}\n    max_sequence_length: 4096\n"
                       for m in ("yes-model", "no-model", "writer", "judge-a", "judge-b"))
        (local / "model_deployments.yaml").write_text("model_deployments:\n" + deps)
        jury_dir = EXAMPLES / "llm_jury_score_demo"
        jury_cfg = root / "jury.yaml"
        jury_cfg.write_text(
            "name: JURY-E2E\ndescription: jury end to end\n"
            f"prompt_file: {jury_dir / 'llm_jury_score_demo_prompt.txt'}\n"
            f"dataset_file: {jury_dir / 'llm_jury_score_demo_dataset.csv'}\nmax_tokens: 60\n"
            "metrics:\n  - name: jury_score\n"
            f"    prompt_file: {jury_dir / 'llm_jury_score_demo_judge_prompt.txt'}\n"
            "    judges:\n      - {name: mock/judge-a, model_name: test/judge-a}\n"
            "      - {name: mock/judge-b, model_name: test/judge-b}\n")
        em_cfg = EXAMPLES / "exact_match_demo" / "exact_match_demo.yaml"
        entries = [f"medhelm_configurable_benchmark:model=test/{m},model_deployment=mock/{m},config_path={em_cfg}"
                   for m in ("yes-model", "no-model")]
        entries.append(f"medhelm_configurable_benchmark:model=test/writer,model_deployment=mock/writer,"
                       f"config_path={jury_cfg}")
        code, out, err = run_cli("run", "--run-entries", *entries, "--suite", "e2e", "-o", str(root / "out"),
                                 "--local-path", str(local), "-q")
        assert code == 0, err
    return root


def test_pipeline_runs_summarize_into_the_expected_leaderboard(pipeline_output: Path) -> None:
    out = pipeline_output / "out"
    code, stdout, err = run_cli("summarize", "--suites", "e2e", "-o", str(out), "--local-path",
                                str(pipeline_output / "prod_env"), "--bootstrap", "200")
    assert code == 0, err
    rows = list(csv.DictReader(open(EXAMPLES / "exact_match_demo" / "exact_match_demo_dataset.csv")))
    yes_share = sum(r["correct_answer"] == "Yes" for r in rows) / len(rows)
    with open_store(out / "results.sqlite") as store:
        cells = {(c["benchmark"], c["deployment"]): c for c in read.cells(store, "e2e")}
        benches = {b["benchmark"]: b for b in read.benchmarks(store, "e2e")}
        board = read.stored_leaderboard(store, "e2e")
        em = [b for b in benches if b.upper().startswith("EXACT")][0]
        jury = [b for b in benches if b.upper().startswith("JURY")][0]
        assert cells[(em, "mock/yes-model")]["value"] == pytest.approx(yes_share)
        assert cells[(em, "mock/no-model")]["value"] == pytest.approx(1 - yes_share)
        assert cells[(em, "mock/yes-model")]["n_instances"] == len(rows)
        # jury: judges say 4 and 2 on a 0-5 scale -> (0.8 + 0.4) / 2 on the leaderboard's 0-1 column
        assert benches[jury]["main_metric"] == "jury_score_normalized"
        assert cells[(jury, "mock/writer")]["value"] == pytest.approx(0.6)
        winners = {"mock/yes-model"} if yes_share > 0.5 else {"mock/no-model"} if yes_share < 0.5 else \
            {"mock/yes-model", "mock/no-model"}  # a tie counts half for each: both rank 1
        assert {r["deployment"] for r in board if r["rank"] == 1} == winners
        writer = next(r for r in board if r["deployment"] == "mock/writer")
        assert writer["win_rate"] is None and writer["rank"] is None  # alone on its benchmark: not ranked
        run = read.runs(store, "e2e", jury)[0]
        item = read.instances_page(store, run["run_id"], principal=Principal.local(), limit=1)[0]
        assert item["output"] == "Take your medicines and come back in a week."
        assert {(j["judge"], j["score"]) for j in item["judgements"]} >= {("mock/judge-a", 4.0),
                                                                        ("mock/judge-b", 2.0)}
        assert any("judge-a gives 4" in (j.get("explanation") or "") for j in item["judgements"])
        assert "discharge summary" in item["prompt"]
        em_run = next(r for r in read.runs(store, "e2e", em) if r["deployment"] == "mock/yes-model")
        em_item = read.instances_page(store, em_run["run_id"], principal=Principal.local(), limit=1)[0]
        gold = next(r["text"] for r in em_item["references"] if r["correct"])
        assert em_item["output"] == "Yes" and em_item["main_value"] == (1.0 if gold == "Yes" else 0.0)
