"""Who sits on the jury: judges are named deployments, resolved and checked at plan time.

A jury config is YAML::

    judges:
      - name: vllm/qwen2.5-7b-instruct     # a deployment name (model_deployments.yaml)
        model_name: qwen/qwen2.5-7b-instruct  # optional; must match the deployment when given
        weight: 1.0                        # optional, > 0
    max_tokens: 1024                       # optional judge output budget
    structured_output: true                # optional: ask for JSON with the rubric's schema

Upstream's ``judges.yaml`` shape (``{name: <label>, model, model_deployment}``) is read too. A bare
name (``jury_config_path=embedded``) selects a built-in ``config/jury_<name>.yaml``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm.errors import ConfigError
from medhelm.files import load_yaml
from medhelm.specs import JSON, MetricSpec

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
DEFAULT_JURY = "default"
DEFAULT_MAX_TOKENS = 1024
_JUDGE_KEYS = {"name", "model_name", "weight", "model", "model_deployment"}
_TOP_KEYS = {"judges", "max_tokens", "structured_output", "description"}


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

    def args(self) -> dict[str, JSON]:
        """The resolved part of a jury_score MetricSpec's arguments."""
        return {"judges": [j.to_json() for j in self.judges], "max_tokens": self.max_tokens,
                "structured_output": self.structured_output}


def config_path(value: str, base_dir: Path) -> Path:
    """``jury_config_path=`` -> a file: a built-in name, or a path relative to the run entry's folder."""
    builtin = CONFIG_DIR / f"jury_{value}.yaml"
    if "/" not in value and not value.endswith((".yaml", ".yml")) and builtin.is_file():
        return builtin
    path = Path(value)
    return path if path.is_absolute() else Path(base_dir) / path


def load(path: Path, deployments: Any) -> Jury:
    """Read and check a jury config file (every judge must be a known deployment)."""
    doc = load_yaml(path, missing="jury config not found")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("judges"), list):
        raise ConfigError("expected a list under the key 'judges'", path=path)
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)}", path=path)
    return from_mapping(doc, deployments, where=str(path))


def from_mapping(doc: Mapping[str, Any], deployments: Any, *, where: str = "") -> Jury:
    judges = judges_from(doc.get("judges") or (), deployments, where=where)
    max_tokens = doc.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ConfigError("must be a positive integer", path=where or None, field="max_tokens")
    structured = doc.get("structured_output", True)
    if not isinstance(structured, bool):
        raise ConfigError("must be true or false", path=where or None, field="structured_output")
    return Jury(judges=judges, max_tokens=max_tokens, structured_output=structured)


def judges_from(items: Sequence[Any], deployments: Any, *, where: str = "") -> tuple[Judge, ...]:
    """Judge entries -> Judges, each checked against the deployment registry (when given)."""
    if not items:
        raise ConfigError("the jury has no judges", path=where or None, field="judges")
    out: list[Judge] = []
    for i, item in enumerate(items):
        field = f"judges[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"].strip():
            raise ConfigError("each judge needs a 'name' (a model deployment)", path=where or None, field=field)
        unknown = set(item) - _JUDGE_KEYS
        if unknown:
            raise ConfigError(f"unknown key(s) {sorted(unknown)}", path=where or None, field=field)
        name = str(item.get("model_deployment") or item["name"])  # upstream: name is a label
        if "\n" in name or len(name) > 500:
            raise ConfigError("must be a deployment name", path=where or None, field=field)
        model = item.get("model_name") or item.get("model")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < math.inf:
            raise ConfigError("weight must be a number > 0 and finite", path=where or None, field=f"{field}.weight")
        if deployments is not None:
            if name not in deployments:
                raise ConfigError(f"judge '{name}' is not a known model deployment; add it to "
                                  f"model_deployments.yaml under --local-path", path=where or None, field=field)
            served = deployments.get(name).model_name
            if model and str(model) != served:
                raise ConfigError(f"judge '{name}' serves model '{served}', not '{model}'", path=where or None,
                                  field=f"{field}.model_name")
            model = served
        if any(j.name == name for j in out):
            raise ConfigError(f"judge '{name}' is listed twice", path=where or None, field=field)
        out.append(Judge(name=name, model_name=str(model or ""), weight=float(weight)))
    return tuple(out)


def resolve(spec: MetricSpec, ctx: Any) -> MetricSpec:
    """Plan-time hook: fill in the jury (run entry's jury_config_path= > the spec's judges > default)."""
    args = spec.args.to_json()
    override = ctx.benchmark_args.get("jury_config_path")
    if override:
        jury = load(config_path(str(override), ctx.base_dir), ctx.deployments)
    elif args.get("judges"):
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
