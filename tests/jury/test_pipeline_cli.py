"""A jury benchmark through the real pipeline (`medhelm run`), then `medhelm jury stats` and
`medhelm jury calibrate` on the run directory it wrote. Candidate and judges are scripted on the mock server."""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest

from medhelm.cli import main
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.rundir import RunDir
from medhelm.scoring.jury import agreement as ag
from medhelm.scoring.jury.summary import judge_agreement, summarize

from .conftest import SEEDS_PROMPT, write_judges

ROWS = 12


def quality(text: str) -> int:
    """A per-instance 'true quality' both judges see (0-5), so they agree up to noise."""
    return int(hashlib.sha256(text.strip().encode()).hexdigest(), 16) % 6


def responder(body: dict) -> str:
    text = body["messages"][-1]["content"]
    model = body["model"]
    if model == "candidate":
        return "" if "patient 0003" in text else f"Summary. {text}"
    response = text.split("<RESPONSE>")[1].split("</RESPONSE>")[0].strip()
    q = quality(response)
    if model == "judge-b" and "patient 0007" in response:
        return "no idea"  # judge B fails on one instance (both attempts)
    delta = 1 if model == "judge-b" and q < 5 else 0  # judge B is a little more lenient
    return json.dumps({"faithfulness": {"score": q, "explanation": "f"},
                       "safety": {"score": min(q + delta, 5), "explanation": "c"}})


@pytest.fixture
def suite(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "prompt.txt").write_text("Write a summary for patient {patient_id}: {note}")
    (bench / "judge.txt").write_text(SEEDS_PROMPT)
    with open(bench / "data.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note"])
        for i in range(ROWS):
            w.writerow([f"{i:04d}", f"Synthetic admission {i} for pneumonia, day {i % 5}."])
    (bench / "bench.yaml").write_text(
        "name: JURY-DEMO\ndescription: jury demo\nprompt_file: prompt.txt\ndataset_file: data.csv\n"
        "max_tokens: 50\nmetrics:\n  - name: jury_score\n    prompt_file: judge.txt\n    judges:\n"
        "      - name: mock/judge-a\n        model_name: test/judge-a\n"
        "      - name: mock/judge-b\n        model_name: test/judge-b\n")
    with MockOpenAIServer(responder=responder) as srv:
        write_judges(tmp_path / "prod_env", srv.base_url, names=("judge-a", "judge-b", "candidate"))
        entry = f"medhelm_configurable_benchmark:model=mock/candidate,config_path={bench / 'bench.yaml'}"
        assert main(["run", "-r", entry, "--suite", "s", "-o", str(tmp_path / "out"), "--local-path",
                     str(tmp_path / "prod_env"), "-q"]) == 0
        yield {"out": tmp_path / "out", "server": srv, "tmp": tmp_path}


def run_dir(suite) -> RunDir:
    [path] = [p for p in (suite["out"] / "runs" / "s").iterdir() if p.is_dir()]
    return RunDir(path)


def test_records_stats_and_run_summary(suite):
    rd = run_dir(suite)
    records = list(rd.iter_records())
    assert len(records) == ROWS
    empty = [r for r in records if r.instance.extra.get("patient_id") == "0003" or not r.completion.text]
    assert len(empty) == 1 and empty[0].stats["jury_score"] == 0.0  # the rubric minimum, with its reason
    failed = [j for r in records for j in r.judgements if j.status.value == "unscored"]
    assert len(failed) == 2 and {j.judge for j in failed} == {"mock/judge-b"}
    [main_stat] = [s for s in rd.stats() if s.name == "jury_score_normalized"]
    assert main_stat.count == ROWS and main_stat.unscored == 0
    assert any(s.name == "judge_prompt_tokens" and s.sum > 0 for s in rd.stats())

    summary = summarize(records, n_boot=200)
    assert summary.instances == ROWS and summary.empty_responses == 1 and summary.unscored_instances == 0
    assert summary.jury_score_normalized.value == pytest.approx(main_stat.mean)
    assert summary.jury_score.low <= summary.jury_score.value <= summary.jury_score.high
    b_faith = next(c for c in summary.counts if (c.judge, c.criterion) == ("mock/judge-b", "faithfulness"))
    assert (b_faith.requested, b_faith.ok, b_faith.unscored, b_faith.error) == (ROWS - 1, ROWS - 2, 1, 0)
    assert b_faith.failure_rate == pytest.approx(1 / (ROWS - 1))
    assert summary.judge_prompt_tokens > 0 and summary.judge_completion_tokens > 0

    agreement = judge_agreement(records, n_boot=200)
    assert agreement.judges == ("mock/judge-a", "mock/judge-b")
    faith = next(c for c in agreement.criteria if c.criterion == "faithfulness")
    assert faith.exact_agreement.value == 1.0 and faith.mean_abs_difference.value == 0.0
    # the judges' scores as the responder gives them (0-1 scale): B is +1 on safety, fails on patient 0007
    rows = []
    for r in records:
        if r.completion.text:
            q = quality(r.completion.text)
            b_fails = "patient 0007" in r.completion.text
            rows += [[q / 5, np.nan if b_fails else q / 5], [q / 5, np.nan if b_fails else min(q + 1, 5) / 5]]
    expected = np.array(rows)
    assert agreement.targets == len(expected) == 2 * (ROWS - 1)
    assert agreement.icc2_1.n == len(expected) - 2
    assert agreement.icc2_1.value == pytest.approx(ag.icc_value(expected, "2,1"), abs=1e-12)
    assert agreement.icc3_k.value == pytest.approx(ag.icc_value(expected, "3,k"), abs=1e-12)
    assert agreement.alpha_ordinal.value == pytest.approx(ag.krippendorff_alpha(expected.T, "ordinal"), abs=1e-12)
    assert agreement.icc2_1.value < agreement.icc3_k.value < 1.0  # B's leniency costs absolute agreement
    assert agreement.pairs[0].spearman.value == pytest.approx(ag.spearman(expected[:, 0], expected[:, 1]))


