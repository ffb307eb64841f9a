"""End to end on the real embedded model (SmolLM2-135M-Instruct via llama.cpp): the seeds' two example
benchmarks, exact_match and jury_score (the jury is the embedded model too), 2 rows each, 64 output tokens;
then the same again in another process, one request at a time and without the request cache: the same texts
and verdicts.

Size is not the point here (it is the slowest test of the suite): every judge call writes ~350 tokens of
grammar-held JSON (one of SmolLM2's verdicts, five criteria with explanations), twice per instance (the model's
summary and the copy-input baseline's) and again in the second process. Two rows prove the mechanism (sampling
honours --max-eval-instances, stats count the unscored, the determinism check compares 12 texts and their
verdicts across processes) at two thirds of the cost of three."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from medhelm.cli import main
from medhelm.rundir import RunDir

pytestmark = [pytest.mark.slow, pytest.mark.embedded]
N = 2  # rows per benchmark


def _outputs(out) -> dict:
    """Per run and instance: the completion's text and every judge's verdict (what determinism promises)."""
    found = {}
    for path in (out / "runs" / "DEMO").iterdir():
        for r in RunDir(path).iter_records():
            found[(path.name, r.instance.id)] = (r.completion.text, [
                (j.judge, j.criterion, j.status.value, j.score, j.explanation) for j in r.judgements])
    return found


def test_both_examples_on_the_embedded_model(repo_root, tmp_path, capsys):
    ex = repo_root / "examples"
    args = ["run", "--conf-paths", str(ex / "exact_match_demo" / "exact_match_demo.conf"),
            str(ex / "llm_jury_score_demo" / "llm_jury_score_demo.conf"), "--suite", "DEMO",
            "--max-eval-instances", str(N), "--num-output-tokens", "64", "-q"]
    rc = main([*args, "--output-path", str(tmp_path / "out"), "--local-path", str(tmp_path / "prod_env"),
               "--max-concurrency", "4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    all_runs = [RunDir(p) for p in (tmp_path / "out" / "runs" / "DEMO").iterdir()]
    assert sorted(r.spec().deployment for r in all_runs) == sorted(  # the examples name the baselines too
        ["local/smollm2-135m-instruct"] * 2 + ["baseline/random", "baseline/majority", "baseline/empty",
                                               "baseline/copy-input"])
    runs = {r.path.name.split(":")[0]: r for r in all_runs if r.spec().deployment == "local/smollm2-135m-instruct"}
    assert set(runs) == {"EXACT-MATCH-DEMO", "LLM-JURY-SCORE-DEMO"}

    em = runs["EXACT-MATCH-DEMO"]
    records = list(em.iter_records())
    assert len(records) == N and em.status()["status"] == "complete"
    for r in records:
        assert r.completion is not None and r.completion.usage.completion_tokens >= 1
        assert r.stats["exact_match"] in (0.0, 1.0)
    assert any(s.name == "exact_match" and s.count == N for s in em.stats())

    jury = runs["LLM-JURY-SCORE-DEMO"]
    spec = jury.spec()
    [judges] = [m.args["judges"] for m in spec.benchmark.metrics if m.name == "jury_score"]
    records = list(jury.iter_records())
    assert len(records) == N and jury.status()["status"] == "complete"
    for r in records:
        assert r.completion.text.strip(), "the candidate wrote a summary"
        # one score per judge x criterion (5 criteria in the demo rubric), each ok or explicitly unscored
        assert len(r.judgements) == 5 * len(judges)
        assert {j.status.value for j in r.judgements} <= {"ok", "unscored"}
        for j in r.judgements:
            assert (j.score is None) == (j.status.value == "unscored")
            if j.score is not None:
                assert 0 <= j.score <= 5 and j.min_score == 0 and j.max_score == 5
        valid = [j.score for j in r.judgements if j.score is not None]
        assert r.stats["jury_score"] == (pytest.approx(sum(valid) / len(valid)) if valid else None)
        assert r.stats["jury_coverage"] == pytest.approx(len(valid) / len(r.judgements))
        assert r.judge_usage.prompt_tokens > 0
    # the run's stats say how many instances were unscored instead of hiding them as zeros
    [js] = [s for s in jury.stats() if s.name == "jury_score"]
    assert js.count + js.unscored == N
    json.dumps([s.to_json() for s in jury.stats()])

    # Determinism at temperature 0: another process, requests one at a time (so each sees another previous
    # call than above), the request cache off: the same text for every candidate and every judge.
    again = subprocess.run([sys.executable, "-m", "medhelm", *args, "--output-path", str(tmp_path / "again"),
                            "--local-path", str(tmp_path / "env2"), "--max-concurrency", "1", "--disable-cache"],
                           capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not (tmp_path / "env2" / "cache").exists()
    first, second = _outputs(tmp_path / "out"), _outputs(tmp_path / "again")
    assert len(first) == 6 * N and first == second  # 6 runs (the model and the baselines) x N instances
