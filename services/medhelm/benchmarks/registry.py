"""The MedHELM catalogue (owned by the catalogue capability; see issue 3)."""

from __future__ import annotations

from medhelm.benchmarks.base import Benchmark, LoadContext
from medhelm.errors import ConfigError


def resolve_catalogue(name: str, ctx: LoadContext) -> Benchmark:
    raise ConfigError(f"unknown benchmark '{name}'")
