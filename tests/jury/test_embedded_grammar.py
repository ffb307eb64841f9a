"""The embedded judge held to the rubric's JSON schema by a llama.cpp grammar: every score it writes is on the
rubric's scale and parses (the demo's jury was unscored when llama-cpp-python dropped the score's range)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from medhelm.benchmarks.base import PromptBudget
from medhelm.deployments import DeploymentRegistry
from medhelm.errors import InferenceError
from medhelm.inference import ClientPool
from medhelm.pipeline import RunOptions, plan_runs
from medhelm.pipeline.sampling import sample_run
from medhelm.runentries import read_conf
from medhelm.scoring import registry
from medhelm.scoring.base import ScoringContext, ScoringItem
from medhelm.specs import Completion

pytestmark = pytest.mark.embedded
llama_cpp = pytest.importorskip("llama_cpp")
from medhelm.inference.llamacpp import schema_grammar  # noqa: E402 - after the skip

DEMO = Path(__file__).parents[2] / "examples" / "llm_jury_score_demo" / "llm_jury_score_demo.conf"
SUMMARIES = (  # what a candidate might write: a fair one, a poor one, an off-topic one
    "You had pneumonia. Take amoxicillin-clavulanate 875/125 mg twice a day for 7 days with your usual metformin "
    "and atorvastatin. Come back if you feel worse. See your doctor in 3 days.",
    "Take your pills.",
    "The weather in Paris is mild in spring.",
)


def _plan(tmp_path: Path):
    options = RunOptions(suite="g", output_path=tmp_path / "out", local_path=tmp_path / "prod_env",
                         max_eval_instances=3, progress=False)
    [plan] = [p for p in plan_runs(read_conf(DEMO), options) if not p.deployment.name.startswith("baseline/")]
    return plan


def test_the_rubric_grammar_allows_only_scores_on_the_scale(tmp_path: Path) -> None:
    [jury] = [m for m in _plan(tmp_path).spec.benchmark.metrics if m.name == "jury_score"]
    metric = registry.build_all([jury], ScoringContext(deployments=DeploymentRegistry.load(), clients=ClientPool()))[0]
    grammar = schema_grammar(metric.schema)._grammar
    for criterion in metric.rubric.criteria:  # the score rule is the scale's values, not any integer
        assert f'{criterion}-score ::= "0" | "1" | "2" | "3" | "4" | "5"' in grammar
    with pytest.raises(InferenceError, match="cannot hold the output to this JSON schema"):
        schema_grammar(json.dumps({"type": "object", "properties": {"x": {"type": "decimal"}}}))  # no silent "any JSON"


def test_the_embedded_judge_scores_every_criterion_within_the_rubric(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    [jury] = [m for m in plan.spec.benchmark.metrics if m.name == "jury_score"]
    instances = sample_run(plan.benchmark, plan.spec)

    async def judge_all():
        pool = ClientPool()
        try:
            [metric] = registry.build_all([jury], ScoringContext(deployments=DeploymentRegistry.load(), clients=pool))
            return [await metric.score(ScoringItem(plan.spec, instance, plan.benchmark.prompt(instance, PromptBudget()),
                                                   Completion(text=summary)))
                    for instance, summary in zip(instances, SUMMARIES)]
        finally:
            await pool.aclose()

    results = asyncio.run(judge_all())
    assert len(results) == 3
    for result in results:
        assert len(result.judgements) == 5
        for j in result.judgements:
            assert j.status.value == "ok", j.explanation  # parsed, on the scale: never "unscored"
            assert 0 <= j.score <= 5 and float(j.score).is_integer()
        assert result.stats["jury_coverage"] == 1.0 and 0.0 <= result.stats["jury_score_normalized"] <= 1.0

