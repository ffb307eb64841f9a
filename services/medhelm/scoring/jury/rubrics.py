"""Judge rubrics: a judge prompt template plus the criteria and score scale it asks for.

Three sources, one shape. A built-in rubric (one of the 13 open-ended MedHELM benchmarks) comes in two
styles (docs/jury.md, "Two prompt styles"): ``helm``, HELM's own annotator prompt for that benchmark, kept
byte for byte in ``config/jury_helm_prompts.yaml`` with HELM's request settings; or ``rubric``, a row of
``config/jury_rubrics.yaml`` rendered through our one shared template (asked with a JSON schema). A custom
rubric is the seeds' judge-prompt text (``{QUESTION}``, ``{RESPONSE}``, optional ``{GOLD_RESPONSE}`` and a
``<rubric_criteria>`` JSON block whose keys are the criteria; scales start at 0), asked with our request
(``rubric``) or with HELM's (``helm``: as ``LLMAsJuryAnnotator`` asks a custom benchmark's judges), the jury's
``custom_prompts``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from medhelm.errors import ConfigError
from medhelm.json_text import canonical_json, digest

RUBRICS_PATH = Path(__file__).resolve().parents[2] / "config" / "jury_rubrics.yaml"
HELM_PROMPTS_PATH = RUBRICS_PATH.with_name("jury_helm_prompts.yaml")
STYLES = ("helm", "rubric")  # a built-in rubric's prompt: HELM's annotator text, or our shared template
INSTANCE_FIELDS = ("QUESTION", "RESPONSE", "GOLD_RESPONSE")
DEFAULT_CUSTOM_MAX = 5
EXPLANATION_MAX_CHARS = 300  # bounds a constrained judge's output: "one or two sentences" fit

_PLACEHOLDER = re.compile(r"\{([A-Z][A-Z_]*)\}")
# the innermost block: prose that mentions the tag ("inside <rubric_criteria> tags") is not a block
_BLOCK = re.compile(r"<rubric_criteria>((?:(?!<rubric_criteria>).)*?)</rubric_criteria>", re.S | re.I)
_RANGE = re.compile(r"(?<![\w.])0\s*(?:-|–|—|to|and)\s*(\d{1,3})(?!\w|\.\d)")  # "0 to 5." yes, "0-5.5" no


JUDGE_TRUNCATION_MARK = "[... truncated to fit the judge's context window ...]"


def _cut(text: str, n: int) -> str:
    if n >= len(text):
        return text
    return f"{text[:n]}\n{JUDGE_TRUNCATION_MARK}" if n > 0 else JUDGE_TRUNCATION_MARK


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{NAME}`` for the given names in one pass.

    Inserted text is never re-scanned, so a ``$``, ``{RESPONSE}`` or ``{`` inside a candidate's answer
    stays literal; unknown ``{...}`` (e.g. the rubric's JSON) is left as written."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass(frozen=True)
class Rubric:
    name: str  # built-in rubric name, or "custom:<digest>" for a judge prompt given as text
    template: str  # judge prompt with {QUESTION}, {RESPONSE}, optional {GOLD_RESPONSE}
    criteria: tuple[str, ...]
    min_score: int
    max_score: int
    helm_request: tuple[int, float] | None = None  # HELM's (max_tokens, temperature): its annotator's request

    @property
    def uses_gold(self) -> bool:
        return "{GOLD_RESPONSE}" in self.template

    def render(self, *, question: str, response: str, gold: str = "") -> str:
        return fill(self.template, {"QUESTION": question, "RESPONSE": response, "GOLD_RESPONSE": gold})

    def render_within(self, *, question: str, response: str, gold: str, limit: int | None,
                      count: Callable[[str], int]) -> tuple[str, bool] | None:
        """The judge prompt fitted to ``limit`` tokens -> (text, truncated), or None when even the bare
        rubric does not fit. Cut first the question (the dialogue / note the candidate was given), then the
        gold reference, then the response, each keeping its beginning (binary search on characters)."""
        values = {"QUESTION": question, "RESPONSE": response, "GOLD_RESPONSE": gold}
        if limit is None or count(fill(self.template, values)) <= limit:
            return fill(self.template, values), False
        for name in ("QUESTION", "GOLD_RESPONSE", "RESPONSE"):
            full = values[name]

            def fits(n: int, name: str = name, full: str = full) -> bool:
                trial = dict(values, **{name: _cut(full, n)})
                return count(fill(self.template, trial)) <= limit

            if fits(0):
                lo, hi = 0, len(full)
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
                values[name] = _cut(full, lo)
                return fill(self.template, values), True
            values[name] = _cut(full, 0)
        return None

    def json_schema(self) -> str:
        """Schema for guided decoding (vLLM) / grammar (llama.cpp), as canonical text (hashable)."""
        item = {
            "type": "object",
            "properties": {
                "explanation": {"type": "string", "maxLength": EXPLANATION_MAX_CHARS},
                "score": {"type": "integer", "minimum": self.min_score, "maximum": self.max_score},
            },
            "required": ["explanation", "score"],
            "additionalProperties": False,
        }
        return canonical_json({
            "type": "object",
            "properties": {c: item for c in self.criteria},
            "required": list(self.criteria),
            "additionalProperties": False,
        })


# ------------------------------------------------------------------------------------------------
# built-in rubrics


@cache
def _builtin_doc() -> dict:
    return yaml.safe_load(RUBRICS_PATH.read_text(encoding="utf-8"))


def builtin_names() -> tuple[str, ...]:
    return tuple(_builtin_doc()["rubrics"])


def _row(table: Mapping[str, dict], name: str) -> dict:
    """A built-in rubric's row of ``table``, or the one error naming the rubrics known."""
    row = table.get(name)
    if row is None:
        raise ConfigError(f"unknown jury rubric '{name}' (known: {', '.join(table)})", field="rubric")
    return row


