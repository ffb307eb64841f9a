"""``medhelm_configurable_benchmark:config_path=<yaml>`` — a benchmark made of three user files.

The YAML (upstream's keys: ``name``, ``description``, ``prompt_file``, ``dataset_file``, ``max_tokens``,
``metrics``; ours: ``category``, ``subcategory``, ``access``), a prompt template with ``{column}``
placeholders, and a CSV. Everything is read and checked when the benchmark is resolved, so a bad
file stops the run at planning, with one line naming the file, line and field: the YAML against a
typed schema first (``schemas.py``: known keys, types, ranges), then what a schema cannot know
(known metrics, the taxonomy, the files it names, the prompt's placeholders against the CSV's columns).

Relative paths: ``config_path`` against the ``.conf``'s folder, then the working directory; the
prompt, dataset and judge-prompt files against the YAML's folder, then the working directory
(upstream used the working directory only).

The prompt is HELM's byte for byte (crfm-helm's ``MedHELMConfigurableScenario`` and the generation adapter of
its run spec): the template file's text whole (read as Python's text mode reads it: ``\r\n`` and ``\r`` are
``\n``; its final newline kept), filled, then one ``"\n"`` (the adapter's input suffix; no instructions, no
output prefix). The instance's ``input`` is the filled template without that newline, as HELM's instance
input is: the jury's ``{QUESTION}``. Where HELM's pandas reading changes a cell (an empty cell or ``NA`` sent
as ``nan``, ``001`` as ``1``) ours sends the cell as the file spells it (docs/metrics.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from medhelm import files, taxonomy
from medhelm.benchmarks.base import LoadContext, PromptBudget
from medhelm.benchmarks.template import PromptTemplate
from medhelm.benchmarks.user_dataset import DatasetFile, scan_dataset
from medhelm.confine import inside, real, roots_of, shown
from medhelm.errors import ConfigError, escape
from medhelm.schemas import LongText, NameText, PathText, Strict, Text, check
from medhelm.scoring import registry
from medhelm.scoring.jury import rubrics
from medhelm.scoring.exact import STATS as EXACT_STATS
from medhelm.specs import EMPTY_MAP, Access, BenchmarkSpec, Instance, MetricSpec, Prompt, TaskType

ARGS = frozenset({"config_path", "jury_config_path"})
JURY = "jury_score"
INPUT_SUFFIX = "\n"  # HELM's generation adapter (get_generation_adapter_spec): after the filled template
_BAD_NAME = re.compile(r"[/\\:,=\x00-\x1f]")


def _run_folder_name(value: str) -> str:
    if _BAD_NAME.search(value):
        raise ValueError("must be text without / \\ : , = (it names the run's folder)")
    return value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _named(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value  # "- exact_match" is "- name: exact_match"


Label = Annotated[str, Field(max_length=500)]


class _Metric(BaseModel):
    """One item of ``metrics``: a name plus the metric's own arguments (its ``validate`` checks those)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    name: Text


class _Judge(Strict):
    name: Text  # a deployment
    model_name: Text


class _JuryMetric(Strict):
    """A ``jury_score`` item: its keys are all known here (docs/jury.md), so a misspelt one is refused."""

    name: Literal["jury_score"]
    prompt_file: PathText | None = None  # the judge prompt (upstream); becomes prompt_template
    rubric: Text | None = None  # a built-in rubric instead
    judges: Annotated[list[_Judge], Field(min_length=1, max_length=100)] | None = None
    min_score: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] | None = None
    max_score: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] | None = None
    max_tokens: Annotated[int, Field(gt=0, le=1_000_000)] | None = None
    structured_output: bool | None = None
    custom_prompts: Literal["helm", "rubric"] | None = None  # helm: the judge prompt asked as crfm-helm asks it

    @model_validator(mode="after")
    def _one_rubric(self) -> _JuryMetric:
        if (self.prompt_file is None) == (self.rubric is None):
            raise ValueError("jury_score needs exactly one of 'prompt_file' (a judge prompt) or 'rubric' (a built-in "
                             "rubric name)")
        return self


