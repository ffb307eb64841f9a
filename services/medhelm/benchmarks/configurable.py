"""``medhelm_configurable_benchmark:config_path=<yaml>`` — a benchmark made of three user files.

The YAML (upstream's keys: ``name``, ``description``, ``prompt_file``, ``dataset_file``, ``max_tokens``,
``metrics``; ours: ``category``, ``subcategory``, ``access``), a prompt template with ``{column}``
placeholders, and a CSV. Everything is read and checked when the benchmark is resolved, so a bad
file stops the run at planning, with one line naming the file, line and field.

Relative paths: ``config_path`` against the ``.conf``'s folder, then the working directory; the
prompt, dataset and judge-prompt files against the YAML's folder, then the working directory
(upstream used the working directory only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from medhelm import files, taxonomy
from medhelm.benchmarks.base import LoadContext, PromptBudget
from medhelm.benchmarks.template import PromptTemplate
from medhelm.benchmarks.user_dataset import DatasetFile, scan_dataset
from medhelm.confine import inside, real, roots_of, shown
from medhelm.errors import ConfigError
from medhelm.scoring import registry
from medhelm.scoring.exact import STATS as EXACT_STATS
from medhelm.specs import Access, BenchmarkSpec, Instance, MetricSpec, Prompt, TaskType

KEYS = ("name", "description", "prompt_file", "dataset_file", "max_tokens", "metrics",
        "category", "subcategory", "access")
REQUIRED = ("name", "prompt_file", "dataset_file", "metrics")
ARGS = frozenset({"config_path", "jury_config_path"})
JURY = "jury_score"
_JUDGE_KEYS = frozenset({"name", "model_name"})
_BAD_NAME = re.compile(r"[/\\:,=\x00-\x1f]")


@dataclass(frozen=True, eq=False)
class ConfigurableBenchmark:
    spec: BenchmarkSpec
    template: PromptTemplate
    rows: DatasetFile  # read from the CSV at every pass, never held (checked once when loaded)

    def instances(self) -> DatasetFile:
        return self.rows

    def prompt(self, instance: Instance, budget: PromptBudget) -> Prompt:
        limit = budget.max_prompt_tokens
        if limit is None or budget.count_tokens(instance.input) <= limit:
            return Prompt.user(instance.input)
        text, truncated = self.template.fit(instance.extra, limit, budget.count_tokens)
        return Prompt.user(text, truncated=truncated)


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
        doc = self.doc
        for key in doc:
            if key not in KEYS:
                raise self.fail(f"unknown key (allowed: {', '.join(KEYS)})", str(key))
        for key in REQUIRED:
            if doc.get(key) in (None, ""):
                raise ConfigError(f"missing required key '{key}'", path=self.path, field=key)
        # the cheap checks first: a typo in the YAML should not wait for a large CSV to be read
        name, description, access, max_tokens = self.name(), self.string("description"), self.access(), \
            self.max_tokens()
        category, subcategory = self.taxonomy()
        metrics = self.metrics(doc["metrics"])
        prompt_path = self.locate(doc["prompt_file"], "prompt_file")
        dataset_path = self.locate(doc["dataset_file"], "dataset_file")
        template = PromptTemplate.parse(_read_text(prompt_path), prompt_path)
        only_jury = all(m.name == JURY for m in metrics)
        rows, sha = scan_dataset(dataset_path, template, answer_required=not only_jury,
                                 digest_prefix=template.text.encode() + b"\0")
        digest = sha[:12]
        spec = BenchmarkSpec(
            name=name, display_name=name, description=description, category=category, subcategory=subcategory,
            access=access, task_type=TaskType.CLASSIFICATION if metrics[0].name in EXACT_STATS else TaskType.GENERATION,
            metrics=metrics, main_metric=registry.stat_names(metrics[0])[0], max_tokens=max_tokens,
            source=f"user files sha256:{digest}")  # the digest keeps an edited CSV from resuming old results
        return ConfigurableBenchmark(spec=spec, template=template, rows=rows)

    # ---- keys

    def string(self, key: str) -> str:
        value = self.doc.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.fail("must be text", key)
        return value.strip()

    def name(self) -> str:
        value = self.doc["name"]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip() or _BAD_NAME.search(value):
            raise self.fail("must be text without / \\ : , = (it names the run's folder)", "name")
        return value.strip()

    def max_tokens(self) -> int:
        value = self.doc.get("max_tokens", 1024)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail("must be a positive integer", "max_tokens")
        return value

    def access(self) -> Access:
        value = self.string("access") or Access.PRIVATE.value  # hospital data unless said otherwise
        try:
            return Access(value.lower())
        except ValueError:
            raise self.fail(f"must be one of {', '.join(a.value for a in Access)}", "access") from None

    def taxonomy(self) -> tuple[str, str]:
        category, subcategory = self.string("category"), self.string("subcategory")
        category = category or taxonomy.CATEGORY_OF.get(subcategory, "")
        try:
            taxonomy.check(category, subcategory)
        except ValueError as err:
            raise self.fail(str(err), "subcategory" if category in taxonomy.TAXONOMY else "category") from None
        if subcategory and not category:
            raise self.fail("unknown subcategory (see `medhelm list`)", "subcategory")
        return category, subcategory

    # ---- metrics

    def metrics(self, items: Any) -> tuple[MetricSpec, ...]:
        if not isinstance(items, list) or not items:
            raise self.fail("must be a list of metrics, e.g. '- name: exact_match' (the first is the main one)",
                            "metrics")
        known = registry.factories()
        specs = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise self.fail("each metric needs a 'name'", "metrics", item=i)
            name = item["name"]
            if name not in known:
                raise self.fail(f"unknown metric '{name}' (known: {', '.join(sorted(known))})", "name", item=i)
            args = {k: v for k, v in item.items() if k != "name"}
            spec = MetricSpec(name, self.jury_args(args, i) if name == JURY else args)
            # jury_score without judges gets them at planning (jury_config_path= or the default jury)
            if name != JURY or "judges" in spec.args:
                try:
                    known[name].validate(spec)
                except ConfigError as err:
                    raise self.fail(str(err).removeprefix("field 'metrics': "), "metrics", item=i) from None
            specs.append(spec)
        return tuple(specs)

    def jury_args(self, args: dict[str, Any], i: int) -> dict[str, Any]:
        out = dict(args)
        if "prompt_file" in out:
            out["prompt_template"] = _read_text(self.locate(out.pop("prompt_file"), "prompt_file", item=i))
        if "judges" in out:
            out["judges"] = self.judges(out["judges"], i)
        return out

    def judges(self, judges: Any, i: int) -> list[dict[str, str]]:
        if not isinstance(judges, list) or not judges:
            raise self.fail("must be a list of {name: <deployment>, model_name: <model>}", "judges", item=i)
        out = []
        for j, judge in enumerate(judges):
            if not isinstance(judge, Mapping) or set(judge) != _JUDGE_KEYS or not all(
                    isinstance(judge[k], str) and judge[k].strip() for k in _JUDGE_KEYS):
                raise self.fail(f"judge {j + 1} must have exactly 'name' (a deployment) and 'model_name'",
                                "judges", item=i)
            out.append({"name": judge["name"].strip(), "model_name": judge["model_name"].strip()})
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
        if candidate.exists():  # a folder, FIFO or device is then refused by the reader, by name
            return candidate
    looked = " and ".join(str(c) for c in candidates)
    hint = f" (relative paths are tried against {where}, then the working directory)" if where else ""
    raise ConfigError(f"file '{value}' not found; looked at {looked}{hint}", field=field)


def _read_text(path: Path) -> str:
    return files.read_text(path, what="prompt file")
