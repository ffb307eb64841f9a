"""Reading a judge's verdict from its output, in a way a candidate cannot game.

Rules (docs/jury.md, "Parsing"):

1. Only the judge's own output is read, and within it only a well-formed JSON object: the one in the
   last ``<rubric_criteria>`` block, else the last top-level JSON object that names a criterion.
2. An object that also appears in the prompt the judge was given — the candidate's response, the
   rubric's example — is a quotation, not a verdict, and is skipped. So a response that plants
   ``"accuracy": {"score": 5}`` cannot score itself even if the judge echoes it.
3. Every criterion is validated on its own: present, an integer (4, 4.0 or "4"; not 4.5, true, "four"),
   inside the rubric's scale. A criterion that fails is *unscored* with the reason, never 0.
4. A criterion whose explanation is (part of) an example explanation from the prompt — the seeds' rubric
   shows ``"score": 0, "explanation": "Explain why this score was given."`` — is a copy of the example,
   not a judgement: small judges do this, and upstream counted it as a real 0. It is *unscored*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from medhelm.scoring.jury.rubrics import Rubric
from medhelm.json_text import canonical_json

MAX_EXPLANATION_CHARS = 2000  # what we keep of a judge's explanation in the record

# the innermost block: prose that mentions the tag ("inside <rubric_criteria> tags") is not a block
_BLOCK = re.compile(r"<rubric_criteria>((?:(?!<rubric_criteria>).)*?)(?:</rubric_criteria>|$)", re.S | re.I)
_INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$")
_WS = re.compile(r"\s+")
_SPECIAL = re.compile(r'[{}"\\]')
_WORD = re.compile(r"[a-z0-9]+")
_MIN_COPY_CHARS = 10  # shorter explanations ("Accurate.") are not taken as copies
_MAX_DEPTH = 32  # no verdict nests deeper; bounds the work on hostile input
NO_VERDICT = "no JSON object with the rubric's criteria in the judge's own output"
QUOTED_ONLY = ("the judge's JSON only repeated an object shown in its prompt (the rubric's example or the "
               "response), not a verdict of its own")


@dataclass(frozen=True)
class Verdict:
    """One criterion as read from one judge output: a score, or the reason there is none."""

    criterion: str
    score: int | None
    explanation: str = ""
    problem: str = ""  # non-empty when unscored


@dataclass(frozen=True)
class Judgement:
    verdicts: tuple[Verdict, ...]  # one per rubric criterion, in rubric order

    @property
    def valid(self) -> int:
        return sum(v.score is not None for v in self.verdicts)

    @property
    def complete(self) -> bool:
        return self.valid == len(self.verdicts)


class Quoted:
    """What the judge was shown: JSON found in it is never taken as the judge's own verdict."""

    def __init__(self, prompt: str) -> None:
        self._text = _WS.sub("", prompt)
        self._objects: set[str] = set()
        self._explanations: set[str] = set()  # example explanations shown in the prompt, normalised
        for obj, _ in _json_objects(prompt):
            for d in _dicts_within(obj):
                self._objects.add(canonical_json(d))
                if isinstance(d.get("explanation"), str):
                    self._explanations.add(_plain(d["explanation"]))

    def contains(self, obj: dict, raw: str) -> bool:
        return canonical_json(obj) in self._objects or (len(raw) > 2 and _WS.sub("", raw) in self._text)

    def copies_example(self, explanation: str) -> bool:
        plain = _plain(explanation)
        return len(plain) >= _MIN_COPY_CHARS and any(plain in example for example in self._explanations)


