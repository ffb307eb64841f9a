"""Special scorers on real rows: MedCalc-Bench, MEDEC, multiple choice, ICD-10 F1."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections import defaultdict

import pytest

from medhelm.scoring import registry
from medhelm.scoring.base import ScoringItem
from medhelm.scoring.choice import parse_choice
from medhelm.scoring.icd10 import extract_codes, set_prf
from medhelm.scoring.medcalc import extract_number, score_answer
from medhelm.scoring.medec import parse_answer
from medhelm.specs import Completion, FrozenMap, Instance, MetricSpec, Reference


def _wrong(inst: Instance) -> str:
    """A wrong answer of the right shape for the category."""
    ref = inst.references[0].text
    if inst.extra["category"] == "date":
        m = re.search(r"(\d+) weeks', '(\d+) days", ref)
        if m:
            return f"('{int(m.group(1)) + 2} weeks', '{m.group(2)} days')"
        return (dt.datetime.strptime(ref, "%m/%d/%Y") + dt.timedelta(days=3)).strftime("%m/%d/%Y")
    return str(float(ref) * 1.5 + 3)


def test_medcalc_ground_truth_scores_100_and_wrong_values_0_in_every_category(load):
    _, instances = load("medcalc_bench")
    per_cat: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for inst in instances:
        truth = inst.references[0].text
        per_cat[inst.extra["category"]].append((
            score_answer(truth, inst, lenient=False), score_answer(truth, inst, lenient=True),
            score_answer(_wrong(inst), inst, lenient=False), score_answer(_wrong(inst), inst, lenient=True)))
    assert set(per_cat) == {"lab test", "risk", "physical", "severity", "date", "diagnosis", "dosage"}
    for cat, scores in per_cat.items():
        assert all(s[:2] == (1.0, 1.0) for s in scores), cat
        assert all(s[2:] == (0.0, 0.0) for s in scores), cat


def test_medcalc_edges_on_real_rows(load):
    _, instances = load("medcalc_bench")
    by_calc = {i.extra["calculator"]: i for i in instances}
    chads = by_calc["CHA2DS2-VASc Score for Atrial Fibrillation Stroke Risk"]  # risk, truth "2"
    assert score_answer("2.0", chads, lenient=False) == 1.0  # upstream compared strings: "2.0" != "2"
    assert score_answer("The CHA2DS2-VASc score is 2.", chads, lenient=False) == 0.0
    assert score_answer("The CHA2DS2-VASc score is 2.", chads, lenient=True) == 1.0
    assert score_answer("Score: 2 out of 9", chads, lenient=True) == 1.0
    crcl = by_calc["Creatinine Clearance (Cockcroft-Gault Equation)"]  # lab test, [63.6547, 70.3552]
    assert score_answer("64", crcl, lenient=False) == 1.0 and score_answer("71", crcl, lenient=False) == 0.0
    assert score_answer("CrCl = 66.9 mL/min", crcl, lenient=True) == 1.0
    gest = next(i for i in instances if "weeks" in i.references[0].text)
    assert score_answer("(34 weeks, 3 days)", gest, lenient=False) == 1.0
    assert score_answer("The gestational age is 34 weeks and 3 days.", gest, lenient=True) == 1.0
    due = by_calc["Estimated Due Date"]
    assert score_answer("Due date: 12/02/2000.", due, lenient=True) == 1.0
    assert extract_number('{"step_by_step_thinking": "...", "answer": "-2.1"}') == -2.1


def test_medcalc_metric_through_the_registry(load):
    bench, instances = load("medcalc_bench")
    metric = registry.build_all([MetricSpec("medcalc_bench_accuracy")], ctx=None)[0]  # type: ignore[arg-type]
    inst = instances[0]
    res = asyncio.run(metric.score(ScoringItem(run=None, instance=inst, prompt=bench.prompt(inst, _budget()),  # type: ignore[arg-type]
                                               completion=Completion("I cannot compute this."))))
    assert res.stats == {"medcalc_bench_accuracy": 0.0, "medcalc_bench_accuracy_lenient": 0.0,
                         "medcalc_bench_unparseable": 1.0}


def _budget():
    from medhelm.benchmarks import PromptBudget

    return PromptBudget()


def _medec_stats(inst: Instance, answer: str) -> dict:
    metric = registry.build_all([MetricSpec("medec")], ctx=None)[0]  # type: ignore[arg-type]
    return asyncio.run(metric.score(ScoringItem(run=None, instance=inst, prompt=None,  # type: ignore[arg-type]
                                                completion=Completion(answer)))).stats


def test_medec_scores_flag_and_sentence_on_real_rows(load):
    _, instances = load("medec")
    flagged = next(i for i in instances if i.id == "ms-test-0")  # error in sentence 10
    clean = next(i for i in instances if i.id == "ms-test-1")
    assert _medec_stats(flagged, flagged.references[0].text) == {
        "medec_error_flag_accuracy": 1.0, "medec_error_flag_accuracy_lenient": 1.0,
        "medec_error_sentence_accuracy": 1.0, "medec_unparseable": 0.0}
    assert _medec_stats(flagged, "3 The patient has hepatitis B.")["medec_error_sentence_accuracy"] == 0.0
    assert _medec_stats(flagged, "3 The patient has hepatitis B.")["medec_error_flag_accuracy"] == 1.0
    assert _medec_stats(flagged, "Sentence 10: ... Schistosoma mansoni.")["medec_error_sentence_accuracy"] == 1.0
    assert _medec_stats(flagged, "CORRECT")["medec_error_flag_accuracy"] == 0.0
    assert _medec_stats(clean, "CORRECT") == {
        "medec_error_flag_accuracy": 1.0, "medec_error_flag_accuracy_lenient": 1.0,
        "medec_error_sentence_accuracy": 1.0, "medec_unparseable": 0.0}
    assert _medec_stats(clean, "I am not sure.") == {
        "medec_error_flag_accuracy": 0.0, "medec_error_flag_accuracy_lenient": 0.0,
        "medec_error_sentence_accuracy": 0.0, "medec_unparseable": 1.0}


def test_medec_flag_column_is_upstreams_exact_correct_rule_and_the_lenient_one_beside_it(load):
    """HELM's MedecMetric: only the stripped answer `CORRECT` says "no error", anything else flags one."""
    _, instances = load("medec")
    flagged = next(i for i in instances if i.id == "ms-test-0")
    clean = next(i for i in instances if i.id == "ms-test-1")
    for answer, note, upstream, lenient in (("correct", clean, 0.0, 1.0), ("Correct.", clean, 0.0, 1.0),
                                            ("  CORRECT\n", clean, 1.0, 1.0), ("correct", flagged, 1.0, 0.0),
                                            ("I am not sure.", flagged, 1.0, 0.0)):
        stats = _medec_stats(note, answer)
        assert (stats["medec_error_flag_accuracy"], stats["medec_error_flag_accuracy_lenient"]) == (upstream, lenient)


