"""Small constructors the loaders share, so every benchmark's instances follow one convention
(``extra["context"]`` = the long passage, ``extra["question"]`` = the question; see prompts.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from medhelm.errors import ConfigError
from medhelm.specs import FrozenMap, Instance, Reference


def choice_instance(id: str, question: str, options: Sequence[str], correct: int, *, context: str = "",
                    split: str = "test", extra: Mapping[str, Any] | None = None) -> Instance:
    """A multiple-choice instance: options in display order (lettered A, B, ... by the prompt builder)."""
    if not 0 <= correct < len(options):
        raise ValueError(f"correct option {correct} out of range for {len(options)} options")
    text = f"{context}\n\n{question}".strip() if context else question
    return Instance(
        id=str(id), input=text, split=split, choices=tuple(options),
        references=tuple(Reference(o, i == correct) for i, o in enumerate(options)),
        extra=FrozenMap({**(extra or {}), "context": context, "question": question}),
    )


def text_instance(id: str, reference: str | Sequence[str], *, context: str = "", question: str = "",
                  split: str = "test", extra: Mapping[str, Any] | None = None) -> Instance:
    """A generation instance; ``input`` (what a judge sees) is the context and/or the question."""
    refs = [reference] if isinstance(reference, str) else list(reference)
    text = "\n\n".join(p for p in (context, question) if p)
    fields: dict[str, Any] = {**(extra or {})}
    if context:
        fields["context"] = context
        fields["question"] = question
    return Instance(id=str(id), input=text, split=split,
                    references=tuple(Reference(r) for r in refs), extra=FrozenMap(fields))


def label_index(value: str, labels: Sequence[str], *, path: Any, line: int, column: str) -> int:
    """Index of a label cell (e.g. 'A'/'B'/'C'); anything else is a ConfigError naming file:line."""
    v = str(value).strip()
    if v not in labels:
        raise ConfigError(f"column '{column}' must be one of {', '.join(labels)}", path=path, line=line)
    return labels.index(v)


HELM_MAX_EVAL = 1000  # MedHELM's leaderboard recipe runs every benchmark with --max-eval-instances 1000


def helm_draw(n: int, k: int = HELM_MAX_EVAL) -> list[int]:
    """The positions (ascending) of the ``n`` evaluation instances HELM's runner kept: all when ``n <= k``, else
    ``np.random.seed(0); np.random.choice(instances, k, replace=False)`` (``runner.downsample_eval_instances``),
    which is the legacy ``RandomState(0).permutation(n)[:k]``. Reproduces MedHELM's leaderboard set where the
    eval splits are read in upstream's order."""
    if n <= k:
        return list(range(n))
    import numpy as np

    return sorted(int(i) for i in np.random.RandomState(0).permutation(n)[:k])
