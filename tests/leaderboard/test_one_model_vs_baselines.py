"""One model and the reference baselines, end to end: the embedded model (SmolLM2-135M-Instruct, llama.cpp)
run on the yes/no example through its .conf file, which names the random and majority baselines beside it,
then plain ``medhelm summarize`` (no --rank-baselines). A lone model has no win rate (it is the share of
other models it beats), so the summary says why in one line and shows where it stands: how many of the
baselines it beats head to head, with the bootstrap interval — the same text on the dashboard. The count is
checked against the runs' own stats (one shared benchmark: beaten = a strictly higher exact_match)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medhelm.rundir import RunDir
from tests.leaderboard.helpers import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.embedded]
MODEL = "local/smollm2-135m-instruct"
APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    root = tmp_path_factory.mktemp("lone")
    code, _, err = run_cli("run", "--conf-paths", str(repo_root / "examples" / "exact_match_demo" / "exact_match_demo.conf"),
                           "--suite", "demo", "--max-eval-instances", "6", "--num-output-tokens", "4", "-q",
                           "-o", str(root / "out"), "--local-path", str(root / "prod_env"))
    assert code == 0, err
    return root


def _main_metric(root: Path) -> dict[str, float]:
    """Each run's exact_match mean from its stats.json (deployment -> value)."""
    out = {}
    for path in (root / "out" / "runs" / "demo").iterdir():
        run = RunDir(path)
        (em,) = [s for s in run.stats() if s.name == "exact_match"]
        out[run.spec().deployment] = em.mean
    return out


def _summarize(root: Path, store: str, *flags: str) -> list[str]:
    code, out, err = run_cli("summarize", "--suite", "demo", "-o", str(root / "out"), "--local-path",
                             str(root / "prod_env"), "--store", f"sqlite:///{root / store}", "--bootstrap", "200",
                             *flags)
    assert code == 0, err
    return out.splitlines()


def test_lone_model_is_placed_against_the_baselines(demo: Path, dashboard_env) -> None:
    scores = _main_metric(demo)
    assert set(scores) == {MODEL, "baseline/random", "baseline/majority"}
    beaten = sum(scores[MODEL] > scores[b] for b in ("baseline/random", "baseline/majority"))

    lines = _summarize(demo, "apart.sqlite")
    header, model_row, *rest = lines[1:]
    assert "vs baselines (95% CI)" in header
    assert model_row.split()[:4] == ["-", "none:", "one", "model"] and f"[{MODEL}]" in model_row
    standing = re.search(r"beats (\d) of 2 \((\d)-(\d)\)", model_row)
    assert standing and int(standing.group(1)) == beaten, (model_row, scores)
    assert int(standing.group(2)) <= beaten <= int(standing.group(3))
    assert [line.split()[0] for line in rest[:2]] == ["base", "base"]  # the baselines after the model
    (why,) = [line for line in rest if "win rate" in line]
    assert "needs two" in why and "'vs baselines' counts the baselines" in why and why == lines[-1]
    assert not any(re.search(r"^\s+-\s+-\s", line) for line in lines)  # the old "-  -" row

    # ranked with the baselines (the quickstart's way): a rank, and the same standing
    ranked = _summarize(demo, "ranked.sqlite", "--rank-baselines")
    (row,) = [line for line in ranked if f"[{MODEL}]" in line]
    assert re.match(r"\s+[1-3]\s+\d\.\d{3} ", row) and standing.group(0) in row
    assert not any("needs two" in line for line in ranked)

    # the dashboard shows the same text for the same store
    os.environ["MEDHELM_STORE"] = str(demo / "apart.sqlite")
    for key in ("MEDHELM_RELEASE", "MEDHELM_REDACTED"):
        os.environ.pop(key, None)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    board = at.dataframe[0].value
    by_deployment = dict(zip(board["Deployment"], board["Vs baselines"]))
    assert by_deployment[MODEL] == standing.group(0)
    assert by_deployment["baseline/random"] == by_deployment["baseline/majority"] == "–"
    notes = " ".join(i.value for i in at.info)
    assert "nothing for it to win against" in notes and "\"Vs baselines\" says where it stands" in notes
    assert board.loc[board["Deployment"] == MODEL, "Mean win rate"].isna().all()
