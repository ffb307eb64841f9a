"""Who sits on the jury: judges are named deployments, resolved and checked at plan time.

A jury config is YAML::

    judges:
      - name: vllm/qwen2.5-7b-instruct     # a deployment name (model_deployments.yaml)
        model_name: qwen/qwen2.5-7b-instruct  # optional; must match the deployment when given
        weight: 1.0                        # optional, > 0
    builtin_prompts: helm                  # optional: a built-in rubric asked as HELM asks it (the default), or
                                           # `rubric`: our shared template, with max_tokens/structured_output;
                                           # unset in a file that sets max_tokens or structured_output: `rubric`
                                           # (the file tuned the judge's request, so it is honoured)
    max_tokens: 1024                       # optional judge output budget (rubric style and custom prompts)
    structured_output: true                # optional: ask for JSON with the rubric's schema (same)
    custom_prompts: helm                   # optional: a custom judge prompt asked with HELM's request (4,096
                                           # tokens, free text, once), as crfm-helm's configurable benchmark asks
                                           # it; `rubric` (the default): with max_tokens/structured_output

Upstream's ``judges.yaml`` shape (``{name: <label>, model, model_deployment}``) is read too. A bare
name (``jury_config_path=embedded``) selects a built-in ``config/jury_<name>.yaml``.

Failure semantics: the file is checked against a typed schema (``schemas.py``: known keys, types,
finite weights > 0) and every judge against the deployment registry at plan time, before anything is
written; a problem is a ConfigError naming the file, line and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from medhelm.errors import ConfigError, escape
from medhelm.files import YamlDoc, load_yaml_doc
from medhelm.schemas import Finite, LongText, Strict, Text, check
from medhelm.json_text import JSON
from medhelm.specs import MetricSpec

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
DEFAULT_JURY = "default"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_BUILTIN_PROMPTS = "helm"  # upstream benchmarks are judged as HELM judges them: comparable columns
DEFAULT_CUSTOM_PROMPTS = "rubric"  # a custom judge prompt: the jury's max_tokens and structured_output, a re-ask


@dataclass(frozen=True)
class Judge:
    name: str  # deployment name
    model_name: str
    weight: float = 1.0

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "model_name": self.model_name, "weight": self.weight}


@dataclass(frozen=True)
class Jury:
    judges: tuple[Judge, ...]
    max_tokens: int = DEFAULT_MAX_TOKENS
    structured_output: bool = True
    builtin_prompts: str = DEFAULT_BUILTIN_PROMPTS  # rubrics.STYLES
    custom_prompts: str = DEFAULT_CUSTOM_PROMPTS  # rubrics.STYLES: how a judge prompt given as text is asked

    def args(self) -> dict[str, JSON]:
        """The resolved part of a jury_score MetricSpec's arguments (``custom_prompts`` only when not the
        default: a jury's resolved arguments, and so its runs' digests, are as they were without it)."""
        return {"judges": [j.to_json() for j in self.judges], "max_tokens": self.max_tokens,
                "structured_output": self.structured_output, "builtin_prompts": self.builtin_prompts,
                **({"custom_prompts": self.custom_prompts} if self.custom_prompts != DEFAULT_CUSTOM_PROMPTS
                   else {})}


def config_path(value: str, base_dir: Path) -> Path:
    """``jury_config_path=`` -> a file: a built-in name, or a path relative to the run entry's folder."""
    builtin = CONFIG_DIR / f"jury_{value}.yaml"
    if "/" not in value and not value.endswith((".yaml", ".yml")) and builtin.is_file():
        return builtin
    path = Path(value)
    return path if path.is_absolute() else Path(base_dir) / path


class _JudgeItem(Strict):
    name: Text  # a deployment name (ours) or a label (upstream, with model_deployment)
    model_name: Text | None = None
    model: Text | None = None  # upstream's judges.yaml
    model_deployment: Text | None = None  # upstream's judges.yaml
    weight: Annotated[Finite, Field(gt=0, le=1_000_000)] = 1.0


class _JuryFile(Strict):
    """A jury config file: every key known, every type checked (``schemas.py``)."""

    judges: Annotated[list[_JudgeItem], Field(min_length=1)]
    max_tokens: Annotated[int, Field(gt=0, le=1_000_000)] = DEFAULT_MAX_TOKENS
    structured_output: bool = True
    builtin_prompts: Literal["helm", "rubric"] = DEFAULT_BUILTIN_PROMPTS
    custom_prompts: Literal["helm", "rubric"] = DEFAULT_CUSTOM_PROMPTS
    description: LongText | None = None


