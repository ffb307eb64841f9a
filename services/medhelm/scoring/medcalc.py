"""MedCalc-Bench scoring, correct for every category the real data uses.

* ``lab test``, ``physical``, ``dosage`` (and the older ``dosage conversion``): the number must lie in
  [Lower Limit, Upper Limit] (the dataset's ±5 % band for formula calculators).
* ``risk``, ``severity``, ``diagnosis``: numeric equality with the ground truth after parsing (``3`` = ``3.0``).
* ``date``: ``MM/DD/YYYY`` within the limits, or a gestational age ``(N weeks, M days)`` compared in days.

Two stats: ``medcalc_bench_accuracy`` scores the raw answer (the whole stripped answer must parse — what
the prompt asks for), ``medcalc_bench_accuracy_lenient`` extracts the answer from verbose output.
``medcalc_bench_unparseable`` counts answers from which nothing could be extracted (they score 0 on both).
"""

from __future__ import annotations

import datetime as dt
import math
import re

from medhelm.scoring.instance_scorer import instance_metric_factory
from medhelm.specs import Instance

RANGE_CATEGORIES = frozenset({"lab test", "physical", "dosage", "dosage conversion"})
EXACT_CATEGORIES = frozenset({"risk", "severity", "diagnosis"})
DATE_CATEGORIES = frozenset({"date"})
CATEGORIES = RANGE_CATEGORIES | EXACT_CATEGORIES | DATE_CATEGORIES

_NUMBER = r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-−]?\.\d+"
_DATE = r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b"
_WEEKS_DAYS = r"(\d+)\s*(?:weeks?|wks?)\W+(?:and\s+)?(\d+)\s*days?"
_ANSWER_MARK = re.compile(r"(?:answer|result|score|total|value)\s*(?:is|:|=|of)?\s*[:=]?\s*\**\s*", re.I)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)


def parse_number(text: str) -> float | None:
    t = text.strip().replace("−", "-").replace(",", "")
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_date(text: str) -> dt.date | None:
    m = re.fullmatch(_DATE, text.strip())
    return _date(m) if m else None


def _date(m: re.Match[str]) -> dt.date | None:
    try:
        return dt.date(int(m.group(3)), int(m.group(1)), int(m.group(2)))
    except ValueError:
        return None


def parse_weeks_days(text: str) -> int | None:
    """``('34 weeks', '3 days')``, ``(34 weeks, 3 days)`` or ``34 weeks and 3 days`` -> total days."""
    m = re.search(_WEEKS_DAYS, text, re.I)
    return int(m.group(1)) * 7 + int(m.group(2)) if m else None


def is_weeks_days(reference: str) -> bool:
    return parse_weeks_days(reference) is not None


def extract_number(text: str) -> float | None:
    """The answer in verbose output: after an 'answer is'/'score ='-style marker, else the last number."""
    t = _THINK.sub("", text)
    t = re.sub(r"\b(\d+)\s+out\s+of\s+\d+", r"\1", t, flags=re.I)  # "3 out of 5" means 3
    json_answer = re.search(r'"answer"\s*:\s*"?\s*(' + _NUMBER + ")", t, re.I)
    if json_answer:
        return parse_number(json_answer.group(1))
    marks = list(_ANSWER_MARK.finditer(t))
    for mark in reversed(marks):
        m = re.match(_NUMBER, t[mark.end():])
        if m:
            return parse_number(m.group())
    numbers = re.findall(_NUMBER, t)
    return parse_number(numbers[-1]) if numbers else None


def extract_date(text: str) -> dt.date | None:
    found = [d for d in (_date(m) for m in re.finditer(_DATE, _THINK.sub("", text))) if d]
    return found[-1] if found else None


def _in_range(value: float, lower: float, upper: float) -> bool:
    lo, hi = min(lower, upper), max(lower, upper)
    return lo - 1e-9 <= value <= hi + 1e-9


def score_answer(answer: str, instance: Instance, *, lenient: bool) -> float | None:
    """1.0 / 0.0, or None when the instance itself cannot be scored (unknown category)."""
    category = str(instance.extra.get("category", "")).strip().lower()
    reference = instance.correct_references[0].text if instance.correct_references else ""
    lower, upper = str(instance.extra.get("lower_limit", "")), str(instance.extra.get("upper_limit", ""))
    if category not in CATEGORIES:
        return None
    text = answer.strip()
    if category in DATE_CATEGORIES:
        if is_weeks_days(reference):
            got = parse_weeks_days(text) if lenient else _strict_weeks_days(text)
            lo, hi = parse_weeks_days(lower), parse_weeks_days(upper)
            if got is None or lo is None or hi is None:
                return 0.0
            return float(lo <= got <= hi)
        got_date = extract_date(text) if lenient else parse_date(text)
        lo_d, hi_d = parse_date(lower), parse_date(upper)
        if got_date is None or lo_d is None or hi_d is None:
            return 0.0
        return float(lo_d <= got_date <= hi_d)
    got = extract_number(text) if lenient else parse_number(text)
    if got is None:
        return 0.0
    if category in EXACT_CATEGORIES:
        truth = parse_number(reference)
        return float(truth is not None and abs(got - truth) <= 1e-9)
    lo_n, hi_n = parse_number(lower), parse_number(upper)
    if lo_n is None or hi_n is None:
        return None
    return float(_in_range(got, lo_n, hi_n))


def _strict_weeks_days(text: str) -> int | None:
    t = text.strip()
    ok = re.fullmatch(r"\(\s*'?(\d+)\s*weeks?'?\s*,\s*'?(\d+)\s*days?'?\s*\)", t, re.I)
    return int(ok.group(1)) * 7 + int(ok.group(2)) if ok else None


def extractable(answer: str, instance: Instance) -> bool:
    category = str(instance.extra.get("category", "")).strip().lower()
    if category in DATE_CATEGORIES:
        return parse_weeks_days(answer) is not None or extract_date(answer) is not None
    return extract_number(answer) is not None


def _score(instance: Instance, answer: str) -> dict[str, float | None]:
    strict = score_answer(answer, instance, lenient=False)
    lenient = score_answer(answer, instance, lenient=True)
    return {
        "medcalc_bench_accuracy": strict,
        "medcalc_bench_accuracy_lenient": lenient,
        "medcalc_bench_unparseable": None if lenient is None else float(not extractable(answer, instance)),
    }


FACTORIES = {
    "medcalc_bench_accuracy": instance_metric_factory(
        ("medcalc_bench_accuracy", "medcalc_bench_accuracy_lenient", "medcalc_bench_unparseable"), _score,
        description="MedCalc-Bench: range check (lab test/physical/dosage), numeric equality (risk/severity/"
                    "diagnosis), dates and (weeks, days); strict on the raw answer and lenient on verbose output"),
}
