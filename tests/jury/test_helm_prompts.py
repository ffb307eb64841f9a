"""The HELM style of a built-in rubric against crfm-helm 0.5.16 itself (the oracle): every upstream jury
benchmark's annotator prompt byte for byte, its criteria, the prompt as HELM's LLMAsJuryAnnotator fills it, its
request settings, and which judge outputs HELM's parse keeps (with the scores it keeps)."""

from __future__ import annotations

import json
import subprocess

import pytest

from medhelm.scoring.jury import rubrics
from medhelm.scoring.jury.parse import Quoted, parse_as_helm
from tests.upstream_medhelm import JURY_SCORED

# Filled values HELM's string.Template and our one-pass fill must treat alike: a dollar, a placeholder in an answer.
VALUES = {"QUESTION": "Doctor: pain $5 {RESPONSE}?", "RESPONSE": "Note: $QUESTION and {GOLD_RESPONSE}\n",
          "GOLD_RESPONSE": "gold {QUESTION} $$"}
OUTPUTS = [
    '{"accuracy": {"score": 4, "explanation": "ok"}, "completeness": {"score": 3, "explanation": "ok"}, '
    '"clarity": {"score": 5, "explanation": "ok"}}',
    'Here: {"accuracy": {"score": "2", "explanation": "a"}, "completeness": {"score": 3, "explanation": "b"}, '
    '"clarity": {"score": 1, "explanation": "c"}} done',
    '{"accuracy": {"score": 4, "explanation": "ok"}, "completeness": {"score": 3, "explanation": "ok"}, '
    '"clarity": {"score": 5, "explanation": "ok"}',  # the last brace missing: HELM's repair
    '{"accuracy": {"score": 4, "explanation": "ok"}, "completeness": {"score": 3, "explanation": "ok"}}',
    "I would rather not grade this note.",
]

HELM_SIDE = r"""
import importlib, json, sys
from types import SimpleNamespace
from helm.benchmark.annotation.model_as_judge import AnnotatorModelInfo
names, values, outputs = json.loads(sys.stdin.read())
out = {"prompts": {}, "filled": {}, "parsed": [], "request": None}
class Client:
    def make_request(self, request):
        out["request"] = [request.max_tokens, request.temperature, request.stop_sequences]
        return SimpleNamespace(success=True, completions=[SimpleNamespace(text=self.text)])
client = Client()
state = SimpleNamespace(instance=SimpleNamespace(input=SimpleNamespace(text=values["QUESTION"]),
                        references=[SimpleNamespace(output=SimpleNamespace(text=values["GOLD_RESPONSE"]))]),
                        result=SimpleNamespace(completions=[SimpleNamespace(text=values["RESPONSE"])]))
for n in names:
    m = importlib.import_module(f"helm.benchmark.annotation.{n}_annotator")
    cls = next(v for k, v in vars(m).items() if k.endswith("Annotator") and k != "LLMAsJuryAnnotator")
    ann = cls(auto_client=client, annotator_models={"j": AnnotatorModelInfo("m/j", "m/j")})
    out["prompts"][n] = [m.PROMPT_TEMPLATE, list(m.ANNOTATION_CRITERIA)]
    out["filled"][n] = ann._interpolate_prompt(state)
    if n == "aci_bench":
        for text in outputs:
            client.text = text
            got = ann._annotate_with_model("p", AnnotatorModelInfo("m/j", "m/j"), "j")
            out["parsed"].append(None if got is None else {k: int(v["score"]) for k, v in got.items()})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def helm_says(helm_python) -> dict:  # noqa: F811
    names = sorted(JURY_SCORED)
    done = subprocess.run([str(helm_python), "-c", HELM_SIDE], input=json.dumps([names, VALUES, OUTPUTS]),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_upstream_jury_benchmark_has_helms_prompt_byte_for_byte(helm_says):
    assert set(helm_says["prompts"]) == set(JURY_SCORED) == set(rubrics._helm_doc()["prompts"])
    for name, (template, criteria) in helm_says["prompts"].items():
        rubric = rubrics.helm(name)
        assert rubric.template == template, name
        assert rubric.criteria == tuple(criteria), name


def test_the_prompt_is_filled_as_helms_annotator_fills_it(helm_says):
    for name, filled in helm_says["filled"].items():
        ours = rubrics.helm(name).render(question=VALUES["QUESTION"], response=VALUES["RESPONSE"],
                                         gold=VALUES["GOLD_RESPONSE"])
        assert ours == filled, name


def test_the_request_is_helms(helm_says):
    max_tokens, temperature, stop = helm_says["request"]
    assert rubrics.helm("aci_bench").helm_request == (max_tokens, temperature) and stop == []


def test_the_verdicts_helm_keeps_are_the_ones_we_keep(helm_says):
    rubric = rubrics.helm("aci_bench")
    prompt = rubric.render(question="q", response="r", gold="g")
    for text, helm in zip(OUTPUTS, helm_says["parsed"], strict=True):
        judgement = parse_as_helm(text, rubric, Quoted(prompt))
        ours = {v.criterion: v.score for v in judgement.verdicts} if judgement.complete else None
        assert ours == helm, text


def test_the_style_is_chosen_by_the_jury_and_custom_prompts_keep_their_own():
    assert rubrics.from_args({"rubric": "aci_bench"}, style="helm").helm_request is not None
    assert rubrics.from_args({"rubric": "aci_bench"}, style="rubric") == rubrics.builtin("aci_bench")
    with pytest.raises(Exception, match="unknown jury rubric"):
        rubrics.from_args({"rubric": "nope"}, style="helm")