@cache
def builtin(name: str) -> Rubric:
    doc = _builtin_doc()
    row = _row(doc["rubrics"], name)
    lo, hi = int(doc["scale"]["min"]), int(doc["scale"]["max"])
    criteria = tuple(row["criteria"])
    # Placeholders, not a valid example: small judges copy a valid example verbatim (and a copy is
    # rejected as a quotation by the parser), so show the shape without values to copy.
    example = "{\n" + ",\n".join(f'  "{c}": {{"explanation": "<one or two sentences>", "score": <integer {lo}-{hi}>}}'
                                  for c in criteria) + "\n}"
    parts = {
        "TASK": row["task"],
        "INPUT_LABEL": row["input_label"],
        "GOLD_SECTION": doc["gold_section"] if row["gold"] else "",
        "CRITERIA": "\n".join(f"- {c}: {text}" for c, text in row["criteria"].items()),
        "RUBRIC_JSON": example,
        "MIN": str(lo),
        "MAX": str(hi),
    }
    # Two passes on our own trusted text: the gold section itself carries {GOLD_RESPONSE}.
    template = fill(doc["template"], parts)
    return Rubric(name=name, template=template, criteria=criteria, min_score=lo, max_score=hi)


@cache
def _helm_doc() -> dict:
    return yaml.safe_load(HELM_PROMPTS_PATH.read_text(encoding="utf-8"))


@cache
def helm(name: str) -> Rubric:
    """The built-in rubric ``name`` as HELM's annotator asks it: its prompt text, criteria and request."""
    doc = _helm_doc()
    row = _row(doc["prompts"], name)
    return Rubric(name=name, template=row["template"], criteria=tuple(row["criteria"]),
                  min_score=int(doc["scale"]["min"]), max_score=int(doc["scale"]["max"]), helm_request=helm_request())


def helm_request() -> tuple[int, float]:
    """(max_tokens, temperature) of ``LLMAsJuryAnnotator``'s request: every judge HELM asks, built-in or custom."""
    request = _helm_doc()["request"]
    return int(request["max_tokens"]), float(request["temperature"])


# ------------------------------------------------------------------------------------------------
# custom rubrics (the seeds' judge-prompt format)


