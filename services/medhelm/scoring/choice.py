"""Multiple-choice scoring: map the model's answer to an option, then compare with the correct one.

Accepted forms: ``A``, ``(A)``, ``A.``, ``A)``, ``Answer: A``, ``The answer is (B)``, or the option's text.
Upstream HELM only accepted the bare letter, so ``(A)`` or ``A.`` scored 0 silently. An answer that maps to
no option is wrong *and* counted (``unparseable_answer``), so a formatting problem is visible, not hidden.
``exact_match_strict`` is upstream's rule (the stripped answer is exactly the letter) for comparison.
The gold answer is the correct option's position, never its text (see ``correct_index``).
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
    exact = [i for i, o in enumerate(normalized) if o and norm == o]
    if exact:
        return exact[0] if len(exact) == 1 else None  # twin options: the text alone does not say which letter
    mentioned = [i for i, o in enumerate(normalized) if o and re.search(rf"\b{re.escape(o)}\b", norm)]
    return mentioned[0] if len(mentioned) == 1 else None


def correct_index(instance: Instance) -> int | None:
    """The correct option's *position*. Loaders write one reference per option in display order, so the
    correct reference's index is the answer's letter; two options with the same text (it happens in exam
    files) still have one correct letter. Keying by text gave the first of the twins, so the correct letter
    scored 0 and a wrong one 1. References that are not one per option (older records) fall back to text,
    and only when that text names exactly one option."""
    refs = instance.references
    if len(refs) == len(instance.choices) and all(r.text == c for r, c in zip(refs, instance.choices)):
        hits = [i for i, r in enumerate(refs) if r.correct]
        return hits[0] if len(hits) == 1 else None
    correct = {r.text for r in instance.correct_references}
    hits = [i for i, option in enumerate(instance.choices) if option in correct]
    return hits[0] if len(hits) == 1 else None


def gold_label(instance: Instance) -> str | None:
    """The instance's gold label as a model would answer it: the correct option's letter (multiple choice),
    else its first correct answer's text; None when it has none (the majority baseline counts these)."""
    if instance.choices:
        index = correct_index(instance)
        return None if index is None else LETTERS[index]
    return next((r.text for r in instance.correct_references if r.text.strip()), None)


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
