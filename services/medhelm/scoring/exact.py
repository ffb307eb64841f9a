"""The exact-match family (HELM's ``BasicGenerationMetric``): four stats computed together.

* ``exact_match`` — output equals a correct reference after stripping surrounding whitespace;
* ``quasi_exact_match`` — equal after HELM's normalisation (lowercase, no punctuation, no articles,
  whitespace collapsed), so ``"Yes."`` matches ``"yes"``;
* ``prefix_exact_match`` / ``quasi_prefix_exact_match`` — the output *starts with* the reference
  (models that keep talking after the answer).

Each value is the max over the instance's correct references. An empty output scores 0 (the model
answered nothing) unless a correct reference is empty too: then the empty answer *is* the answer (EHRSQL's
unanswerable questions, whose gold is no query) and scores 1. An instance without a correct reference is
unscored (``None``), never 0.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

from medhelm.scoring.base import MetricResult, ScoringItem
from medhelm.scoring.cpu import CpuPool, run_cpu
from medhelm.scoring.family import family_factories

STATS = ("exact_match", "quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match")

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """HELM's ``normalize_text``: lowercase, drop punctuation, drop articles, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def _exact(gold: str, pred: str) -> bool:
    return gold.strip() == pred.strip()


def _quasi(gold: str, pred: str) -> bool:
    return normalize(gold) == normalize(pred)


def _prefix(gold: str, pred: str) -> bool:
    return pred.strip().startswith(gold.strip())


def _quasi_prefix(gold: str, pred: str) -> bool:
    return normalize(pred).startswith(normalize(gold))


_MATCHERS: dict[str, Callable[[str, str], bool]] = dict(
    zip(STATS, (_exact, _quasi, _prefix, _quasi_prefix), strict=True))


def score_text(prediction: str, golds: tuple[str, ...] | list[str]) -> dict[str, float | None]:
    """The four stats for one output against its correct references (max over references)."""
    if not golds:
        return dict.fromkeys(STATS)
    pred = prediction.strip()
    if not pred:  # nothing answered: right only where answering nothing is the gold answer
        return dict.fromkeys(STATS, float(any(not g.strip() for g in golds)))
    # _MATCHERS' four comparisons with each side stripped / normalised once (not once per matcher and gold)
    norm_pred = normalize(prediction)
    stripped = [g.strip() for g in golds]
    normed = [normalize(g) for g in golds]
    return {"exact_match": float(pred in stripped),
            "quasi_exact_match": float(norm_pred in normed),
            # HELM's prefix rule as it is: an empty reference (or one that normalises to nothing, e.g. the option
            # text "A", an article) is a prefix of every answer; the columns carry HELM's names, so HELM's numbers
            "prefix_exact_match": float(any(pred.startswith(g) for g in stripped)),
            "quasi_prefix_exact_match": float(any(norm_pred.startswith(g) for g in normed))}


_ON_LOOP_CHARS = 20_000  # longer outputs are normalised off the loop (seconds for megabytes)


class ExactMatch:
    """Pure string comparison: cheap enough to run on the event loop for ordinary outputs; a very long
    output (a hostile caller's, or a runaway model) is scored in a thread, or in the service's scoring
    processes, so the loop keeps serving."""

    stat_names = STATS

    def __init__(self, cpu: CpuPool | None = None) -> None:
        self._cpu = cpu

    async def score(self, item: ScoringItem) -> MetricResult:
        golds = [r.text for r in item.instance.correct_references]
        text = item.completion.text
        if len(text) > _ON_LOOP_CHARS:
            return MetricResult(stats=await run_cpu(self._cpu, score_text, text, golds))
        return MetricResult(stats=score_text(text, golds))

    async def aclose(self) -> None:
        return None


_DESCRIPTIONS = {
    "exact_match": "output equals a correct reference (whitespace-stripped)",
    "quasi_exact_match": "output equals a correct reference after lowercasing and removing punctuation and articles",
    "prefix_exact_match": "output starts with a correct reference",
    "quasi_prefix_exact_match": "normalised output starts with a normalised correct reference",
}

FACTORIES = family_factories(
    STATS, family="exact_match", build=lambda spec, ctx: ExactMatch(getattr(ctx, "cpu", None)),
    describe=lambda name: f"{_DESCRIPTIONS[name]}; max over correct references; emits the whole EM family")
