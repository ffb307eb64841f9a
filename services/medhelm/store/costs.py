"""Prices (a small YAML file) and the cost of a model's runs.

```yaml
prices:
  - deployment: openai/gpt-4o          # API model: per-million-token list prices, USD
    input_per_million: 2.50
    output_per_million: 10.00
  - deployment: openai/o3-mini          # a reasoning model: its thinking tokens may be priced apart
    input_per_million: 1.10
    output_per_million: 4.40
    reasoning_per_million: 4.40         # optional; the output price when not given
  - deployment: vllm/qwen2.5-7b-instruct  # local deployment: GPU-hour price x GPU-seconds
    gpu_hour: 2.10
    gpus: 1
  - deployment: local/smollm2-135m-instruct  # CPU model: core-hour price x cores x seconds
    cpu_hour: 0.048
    cpus: 2
```

Built-in prices (``config/prices.yaml``: the embedded model's CPU time) apply unless the user's file prices
the same name (``PriceTable.configured``). A reference baseline (``baselines.is_baseline``) costs 0: it calls
no model.

A GPU- or CPU-priced deployment is charged for the wall time of its runs (``run.json`` ``wall_time_s``: the
GPU is held while the run goes), or the summed request latency when a run has no wall time. Reasoning
tokens are part of the output tokens (OpenAI's convention): the answer's tokens are charged at
``output_per_million``, the thinking at ``reasoning_per_million`` (the output price when not given). A
deployment without a price has no cost (shown as such), never a cost of 0.

``jury_cost``, ``total_cost`` and ``cost_per_point`` are the cost arithmetic ``summarize`` writes and the
dashboard and the planner show (one place; unknown stays None, never 0).

Failure semantics: the file is checked against a typed schema (``schemas.py``: known keys, finite
non-negative prices) when read, before ``summarize`` writes anything; a problem is a ConfigError naming
the file, line and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from medhelm.baselines import is_baseline
from medhelm.errors import ConfigError, escape
from medhelm.files import load_yaml_doc
from medhelm.schemas import Finite, NameText, Strict, check


@dataclass(frozen=True)
class Price:
    input_per_million: float | None = None
    output_per_million: float | None = None
    reasoning_per_million: float | None = None  # None: thinking costs the output price
    gpu_hour: float | None = None
    gpus: float = 1.0
    cpu_hour: float | None = None
    cpus: float = 1.0


@dataclass(frozen=True)
class Usage:
    """Totals for one (model, deployment) row."""

    prompt_tokens: int = 0
    completion_tokens: int = 0  # every generated token, reasoning included
    gpu_s: float = 0.0
    reasoning_tokens: int = 0  # of completion_tokens, the thinking


@dataclass(frozen=True)
class Cost:
    usd: float | None
    basis: str  # "api tokens" | "gpu time" | "cpu time" | "baseline" | "no price"


@dataclass(frozen=True)
class PriceTable:
    by_name: Mapping[str, Price]

    @classmethod
    def empty(cls) -> PriceTable:
        return cls({})

    @classmethod
    def configured(cls, path: str | Path | None) -> PriceTable:
        """The built-in prices, overridden name by name by the user's file (``path``; None = none)."""
        builtin = cls.load(BUILTIN_PATH).by_name
        return cls({**builtin, **(cls.load(path).by_name if path is not None else {})})

    @classmethod
    def load(cls, path: str | Path) -> PriceTable:
        """Read and check a prices file: a typed schema (``schemas.py``), then one price per name."""
        path = Path(path)
        doc = load_yaml_doc(path)
        if not isinstance(doc.data, Mapping):
            raise ConfigError("expected a list under the key 'prices'", path=path)
        parsed = check(_PricesFile, doc.data, path=path, doc=doc)
        out: dict[str, Price] = {}
        for i, item in enumerate(parsed.prices):
            name = item.deployment or item.model
            where = {"path": path, "line": doc.line("prices", i), "field": f"prices[{i}]"}
            if not name:
                raise ConfigError("needs 'deployment' (or 'model')", **where)
            if all(x is None for x in (item.gpu_hour, item.cpu_hour, item.input_per_million,
                                       item.output_per_million, item.reasoning_per_million)):
                raise ConfigError("needs input_per_million/output_per_million (API), gpu_hour (GPU) or cpu_hour "
                                  "(CPU)", **where)
            if name in out:
                raise ConfigError(f"a second price for '{escape(name)}'", **where)
            out[name] = Price(input_per_million=item.input_per_million, output_per_million=item.output_per_million,
                              reasoning_per_million=item.reasoning_per_million, gpu_hour=item.gpu_hour,
                              gpus=item.gpus, cpu_hour=item.cpu_hour, cpus=item.cpus)
        return cls(out)

    def cost(self, deployment: str, model: str, usage: Usage) -> Cost:
        if is_baseline(deployment):
            return Cost(0.0, "baseline")
        price = self.by_name.get(deployment) or self.by_name.get(model)
        if price is None:
            return Cost(None, "no price")
        if price.gpu_hour is not None:
            return Cost(price.gpu_hour * price.gpus * usage.gpu_s / 3600.0, "gpu time")
        if price.cpu_hour is not None:  # the model time of its runs, on this many cores
            return Cost(price.cpu_hour * price.cpus * usage.gpu_s / 3600.0, "cpu time")
        output = price.output_per_million or 0.0
        thinking = price.reasoning_per_million if price.reasoning_per_million is not None else output
        reasoning = min(max(usage.reasoning_tokens, 0), usage.completion_tokens)
        return Cost((usage.prompt_tokens * (price.input_per_million or 0.0)
                     + (usage.completion_tokens - reasoning) * output + reasoning * thinking) / 1e6, "api tokens")


BUILTIN_PATH = Path(__file__).resolve().parent.parent / "config" / "prices.yaml"
Money = Annotated[Finite, Field(ge=0, le=1e9)]


class _PriceItem(Strict):
    deployment: NameText | None = None
    model: NameText | None = None
    input_per_million: Money | None = None
    output_per_million: Money | None = None
    reasoning_per_million: Money | None = None
    gpu_hour: Money | None = None
    gpus: Annotated[Finite, Field(gt=0, le=1_000_000)] = 1.0
    cpu_hour: Money | None = None
    cpus: Annotated[Finite, Field(gt=0, le=1_000_000)] = 1.0


class _PricesFile(Strict):
    prices: list[_PriceItem]


def jury_cost(prices: PriceTable, judge_tokens: dict[str, list[float]]) -> float | None:
    """USD the judges spent scoring one model, each judge priced by its deployment's token price; None when a
    judge that spent tokens has no token price (unknown, never 0; a GPU-hour judge's time is not attributable
    to one candidate). 0.0 when no judge spent any token."""
    total = 0.0
    for judge, (prompt, completion, *reasoning) in judge_tokens.items():
        cost = prices.cost(judge, judge, Usage(round(prompt), round(completion), 0.0, round(sum(reasoning))))
        if cost.basis != "api tokens" or cost.usd is None:
            return None
        total += cost.usd
    return total


def total_cost(candidate_usd: float | None, jury_usd: float | None) -> float | None:
    """Candidate plus jury cost; None without a candidate price (an unpriced jury adds nothing)."""
    return None if candidate_usd is None else candidate_usd + (jury_usd or 0.0)


def cost_per_point(cost_usd: float | None, mean_score: float | None) -> float | None:
    """USD per percentage point of mean score (None when either is unknown or the score is 0)."""
    if cost_usd is None or not mean_score:
        return None
    return cost_usd / (mean_score * 100.0)