class _BenchmarkFile(Strict):
    """The benchmark YAML (upstream's keys plus ours): every key known, every type checked (``schemas.py``)."""

    name: Annotated[NameText, AfterValidator(_run_folder_name)]
    description: LongText | None = None
    prompt_file: PathText
    dataset_file: PathText
    max_tokens: Annotated[int, Field(gt=0, le=1_000_000)] = 1024
    metrics: Annotated[list[Annotated[_Metric, BeforeValidator(_named)]], Field(min_length=1, max_length=100)]
    category: Label | None = None
    subcategory: Label | None = None
    access: Annotated[Literal["public", "gated", "private"], BeforeValidator(_lower)] = Access.PRIVATE.value
    # CSV columns naming each instance's patient subgroup (age_band, sex, ...): every metric is also reported per
    # subgroup, small groups suppressed (store/subgroups.py, docs/report.md)
    subgroups: Annotated[list[Annotated[NameText, AfterValidator(_run_folder_name)]],
                         Field(max_length=20)] | None = None


@dataclass(frozen=True, eq=False)
class ConfigurableBenchmark:
    spec: BenchmarkSpec
    template: PromptTemplate
    rows: DatasetFile  # read from the CSV at every pass, never held (checked once when loaded)

    def instances(self) -> DatasetFile:
        return self.rows

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        limit = budget.max_prompt_tokens
        whole = instance.input + INPUT_SUFFIX
        if limit is None or budget.count_tokens(whole) <= limit:
            return Prompt.user(whole)
        text, truncated = self.template.fit(instance.extra, limit,
                                            lambda filled: budget.count_tokens(filled + INPUT_SUFFIX))
        return Prompt.user(text + INPUT_SUFFIX, truncated=truncated)

    def record_instance(self, instance: Instance) -> Instance:
        return record_instance(instance)


def load_configurable(ctx: LoadContext) -> ConfigurableBenchmark:
    unknown = sorted(set(ctx.args) - ARGS)
    if unknown:
        raise ConfigError(f"medhelm_configurable_benchmark takes config_path= (and jury_config_path=), "
                          f"not {', '.join(unknown)}", field=unknown[0])
    if not ctx.args.get("config_path"):
        raise ConfigError("medhelm_configurable_benchmark needs config_path=<benchmark .yaml>", field="config_path")
    config_path = _locate(ctx.args["config_path"], (ctx.base_dir, Path.cwd()), field="config_path",
                          where="the .conf's folder" if ctx.base_dir != Path(".") else "")
    roots = (config_path.parent, *((Path.cwd(),) if ctx.cwd_allowed else ()), *ctx.data_roots)
    return _Loader(config_path, None if ctx.any_path else roots).load()