def custom(prompt_template: str, *, min_score: int | None = None, max_score: int | None = None,
           where: str = "", style: str = "rubric") -> Rubric:
    """A rubric from the seeds' judge-prompt text; criteria are the keys of its ``<rubric_criteria>`` JSON.
    ``style`` ``helm``: asked with HELM's request (``helm_request``), as crfm-helm's configurable benchmark asks."""
    where = where or None
    for name in ("QUESTION", "RESPONSE"):
        if "{" + name + "}" not in prompt_template:
            raise ConfigError(f"the judge prompt has no {{{name}}} placeholder", path=where, field="prompt_file")
    criteria = _criteria_of(prompt_template, where)
    lo = 0 if min_score is None else int(min_score)
    hi = _stated_max(prompt_template, where) if max_score is None else int(max_score)
    if hi <= lo:
        raise ConfigError(f"score scale {lo}-{hi} is empty", path=where, field="max_score")
    return Rubric(name=f"custom:{digest(prompt_template, 12)}", template=prompt_template, criteria=criteria,
                  min_score=lo, max_score=hi, helm_request=helm_request() if style == "helm" else None)


def _criteria_of(text: str, where: str | None) -> tuple[str, ...]:
    blocks = _BLOCK.findall(text)
    if not blocks:
        raise ConfigError("the judge prompt has no <rubric_criteria>{...}</rubric_criteria> block", path=where,
                          field="prompt_file")
    body = blocks[-1].strip()
    try:
        obj = json.loads(body)
    except (RecursionError, ValueError) as err:
        if not isinstance(err, json.JSONDecodeError):  # nested past the stack, a 5,000-digit integer
            raise ConfigError("the <rubric_criteria> block is not a usable JSON object (nested too deeply or a "
                              "number too long)", path=where, field="prompt_file") from None
        # Tolerate an illustrative, not-quite-JSON example: read the top-level "key": { lines.
        obj = dict.fromkeys(re.findall(r'^\s{0,4}"([^"]+)"\s*:\s*\{', body, re.M))
    if not isinstance(obj, dict) or not obj:
        raise ConfigError("the <rubric_criteria> block names no criteria (expected a JSON object)", path=where,
                          field="prompt_file")
    criteria = tuple(str(k) for k in obj)
    if len({c.lower() for c in criteria}) != len(criteria):
        raise ConfigError("the <rubric_criteria> block repeats a criterion", path=where, field="prompt_file")
    return criteria


def _stated_max(text: str, where: str | None) -> int:
    """The scale's top as stated in the prompt ("from 0 to 5", "0-10"); 5 when unstated."""
    found = {int(m) for m in _RANGE.findall(_BLOCK.sub("", text))}
    found.discard(0)
    if len(found) > 1:
        raise ConfigError(f"the judge prompt states several score ranges (0-{', 0-'.join(map(str, sorted(found)))});"
                          f" set max_score", path=where, field="max_score")
    return found.pop() if found else DEFAULT_CUSTOM_MAX


def from_args(args: Mapping[str, object], *, where: str = "", style: str = "rubric",
              custom_style: str = "rubric") -> Rubric:
    """The rubric a ``jury_score`` MetricSpec asks for (``rubric:`` or ``prompt_template:``); ``style`` picks a
    built-in rubric's prompt (``helm`` or ``rubric``, the jury's ``builtin_prompts``), ``custom_style`` how a
    judge prompt given as text is asked (the jury's ``custom_prompts``)."""
    if ("rubric" in args) == ("prompt_template" in args):
        raise ConfigError("jury_score needs exactly one of 'rubric' (a built-in name) or 'prompt_template' "
                          "(a judge prompt)", path=where or None, field="metrics")
    if "rubric" in args:
        name = str(args["rubric"])
        builtin(name)  # an unknown name is one error, whatever the style
        return helm(name) if style == "helm" else builtin(name)
    return custom(str(args["prompt_template"]), min_score=_int_or_none(args, "min_score", where),
                  max_score=_int_or_none(args, "max_score", where), where=where, style=custom_style)


def _int_or_none(args: Mapping[str, object], key: str, where: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        raise ConfigError("must be an integer", path=where or None, field=key) from None
