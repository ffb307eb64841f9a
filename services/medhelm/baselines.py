"""Reference baselines: zero-cost answers that show what "no work" scores on a benchmark.

Four built-in deployments of kind ``baseline`` (``config/model_deployments.yaml``), one per strategy:

* ``baseline/random``     multiple choice / classification: one of the instance's answer options, uniformly
  at random. The draw is seeded by (run seed, instance id) alone, so it is the same on every run, in any order,
  under any concurrency or sharding.
* ``baseline/majority``   multiple choice / classification: the most frequent gold label (the correct option's
  letter, else the correct answer's text: ``scoring.choice.gold_label``) over the instances the run
  evaluates, counted at planning (``majority_label``), never hard-coded. Ties go to the label sorting first.
* ``baseline/empty``      generation: the empty answer (the floor ROUGE/BERTScore/the jury give to nothing).
* ``baseline/copy-input`` generation: the instance's input, copied (what echoing the note back scores).

``--baselines`` on ``medhelm run`` adds the pair that fits each benchmark's task (``for_task``). A baseline's
name starts with ``PREFIX``, and only a baseline's does (``deployments.py`` refuses other names with that
prefix): the store and the leaderboard tell baselines apart by name (``is_baseline``), mark them, cost them
0, and keep them out of the models' win rates and ranks unless asked.

Failure semantics: a strategy that cannot answer a benchmark (random with no answer options; majority with no
gold label) is a ConfigError at planning, before anything is written; nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections import Counter
from collections.abc import Iterable

from medhelm.errors import ConfigError
from medhelm.specs import Instance, TaskType

PREFIX = "baseline/"
RANDOM, MAJORITY, EMPTY, COPY_INPUT = "random", "majority", "empty", "copy-input"
STRATEGIES = (RANDOM, MAJORITY, EMPTY, COPY_INPUT)
CHOICE_TASKS = (TaskType.MULTIPLE_CHOICE, TaskType.CLASSIFICATION)
LETTERS = string.ascii_uppercase  # option letters, as scoring.choice reads them


def is_baseline(name: str) -> bool:
    """A model or deployment name that is a reference baseline."""
    return str(name).startswith(PREFIX)


def name_of(strategy: str) -> str:
    return PREFIX + strategy


def strategy_of(name: str) -> str:
    strategy = str(name).removeprefix(PREFIX)
    if not is_baseline(name) or strategy not in STRATEGIES:
        raise ConfigError(f"unknown baseline '{name}' (known: {', '.join(name_of(s) for s in STRATEGIES)})")
    return strategy


def for_task(task: TaskType) -> tuple[str, ...]:
    """The baselines ``--baselines`` adds to a benchmark of this task type."""
    return tuple(name_of(s) for s in ((RANDOM, MAJORITY) if task in CHOICE_TASKS else (EMPTY, COPY_INPUT)))


def options(instance: Instance) -> tuple[str, ...]:
    """The answers an instance offers: option letters for multiple choice, else its references' texts (the
    gold answer and the wrong ones of a classification CSV), sorted so the draw does not depend on order."""
    if instance.choices:
        return tuple(LETTERS[: len(instance.choices)])
    return tuple(sorted({r.text for r in instance.references if r.text.strip()}))


def majority_label(labels: Iterable[str | None]) -> tuple[str, int, int]:
    """(most frequent gold label, its count, instances with a label) from the instances' gold labels
    (``scoring.choice.gold_label``; None = none); ConfigError when none has a label."""
    counts = Counter(label for label in labels if label is not None)
    if not counts:
        raise ConfigError("baseline/majority needs gold labels (correct answers) and the benchmark has none")
    top = max(counts.values())
    label = min(k for k, v in counts.items() if v == top)
    return label, top, sum(counts.values())


def random_answer(instance: Instance, seed: int) -> str:
    """One of the instance's options, drawn uniformly by a generator seeded with (seed, instance id)."""
    opts = options(instance)
    if not opts:
        raise ConfigError(f"baseline/random needs answer options (choices or answers); instance {instance.id} has none")
    digest = hashlib.sha256(f"{seed}\0{instance.id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).choice(opts)


def answer(strategy: str, instance: Instance, *, seed: int, majority: str | None = None) -> str:
    """The baseline's answer to one instance."""
    if strategy == EMPTY:
        return ""
    if strategy == COPY_INPUT:
        return instance.input
    if strategy == RANDOM:
        return random_answer(instance, seed)
    if strategy == MAJORITY:
        if majority is None:
            raise ConfigError("baseline/majority was not given the majority label (it is computed at planning)")
        return majority
    raise ConfigError(f"unknown baseline strategy '{strategy}'")


def check_fits(strategy: str, task: TaskType, instances: Iterable[Instance]) -> None:
    """At planning: ConfigError when the random baseline has nothing to choose from on these instances."""
    if strategy == RANDOM and not any(len(options(i)) >= 2 for i in instances):
        raise ConfigError(f"baseline/random needs answer options to choose from (multiple choice or "
                          f"classification); this {task.value} benchmark offers none")
