"""End to end on real data with a real judge: SmolLM2-135M (llama.cpp, in-process) writes ACI-Bench notes
and, as the one-judge embedded jury, scores them with the built-in aci_bench rubric under a JSON grammar.
A 135M model is no clinical judge; this proves the path (prompting, grammar, parsing, records, stats)."""

from __future__ import annotations

import json

import pytest

from medhelm.cli import main
from medhelm.rundir import RunDir
from medhelm.records import JudgeStatus

pytestmark = [pytest.mark.slow, pytest.mark.embedded]


def test_embedded_judge_on_aci_bench(shared_data, tmp_path, capsys):
    entry = "aci_bench:model=local/smollm2-135m-instruct,subset=clinicalnlp_taskB_test1,jury_config_path=embedded"
    code = main(["run", "-r", entry, "--data-dir", str(shared_data), "--offline", "-m", "1", "--suite", "e2e",
                 "-o", str(tmp_path / "out"), "--local-path", str(tmp_path / "prod_env"),
                 "--num-output-tokens", "40", "-q"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # the candidate is its own judge here: the self-preference guard says so
    assert "judge 'local/smollm2-135m-instruct' is the model under evaluation" in captured.err

    [path] = list((tmp_path / "out" / "runs" / "e2e").iterdir())
    records = list(RunDir(path).iter_records())
    assert len(records) == 1
    for r in records:
        assert r.completion.text.strip()
        assert [j.criterion for j in r.judgements] == ["accuracy", "completeness", "clarity"]
        assert {j.judge for j in r.judgements} == {"local/smollm2-135m-instruct"}
        for j in r.judgements:
            if j.status is JudgeStatus.OK:
                assert isinstance(j.score, int) and 1 <= j.score <= 5 and j.explanation
            else:  # unscored is recorded with its reason, never as a number
                assert j.score is None and j.explanation.startswith("unscored:")
        valid = [j for j in r.judgements if j.status is JudgeStatus.OK]
        assert r.stats["jury_coverage"] == pytest.approx(len(valid) / 3)
        assert r.judge_usage.prompt_tokens > 1000  # the dialogue, the note and the gold note were all shown
    # under the JSON grammar the tiny judge does produce readable verdicts
    assert records[0].stats["jury_score"] is not None

    assert main(["jury", "stats", "--run-dir", str(path), "--json", "--bootstrap", "50"]) == 0
    summary = json.loads(capsys.readouterr().out)["runs"][0]["summary"]
    assert summary["instances"] == 1 and summary["judge_prompt_tokens"] > 1000
