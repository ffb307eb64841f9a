"""The MedHELM catalogue behind ``benchmarks.resolve``: a catalogue row + run-entry args -> a Benchmark."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from medhelm.benchmarks.base import Benchmark, LoadContext, PromptBudget
from medhelm.benchmarks.catalogue import CatalogueEntry, get_entry
from medhelm.benchmarks.prompts import build_prompt
from medhelm.errors import ConfigError
from medhelm.specs import BenchmarkSpec, FrozenMap, Instance, Prompt


@dataclass(frozen=True)
class CatalogueBenchmark:
    entry: CatalogueEntry
    ctx: LoadContext  # args validated, defaults filled in
    spec: BenchmarkSpec

    def instances(self) -> Iterable[Instance]:
        instances = list(self.entry.loader(self.ctx, self.entry))
        if not instances:
            raise ConfigError(f"benchmark '{self.entry.name}': the data holds no instances "
                              f"({self.entry.expected or self.entry.source})")
        seen: set[str] = set()
        for inst in instances:  # ids key resume and sharding: a duplicate would silently merge two items
            if inst.id in seen:
                raise ConfigError(f"benchmark '{self.entry.name}': duplicate instance id '{inst.id}' in the data")
            seen.add(inst.id)
        return instances

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        return build_prompt(self.entry.prompt, instance, budget)


def resolve_catalogue(name: str, ctx: LoadContext) -> Benchmark:
    entry = get_entry(name)
    args = entry.check_args(ctx.args)
    resolved = LoadContext(args=FrozenMap(args), data_dir=ctx.data_dir, cache_dir=ctx.cache_dir,
                           offline=ctx.offline, base_dir=ctx.base_dir, data_roots=ctx.data_roots,
                           any_path=ctx.any_path, cwd_allowed=ctx.cwd_allowed)
    return CatalogueBenchmark(entry=entry, ctx=resolved, spec=entry.spec(args))
