"""HELM ``benchmark_output`` run directories read as ``RunSource`` values (for ``import-helm`` and
for suites such as the public ``v2.0.0`` passed to ``summarize``).

Reads ``run_spec.json`` (run name, ``adapter_spec.model`` / ``model_deployment``, ``groups``),
``stats.json`` and ``per_instance_stats.json``. HELM keeps no judge explanations or token usage per
instance in these files, and we do not read its prompt-bearing files (``scenario_state.json``), so
imported runs carry aggregates and per-instance scores only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from medhelm.errors import ConfigError
from medhelm.specs import BenchmarkSpec, MetricSpec, Stat
from medhelm.store.helm_names import BY_NAME, HelmBenchmark
from medhelm.store.sources import JURY_STAT_NORMALIZED, InstanceRow, RunSource, load_json, number

PER_INSTANCE = "per_instance_stats.json"
_JURY_MIN, _JURY_MAX = 1.0, 5.0


def is_helm_run(path: Path) -> bool:
    return (path / PER_INSTANCE).is_file() or ((path / "stats.json").is_file() and not (path / "run.json").is_file()
                                              and "adapter_spec" in _peek_keys(path / "run_spec.json"))


def read_helm_run(path: Path, suite: str) -> RunSource:
    spec = load_json(path / "run_spec.json")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("adapter_spec"), Mapping):
        raise ConfigError("not a HELM run spec (no adapter_spec)", path=path / "run_spec.json")
    name = str(spec.get("name") or path.name)
    adapter = spec["adapter_spec"]
    info = _benchmark_of(name, spec.get("groups") or ())
    scale = _jury_scale if info.jury else (lambda v: v)
    main = JURY_STAT_NORMALIZED if info.jury else info.main_stat
    raw_stats = load_json(path / "stats.json") if (path / "stats.json").is_file() else []
    stats = tuple(_stat(s, info, scale) for s in raw_stats if _plain(s))
    bench = BenchmarkSpec(name=info.name, display_name=info.display_name, description="imported from HELM",
                          category=info.category, subcategory=info.subcategory, access=info.access,
                          task_type="generation" if info.jury else "classification",
                          metrics=(MetricSpec(main),), main_metric=main, max_tokens=int(adapter.get("max_tokens") or 0),
                          source="HELM benchmark_output", main_split=info.main_split)
    return RunSource(suite=suite, run_name=path.name, benchmark=bench, model=str(adapter.get("model") or "?"),
                     deployment=str(adapter.get("model_deployment") or adapter.get("model") or "?"),
                     main_stat=main, status={"status": "complete", "source": "helm"}, stats=stats,
                     spec_json=json.dumps(spec, ensure_ascii=False), source="helm",
                     rows=lambda with_text: _helm_rows(path / PER_INSTANCE, info, scale))


def _benchmark_of(run_name: str, groups: Any) -> HelmBenchmark:
    head = run_name.split(":", 1)[0].split(",", 1)[0]
    for candidate in (head, *[str(g) for g in groups]):
        if candidate in BY_NAME:
            return BY_NAME[candidate]
    # Not a MedHELM leaf: keep it, unclassified, with HELM's usual accuracy stat.
    return HelmBenchmark(head, head, "", "", "public", "exact_match")


def _jury_scale(value: float | None) -> float | None:
    return None if value is None else (value - _JURY_MIN) / (_JURY_MAX - _JURY_MIN)


def _plain(s: Mapping[str, Any]) -> bool:
    """Stats without perturbation or sub-split (HELM also writes robustness/fairness variants)."""
    name = s.get("name") or {}
    return not name.get("perturbation") and not name.get("sub_split")


def _stat(s: Mapping[str, Any], info: HelmBenchmark, scale: Any) -> Stat:
    name = s["name"]["name"]
    count = int(s.get("count") or 0)
    if info.jury and name == info.main_stat:  # the 1-5 column, stored on 0-1 under our name
        mean = number(s.get("mean"))
        v = scale(mean)
        return Stat(JURY_STAT_NORMALIZED, s["name"].get("split", "test"), count, (v or 0.0) * count,
                    (v or 0.0) ** 2 * count, scale(number(s.get("min"))), scale(number(s.get("max"))))
    return Stat(name, s["name"].get("split", "test"), count, float(s.get("sum") or 0.0),
                float(s.get("sum_squared") or 0.0), number(s.get("min")), number(s.get("max")))


def _helm_rows(path: Path, info: HelmBenchmark, scale: Any) -> Iterator[InstanceRow]:
    if not path.is_file():
        return
    entries = load_json(path)
    if not isinstance(entries, list):
        raise ConfigError("expected a list of per-instance stats", path=path)
    for position, entry in enumerate(entries):
        if isinstance(entry, Mapping) and (entry.get("perturbation") or entry.get("train_trial_index", 0)):
            continue  # robustness variants and extra trials are not leaderboard values
        try:
            stats = {s["name"]["name"]: _mean(s) for s in entry.get("stats") or () if _plain(s)}
            instance_id = str(entry["instance_id"])
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(f"bad per-instance entry #{position}", path=path) from None
        if info.jury and info.main_stat in stats:
            stats[JURY_STAT_NORMALIZED] = scale(stats[info.main_stat])
        main = stats.get(JURY_STAT_NORMALIZED if info.jury else info.main_stat)
        yield InstanceRow(instance_id, position, main, None, json.dumps(stats), None,
                          int(stats.get("num_prompt_tokens") or 0), int(stats.get("num_output_tokens") or 0),
                          float(stats.get("inference_runtime") or 0.0), 0, 0)


def _mean(s: Mapping[str, Any]) -> float | None:
    if s.get("mean") is not None:
        return number(s["mean"])
    count = s.get("count") or 0
    return number(s.get("sum")) / count if count and s.get("sum") is not None else None


def _peek_keys(path: Path) -> set[str]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return set()
    return set(doc) if isinstance(doc, dict) else set()