def test_medec_reference_text_alone_is_parsed_correctly(load):
    _, instances = load("medec")
    for inst in instances:
        bare = Instance(id=inst.id, input=inst.input, references=inst.references)  # no extra fields
        assert _medec_stats(bare, inst.references[0].text)["medec_error_sentence_accuracy"] == 1.0
    assert parse_answer("10 Patient's symptoms are suspected to be due to Schistosoma mansoni.") == (1, 10)


@pytest.mark.parametrize("answer,expected", [
    ("A", 0), ("(B)", 1), ("C.", 2), ("Answer: A", 0), ("The answer is (B).", 1), ("**Answer: C**", 2),
    ("maybe", 2), ("B) no", 1), ("no", 1), ("D", None), ("", None), ("yes and no", None),
])
def test_choice_parsing(answer, expected):
    assert parse_choice(answer, ("yes", "no", "maybe")) == expected


HELM_FAMILY = ("exact_match", "quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match")


def _helm_mcq(inst: Instance, text: str) -> float:
    """HELM's own exact_match for a multiple-choice-joint answer, written out as ``compute_reference_metrics``
    does it: strip, look up in output_mapping (letter -> option text), compare with the correct references."""
    mapping = {"ABCDE"[i]: option for i, option in enumerate(inst.choices)}
    pred = mapping.get(text.strip())
    return max(float(bool(pred) and gold.strip() == pred.strip()) for gold in
               (r.text for r in inst.correct_references))


