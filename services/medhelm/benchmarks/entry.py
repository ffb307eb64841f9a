"""The catalogue's row type: ``CatalogueEntry`` (one MedHELM benchmark as data plus small loader hooks) and
``Arg`` (a run-entry argument it accepts). The three tables (``catalogue_public/gated/private``) build rows
from these; ``catalogue.py`` looks them up. Nothing here imports a table, so the tables import this module
and ``catalogue.py`` imports the tables: the imports point one way.

Failure semantics: ``check_args`` raises ``ConfigError`` naming the argument (unknown key, value not among
the choices, required argument missing), ``subgroup_columns`` one naming ``subgroups=`` (an empty or repeated
column); nothing else here raises.

Instance sets: a row whose instances can be taken two ways (MedHELM's leaderboard set, or every published
item) lists them in ``instance_sets``; the row then accepts ``instance_set=<name>`` (default: the first set),
its ``counts`` are keyed ``instance_set=<name>``, and ``medhelm validate``/``describe`` print the set's own
description, so a set that is not the leaderboard's is never reported as if it were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import RemoteFile
from medhelm.benchmarks.prompts import PromptStyle
from medhelm.errors import ConfigError, escape
from medhelm.specs import Access, BenchmarkSpec, FrozenMap, Instance, MetricSpec, TaskType


@dataclass(frozen=True)
class Arg:
    """A run-entry argument a benchmark accepts (``subset=``, ``condition=``, ``data_path=``, ...)."""

    name: str
    help: str
    choices: tuple[str, ...] = ()
    required: bool = False
    default: str | None = None


PROMPT_PATH = Arg("prompt_path", "a text file whose content replaces the instructions verbatim (for example "
                                 "MedHELM's own wording); the run and the leaderboard mark the prompt as not the "
                                 "default")

# Benchmarks reading one private data file (``data_file`` below) accept it: the columns naming each patient's
# subgroup, joined with "+" as HELM joins a multi-valued argument (``subgroups=age_band+sex``). Every metric is then
# also computed per subgroup, small groups suppressed (store/subgroups.py, docs/report.md).
SUBGROUPS = Arg("subgroups", "columns of the data file naming each patient's subgroup, joined with + "
                             "(subgroups=age_band+sex): every metric is also reported per subgroup (docs/report.md)")
MAX_SUBGROUP_COLUMNS = 16


@dataclass(frozen=True)
class InstanceSet:
    """One way to take a benchmark's instances: its ``instance_set=`` value and what it holds."""

    name: str
    description: str  # what the set holds and how it relates to MedHELM's leaderboard (validate/describe print it)
    leaderboard: bool = False  # True: the set MedHELM's published leaderboard evaluated


INSTANCE_SET = "instance_set"

# arguments that never change which instances a benchmark has
_NEUTRAL_ARGS = frozenset({"data_path", "jury_config_path", "bertscore", "prompt_path", "max_length",
                           "skip_unlabelled", "subgroups"})

Loader = Callable[[LoadContext, "CatalogueEntry"], Iterable[Instance]]
DataFile = Callable[[LoadContext, "CatalogueEntry"], Path]


def subgroup_columns(args: Mapping[str, str]) -> tuple[str, ...]:
    """The columns of ``subgroups=`` (none when absent), in the order given."""
    raw = str(args.get("subgroups") or "")
    if not raw:
        return ()
    columns = tuple(c.strip() for c in raw.split("+"))
    if any(not c for c in columns):
        raise ConfigError(f"subgroups={escape(raw, 80)}: an empty column name (columns are joined with +, "
                          "e.g. subgroups=age_band+sex)", field="subgroups")
    if len(set(columns)) != len(columns):
        raise ConfigError(f"subgroups={escape(raw, 80)}: a column is named twice", field="subgroups")
    if len(columns) > MAX_SUBGROUP_COLUMNS:
        raise ConfigError(f"subgroups= names {len(columns)} columns (at most {MAX_SUBGROUP_COLUMNS})",
                          field="subgroups")
    return columns


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
    # instances in the full published data: {"": n} for the default arguments, {"subset=x": n} per argument
    # value; absent = not known for this source (gated/private data vary by release)
    counts: FrozenMap = field(default_factory=FrozenMap)
    left_out: str = ""  # a split or part of the source dropped on purpose, and why (``medhelm describe``)
    # public sources whose full count is not recorded here: why (``describe`` says it; ``validate`` says what it
    # loaded instead of comparing). Every public entry has ``counts`` or this (tests/catalogue checks).
    count_note: str = ""
    # private data read from one CSV file: where it is (``data_path=`` resolved); such a row may accept
    # ``subgroups=``, whose columns are checked in this file's header at planning
    data_file: DataFile | None = None
    # the ways to take the instances (first = default); the row then accepts instance_set=<name>
    instance_sets: tuple[InstanceSet, ...] = ()

    def __post_init__(self) -> None:
        for name in ("options", "counts"):
            if not isinstance(getattr(self, name), FrozenMap):
                object.__setattr__(self, name, FrozenMap(getattr(self, name)))
        if SUBGROUPS in self.args and self.data_file is None:
            raise ValueError(f"catalogue row {self.name}: subgroups= needs data_file (the file whose header names "
                             "the columns)")
        if self.instance_sets and all(a.name != INSTANCE_SET for a in self.args):
            choices = tuple(s.name for s in self.instance_sets)
            arg = Arg(INSTANCE_SET, "which instances: " + "; ".join(f"{s.name} = {s.description}"
                                                                    for s in self.instance_sets),
                      choices=choices, default=choices[0])
            object.__setattr__(self, "args", self.args + (arg,))

    def instance_set(self, args: Mapping[str, str]) -> InstanceSet | None:
        """The set these (validated) arguments select; None for a row with one way to take its instances."""
        if not self.instance_sets:
            return None
        chosen = args.get(INSTANCE_SET, self.instance_sets[0].name)
        return next(s for s in self.instance_sets if s.name == chosen)

    def expected_count(self, args: Mapping[str, str]) -> int | None:
        """Instances the full published data gives for these arguments, if known (``medhelm validate``
        compares what it loaded with this). Arguments that narrow the set without a count of their own
        (``category=``) make it unknown."""
        narrowing = {k: v for k, v in args.items() if k not in _NEUTRAL_ARGS}
        if not narrowing:
            return self.counts.get("")
        keys = [f"{k}={v}" for k, v in sorted(narrowing.items())]
        hits = [self.counts[k] for k in keys if k in self.counts]
        return hits[0] if len(hits) == len(keys) == 1 else None

    @property
    def folder(self) -> str:
        """Mirror/cache folder name (benchmarks sharing a source may override via options['folder'])."""
        return str(self.options.get("folder", self.name))

    def check_args(self, args: Mapping[str, str]) -> dict[str, str]:
        """Validated benchmark args with defaults filled in; unknown/missing/invalid -> ConfigError.
        ``prompt_path=`` is accepted by every catalogue benchmark."""
        known = {a.name: a for a in self.args + (PROMPT_PATH,)}
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
