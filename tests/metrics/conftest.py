"""Fixtures for the metrics area: real text pairs and a ScoringItem builder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from medhelm.scoring.base import ScoringItem
from medhelm.specs import BenchmarkSpec, Completion, Instance, Prompt, Reference, RunSpec

_SPEC = BenchmarkSpec(name="metrics-test", display_name="metrics-test", description="", category="",
                      subcategory="", access="public", task_type="generation", metrics=(), main_metric="",
                      max_tokens=16)
_RUN = RunSpec(entry="metrics-test", benchmark=_SPEC, benchmark_args={}, model="m", deployment="d")


def scoring_item(prediction: str, golds: Sequence[str], wrong: Sequence[str] = ()) -> ScoringItem:
    refs = tuple(Reference(g, True) for g in golds) + tuple(Reference(w, False) for w in wrong)
    instance = Instance(id="1", input="question", references=refs)
    return ScoringItem(run=_RUN, instance=instance, prompt=Prompt.user("question"), completion=Completion(prediction))


def _section(note: str, heading: str) -> str:
    """The text under ``heading`` in an ACI-Bench note, up to the next all-caps heading."""
    lines = note.split("\n")
    start = lines.index(heading) + 1
    body = []
    for line in lines[start:]:
        if line.isupper() and line.strip():
            break
        body.append(line)
    return "\n".join(body).strip()


@pytest.fixture(scope="session")
def aci_notes(shared_data: Path) -> list[dict[str, str]]:
    return json.loads((shared_data / "aci_bench" / "clinicalnlp_taskB_test1_full.json").read_text())["data"]


@pytest.fixture(scope="session")
def aci_pairs(aci_notes: list[dict[str, str]]) -> list[tuple[str, list[str]]]:
    """(prediction, references) pairs from real ACI-Bench notes: a hand paraphrase of a real section,
    the encounter's own dialogue against its note, an unrelated note's section, and two references."""
    hpi = [_section(n["tgt"], "HISTORY OF PRESENT ILLNESS").split("\n")[0] for n in aci_notes[:4]]
    paraphrase = ("Andrew Campbell, a 59-year-old man with a history of depression, type 2 diabetes and high "
                  "blood pressure, comes in today with an upper respiratory infection.")
    return [
        (paraphrase, [hpi[0]]),
        (aci_notes[1]["src"][:800], [hpi[1]]),  # what was said vs what was written
        (hpi[2], [hpi[3]]),  # two different patients
        (paraphrase, [hpi[2], hpi[0]]),  # max over references: the second one matches
        (hpi[1], [hpi[1]]),  # identical
    ]