def test_multiple_choice_metric_on_real_pubmed_rows(load):
    """exact_match is HELM's rule (the stripped answer must be the letter); lenient_match is ours; they
    disagree on "A.", "(A)", "The answer is B", "b" and the option text, and agree on the bare letter."""
    _, instances = load("pubmed_qa")
    metric = registry.build_all([MetricSpec("multiple_choice")], ctx=None)[0]  # type: ignore[arg-type]
    assert metric.stat_names == (*HELM_FAMILY, "lenient_match", "unparseable_answer")

    def stats(inst, text):
        return asyncio.run(metric.score(ScoringItem(run=None, instance=inst, prompt=None,  # type: ignore[arg-type]
                                                    completion=Completion(text)))).stats

    disagreements = 0
    for inst in instances[:30]:
        truth = inst.choices.index(inst.correct_references[0].text)
        letter, wrong = "ABC"[truth], "ABC"[(truth + 1) % 3]
        assert stats(inst, letter) == {**dict.fromkeys(HELM_FAMILY, 1.0), "lenient_match": 1.0,
                                       "unparseable_answer": 0.0}
        assert stats(inst, f" {letter}\n")["exact_match"] == 1.0  # HELM strips before the lookup
        for lenient_only in (f"{letter}.", f"({letter})", f"The answer is {letter}", letter.lower(),
                             f"Answer: {letter}", inst.correct_references[0].text):
            got = stats(inst, lenient_only)
            assert got == {**dict.fromkeys(HELM_FAMILY, 0.0), "lenient_match": 1.0, "unparseable_answer": 0.0}, \
                lenient_only
            assert got["exact_match"] == _helm_mcq(inst, lenient_only) == 0.0
            disagreements += 1
        for answer in (letter, wrong, f" {wrong} ", f"{wrong}.", "I cannot tell.", ""):
            assert stats(inst, answer)["exact_match"] == _helm_mcq(inst, answer), answer
        assert stats(inst, f"The answer is {wrong}")["lenient_match"] == 0.0
        assert stats(inst, "I cannot tell.") == {**dict.fromkeys(HELM_FAMILY, 0.0), "lenient_match": 0.0,
                                                 "unparseable_answer": 1.0}
    assert disagreements == 180


def test_icd10_set_f1_per_instance():
    gold = Instance(id="1", input="note", references=(Reference("E11.9, I10, N18.3"),),
                    extra=FrozenMap({"codes": ["E11.9", "I10", "N18.3"]}))
    metric = registry.build_all([MetricSpec("mimiciv_billing_code_f1")], ctx=None)[0]  # type: ignore[arg-type]

    def stats(text):
        return asyncio.run(metric.score(ScoringItem(run=None, instance=gold, prompt=None,  # type: ignore[arg-type]
                                                    completion=Completion(text)))).stats

    assert stats("E119, I10, n18.3") == {"mimiciv_billing_code_f1": 1.0, "mimiciv_billing_code_precision": 1.0,
                                         "mimiciv_billing_code_recall": 1.0}
    s = stats("Codes: E11.9, Z79.4")  # 1 of 2 predicted right, 1 of 3 gold found
    assert s["mimiciv_billing_code_precision"] == 0.5
    assert s["mimiciv_billing_code_recall"] == pytest.approx(1 / 3)
    assert s["mimiciv_billing_code_f1"] == pytest.approx(0.4)
    assert stats("none")["mimiciv_billing_code_f1"] == 0.0
    assert extract_codes("I10; E11.65 and S72.001A") == {"I10", "E1165", "S72001A"}
    assert set_prf(set(), {"I10"}) == (0.0, 0.0, 0.0)
