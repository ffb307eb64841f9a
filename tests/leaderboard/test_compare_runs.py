"""The gate on real runs: `medhelm run` evaluates the same deployment twice through the mock OpenAI server
(the "weights" behind it change between the runs), `medhelm summarize` makes two releases, and the
`medhelm compare` process exits 3 on the regression, 0 on a re-run that did not change, 2 on bad input —
what a model-release pipeline sees."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from tests.leaderboard.compare_helpers import binom_two_sided
from tests.leaderboard.helpers import run_cli

ROWS = 40
ITEM = re.compile(r"Is item (\d+) flagged")


def _truth(i: int) -> str:
    return "Yes" if i % 2 == 0 else "No"


def _responder(broken_from: int):  # noqa: ANN202
    """Answers item i correctly, except items >= broken_from (the regressed weights)."""

    def answer(body: dict) -> str:
        text = body["messages"][-1]["content"]
        i = int(ITEM.search(text).group(1))
        right = _truth(i)
        return right if i < broken_from else ("No" if right == "Yes" else "Yes")

    return answer


def _evaluate(root: Path, suite: str, broken_from: int) -> None:
    bench = root / "bench"
    if not bench.exists():
        bench.mkdir()
        (bench / "prompt.txt").write_text("Note: {note}\nQuestion: {question}\nAnswer Yes or No.")
        with open(bench / "dataset.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
            for i in range(ROWS):
                w.writerow([f"{i:04d}", f"note {i}", f"Is item {i} flagged?", _truth(i), "[]"])
        (bench / "bench.yaml").write_text("name: GATE-DEMO\ndescription: gate demo\nprompt_file: prompt.txt\n"
                                          "dataset_file: dataset.csv\nmax_tokens: 2\nmetrics:\n  - name: exact_match\n")
    local = root / f"prod_env_{suite}"  # its own request cache: the new weights are asked again
    local.mkdir()
    with MockOpenAIServer(responder=_responder(broken_from)) as srv:
        (local / "model_deployments.yaml").write_text(
            f"model_deployments:\n  - name: mock/cand\n    model_name: test/cand\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: cand\n    max_sequence_length: 4096\n")
        entry = f"medhelm_configurable_benchmark:model=test/cand,model_deployment=mock/cand," \
                f"config_path={bench / 'bench.yaml'}"
        code, _, err = run_cli("run", "--run-entries", entry, "--suite", suite, "-o", str(root / "out"),
                               "--local-path", str(local), "-q")
        assert code == 0, err
    code, _, err = run_cli("summarize", "--suites", suite, "-o", str(root / "out"), "--bootstrap", "100")
    assert code == 0, err


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gate")
    _evaluate(root, "accepted", broken_from=ROWS)  # every answer right
    _evaluate(root, "candidate", broken_from=30)  # items 30-39 now wrong
    _evaluate(root, "rerun", broken_from=ROWS)  # the same weights again
    return root


def _compare(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "services"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "medhelm", "compare", *argv, "-o", str(root / "out")],
                          capture_output=True, text=True, timeout=120, env=env)


def test_gate_fails_on_the_regressed_weights(releases: Path):
    done = _compare(releases, "--release", "accepted", "--release", "candidate", "--json")
    assert done.returncode == 3, done.stderr
    (row,) = json.loads(done.stdout)["results"]
    assert (row["n_pairs"], row["score_a"], row["score_b"]) == (ROWS, 1.0, 0.75)
    assert (row["a_only_right"], row["b_only_right"]) == (10, 0)
    assert row["p_value"] == pytest.approx(binom_two_sided(10, 0)) == pytest.approx(2 / 2 ** 10)
    assert row["change"] == "drop" and row["gate"]


def test_gate_threshold_and_unchanged_rerun_pass(releases: Path):
    done = _compare(releases, "--release", "accepted", "--release", "candidate", "--threshold", "0.3")
    assert done.returncode == 0, done.stderr
    assert "gate passed" in done.stdout and "DROP" in done.stdout  # reported, below the threshold
    done = _compare(releases, "--release", "accepted", "--suite", "rerun")
    assert done.returncode == 0, done.stderr
    assert "0 significant drop(s)" in done.stdout


def test_gate_bad_input_exits_2(releases: Path):
    done = _compare(releases, "--release", "accepted", "--release", "no-such-release")
    assert done.returncode == 2 and "unknown release" in done.stderr and "Traceback" not in done.stderr
