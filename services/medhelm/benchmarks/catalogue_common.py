"""Pieces the three catalogue tables share: metric sets, argument sets, taxonomy shorthands."""

from __future__ import annotations

from medhelm.benchmarks.entry import Arg
from medhelm.specs import MetricSpec

CDS = "Clinical Decision Support"
CNG = "Clinical Note Generation"
PCE = "Patient Communication and Education"
MRA = "Medical Research Assistance"
AW = "Administration and Workflow"

# Multiple choice: the answer is mapped to an option ("A", "(A)", "Answer: A", the option text);
# `exact_match` is the leaderboard column, as upstream.
CHOICE = (MetricSpec("multiple_choice"),)
CHOICE_MAIN = "exact_match"

EXACT = (MetricSpec("exact_match"),)


def jury(rubric: str) -> tuple[MetricSpec, ...]:
    """A built-in jury rubric plus ROUGE (BERTScore with bertscore=true): upstream's summarisation metrics."""
    return (MetricSpec("jury_score", {"rubric": rubric}), MetricSpec("rouge_1"), MetricSpec("rouge_2"),
            MetricSpec("rouge_l"))


JURY_MAIN = "jury_score_normalized"  # the 1-5 judge mean mapped to 0-1: comparable across columns
JURY_ARGS = (
    Arg("jury_config_path", "a jury YAML replacing the default judges (see docs/jury.md)"),
    Arg("bertscore", "also compute BERTScore P/R/F (needs the bertscore extra)", choices=("true", "false")),
)
DATA_PATH = Arg("data_path", "where your copy of the data is (see `medhelm describe`)", required=True)