class _Loader:
    """Reads one benchmark YAML and the files it names; errors carry the YAML's path and line.

    ``roots``: where the files it names may be (its own folder and --data-root folders, symlinks
    followed); None = anywhere (--allow-any-data-path)."""

    def __init__(self, path: Path, roots: Sequence[Path] | None = None) -> None:
        self.path = path
        self.roots = None if roots is None else roots_of(roots)
        parsed = files.load_yaml_doc(path)  # duplicate keys refused, aliases bounded
        self.doc, self.node = parsed.data, parsed.node  # the node tree: line numbers in errors
        if not isinstance(self.doc, dict):
            raise ConfigError("expected a mapping with name, description, prompt_file, dataset_file, "
                              "max_tokens and metrics", path=path)
        self.yaml = parsed
        self.file = check(_BenchmarkFile, self.doc, path=path, doc=parsed)  # keys and types, before any file

    def fail(self, message: str, key: str, *, item: int | None = None) -> ConfigError:
        """An error at top-level ``key``, or at ``key`` of the ``item``-th metric ("metrics" = the item)."""
        field = key if item is None else f"metrics[{item}]" if key == "metrics" else f"metrics[{item}].{key}"
        return ConfigError(message, path=self.path, line=self.line(key, item), field=field)

    def line(self, key: str, item: int | None = None) -> int | None:
        node = self.node
        if item is not None:
            items = _child(node, "metrics")[1]
            node = items.value[item] if isinstance(items, yaml.SequenceNode) and item < len(items.value) else None
            if key == "metrics":
                return None if node is None else node.start_mark.line + 1
        key_node = _child(node, key)[0]
        return None if key_node is None else key_node.start_mark.line + 1

    def locate(self, value: Any, field: str, *, item: int | None = None) -> Path:
        if not isinstance(value, str) or not value.strip():
            raise self.fail("must be a file path", field, item=item)
        try:
            found = _locate(value, (self.path.parent, Path.cwd()), field=field, where="the YAML's folder")
            if self.roots is not None and not any(inside(real(found), r) for r in self.roots):
                raise ConfigError(f"'{shown(value)}' is outside the benchmark's folder, the working directory and "
                                  f"the --data-root folders (use --allow-any-data-path to allow it)", field=field)
        except ConfigError as err:
            raise self.fail(str(err).removeprefix(f"field '{field}': "), field, item=item) from None
        return real(found) if self.roots is not None else found

    def load(self) -> ConfigurableBenchmark:
        f = self.file
        # the cheap checks first: a typo in the YAML should not wait for a large CSV to be read
        category, subcategory = self.taxonomy()
        metrics = self.metrics(f.metrics)
        prompt_path = self.locate(f.prompt_file, "prompt_file")
        dataset_path = self.locate(f.dataset_file, "dataset_file")
        template = PromptTemplate.parse(_read_text(prompt_path), prompt_path)
        only_jury = all(m.name == JURY for m in metrics)
        groups = tuple(dict.fromkeys(f.subgroups or ()))
        if len(groups) != len(f.subgroups or ()):
            raise self.fail("a subgroup column is named twice", "subgroups")
        # the subgroup columns enter the digest only when named: a benchmark without them keeps its digest
        rows, sha = scan_dataset(dataset_path, template, answer_required=not only_jury,
                                 digest_prefix=template.text.encode() + b"\0" +
                                 (("\0".join(groups) + "\0").encode() if groups else b""), subgroups=groups)
        digest = sha[:12]
        spec = BenchmarkSpec(
            name=f.name, display_name=f.name, description=(f.description or "").strip(), category=category,
            subcategory=subcategory, access=Access(f.access),
            task_type=TaskType.CLASSIFICATION if metrics[0].name in EXACT_STATS else TaskType.GENERATION,
            metrics=metrics, main_metric=registry.stat_names(metrics[0])[0], max_tokens=f.max_tokens,
            source=f"user files sha256:{digest}")  # the digest keeps an edited CSV from resuming old results
        return ConfigurableBenchmark(spec=spec, template=template, rows=rows)

    # ---- what the schema cannot know

    def taxonomy(self) -> tuple[str, str]:
        category, subcategory = (self.file.category or "").strip(), (self.file.subcategory or "").strip()
        if subcategory and not category and subcategory not in taxonomy.CATEGORY_OF:
            raise self.fail(f"unknown subcategory {subcategory!r} (see `medhelm list`); expected one of "
                            f"{', '.join(taxonomy.SUBCATEGORIES)}", "subcategory")
        category = category or taxonomy.CATEGORY_OF.get(subcategory, "")
        try:
            taxonomy.check(category, subcategory)
        except ValueError as err:
            raise self.fail(str(err), "subcategory" if category in taxonomy.TAXONOMY else "category") from None
        if subcategory and not category:
            raise self.fail("unknown subcategory (see `medhelm list`)", "subcategory")
        return category, subcategory

    def metrics(self, items: Sequence[_Metric]) -> tuple[MetricSpec, ...]:
        known = registry.MODULE_OF
        specs = []
        for i, item in enumerate(items):
            name = item.name
            if name not in known:
                raise self.fail(f"unknown metric '{escape(name)}' (known: {', '.join(registry.names())})", "name",
                                item=i)
            args = dict(item.model_extra or {})
            spec = MetricSpec(name, self.jury_args(i) if name == JURY else args)
            # jury_score without judges gets them at planning (jury_config_path= or the default jury)
            if name != JURY or "judges" in spec.args:
                try:
                    registry.lookup(spec).validate(spec)
                except ConfigError as err:
                    raise self.fail(str(err).removeprefix("field 'metrics': "), "metrics", item=i) from None
            specs.append(spec)
        return tuple(specs)

    def jury_args(self, i: int) -> dict[str, Any]:
        raw = _named(self.doc["metrics"][i])
        jury = check(_JuryMetric, raw, path=self.path, doc=self.yaml, prefix=("metrics", i))
        out = jury.model_dump(exclude_none=True, exclude={"name", "prompt_file", "judges"})
        if jury.prompt_file is not None:
            prompt_path = self.locate(jury.prompt_file, "prompt_file", item=i)
            out["prompt_template"] = _read_text(prompt_path)
            try:  # now, with or without judges here (without, they join at planning, where the file is unknown)
                rubrics.from_args(out)
            except ConfigError as err:  # the prompt's own mistakes name its file; a scale's, the YAML's line
                message = str(err).removeprefix(f"field '{err.field}': ")
                if err.field == "prompt_file":
                    raise ConfigError(message, path=prompt_path) from None
                raise self.fail(message, err.field or "metrics", item=i) from None
        if jury.judges is not None:
            out["judges"] = [{"name": j.name, "model_name": j.model_name} for j in jury.judges]
        return out