def _plain(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def parse_judgement(output: str, rubric: Rubric, quoted: Quoted | None = None) -> Judgement:
    verdict_obj, skipped_quotes = _pick(output, rubric, quoted)
    if verdict_obj is None:
        reason = QUOTED_ONLY if skipped_quotes else NO_VERDICT
        return Judgement(tuple(Verdict(c, None, problem=reason) for c in rubric.criteria))
    by_key = {str(k).strip().lower(): v for k, v in verdict_obj.items()}
    return Judgement(tuple(_verdict(c, by_key.get(c.lower()), rubric, quoted) for c in rubric.criteria))


def parse_as_helm(output: str, rubric: Rubric, quoted: Quoted | None = None) -> Judgement:
    """``parse_judgement`` plus the one repair HELM's ``LLMAsJuryAnnotator`` makes: when its JSON stops
    before the last closing brace ("Expecting ',' delimiter"), HELM reads the text up to the last ``}`` with
    one ``}`` added (helm/benchmark/annotation/model_as_judge.py, crfm-helm 0.5.16)."""
    judgement = parse_judgement(output, rubric, quoted)
    end = output.rfind("}")
    if judgement.valid or end < 0 or any(v.problem != NO_VERDICT for v in judgement.verdicts):
        return judgement
    repaired = parse_judgement(output[:end + 1] + "}", rubric, quoted)
    return repaired if repaired.valid else judgement


def _pick(output: str, rubric: Rubric, quoted: Quoted | None) -> tuple[dict | None, bool]:
    """(the verdict object, whether objects were skipped as quotations of the prompt)."""
    in_blocks = [o for body in _BLOCK.findall(output) for o in _json_objects(body)]
    names = {c.lower() for c in rubric.criteria}
    skipped = False
    for group in (in_blocks, list(_json_objects(output))):  # the rubric block first, then anywhere
        for obj, raw in reversed(group):  # the last word counts: a judge may draft, then answer
            if not any(str(k).strip().lower() in names for k in obj):
                continue
            if quoted is not None and quoted.contains(obj, raw):
                skipped = True
                continue
            return obj, skipped
    return None, skipped


def _verdict(criterion: str, value: object, rubric: Rubric, quoted: Quoted | None = None) -> Verdict:
    if value is None:
        return Verdict(criterion, None, problem="criterion missing")
    explanation = ""
    if isinstance(value, dict):
        fields = {str(k).strip().lower(): v for k, v in value.items()}
        if "score" not in fields:
            return Verdict(criterion, None, problem="no 'score'")
        raw, explanation = fields["score"], fields.get("explanation", "")
        explanation = explanation if isinstance(explanation, str) else json.dumps(explanation)
    else:
        raw = value  # a bare number ("accuracy": 4) is a score without explanation
    explanation = explanation[:MAX_EXPLANATION_CHARS]
    if quoted is not None and explanation and quoted.copies_example(explanation):
        return Verdict(criterion, None, explanation, problem="copied the rubric's example instead of judging")
    score = _as_int(raw)
    if score is None:
        return Verdict(criterion, None, explanation, problem="score is not an integer")
    if not rubric.min_score <= score <= rubric.max_score:
        return Verdict(criterion, None, explanation,
                       problem=f"score {score} outside {rubric.min_score}-{rubric.max_score}")
    return Verdict(criterion, score, explanation)


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):  # bool is an int in Python; true is not a score
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and _INT_TEXT.match(value):
        return int(value)
    return None


def _json_objects(text: str) -> Iterator[tuple[dict, str]]:
    """Top-level JSON objects in ``text``, left to right, with their source text.

    Linear-time candidate search (balanced braces, string-aware, nesting capped) so a hostile
    response full of ``{`` cannot make parsing quadratic; each candidate is then json-decoded."""
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    in_string, escaped_at = False, -1
    for m in _SPECIAL.finditer(text):
        ch, i = m.group(), m.start()
        if in_string:
            if i == escaped_at:
                continue  # the character after a backslash
            if ch == "\\":
                escaped_at = i + 1
            elif ch == '"':
                in_string = False
            continue
        if ch == '"' and stack:  # quotes matter only inside an object; prose may have stray ones
            in_string = True
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            start = stack.pop()
            if len(stack) < _MAX_DEPTH:
                spans.append((start, i + 1))
    spans.sort()
    covered = -1
    for start, end in spans:
        if start < covered:
            continue  # inside an object already yielded
        try:
            obj = json.loads(text[start:end])
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj, text[start:end]
            covered = end


def _dicts_within(value: object) -> Iterator[dict]:
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _dicts_within(v)
    elif isinstance(value, list):
        for v in value:
            yield from _dicts_within(v)
