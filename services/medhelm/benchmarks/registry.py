"""The MedHELM catalogue behind ``benchmarks.resolve``: a catalogue row + run-entry args -> a Benchmark.

``prompt_path=`` (any catalogue benchmark) replaces the instructions with a file's text, verbatim; the
benchmark then reports ``prompt_variant`` = ``custom:<sha256 prefix>`` and the run spec carries it. A missing,
unreadable or empty prompt file, unknown arguments or data holding no instances raise ``ConfigError``, and so
does a ``subgroups=`` column missing from the data file's header (checked here, at planning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from medhelm import files
from medhelm.benchmarks.base import Benchmark, LoadContext, PromptBudget
from medhelm.benchmarks.catalogue import CatalogueEntry, get_entry
from medhelm.benchmarks.entry import subgroup_columns
from medhelm.benchmarks.loaders.readers import check_columns
from medhelm.benchmarks.prompts import PromptStyle, build_prompt
from medhelm.errors import ConfigError
from medhelm.specs import BenchmarkSpec, FrozenMap, Instance, Prompt


@dataclass(frozen=True)
class CatalogueBenchmark:
    entry: CatalogueEntry
    ctx: LoadContext  # args validated, defaults filled in
    spec: BenchmarkSpec
    style: PromptStyle  # the entry's, or its instructions replaced by prompt_path=

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

    @property
    def prompt_variant(self) -> str:
        """"" for the catalogue's prompt; ``custom:<sha256 prefix of the instructions>`` for prompt_path=."""
        if self.style == self.entry.prompt:
            return ""
        import hashlib

        return "custom:" + hashlib.sha256(self.style.instructions.encode("utf-8")).hexdigest()[:12]

    @property
    def expected_count(self) -> int | None:
        """Instances the full published data gives for these arguments (None = not known)."""
        return self.entry.expected_count(self.ctx.args)

    @property
    def instance_set(self):
        """The ``InstanceSet`` chosen by ``instance_set=`` (None for a benchmark with a single set)."""
        return self.entry.instance_set(self.ctx.args)

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        return build_prompt(self.style, instance, budget)


def resolve_catalogue(name: str, ctx: LoadContext) -> Benchmark:
    entry = get_entry(name)
    args = entry.check_args(ctx.args)
    resolved = LoadContext(args=FrozenMap(args), data_dir=ctx.data_dir, cache_dir=ctx.cache_dir,
                           offline=ctx.offline, base_dir=ctx.base_dir, data_roots=ctx.data_roots,
                           any_path=ctx.any_path, cwd_allowed=ctx.cwd_allowed)
    columns = subgroup_columns(args)
    if columns and entry.data_file is not None:  # checked at planning, before anything is written
        check_columns(entry.data_file(resolved, entry), columns, where=f"subgroups={'+'.join(columns)}")
    style = entry.prompt
    if args.get("prompt_path"):
        style = dataclasses.replace(style, instructions=read_prompt_file(args["prompt_path"], ctx.base_dir))
    return CatalogueBenchmark(entry=entry, ctx=resolved, spec=entry.spec(args), style=style)


def read_prompt_file(raw: str, base_dir: Path) -> str:
    """The instruction text of ``prompt_path=``, verbatim (one final newline dropped); relative paths are
    resolved against the run entry's folder. Missing, unreadable or empty -> ConfigError naming the file."""
    path = Path(str(raw)).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    text = files.read_text(path, missing="prompt file not found (prompt_path=)", what="prompt file (prompt_path=)")
    text = text.replace("\r\n", "\n").removesuffix("\n")
    if not text.strip():
        raise ConfigError("prompt file is empty", path=path, field="prompt_path")
    return text
