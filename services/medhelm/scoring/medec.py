"""MEDEC: error-flag accuracy and error-sentence accuracy.

The gold answer is ``CORRECT`` or ``"<sentence id> <corrected sentence>"``. Upstream HELM parsed the
latter with ``int()`` on the whole string (always failing), so sentence accuracy only ever credited
CORRECT/CORRECT. Here the id is read from the instance's fields (or the leading integer of the reference),
and the model's answer is parsed the same way: ``CORRECT``, or a sentence id (``3 ...``, ``Sentence 3: ...``).

Two flag columns (docs/metrics.md, "Two rules, two names"): ``medec_error_flag_accuracy`` is upstream's rule
(the stripped answer is exactly ``CORRECT`` -> no error; any other answer flags one), the leaderboard's column;
``medec_error_flag_accuracy_lenient`` reads the answer as the sentence accuracy does (``correct`` in any case,
markdown and a ``<think>`` block removed; an answer that is neither form scores 0 and counts as unparseable).
"""

from __future__ import annotations

import re

from medhelm.scoring.instance_scorer import instance_metric_factory
from medhelm.specs import Instance

_ID = re.compile(r"^\s*(?:sentence\s*(?:id)?\s*[:#]?\s*)?\(?(\d+)\)?\b", re.I)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)


def parse_answer(text: str) -> tuple[int, int] | None:
    """(flag, sentence id) — (0, -1) for CORRECT — or None when neither form is recognisable."""
    t = _THINK.sub("", text).strip().strip("*`\"'").strip()
    if re.match(r"^correct\b", t, re.I):
        return 0, -1
    m = _ID.match(t)
    return (1, int(m.group(1))) if m else None


def gold(instance: Instance) -> tuple[int, int] | None:
    if "error_flag" in instance.extra:
        flag = int(instance.extra["error_flag"])
        return (flag, int(instance.extra.get("error_sentence_id", -1)) if flag else -1)
    refs = instance.correct_references
    return parse_answer(refs[0].text) if refs else None


NAMES = ("medec_error_flag_accuracy", "medec_error_flag_accuracy_lenient", "medec_error_sentence_accuracy",
         "medec_unparseable")


def _score(instance: Instance, answer: str) -> dict[str, float | None]:
    truth = gold(instance)
    if truth is None:
        return dict.fromkeys(NAMES)
    upstream = float((0 if answer.strip() == "CORRECT" else 1) == truth[0])
    pred = parse_answer(answer)
    if pred is None:
        return {"medec_error_flag_accuracy": upstream, "medec_error_flag_accuracy_lenient": 0.0,
                "medec_error_sentence_accuracy": 0.0, "medec_unparseable": 1.0}
    return {
        "medec_error_flag_accuracy": upstream,
        "medec_error_flag_accuracy_lenient": float(pred[0] == truth[0]),
        "medec_error_sentence_accuracy": float(pred == truth),
        "medec_unparseable": 0.0,
    }


FACTORIES = {
    "medec": instance_metric_factory(
        NAMES, _score,
        description="MEDEC: error flag and erroneous-sentence id accuracy (CORRECT or '<id> <corrected sentence>')"),
}
