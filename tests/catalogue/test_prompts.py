"""Prompt construction: options listed once, no stray ': ', the context is cut and the question kept."""

from __future__ import annotations

from medhelm.benchmarks import PromptBudget


def test_pubmed_prompt_is_helms_layout_options_once(load):
    """HELM's PubMedQA input (`Context: <abstract>\\n\\nQuestion: <question>\\n`) under its joint adapter's
    `Question:` noun, the options once, `Answer:` (the differential against helm-run checks it byte for byte)."""
    bench, instances = load("pubmed_qa")
    inst = instances[0]
    text = bench.prompt(inst, PromptBudget()).text
    assert text.count("A. yes") == 1 and text.count("B. no") == 1 and text.count("C. maybe") == 1
    assert "\n: " not in text and not text.startswith(": ")
    assert text == (bench.style.instructions + "\n\nQuestion: Context: " + inst.extra["context"] + "\n\nQuestion: "
                    + inst.extra["question"] + "\n\nA. yes\nB. no\nC. maybe\nAnswer:")
    assert bench.prompt(instances[0], PromptBudget()).truncated is False


def test_truncation_cuts_the_context_and_keeps_question_and_options(load):
    bench, instances = load("medcalc_bench")
    inst = instances[0]
    full = bench.prompt(inst, PromptBudget())
    small = bench.prompt(inst, PromptBudget(max_prompt_tokens=400))
    assert not full.truncated and small.truncated
    assert PromptBudget().count_tokens(small.text) <= 400
    assert inst.extra["question"] in small.text and small.text.endswith("No explanation needed:")
    assert "truncated" in small.text and inst.extra["context"][:200] in small.text


def test_a_budget_smaller_than_the_question_keeps_the_whole_question(load):
    bench, instances = load("pubmed_qa")
    p = bench.prompt(instances[0], PromptBudget(max_prompt_tokens=5))
    assert p.truncated and instances[0].extra["question"] in p.text and "C. maybe" in p.text


def test_timelines_keep_the_latest_events(tmp_path):
    from medhelm.benchmarks.catalogue import get_entry
    from medhelm.benchmarks.loaders.instances import choice_instance
    from medhelm.benchmarks.prompts import build_prompt

    inst = choice_instance("x", "Will it happen?", ("Yes", "No"), 0,
                           context="\n".join(f"2020-01-{d:02d} CODE{d}" for d in range(1, 29)))
    p = build_prompt(get_entry("ehrshot").prompt, inst, PromptBudget(max_prompt_tokens=120))
    assert p.truncated and "CODE28" in p.text and "CODE1\n" not in p.text


def test_an_upstream_benchmarks_judge_question_is_helms_input_text_whole(load):
    """ACI-Bench's HELM scenario words its input `Doctor-patient dialogue:\\n\\n<dialogue>`: that, never cut, is what
    the jury's {QUESTION} gets (Prompt.question), even when the candidate's prompt had its dialogue truncated."""
    bench, instances = load("aci_bench", subset="clinicalnlp_taskB_test1")
    inst = instances[0]
    whole = "Doctor-patient dialogue:\n\n" + inst.extra["context"]
    full = bench.prompt(inst, PromptBudget())
    small = bench.prompt(inst, PromptBudget(max_prompt_tokens=300))
    assert small.truncated and inst.extra["context"] not in small.text
    assert full.question == small.question == whole and whole in full.text


def test_a_benchmark_without_helms_layout_has_no_judge_question(tmp_path):
    from medhelm.benchmarks.prompts import PromptStyle, build_prompt
    from medhelm.specs import Instance

    p = build_prompt(PromptStyle("Summarize."), Instance(id="1", input="the note"), PromptBudget())
    assert p.question is None and "question" not in p.to_json()
