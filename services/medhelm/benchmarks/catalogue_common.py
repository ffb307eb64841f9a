"""Pieces the three catalogue tables share: each row's card, metric sets, argument sets."""

from __future__ import annotations

from medhelm.benchmarks.entry import Arg, InstanceSet
from medhelm.cards import BY_NAME
from medhelm.specs import MetricSpec


def card(name: str) -> dict[str, object]:
    """What a catalogue row takes from its card (``medhelm/cards.py``, written once): name, display name,
    category, subcategory, access, main metric and main split. A row is ``CatalogueEntry(**card("x"), ...)``."""
    c = BY_NAME[name]
    return {"name": c.name, "display_name": c.display_name, "category": c.category, "subcategory": c.subcategory,
            "access": c.access, "main_metric": c.main_metric, "main_split": c.main_split}


# Multiple choice (scoring/choice.py): `exact_match` and its family by HELM's rule (the stripped answer must be
# the letter) are the leaderboard column, as upstream (the cards' main_metric); `lenient_match` (the answer
# mapped to an option from "A", "(A)", "Answer: A", the option text) is shown beside it (the cards' beside).
CHOICE = (MetricSpec("multiple_choice"),)

EXACT = (MetricSpec("exact_match"),)


def jury(rubric: str) -> tuple[MetricSpec, ...]:
    """A built-in jury rubric plus ROUGE (BERTScore with bertscore=true): upstream's summarisation metrics."""
    return (MetricSpec("jury_score", {"rubric": rubric}), MetricSpec("rouge_1"), MetricSpec("rouge_2"),
            MetricSpec("rouge_l"))


JURY_ARGS = (
    Arg("jury_config_path", "a jury YAML replacing the default judges (see docs/jury.md)"),
    Arg("bertscore", "also compute BERTScore P/R/F (needs the bertscore extra)", choices=("true", "false")),
)
DATA_PATH = Arg("data_path", "where your copy of the data is (see `medhelm describe`)", required=True)


def split_or_leaderboard(test: str, leaderboard: str) -> tuple[InstanceSet, InstanceSet]:
    """``instance_set=test`` (default: the published test split whole) or ``instance_set=leaderboard`` (MedHELM's
    leaderboard set, drawn from more than the test split): the two descriptions say what each holds."""
    return InstanceSet("test", test), InstanceSet("leaderboard", leaderboard, leaderboard=True)
