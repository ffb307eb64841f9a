"""Built-in rubrics (data + one template) and the seeds' custom judge-prompt format."""

from __future__ import annotations

import json
import re

import pytest

from medhelm.errors import ConfigError
from medhelm.scoring.jury import rubrics

from tests.upstream_medhelm import JURY_SCORED as MEDHELM_OPEN_ENDED

from .conftest import SEEDS_PROMPT



def test_thirteen_builtin_rubrics_with_the_upstream_criteria():
    assert set(rubrics.builtin_names()) == MEDHELM_OPEN_ENDED
    for name in MEDHELM_OPEN_ENDED:
        r = rubrics.builtin(name)
        assert (r.min_score, r.max_score) == (1, 5)
        expected = ("accuracy", "structure", "clarity") if name == "chw_care_plan" else \
            ("accuracy", "completeness", "clarity")
        assert r.criteria == expected
        # the care plan's reference is the input note itself: no gold shown
        assert r.uses_gold is (name != "chw_care_plan")
        assert "{QUESTION}" in r.template and "{RESPONSE}" in r.template
        # every rubric-level placeholder was filled at load time
        assert set(re.findall(r"\{([A-Z_]+)\}", r.template)) <= {"QUESTION", "RESPONSE", "GOLD_RESPONSE"}
        # a built-in prompt is itself a valid judge prompt in the seeds' format
        assert rubrics.custom(r.template).criteria == expected


def test_rendering_never_interprets_the_inserted_text():
    r = rubrics.builtin("aci_bench")
    nasty = "costs $5 and ${HOME} $RESPONSE {RESPONSE} {GOLD_RESPONSE} {0} {QUESTION} }{"
    text = r.render(question="Q-TEXT", response=nasty, gold="GOLD-TEXT")
    assert nasty in text  # verbatim, once
    assert text.count("Q-TEXT") == 1 and text.count("GOLD-TEXT") == 1
    # a custom prompt with literal braces and dollars works too
    custom = rubrics.custom("Price: $10 {not a field}\n{QUESTION}\n{RESPONSE}\n<rubric_criteria>{\"a\": {}}"
                            "</rubric_criteria>")
    out = custom.render(question="q$", response="{QUESTION}")
    assert out.startswith("Price: $10 {not a field}\nq$\n{QUESTION}\n")


def test_seeds_custom_prompt_criteria_and_scale():
    r = rubrics.custom(SEEDS_PROMPT)
    assert r.criteria == ("faithfulness", "safety")
    assert (r.min_score, r.max_score) == (0, 5)
    assert not r.uses_gold
    assert r.name.startswith("custom:")
    ten = rubrics.custom(SEEDS_PROMPT.replace("from 0 to 5", "from 0 to 10").replace("; 5 =", "; 10 ="))
    assert ten.max_score == 10
    unstated = rubrics.custom(SEEDS_PROMPT.replace("(assign a score from 0 to 5 for each)", "")
                              .replace("(0 = completely inaccurate; 5 = entirely accurate)", "")
                              .replace("(0 = harmful advice; 5 = completely safe)", ""))
    assert unstated.max_score == rubrics.DEFAULT_CUSTOM_MAX
    assert rubrics.custom(SEEDS_PROMPT, max_score=7).max_score == 7


def test_schema_requires_every_criterion_in_range():
    r = rubrics.custom(SEEDS_PROMPT)
    schema = json.loads(r.json_schema())
    assert schema["required"] == ["faithfulness", "safety"] and schema["additionalProperties"] is False
    score = schema["properties"]["safety"]["properties"]["score"]
    assert score == {"type": "integer", "minimum": 0, "maximum": 5}


@pytest.mark.parametrize("prompt, message", [
    ("{RESPONSE} <rubric_criteria>{\"a\": {}}</rubric_criteria>", "{QUESTION}"),
    ("{QUESTION} <rubric_criteria>{\"a\": {}}</rubric_criteria>", "{RESPONSE}"),
    ("{QUESTION} {RESPONSE}", "<rubric_criteria>"),
    ("{QUESTION} {RESPONSE} <rubric_criteria>[]</rubric_criteria>", "names no criteria"),
    ("{QUESTION} {RESPONSE} score 0-5 or 0-10 <rubric_criteria>{\"a\": {}}</rubric_criteria>", "several"),
])
def test_bad_custom_prompts_are_one_line_config_errors(prompt, message):
    with pytest.raises(ConfigError) as err:
        rubrics.custom(prompt, where="judge.txt")
    assert message in str(err.value) and "judge.txt" in str(err.value) and "\n" not in str(err.value)


def test_from_args_needs_exactly_one_source():
    assert rubrics.from_args({"rubric": "medi_qa"}).name == "medi_qa"
    assert rubrics.from_args({"prompt_template": SEEDS_PROMPT}).criteria == ("faithfulness", "safety")
    for args in ({}, {"rubric": "medi_qa", "prompt_template": SEEDS_PROMPT}):
        with pytest.raises(ConfigError, match="exactly one"):
            rubrics.from_args(args)
    with pytest.raises(ConfigError, match="unknown jury rubric 'nope'"):
        rubrics.from_args({"rubric": "nope"})
    with pytest.raises(ConfigError, match="max_score"):
        rubrics.from_args({"prompt_template": SEEDS_PROMPT, "max_score": "five"})


@pytest.mark.parametrize("phrase, top", [("Score from 0 to 3.", 3), ("scale 0-10,", 10), ("(0–4)", 4),
                                         ("from 0 — 7;", 7), ("between 0 and 6", 6)])
def test_scale_top_is_read_from_common_phrasings(phrase, top):
    prompt = f"{{QUESTION}} {{RESPONSE}} {phrase}\n<rubric_criteria>{{\"a\": {{}}}}</rubric_criteria>"
    assert rubrics.custom(prompt).max_score == top


def test_judge_prompt_is_fitted_to_the_judges_window_question_first():
    aci = rubrics.builtin("aci_bench")
    count = len  # one "token" per character keeps the arithmetic visible
    question, response, gold = "Q" * 5000, "R" * 300, "G" * 300
    full = aci.render(question=question, response=response, gold=gold)
    assert aci.render_within(question=question, response=response, gold=gold, limit=None, count=count) == (full, False)
    limit = len(full) - 4000
    text, truncated = aci.render_within(question=question, response=response, gold=gold, limit=limit, count=count)
    assert truncated and len(text) <= limit and rubrics.JUDGE_TRUNCATION_MARK in text
    assert "R" * 300 in text and "G" * 300 in text  # the dialogue was cut; the response and gold are whole
    bare = len(aci.render(question="", response="", gold=""))
    tight = aci.render_within(question=question, response=response, gold=gold, limit=bare + 3 * 60, count=count)
    assert tight is not None and "R" * 300 not in tight[0] and len(tight[0]) <= bare + 180
    assert aci.render_within(question=question, response=response, gold=gold, limit=bare // 2, count=count) is None