class _JuryArgs(_JuryFile):
    """The same keys inside a ``jury_score`` metric's arguments (which hold the rubric's keys too)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


def load(path: Path, deployments: Any) -> Jury:
    """Read and check a jury config file (every judge must be a known deployment)."""
    doc = load_yaml_doc(path, missing="jury config not found")
    if not isinstance(doc.data, Mapping):
        raise ConfigError("expected a mapping with a list under the key 'judges'", path=path)
    return _jury(check(_JuryFile, doc.data, path=path, doc=doc), deployments, path=path, doc=doc)


def from_mapping(doc: Mapping[str, Any], deployments: Any, *, where: str = "") -> Jury:
    """A jury from a ``jury_score`` metric's arguments (``where``: the file they came from, for errors)."""
    plain = doc.to_json() if hasattr(doc, "to_json") else dict(doc)  # a spec's frozen args -> lists and dicts
    return _jury(check(_JuryArgs, plain, path=where or None), deployments, path=where or None, inline=True)


def _jury(parsed: _JuryFile, deployments: Any, *, path: str | Path | None, doc: YamlDoc | None = None,
          inline: bool = False) -> Jury:
    """Checked judge entries -> Judges, each checked against the deployment registry (when given)."""
    out: list[Judge] = []
    for i, item in enumerate(parsed.judges):
        field = f"judges[{i}]"

        def fail(message: str, key: str = "") -> ConfigError:
            return ConfigError(message, path=path, line=doc.line("judges", i, *([key] if key else [])) if doc else None,
                               field=f"{field}.{key}" if key else field)

        name = item.model_deployment or item.name  # upstream: name is a label
        model = item.model_name or item.model
        if deployments is not None:
            if name not in deployments:
                raise fail(f"judge '{escape(name)}' is not a known model deployment; add it to "
                           f"model_deployments.yaml under --local-path")
            served = deployments.get(name).model_name
            if model and model != served:
                raise fail(f"judge '{escape(name)}' serves model '{escape(served)}', not '{escape(model)}'",
                           "model_name" if item.model_name else "model")
            model = served
        if any(j.name == name for j in out):
            raise fail(f"judge '{escape(name)}' is listed twice")
        out.append(Judge(name=name, model_name=model or "", weight=float(item.weight)))
    return Jury(judges=tuple(out), max_tokens=parsed.max_tokens, structured_output=parsed.structured_output,
                builtin_prompts=_builtin_prompts(parsed, inline), custom_prompts=parsed.custom_prompts)


def _builtin_prompts(parsed: _JuryFile, inline: bool) -> str:
    """The style stated, else ``rubric`` for judges written into a benchmark's own metric (a custom benchmark:
    HELM has no annotator to match there) or a file that tunes the judge's request (``max_tokens``,
    ``structured_output``: HELM's style would not honour those), else HELM's."""
    given = parsed.model_fields_set
    if "builtin_prompts" in given:
        return parsed.builtin_prompts
    return "rubric" if inline or {"max_tokens", "structured_output"} & given else parsed.builtin_prompts


def resolve(spec: MetricSpec, ctx: Any) -> MetricSpec:
    """Plan-time hook: fill in the jury (run entry's jury_config_path= > the spec's judges > default)."""
    args = spec.args.to_json()
    override = ctx.benchmark_args.get("jury_config_path")
    if override:
        jury = load(config_path(str(override), ctx.base_dir), ctx.deployments)
    elif "judges" in args:  # `judges: []` is a jury without judges: an error, never the default jury in silence
        jury = from_mapping(args, ctx.deployments, where=str(ctx.benchmark_args.get("config_path") or ""))
    else:
        jury = load(config_path(DEFAULT_JURY, ctx.base_dir), ctx.deployments)
    _guard_self_preference(jury, ctx)
    return MetricSpec(spec.name, {**args, **jury.args()})


def _guard_self_preference(jury: Jury, ctx: Any) -> None:
    evaluated = ctx.evaluated_deployment
    if not evaluated:
        return
    evaluated_model = ctx.deployments.get(evaluated).model_name if evaluated in ctx.deployments else ""
    for judge in jury.judges:
        if judge.name == evaluated or (evaluated_model and judge.model_name == evaluated_model):
            ctx.warn(f"jury: judge '{judge.name}' is the model under evaluation ('{evaluated}'); judges tend to "
                     f"prefer their own answers: use another judge (jury_config_path=) for a fair score")
