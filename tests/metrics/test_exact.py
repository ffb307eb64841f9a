"""The exact-match family on real PubMedQA answers and the outputs models really give."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from medhelm.scoring import registry
from medhelm.scoring.exact import STATS, normalize
from medhelm.specs import MetricSpec

from .conftest import scoring_item


@pytest.fixture(scope="session")
def decisions(shared_data: Path) -> list[str]:
    items = json.loads((shared_data / "pubmedqa" / "ori_pqal_sample.json").read_text())
    return [item["final_decision"] for item in items.values()]


def _score(prediction: str, golds: list[str], wrong: tuple[str, ...] = ()) -> dict[str, float | None]:
    [metric] = registry.build_all([MetricSpec("exact_match")], ctx=None)  # type: ignore[arg-type]
    return asyncio.run(metric.score(scoring_item(prediction, golds, wrong))).stats


def test_helm_normalisation() -> None:
    assert normalize("  The Patient's BP is HIGH!  ") == "patients bp is high"
    assert normalize("An apple, a day.") == "apple day"
    assert normalize("theory") == "theory"  # articles only as whole words


@pytest.mark.parametrize("output, expected", [
    # output as a model writes it -> (exact, quasi, prefix, quasi_prefix)
    ("{gold}", (1, 1, 1, 1)),
    ("  {gold}\n", (1, 1, 1, 1)),
    ("{Gold}.", (0, 1, 0, 1)),
    ("{gold}, because the trial met its endpoint", (0, 0, 1, 1)),
    ("{Gold}: the abstract says so", (0, 0, 0, 1)),
    ("The answer is {gold}", (0, 0, 0, 0)),
    ("", (0, 0, 0, 0)),
])
def test_family_on_real_pubmedqa_answers(decisions: list[str], output: str, expected: tuple[int, ...]) -> None:
    assert set(decisions) == {"yes", "no", "maybe"}
    others = {"yes": ("no", "maybe"), "no": ("yes", "maybe"), "maybe": ("yes", "no")}
    for gold in dict.fromkeys(decisions):
        stats = _score(output.format(gold=gold, Gold=gold.capitalize()), [gold], others[gold])
        assert tuple(stats[s] for s in STATS) == expected, (gold, output)


def test_incorrect_references_never_count(decisions: list[str]) -> None:
    # "no" is an incorrect reference of a "yes" item: answering it scores 0 on every stat
    stats = _score("no", ["yes"], ("no", "maybe"))
    assert set(stats.values()) == {0.0}


def test_max_over_correct_references() -> None:
    stats = _score("Hypertension", ["hypertension", "Hypertension"])
    assert stats["exact_match"] == 1.0


def test_no_correct_reference_is_unscored_not_zero() -> None:
    assert _score("yes", [], ("no",)) == dict.fromkeys(STATS)


def test_family_is_built_once_and_main_stat_is_the_name_asked_for() -> None:
    specs = [MetricSpec("quasi_exact_match"), MetricSpec("exact_match")]
    assert len(registry.build_all(specs, ctx=None)) == 1  # type: ignore[arg-type]
    assert registry.stat_names(specs[0])[0] == "quasi_exact_match"
    assert set(registry.stat_names(specs[0])) == set(STATS)


def test_arguments_are_rejected() -> None:
    from medhelm.errors import ConfigError

    with pytest.raises(ConfigError, match="takes no arguments"):
        registry.validate([MetricSpec("exact_match", {"ignore_case": True})])
