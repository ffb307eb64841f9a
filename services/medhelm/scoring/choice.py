"""Multiple-choice scoring: map the model's answer to an option, then compare with the correct one.

Accepted forms: ``A``, ``(A)``, ``A.``, ``A)``, ``Answer: A``, ``The answer is (B)``, or the option's text.
Upstream HELM only accepted the bare letter, so ``(A)`` or ``A.`` scored 0 silently. An answer that maps to
no option is wrong *and* counted (``unparseable_answer``), so a formatting problem is visible, not hidden.
``exact_match_strict`` is upstream's rule (the stripped answer is exactly the letter) for comparison.
"""

from __future__ import annotations

import re
import string

from medhelm.scoring.instance_scorer import instance_metric_factory
from medhelm.specs import Instance

LETTERS = string.ascii_uppercase
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_PUNCT = re.compile(r"[^\w\s]")


def _norm(text: str) -> str:
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def parse_choice(answer: str, options: tuple[str, ...]) -> int | None:
    """The option index the answer designates, or None."""
    n = len(options)
    valid = LETTERS[:n]
    text = _THINK.sub("", answer).replace("*", "").strip()  # markdown bold around the answer
    if not text:
        return None
    any_case = rf"([{valid}{valid.lower()}])"
    answer_is = r"(?i:(?:the\s+)?(?:correct\s+|final\s+)?answer\s*(?:is\s*:?|:)\s*(?:option\s*)?)"
    patterns = (
        (rf"^\(?{any_case}\)?[.):]?$", 0),  # A  (A)  A.  A)  a
        (rf"^(?:option\s*)?\(?([{valid}])\)?(?:[.):,]|\s+-)\s", 0),  # "B. Vitamin C"  "(B) ..."  "B) ..."
        (rf"(?:^|\b){answer_is}\(?([{valid}])\)?(?:$|[\s.):,])", 0),  # "Answer: A", "The answer is (C)."
        (rf"(?:^|\b){answer_is}\(?([{valid.lower()}])\)?[.)]?$", 0),  # "answer: b" (lower case only at the end)
    )
    for pattern, flags in patterns:
        m = re.search(pattern, text, flags)
        if m:
            return valid.index(m.group(1).upper())
    # the option's own text, alone or as the only option mentioned
    norm = _norm(text)
    normalized = [_norm(o) for o in options]
    for i, o in enumerate(normalized):
        if o and norm == o:
            return i
    mentioned = [i for i, o in enumerate(normalized) if o and re.search(rf"\b{re.escape(o)}\b", norm)]
    return mentioned[0] if len(mentioned) == 1 else None


def correct_index(instance: Instance) -> int | None:
    correct = {r.text for r in instance.correct_references}
    for i, option in enumerate(instance.choices):
        if option in correct:
            return i
    return None


def _score(instance: Instance, answer: str) -> dict[str, float | None]:
    truth = correct_index(instance)
    if truth is None or not instance.choices:
        return {"exact_match": None, "exact_match_strict": None, "unparseable_answer": None}
    picked = parse_choice(answer, instance.choices)
    return {
        "exact_match": float(picked == truth),
        "exact_match_strict": float(answer.strip() == LETTERS[truth]),
        "unparseable_answer": float(picked is None),
    }


FACTORIES = {
    "multiple_choice": instance_metric_factory(
        ("exact_match", "exact_match_strict", "unparseable_answer"), _score,
        description="multiple choice: the answer ('A', '(A)', 'Answer: A', or the option text) mapped to an "
                    "option; unparseable answers are wrong and counted"),
}
