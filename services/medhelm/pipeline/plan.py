"""Plan a suite: turn run entries into fully resolved, validated ``RunPlan`` values.

Planning reads configs, benchmark definitions and deployments and checks everything a run needs
(metrics, judges, files) — and writes nothing. A bad input fails here, before any result exists.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from medhelm import benchmarks
from medhelm.benchmarks.base import Benchmark, LoadContext
from medhelm.deployments import DeploymentRegistry
from medhelm.errors import ConfigError, MedhelmError
from medhelm.pipeline.options import RunOptions
from medhelm.runentries import RunEntry
from medhelm.scoring import registry as metric_registry
from medhelm.specs import Deployment, FrozenMap, RunSpec


@dataclass(frozen=True, eq=False)
class RunPlan:
    spec: RunSpec
    deployment: Deployment
    benchmark: Benchmark
    run_dir: Path

    @property
    def max_prompt_tokens(self) -> int | None:
        """The context window left for the prompt after reserving the output tokens."""
        window = self.deployment.max_sequence_length
        return window - self.spec.max_tokens if window else None


def plan_runs(entries: Sequence[RunEntry], options: RunOptions, *,
              deployments: DeploymentRegistry | None = None,
              warn: Callable[[str], None] | None = None) -> list[RunPlan]:
    deployments = deployments or DeploymentRegistry.load(options.local_path)
    warn = warn or (lambda msg: print(f"medhelm: warning: {msg}", file=sys.stderr))
    plans: dict[str, RunPlan] = {}
    for entry in entries:
        plan = _plan_one(entry, options, deployments, warn)
        if plan.spec.name in plans and plans[plan.spec.name].spec != plan.spec:
            raise ConfigError(f"two run entries map to run '{plan.spec.name}' with different settings",
                              path=entry.source)
        plans.setdefault(plan.spec.name, plan)
    return list(plans.values())


def _plan_one(entry: RunEntry, options: RunOptions, deployments: DeploymentRegistry,
              warn: Callable[[str], None]) -> RunPlan:
    try:
        deployment = deployments.resolve(entry.model, entry.deployment)
    except ConfigError as err:
        raise ConfigError(f"run entry '{entry.text}': {err}", path=_where(entry)) from None
    ctx = LoadContext(args=entry.benchmark_args, data_dir=options.data_dir, cache_dir=options.scenarios_dir,
                      offline=options.offline, base_dir=entry.base_dir, data_roots=tuple(options.data_roots),
                      any_path=options.any_data_path)
    try:
        benchmark = benchmarks.resolve(entry.name, ctx)
    except MedhelmError as err:
        raise _in_entry(err, entry) from None
    spec = benchmark.spec
    rctx = metric_registry.ResolveContext(benchmark_args=entry.benchmark_args, base_dir=entry.base_dir,
                                          deployments=deployments, evaluated_deployment=deployment.name, warn=warn)
    metrics = metric_registry.resolve_all(spec.metrics, rctx)
    metric_registry.validate(metrics, where=_where(entry))
    spec = dataclasses.replace(spec, metrics=metrics)

    run_args = entry.run_args
    max_tokens = _int_arg(run_args, ("num_output_tokens", "max_tokens"), entry) or options.num_output_tokens \
        or spec.max_tokens
    max_eval = _int_arg(run_args, ("max_eval_instances",), entry) or options.max_eval_instances
    temperature = _float_arg(run_args, "temperature", entry, default=0.0)
    seed = _int_arg(run_args, ("seed",), entry)
    run_spec = RunSpec(
        entry=entry.text,
        benchmark=spec,
        benchmark_args=FrozenMap(entry.benchmark_args),
        model=deployment.model_name,
        deployment=deployment.name,
        max_eval_instances=max_eval,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=options.seed if seed is None else seed,
    )
    return RunPlan(spec=run_spec, deployment=deployment, benchmark=benchmark,
                   run_dir=options.suite_dir / run_spec.name)


def _in_entry(err: MedhelmError, entry: RunEntry) -> MedhelmError:
    """The same error, saying which .conf file and entry it came from (when not already said)."""
    where = _where(entry)
    if where is None or str(err).startswith(where):
        return err
    return err.with_context(f"{where}: entry '{entry.name}': ")


def _where(entry: RunEntry) -> str | None:
    return entry.source if entry.source != "--run-entries" else None


def _int_arg(args: FrozenMap, keys: tuple[str, ...], entry: RunEntry) -> int | None:
    for key in keys:
        if key in args:
            try:
                value = int(args[key])
            except ValueError:
                raise ConfigError(f"run entry '{entry.text}': {key} must be an integer", path=_where(entry)) from None
            if value <= 0 and key != "seed":
                raise ConfigError(f"run entry '{entry.text}': {key} must be positive", path=_where(entry))
            return value
    return None


def _float_arg(args: FrozenMap, key: str, entry: RunEntry, *, default: float) -> float:
    if key not in args:
        return default
    try:
        return float(args[key])
    except ValueError:
        raise ConfigError(f"run entry '{entry.text}': {key} must be a number", path=_where(entry)) from None