def test_jury_stats_cli_text_and_json(suite, capsys):
    rd = run_dir(suite)
    assert main(["jury", "stats", "--run-dir", str(rd.path), "--bootstrap", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [run] = out["runs"]
    assert run["summary"]["instances"] == ROWS and run["agreement"]["judges"] == ["mock/judge-a", "mock/judge-b"]
    assert main(["jury", "stats", "--suite", "s", "-o", str(suite["out"]), "--bootstrap", "100"]) == 0
    text = capsys.readouterr().out
    assert "ICC(2,1)" in text and "Krippendorff alpha (ordinal)" in text and "mock/judge-b" in text
    assert "Synthetic admission" not in text  # never instance text


def test_jury_calibrate_cli(suite, capsys):
    rd = run_dir(suite)
    records = {r.instance.id: r for r in rd.iter_records()}
    ratings = suite["tmp"] / "ratings.csv"
    with open(ratings, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["instance_id", "rater", "criterion", "score"])
        for iid, r in records.items():
            if not r.completion.text:
                continue
            q = quality(r.completion.text)
            w.writerow([iid, "dr_a", "Faithfulness", q])  # criterion names match case-insensitively
            w.writerow([iid, "dr_b", "faithfulness", max(q - 1, 0)])
        w.writerow(["not-in-run", "dr_a", "faithfulness", 3])
    assert main(["jury", "calibrate", "--ratings", str(ratings), "--run-dir", str(rd.path), "--json",
                 "--bootstrap", "100"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["clinicians"] == ["dr_a", "dr_b"] and rep["unmatched"] == 1 and rep["targets"] == ROWS - 1
    # expected values straight from the ratings we wrote (rows in the run's order)
    q = np.array([quality(r.completion.text) for r in records.values() if r.completion.text], dtype=float)
    clinicians = np.column_stack([q, np.maximum(q - 1, 0)])
    assert rep["clinician_icc2_1"]["value"] == pytest.approx(ag.icc_value(clinicians, "2,1"), abs=1e-12)
    assert rep["clinician_icc2_k"]["value"] == pytest.approx(ag.icc_value(clinicians, "2,k"), abs=1e-12)
    # both judges give q on faithfulness (judge B's failure leaves judge A alone there): jury mean = q
    jury_vs = np.column_stack([q, clinicians.mean(axis=1)])
    assert rep["jury_icc2_1"]["value"] == pytest.approx(ag.icc_value(jury_vs, "2,1"), abs=1e-12)
    a = next(j for j in rep["judges"] if j["judge"] == "mock/judge-a")
    assert a["bias"]["value"] == pytest.approx(float(np.mean(q - clinicians.mean(axis=1))))
    assert a["bias"]["value"] > 0  # this judge is more lenient than the clinicians


def test_calibrate_errors_are_one_line(suite, capsys):
    rd = run_dir(suite)
    bad = suite["tmp"] / "bad.csv"
    bad.write_text("instance_id,rater,criterion,score\nx,dr,faithfulness,high\n")
    assert main(["jury", "calibrate", "--ratings", str(bad), "--run-dir", str(rd.path)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv:2: field 'score': score is not a number" in err and err.count("\n") == 1
    iid = next(r.instance.id for r in rd.iter_records() if r.completion.text)
    bad.write_text(f"instance_id,rater,criterion,score\n{iid},dr,faithfulness,9\n")
    assert main(["jury", "calibrate", "--ratings", str(bad), "--run-dir", str(rd.path)]) == 2
    assert "outside the rubric's 0-5" in capsys.readouterr().err
    assert main(["jury", "stats", "--run-dir", str(suite["tmp"])]) == 2
    assert "not a run directory" in capsys.readouterr().err
