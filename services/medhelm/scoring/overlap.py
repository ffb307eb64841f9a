"""ROUGE-1/2/L (rouge-score, Porter stemming): n-gram overlap with the correct references.

The three are one family: one scorer computes all of them. Each stat is the F-measure, the max over
the instance's correct references (HELM's ``SummarizationMetric``). Tokenising and stemming is CPU
work, so it runs in a worker thread, or in the service's scoring processes (``scoring/cpu.py``), to keep the
event loop sending requests.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from medhelm.scoring.base import MetricResult, ScoringItem
from medhelm.scoring.cpu import CpuPool, run_cpu
from medhelm.scoring.family import family_factories

# our stat name -> rouge-score's rouge type
ROUGE_TYPES = {"rouge_1": "rouge1", "rouge_2": "rouge2", "rouge_l": "rougeL"}
STATS = tuple(ROUGE_TYPES)


def new_scorer() -> Any:
    # imported on first use: rouge-score pulls in nltk, which plain runs should not pay for
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(list(ROUGE_TYPES.values()), use_stemmer=True)


def rouge(scorer: Any, prediction: str, golds: Sequence[str]) -> dict[str, float | None]:
    """F-measures of ``prediction`` against each gold; the max per ROUGE type."""
    if not golds:
        return dict.fromkeys(STATS)
    best = dict.fromkeys(STATS, 0.0)
    for gold in golds:
        scores = scorer.score(gold, prediction)  # rouge-score's order: (target, prediction)
        for stat, rouge_type in ROUGE_TYPES.items():
            best[stat] = max(best[stat], scores[rouge_type].fmeasure)
    return best


@functools.cache
def _scorer() -> Any:
    return new_scorer()  # one per process: built once in each scoring worker (RougeScorer is stateless)


def rouge_here(prediction: str, golds: Sequence[str]) -> dict[str, float | None]:
    """``rouge`` with this process's scorer: what a scoring worker process runs (it pickles by name)."""
    return rouge(_scorer(), prediction, golds)


class Rouge:
    stat_names = STATS

    def __init__(self, cpu: CpuPool | None = None) -> None:
        self._cpu = cpu
        if cpu is None:
            _scorer()  # built now (nltk import) rather than on the first instance

    async def score(self, item: ScoringItem) -> MetricResult:
        golds = [r.text for r in item.instance.correct_references]
        stats = await run_cpu(self._cpu, rouge_here, item.completion.text, golds)
        return MetricResult(stats=stats)

    async def aclose(self) -> None:
        return None


FACTORIES = family_factories(
    STATS, family="rouge", build=lambda spec, ctx: Rouge(getattr(ctx, "cpu", None)),
    describe=lambda name: f"ROUGE-{name[-1].upper()} F-measure (rouge-score, Porter-stemmed), max over correct "
                          "references; emits rouge_1, rouge_2 and rouge_l")
