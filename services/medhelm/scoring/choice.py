"""Multiple-choice scoring: upstream HELM's exact-match family, and our lenient reading beside it.

Two rules, each under a name that says what it computes (docs/metrics.md, "Two rules, two names"):

* ``exact_match`` (and ``quasi_exact_match``, ``prefix_exact_match``, ``quasi_prefix_exact_match``) — as
  HELM computes them for a multiple-choice-joint run (``compute_reference_metrics``): the output is stripped
  and looked up, as is, among the option letters (``output_mapping``: ``"A"`` -> option A's text); anything
  else (``"A."``, ``"(A)"``, ``"a"``, a sentence) maps to nothing and scores 0 on all four; a letter maps to
  its option's text, which is compared with the correct references' text by ``scoring/exact.py``'s rules
  (the one owner of those four). This is the leaderboard column, the same number HELM's ``exact_match``
  gives, so ``import-helm`` rows and ours sit in one column.
* ``lenient_match`` — ours: the answer mapped to an option from ``A``, ``(A)``, ``A.``, ``A)``,
  ``Answer: A``, ``The answer is (B)`` or the option's text, then compared by *position* with the correct
  option (twin options with the same text still have one correct letter, see ``correct_index``).
  ``unparseable_answer`` counts the answers that map to no option (wrong under both rules), so a formatting
  problem is visible, not hidden.

Runs made before these names (records with ``exact_match_strict``) are read by the store under the new
names (``store/sources.py``: their ``exact_match`` was this lenient rule, their ``exact_match_strict`` the
letter rule). Pure functions; an instance without exactly one correct option is unscored (``None``).
"""

from __future__ import annotations

import re
import string

from medhelm.scoring.exact import STATS as EXACT_FAMILY
from medhelm.scoring.exact import score_text
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


LENIENT = "lenient_match"
STATS = (*EXACT_FAMILY, LENIENT, "unparseable_answer")


def helm_family(instance: Instance, answer: str) -> dict[str, float | None]:
    """HELM's four exact-match stats of a multiple-choice answer: the stripped answer must be an option's
    letter exactly (HELM's ``output_mapping.get``); its option's text is then scored against the correct
    references' text. No correct reference: unscored."""
    golds = [r.text for r in instance.correct_references]
    if not golds:
        return dict.fromkeys(EXACT_FAMILY)
    letter = answer.strip()
    if len(letter) != 1 or letter not in LETTERS[:len(instance.choices)]:
        return dict.fromkeys(EXACT_FAMILY, 0.0)  # HELM: no mapping -> None -> 0 for every member
    return score_text(instance.choices[LETTERS.index(letter)], golds)


def _score(instance: Instance, answer: str) -> dict[str, float | None]:
    truth = correct_index(instance)
    if truth is None or not instance.choices:
        return dict.fromkeys(STATS)
    picked = parse_choice(answer, instance.choices)
    return {**helm_family(instance, answer), LENIENT: float(picked == truth),
            "unparseable_answer": float(picked is None)}


FACTORIES = {
    "multiple_choice": instance_metric_factory(
        STATS, _score,
        description="multiple choice: exact_match and its family as HELM computes them (the stripped answer "
                    "must be the option letter); lenient_match maps 'A', '(A)', 'Answer: A' or the option text "
                    "to an option; unparseable answers are wrong and counted"),
}
