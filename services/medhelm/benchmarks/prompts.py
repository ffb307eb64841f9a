"""Prompt construction shared by every catalogue benchmark.

A benchmark MedHELM ships upstream declares its prompt as HELM's run spec and scenario do (``HelmLayout``): the
scenario's input text (``input_format``, the instance's context and question in it), then HELM's adapter rule
as crfm-helm applies it with no in-context examples, so the prompt is byte for byte the one HELM sends:
``<instructions>\n\n`` (nothing when there are none), the input noun's prefix (``<noun>: ``, or ``<noun>:\n``
when the run spec puts a newline after it), the input, ``\n``, the options as ``A. <option>\n`` (multiple
choice joint; its input prefix and newline exist only when the run spec names an input noun, an empty noun still
giving ``: ``), and the output noun's prefix without its trailing space (``Answer:``, nothing without a noun).

Otherwise (benchmarks of our own), one user message: instructions, then the context (note, abstract, EHR, dialogue), then the question,
then the lettered options (listed once), then the answer cue. Fixes over upstream HELM: options are not
repeated, empty labels never produce a stray ": ", and when the prompt is too long the *context* is cut
(from the end, or from the start for timelines where the latest events matter) — never the question or the
options — and ``Prompt.truncated`` records it.

Instance convention used by the loaders: ``extra["context"]`` (optional) is the long passage and
``extra["question"]`` (optional) the question; without them ``instance.input`` is the question.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from medhelm.benchmarks.base import PromptBudget
from medhelm.specs import Instance, Prompt

LETTERS = string.ascii_uppercase
TRUNCATION_MARK = "[... truncated to fit the context window ...]"


@dataclass(frozen=True)
class HelmLayout:
    """What shapes a prompt in HELM's run spec (its adapter spec's nouns, generation or multiple choice joint)
    and its scenario (the input text, ``{context}`` and ``{question}`` placeholders filled verbatim)."""

    input_format: str = "{question}"
    input_noun: str | None = None
    output_noun: str | None = None
    newline_after_input_noun: bool = False  # generation only, as in HELM's get_generation_adapter_spec
    newline_after_output_noun: bool = False
    joint: bool = False  # multiple_choice_joint: the options follow the input


@dataclass(frozen=True)
class PromptStyle:
    instructions: str
    context_label: str = ""  # e.g. "Patient note"; "" = the context stands on its own
    question_label: str = ""  # e.g. "Question"
    answer_label: str = "Answer"  # the closing cue, e.g. "Clinical Note" -> "Clinical Note:"
    keep_end: bool = False  # truncate from the start of the context (EHR timelines: latest events matter)
    helm: HelmLayout | None = None  # an upstream benchmark: HELM's layout (the labels above are then unused)


def parts(instance: Instance) -> tuple[str, str]:
    """(context, question) of an instance under the convention above."""
    context = str(instance.extra.get("context") or "")
    question = instance.extra.get("question")
    if question is None:
        question = "" if context else instance.input
    return context, str(question)


def _labelled(label: str, text: str) -> str:
    if not label:
        return text
    return f"{label}:\n{text}" if "\n" in text else f"{label}: {text}"


def _noun_prefix(noun: str | None, newline: bool) -> str:
    return "" if noun is None else f"{noun}:" + ("\n" if newline else " ")


def helm_input(layout: HelmLayout, instance: Instance, context: str) -> str:
    """HELM's scenario's input text (its ``instance.input.text``) around ``context``: the prompt's input, and, with
    the whole context, the ``{QUESTION}`` HELM's annotators put in their judge prompts (``Prompt.question``)."""
    _, question = parts(instance)
    return layout.input_format.format(context=context, question=question)


def render_helm(style: PromptStyle, layout: HelmLayout, instance: Instance, context: str) -> str:
    text = helm_input(layout, instance, context)
    if layout.joint:
        named = layout.input_noun is not None
        block = (f"{layout.input_noun}: " if named else "") + text + ("\n" if named else "")
        block += "".join(f"{LETTERS[i]}. {c}\n" for i, c in enumerate(instance.choices))
        block += f"{layout.output_noun or ''}: ".rstrip()
    else:
        block = _noun_prefix(layout.input_noun, layout.newline_after_input_noun) + text + "\n"
        block += _noun_prefix(layout.output_noun, layout.newline_after_output_noun).rstrip()
    return f"{style.instructions}\n\n{block}" if style.instructions else block


def render(style: PromptStyle, instance: Instance, context: str) -> str:
    if style.helm is not None:
        return render_helm(style, style.helm, instance, context)
    _, question = parts(instance)
    blocks = [style.instructions.strip()]
    if context:
        blocks.append(_labelled(style.context_label, context))
    if question:
        blocks.append(_labelled(style.question_label, question.strip()))
    if instance.choices:
        blocks.append("\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(instance.choices)))
    if style.answer_label:
        blocks.append(f"{style.answer_label}:")
    return "\n\n".join(b for b in blocks if b)


def build_prompt(style: PromptStyle, instance: Instance, budget: PromptBudget) -> Prompt:
    context, _ = parts(instance)
    context = context if style.helm is not None else context.strip()  # HELM's input is the scenario's, verbatim
    text = render(style, instance, context)
    question = helm_input(style.helm, instance, context) if style.helm is not None else None  # never cut
    limit = budget.max_prompt_tokens
    if limit is None or budget.count_tokens(text) <= limit or not context:
        return Prompt.user(text, question=question)
    return Prompt.user(_fit(style, instance, context, budget, limit), truncated=True, question=question)


def _fit(style: PromptStyle, instance: Instance, context: str, budget: PromptBudget, limit: int) -> str:
    """The longest cut of the context (in characters, binary search) whose prompt fits ``limit`` tokens."""

    def cut(n: int) -> str:
        if n <= 0:
            return TRUNCATION_MARK
        kept = context[len(context) - n:] if style.keep_end else context[:n]
        return f"{TRUNCATION_MARK}\n{kept}" if style.keep_end else f"{kept}\n{TRUNCATION_MARK}"

    lo, hi = 0, len(context)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if budget.count_tokens(render(style, instance, cut(mid))) <= limit:
            lo = mid
        else:
            hi = mid - 1
    # Even with no context the question may not fit: it is kept anyway (the server decides), never cut.
    return render(style, instance, cut(lo))
