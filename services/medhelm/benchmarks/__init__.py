"""Benchmarks: ``resolve(name, args, ctx)`` is the one entry point the pipeline uses."""

from __future__ import annotations

from medhelm.benchmarks.base import Benchmark, LoadContext, PromptBudget, approx_tokens

CONFIGURABLE = "medhelm_configurable_benchmark"

__all__ = ["Benchmark", "LoadContext", "PromptBudget", "approx_tokens", "resolve", "CONFIGURABLE"]


def resolve(name: str, ctx: LoadContext) -> Benchmark:
    """The benchmark a run entry names, for its arguments (``ctx.args``). Raises ConfigError if unknown."""
    if name == CONFIGURABLE:
        from medhelm.benchmarks.configurable import load_configurable

        return load_configurable(ctx)
    from medhelm.benchmarks.registry import resolve_catalogue

    return resolve_catalogue(name, ctx)
