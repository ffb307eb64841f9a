"""What a run writes: the per-instance record (``InstanceResult``, with its judges' ``JudgeScore``s) and the
aggregate of one stat over a run's instances (``Stat``, HELM's stats.json shape plus ``unscored``).

Frozen values over ``specs.py``'s (the instance, prompt and completion they carry); every value round-trips
through ``to_json()`` / ``from_json()``. A stat value ``None`` is *unscored*: counted apart, never a 0.
``from_json`` trusts its input's types: the store's summarize checks a record's fields first (file:line, field).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from medhelm.json_text import JSON
from medhelm.specs import Completion, FrozenMap, Instance, Prompt, Usage


class JudgeStatus(str, enum.Enum):
    OK = "ok"
    UNSCORED = "unscored"  # the judge's output could not be parsed/validated (after one retry)
    ERROR = "error"  # the judge could not be reached


@dataclass(frozen=True)
class JudgeScore:
    judge: str  # deployment name of the judge
    criterion: str
    score: float | None  # raw score on the rubric's scale (None when unscored)
    min_score: float
    max_score: float
    explanation: str = ""
    status: JudgeStatus = JudgeStatus.OK
    weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", JudgeStatus(self.status))

    @property
    def normalized(self) -> float | None:
        """Score mapped to 0-1 on the rubric's scale."""
        if self.score is None or self.max_score == self.min_score:
            return None
        return (self.score - self.min_score) / (self.max_score - self.min_score)

    def to_json(self) -> dict[str, JSON]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["normalized"] = self.normalized
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> JudgeScore:
        return cls(**{k: v for k, v in d.items() if k != "normalized"})


@dataclass(frozen=True)
class InstanceResult:
    """The durable per-instance record: the source of truth every aggregate is derived from."""

    run: str  # RunSpec.name
    instance: Instance
    prompt: Prompt
    completion: Completion | None  # None when inference failed permanently for this instance
    stats: FrozenMap  # stat name -> float | None (None = unscored, never a silent 0)
    judgements: tuple[JudgeScore, ...] = ()
    judge_usage: Usage = field(default_factory=Usage)  # summed over judge calls
    error: str | None = None  # why this instance has no completion/score (never patient text)
    position: int = 0  # the instance's index in the run's sampled order (for canonical ordering)

    def __post_init__(self) -> None:
        if not isinstance(self.stats, FrozenMap):
            object.__setattr__(self, "stats", FrozenMap(self.stats))

    def to_json(self) -> dict[str, JSON]:
        return {
            "run": self.run,
            "position": self.position,
            "instance": self.instance.to_json(),
            "prompt": self.prompt.to_json(question=False),  # the judge's question: not kept (Prompt)
            "completion": self.completion.to_json() if self.completion else None,
            "stats": self.stats.to_json(),
            "judgements": [j.to_json() for j in self.judgements],
            "judge_usage": self.judge_usage.to_json(),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> InstanceResult:
        return cls(
            run=d["run"],
            position=int(d.get("position", 0)),
            instance=Instance.from_json(d["instance"]),
            prompt=Prompt.from_json(d["prompt"]),
            completion=Completion.from_json(d["completion"]) if d.get("completion") else None,
            stats=FrozenMap(d.get("stats") or {}),
            judgements=tuple(JudgeScore.from_json(j) for j in d.get("judgements") or ()),
            judge_usage=Usage.from_json(d.get("judge_usage") or {}),
            error=d.get("error"),
        )


@dataclass(frozen=True)
class Stat:
    """Aggregate of one stat over a run's instances (HELM's stats.json shape plus `unscored`)."""

    name: str
    split: str
    count: int
    sum: float
    sum_squared: float
    min: float | None
    max: float | None
    unscored: int = 0  # instances whose value was None

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    @property
    def stddev(self) -> float | None:
        if not self.count:
            return None
        var = max(self.sum_squared / self.count - (self.sum / self.count) ** 2, 0.0)
        return var**0.5

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": {"name": self.name, "split": self.split},
            "count": self.count,
            "sum": self.sum,
            "sum_squared": self.sum_squared,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "stddev": self.stddev,
            "unscored": self.unscored,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Stat:
        return cls(
            name=d["name"]["name"],
            split=d["name"].get("split", "test"),
            count=int(d["count"]),
            sum=float(d["sum"]),
            sum_squared=float(d["sum_squared"]),
            min=d.get("min"),
            max=d.get("max"),
            unscored=int(d.get("unscored", 0)),
        )
