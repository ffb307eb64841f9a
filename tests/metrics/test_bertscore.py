"""BERTScore equals bert-score's own output (same local MiniLM model) on real ACI-Bench text."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from medhelm.errors import ConfigError
from medhelm.scoring import registry
from medhelm.scoring.bertscore import ENV_MODEL, model_for
from medhelm.specs import MetricSpec

from .conftest import scoring_item

STATS = ("BERTScore-P", "BERTScore-R", "BERTScore-F")


def _ours(pairs: list[tuple[str, list[str]]]) -> list[dict[str, float | None]]:
    [metric] = registry.build_all([MetricSpec("BERTScore-F"), MetricSpec("BERTScore-P")], ctx=None)  # type: ignore[arg-type]

    async def run() -> list[dict[str, float | None]]:
        # scored concurrently, as the pipeline does: instances are batched into shared forward passes
        results = await asyncio.gather(*(metric.score(scoring_item(p, refs)) for p, refs in pairs))
        await metric.aclose()
        return [r.stats for r in results]

    return asyncio.run(run())


@pytest.mark.slow  # loads the model twice (ours and the library's own): ~15 s on 2 cores
def test_bertscore_equals_bert_score_on_real_pairs(aci_pairs: list[tuple[str, list[str]]]) -> None:
    from bert_score import BERTScorer

    model = model_for(MetricSpec("BERTScore-F"))
    assert model.num_layers == 6 and Path(model.path).name == "model"
    ours = _ours(aci_pairs)
    scorer = BERTScorer(model_type=model.path, num_layers=6, lang="en")  # the library on its own
    p, r, f = scorer.score([pred for pred, _ in aci_pairs], [refs for _, refs in aci_pairs])
    for i, stats in enumerate(ours):
        for stat, expected in zip(STATS, (p[i], r[i], f[i]), strict=True):
            assert stats[stat] == pytest.approx(float(expected), abs=1e-5), (i, stat)
    assert ours[4]["BERTScore-F"] == pytest.approx(1.0, abs=1e-5)  # identical text
    assert ours[0]["BERTScore-F"] > 0.8 > ours[2]["BERTScore-F"]  # paraphrase vs a different patient


def test_empty_output_scores_zero_and_no_reference_is_unscored(aci_pairs: list[tuple[str, list[str]]]) -> None:
    empty, unreferenced = _ours([("", aci_pairs[0][1]), (aci_pairs[0][0], [])])
    assert empty == dict.fromkeys(STATS, 0.0)
    assert unreferenced == dict.fromkeys(STATS)


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bert_score", None)  # as if bert-score were not installed
    with pytest.raises(ConfigError, match=r"pip install 'medhelm-k8s\[bertscore\]'"):
        registry.validate([MetricSpec("BERTScore-F")])


def test_model_must_be_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="never downloads") as err:
        registry.validate([MetricSpec("BERTScore-F", {"model_type": "microsoft/deberta-xlarge-mnli"})])
    assert "model_type" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv(ENV_MODEL, str(tmp_path))
    with pytest.raises(ConfigError, match=ENV_MODEL):
        registry.validate([MetricSpec("BERTScore-F")])


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="unknown argument"):
        registry.validate([MetricSpec("BERTScore-F", {"lang": "en"})])
    with pytest.raises(ConfigError, match="num_layers"):
        registry.validate([MetricSpec("BERTScore-F", {"num_layers": 0})])


def test_environment_model_is_recorded_in_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = model_for(MetricSpec("BERTScore-F")).path
    monkeypatch.setenv(ENV_MODEL, folder)
    [resolved] = registry.resolve_all([MetricSpec("BERTScore-F")], ctx=None)  # type: ignore[arg-type]
    assert resolved.args["model_type"] == folder
    assert model_for(resolved).num_layers == 6  # read from the folder's config.json
