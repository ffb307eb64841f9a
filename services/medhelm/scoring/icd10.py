"""MIMIC-IV billing codes: ICD-10 set precision, recall and F1 per instance (then averaged over instances).

Codes are compared without the dot and in upper case (``E11.9`` = ``e119``). Predicting nothing for a
note that has codes is a real 0 (precision and recall), not an unscored instance.
"""

from __future__ import annotations

import re

from medhelm.scoring.instance_scorer import instance_metric_factory
from medhelm.specs import Instance

# ICD-10-CM: letter, digit, digit-or-letter, then up to 4 characters after an optional dot
_CODE = re.compile(r"\b([A-Z][0-9][0-9A-Z])(?:\.?([0-9A-Z]{1,4}))?\b")


def extract_codes(text: str) -> set[str]:
    return {a + (b or "") for a, b in _CODE.findall(text.upper())}


def gold_codes(instance: Instance) -> set[str]:
    codes = instance.extra.get("codes")
    if codes:
        return {str(c).upper().replace(".", "").strip() for c in codes if str(c).strip()}
    return set().union(*(extract_codes(r.text) for r in instance.correct_references)) if instance.references else set()


def set_prf(pred: set[str], gold: set[str]) -> tuple[float, float, float]:
    hit = len(pred & gold)
    p = hit / len(pred) if pred else 0.0
    r = hit / len(gold) if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def _score(instance: Instance, answer: str) -> dict[str, float | None]:
    gold = gold_codes(instance)
    if not gold:
        return {"mimiciv_billing_code_f1": None, "mimiciv_billing_code_precision": None,
                "mimiciv_billing_code_recall": None}
    p, r, f = set_prf(extract_codes(answer), gold)
    return {"mimiciv_billing_code_f1": f, "mimiciv_billing_code_precision": p, "mimiciv_billing_code_recall": r}


FACTORIES = {
    "mimiciv_billing_code_f1": instance_metric_factory(
        ("mimiciv_billing_code_f1", "mimiciv_billing_code_precision", "mimiciv_billing_code_recall"), _score,
        description="ICD-10 code set precision/recall/F1 per instance"),
}
