"""Spec values <-> protobuf messages. Specs travel as their own JSON (``specs.py`` and ``records.py`` are the
one schema)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from medhelm.errors import ConfigError
from medhelm.scoring.base import MetricResult, ScoringItem
from medhelm.records import JudgeScore
from medhelm.specs import Completion, Instance, MetricSpec, Prompt, RunSpec, Usage
from medhelm.v1 import common_pb2

T = TypeVar("T")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def loads(text: str, build: Callable[[Any], T], field: str) -> T:
    """Decode one JSON payload field; a bad payload is the caller's mistake (INVALID_ARGUMENT)."""
    if not text:
        raise ConfigError("is required", field=field)
    try:
        return build(json.loads(text))
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"is not a valid payload ({type(err).__name__})", field=field) from None


def run_spec(text: str, field: str = "run_spec_json") -> RunSpec:
    return loads(text, RunSpec.from_json, field)


def metric_specs(texts: Any, field: str = "metric_spec_json") -> tuple[MetricSpec, ...]:
    return tuple(loads(t, MetricSpec.from_json, f"{field}[{i}]") for i, t in enumerate(texts))


def setup_message(spec: RunSpec, metrics: tuple[MetricSpec, ...] = ()) -> common_pb2.ScoringSetup:
    return common_pb2.ScoringSetup(run_spec_json=dumps(spec.to_json()),
                                   metric_spec_json=[dumps(m.to_json()) for m in metrics])


def item_message(item: ScoringItem, position: int) -> common_pb2.ScoringItem:
    return common_pb2.ScoringItem(position=position, instance_json=dumps(item.instance.to_json()),
                                  prompt_json=dumps(item.prompt.to_json()),
                                  completion_json=dumps(item.completion.to_json()))


def scoring_item(spec: RunSpec, msg: common_pb2.ScoringItem) -> ScoringItem:
    return ScoringItem(run=spec, instance=loads(msg.instance_json, Instance.from_json, "item.instance_json"),
                       prompt=loads(msg.prompt_json, Prompt.from_json, "item.prompt_json"),
                       completion=loads(msg.completion_json, Completion.from_json, "item.completion_json"))


def result_message(result: MetricResult, position: int) -> common_pb2.MetricResult:
    stats = [common_pb2.StatValue(name=k) if v is None else common_pb2.StatValue(name=k, value=float(v))
             for k, v in result.stats.items()]
    return common_pb2.MetricResult(position=position, stats=stats,
                                   judgements_json=dumps([j.to_json() for j in result.judgements]),
                                   judge_usage_json=dumps(result.judge_usage.to_json()))


def metric_result(msg: common_pb2.MetricResult) -> MetricResult:
    stats: dict[str, float | None] = {s.name: (s.value if s.HasField("value") else None) for s in msg.stats}
    judgements = loads(msg.judgements_json or "[]", lambda d: tuple(JudgeScore.from_json(j) for j in d),
                       "judgements_json")
    usage = loads(msg.judge_usage_json or "{}", lambda d: Usage.from_json(d) if isinstance(d, Mapping) else Usage(),
                  "judge_usage_json")
    return MetricResult(stats=stats, judgements=judgements, judge_usage=usage)
