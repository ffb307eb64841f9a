"""A built-in MedHELM jury run (``med_dialog``) in the layout crfm-helm 0.5.16 writes, made from a real jury run.

A built-in MedHELM jury benchmark cannot run offline (its SummarizationMetric loads spaCy/BERTScore models and
its judges are fixed Stanford deployments), so this reproduces its output layout from HELM's source, version
crfm-helm 0.5.16:

* ``helm/benchmark/run_specs/medhelm_run_specs.py`` ``get_med_dialog_spec``: metric specs are
  ``get_summarization_metric_specs(metric_args) + [MetricSpec(MedDialogMetric)]`` -- SummarizationMetric, then the
  basic metrics (``get_basic_metric_specs([])``), then the jury metric; groups ``["med_dialog"]``;
* ``helm/benchmark/runner.py``: ``per_instance_stats.extend(metric_result.per_instance_stats)`` once per metric,
  so ``per_instance_stats.json`` holds one entry per instance per metric, in that order;
* ``helm/benchmark/metrics/med_dialog_metrics.py`` / ``llm_jury_metrics.py``: ``med_dialog_accuracy`` is the mean
  of every ``score`` of every judge present in ``annotations["med_dialog"]`` (judges ``gpt``, ``llama``,
  ``claude`` from ``annotation/med_dialog_annotator.py`` ANNOTATOR_MODELS), ``default_score`` 1.0 when none;
* ``helm/benchmark/metrics/statistic.py``: a Stat is ``{name, count, sum, sum_squared, min, max, mean,
  variance, stddev}``; ``stats.json`` aggregates per instance means (one trial).

Input: the real configurable jury run (two mock judges scoring 0-4, one failing on some instances). Its basic
metric entries and request states are kept as HELM wrote them; judge scores move to 1-5 (+1), judge-1 becomes
``gpt`` and (shifted by one point on odd instances) ``claude``, judge-2 becomes ``llama``. Summarization values
are deterministic stand-ins (this fixture is about the layout, not ROUGE).

Usage (with crfm-helm 0.5.16 importable): python medhelm_jury_layout.py <real jury run dir> <output suite dir>
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

JUDGES = {"mock/gpt-4-judge-1": "gpt", "mock/gpt-4-judge-2": "llama"}
SUMMARIZATION = ("rouge_1", "rouge_2", "rouge_l", "summarization_coverage", "summarization_density",
                 "summarization_compression")


def stat(name: str, values: list[float], split: str = "test") -> dict:
    n = len(values)
    total, sq = sum(values), sum(v * v for v in values)
    mean = total / n if n else None
    variance = (sq / n - mean * mean) if n else None
    return {"name": {"name": name, "split": split}, "count": n, "sum": total, "sum_squared": sq,
            "min": min(values) if n else None, "max": max(values) if n else None, "mean": mean,
            "variance": variance, "stddev": math.sqrt(max(variance, 0.0)) if n else None}


def stand_in(instance_id: str, name: str) -> float:
    return int(hashlib.sha256(f"{instance_id}/{name}".encode()).hexdigest()[:6], 16) % 1000 / 1000


HEAD = "med_dialog,subset=healthcaremagic"


def main(src: Path, suite: Path) -> None:
    spec = json.loads((src / "run_spec.json").read_text())
    name = HEAD + ":" + spec["name"].split(":", 1)[1]  # HELM's own spelling of the model part, kept
    dst = suite / (HEAD + ":" + src.name.split(":", 1)[1])
    dst.mkdir(parents=True, exist_ok=True)
    # the run spec exactly as crfm-helm 0.5.16 builds and writes it (runner.py: asdict_without_nones)
    from dataclasses import replace

    from helm.benchmark.run_specs.medhelm_run_specs import get_med_dialog_spec
    from helm.common.general import asdict_without_nones

    helm_spec = get_med_dialog_spec(subset="healthcaremagic")
    adapter = replace(helm_spec.adapter_spec, model=spec["adapter_spec"]["model"],
                      model_deployment=spec["adapter_spec"]["model_deployment"])
    spec = asdict_without_nones(replace(helm_spec, name=name, adapter_spec=adapter))
    (dst / "run_spec.json").write_text(json.dumps(spec, indent=2))

    state = json.loads((src / "scenario_state.json").read_text())
    verdicts: dict[str, dict] = {}
    for i, rs in enumerate(state["request_states"]):
        old = (rs.get("annotations") or {}).get("note_summary_jury") or {}
        new = {"prompt_text": old.get("prompt_text")}
        for judge, verdict in old.items():
            if judge in JUDGES and verdict:
                new[JUDGES[judge]] = {c: {**v, "score": int(v["score"]) + 1} for c, v in verdict.items()}
        if "gpt" in new:
            new["claude"] = {c: {**v, "score": min(5, v["score"] + i % 2)} for c, v in new["gpt"].items()}
        rs["annotations"] = {"med_dialog": new}
        verdicts[rs["instance"]["id"]] = new
    (dst / "scenario_state.json").write_text(json.dumps(state, indent=2))

    real = json.loads((src / "per_instance_stats.json").read_text())
    basic = [e for e in real if not any(s["name"]["name"] == "jury_score" for s in e["stats"])]
    ids = list(dict.fromkeys(e["instance_id"] for e in real))
    summ = [{"instance_id": iid, "train_trial_index": 0,
             "stats": [stat(n, [stand_in(iid, n)]) for n in SUMMARIZATION]} for iid in ids]
    jury = []
    for iid in ids:
        scores = [v["score"] for judge in ("gpt", "llama", "claude") for v in (verdicts[iid].get(judge) or {}).values()]
        jury.append({"instance_id": iid, "train_trial_index": 0,
                     "stats": [stat("med_dialog_accuracy", [sum(scores) / len(scores) if scores else 1.0])]})
    entries = summ + basic + jury  # the order the runner appends them: one list per metric
    (dst / "per_instance_stats.json").write_text(json.dumps(entries, indent=2))

    values: dict[str, list[float]] = {}
    for e in entries:
        for s in e["stats"]:
            if s.get("mean") is not None:
                values.setdefault(s["name"]["name"], []).append(s["mean"])
    (dst / "stats.json").write_text(json.dumps([stat(n, v) for n, v in values.items()], indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