def _child(node: Any, key: str) -> tuple[Any, Any]:
    """(key node, value node) of ``key`` in a YAML mapping node, or (None, None)."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                return k, v
    return None, None


def _locate(value: str, bases: Sequence[Path], *, field: str, where: str) -> Path:
    """A user-given path: absolute as is; relative against each base in turn (the first that exists)."""
    given = Path(value.strip()).expanduser()
    candidates = [given] if given.is_absolute() else list(dict.fromkeys((b / given).absolute() for b in bases))
    for candidate in candidates:
        if files.exists(candidate, field=field):  # a folder, FIFO or device is then refused by the reader, by name
            return candidate
    looked = " and ".join(str(c) for c in candidates)
    hint = f" (relative paths are tried against {where}, then the working directory)" if where else ""
    raise ConfigError(f"file '{value}' not found; looked at {looked}{hint}", field=field)


def _read_text(path: Path) -> str:
    """A prompt file as HELM's ``open(path, "r")`` reads it: universal newlines (a BOM is dropped: not text)."""
    return files.read_text(path, what="prompt file").replace("\r\n", "\n").replace("\r", "\n")


def record_instance(instance: Instance) -> Instance:
    """A configurable benchmark's instance as its record keeps it: the prompt's fields (``extra``, the CSV cells
    the template names) are left out, for ``input`` holds them already, rendered whole: kept, a large cell would be stored
    twice (and cut to fit the context in ``prompt`` a third time). The one rule, in one process or through the
    scenario service (``rpc/remote.py``)."""
    if not instance.extra:
        return instance
    # ``replace(instance, extra=FrozenMap())`` without its cost per record (it reads every field and runs
    # __post_init__ again): the other fields are already what __post_init__ makes them
    kept = object.__new__(Instance)
    kept.__dict__.update(instance.__dict__)
    object.__setattr__(kept, "extra", EMPTY_MAP)
    return kept
