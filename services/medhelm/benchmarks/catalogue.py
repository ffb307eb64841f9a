"""The MedHELM catalogue: 37 benchmarks as data rows (``CatalogueEntry``) plus small loader hooks.

The rows live in ``catalogue_public.py``, ``catalogue_gated.py`` and ``catalogue_private.py`` (the access
level is the file, as upstream's run-entry confs); this module defines the row type and the lookup.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import RemoteFile
from medhelm.benchmarks.prompts import PromptStyle
from medhelm.errors import ConfigError
from medhelm.specs import Access, BenchmarkSpec, FrozenMap, Instance, MetricSpec, TaskType


@dataclass(frozen=True)
class Arg:
    """A run-entry argument a benchmark accepts (``subset=``, ``condition=``, ``data_path=``, ...)."""

    name: str
    help: str
    choices: tuple[str, ...] = ()
    required: bool = False
    default: str | None = None


Loader = Callable[[LoadContext, "CatalogueEntry"], Iterable[Instance]]


@dataclass(frozen=True)
class CatalogueEntry:
    name: str  # upstream run-entry name
    display_name: str
    description: str
    category: str
    subcategory: str
    access: Access
    task_type: TaskType
    metrics: tuple[MetricSpec, ...]  # first = main
    main_metric: str
    max_tokens: int
    source: str  # upstream location pinned at a revision (or what the user supplies)
    loader: Loader
    prompt: PromptStyle
    args: tuple[Arg, ...] = ()
    remote: tuple[RemoteFile, ...] = ()  # public files fetched through the mirror/cache
    expected: str = ""  # gated/private: what data_path= must hold
    access_note: str = ""  # gated/private: where access is requested
    options: FrozenMap = field(default_factory=FrozenMap)  # loader-specific settings (columns, labels, ...)
    main_split: str = "test"

    def __post_init__(self) -> None:
        if not isinstance(self.options, FrozenMap):
            object.__setattr__(self, "options", FrozenMap(self.options))

    @property
    def folder(self) -> str:
        """Mirror/cache folder name (benchmarks sharing a source may override via options['folder'])."""
        return str(self.options.get("folder", self.name))

    def check_args(self, args: Mapping[str, str]) -> dict[str, str]:
        """Validated benchmark args with defaults filled in; unknown/missing/invalid -> ConfigError."""
        known = {a.name: a for a in self.args}
        out: dict[str, str] = {}
        for key, value in args.items():
            if key not in known:
                accepted = ", ".join(sorted(known)) or "none"
                raise ConfigError(f"benchmark '{self.name}' does not accept '{key}=' (accepted: {accepted})",
                                  field=key)
            arg = known[key]
            if arg.choices and str(value) not in arg.choices:
                raise ConfigError(f"benchmark '{self.name}': {key}={value} is not one of {', '.join(arg.choices)}",
                                  field=key)
            out[key] = str(value)
        for arg in self.args:
            if arg.name not in out:
                if arg.required:
                    hint = f" (one of {', '.join(arg.choices)})" if arg.choices else f" ({arg.help})"
                    raise ConfigError(f"benchmark '{self.name}' needs {arg.name}=...{hint}", field=arg.name)
                if arg.default is not None:
                    out[arg.name] = arg.default
        return out

    def spec(self, args: Mapping[str, str]) -> BenchmarkSpec:
        metrics = self.metrics
        if str(args.get("bertscore", "false")).lower() == "true":
            metrics = metrics + (MetricSpec("BERTScore-P"), MetricSpec("BERTScore-R"), MetricSpec("BERTScore-F"))
        return BenchmarkSpec(
            name=self.name, display_name=self.display_name, description=self.description,
            category=self.category, subcategory=self.subcategory, access=self.access,
            task_type=self.task_type, metrics=metrics, main_metric=self.main_metric,
            max_tokens=self.max_tokens, source=self.source, main_split=self.main_split,
        )


def all_entries() -> tuple[CatalogueEntry, ...]:
    from medhelm.benchmarks.catalogue_gated import GATED
    from medhelm.benchmarks.catalogue_private import PRIVATE
    from medhelm.benchmarks.catalogue_public import PUBLIC

    return PUBLIC + GATED + PRIVATE


def get_entry(name: str) -> CatalogueEntry:
    table = {e.name: e for e in all_entries()}
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "; see `medhelm list`"
    raise ConfigError(f"unknown benchmark '{name}'{hint}")
