"""Prices (a small YAML file) and the cost of a model's runs.

```yaml
prices:
  - deployment: openai/gpt-4o          # API model: per-million-token list prices, USD
    input_per_million: 2.50
    output_per_million: 10.00
  - deployment: vllm/qwen2.5-7b-instruct  # local deployment: GPU-hour price x GPU-seconds
    gpu_hour: 2.10
    gpus: 1
```

A GPU-priced deployment is charged for the wall time of its runs (``run.json`` ``wall_time_s``: the
GPU is held while the run goes), or the summed request latency when a run has no wall time. A
deployment without a price has no cost (shown as such), never a cost of 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from medhelm.errors import ConfigError, escape
from medhelm.files import load_yaml

_KEYS = {"deployment", "model", "input_per_million", "output_per_million", "gpu_hour", "gpus"}


@dataclass(frozen=True)
class Price:
    input_per_million: float | None = None
    output_per_million: float | None = None
    gpu_hour: float | None = None
    gpus: float = 1.0


@dataclass(frozen=True)
class Usage:
    """Totals for one (model, deployment) row."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    gpu_s: float = 0.0


@dataclass(frozen=True)
class Cost:
    usd: float | None
    basis: str  # "api tokens" | "gpu time" | "no price"


@dataclass(frozen=True)
class PriceTable:
    by_name: Mapping[str, Price]

    @classmethod
    def empty(cls) -> PriceTable:
        return cls({})

    @classmethod
    def load(cls, path: str | Path) -> PriceTable:
        path = Path(path)
        doc = load_yaml(path) or {}
        items = doc.get("prices") if isinstance(doc, Mapping) else None
        if not isinstance(items, list):
            raise ConfigError("expected a list under the key 'prices'", path=path)
        out: dict[str, Price] = {}
        for i, item in enumerate(items):
            name, price = _parse(item, path, i)
            if name in out:
                raise ConfigError(f"a second price for '{escape(name)}'", path=path, field=f"prices[{i}]")
            out[name] = price
        return cls(out)

    def cost(self, deployment: str, model: str, usage: Usage) -> Cost:
        price = self.by_name.get(deployment) or self.by_name.get(model)
        if price is None:
            return Cost(None, "no price")
        if price.gpu_hour is not None:
            return Cost(price.gpu_hour * price.gpus * usage.gpu_s / 3600.0, "gpu time")
        return Cost((usage.prompt_tokens * (price.input_per_million or 0.0)
                     + usage.completion_tokens * (price.output_per_million or 0.0)) / 1e6, "api tokens")


def _parse(item: object, path: Path, index: int) -> tuple[str, Price]:
    where = f"prices[{index}]"
    if not isinstance(item, Mapping):
        raise ConfigError("each price must be a mapping", path=path, field=where)
    unknown = set(item) - _KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)}", path=path, field=where)
    name = item.get("deployment") or item.get("model")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("needs 'deployment' (or 'model')", path=path, field=where)
    values: dict[str, float] = {}
    for key in ("input_per_million", "output_per_million", "gpu_hour", "gpus"):
        if item.get(key) is not None:
            v = item[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                raise ConfigError("must be a non-negative number", path=path, field=f"{where}.{key}")
            values[key] = float(v)
    if "gpu_hour" not in values and not {"input_per_million", "output_per_million"} & set(values):
        raise ConfigError("needs input_per_million/output_per_million (API) or gpu_hour (local)", path=path,
                          field=where)
    return str(name), Price(**values)
