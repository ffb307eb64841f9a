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

from medhelm import baselines, benchmarks
from medhelm.benchmarks.base import Benchmark, LoadContext
from medhelm.deployments import DeploymentRegistry, check_usable, resolve_gguf
from medhelm.errors import ConfigError, MedhelmError, escape
from medhelm.inference.llamacpp_check import check_runtime
from medhelm.pipeline.options import RunOptions
from medhelm.runentries import MODEL_KEYS, RunEntry
from medhelm.scoring import registry as metric_registry
from medhelm.scoring.choice import gold_label
from medhelm.pipeline.sampling import stream_run
from medhelm.specs import Deployment, DeploymentKind, FrozenMap, RunSpec


@dataclass(frozen=True, eq=False)
class RunPlan:
    spec: RunSpec
    deployment: Deployment
    benchmark: Benchmark
    run_dir: Path
    majority: str | None = None  # baseline/majority: the most frequent gold label of the run's instances

    @property
    def max_prompt_tokens(self) -> int | None:
        """The context window left for the prompt after reserving the output tokens."""
        window = self.deployment.max_sequence_length
        return window - self.spec.max_tokens if window else None


def plan_runs(entries: Sequence[RunEntry], options: RunOptions, *,
              deployments: DeploymentRegistry | None = None,
              warn: Callable[[str], None] | None = None, with_baselines: bool = False) -> list[RunPlan]:
    """``with_baselines``: every benchmark also gets the reference baselines that fit its task
    (``baselines.for_task``), on the same instances (same run arguments: sample size, seed)."""
    deployments = deployments or DeploymentRegistry.load(options.local_path)
    warn = warn or (lambda msg: print(f"medhelm: warning: {msg}", file=sys.stderr))
    plans: dict[str, RunPlan] = {}
    cache: dict[tuple, object] = {}  # a .conf of 20,000 entries reads each benchmark's files once
    planned: set[tuple[str, Path]] = set()  # an entry repeated verbatim plans to the same run
    for entry in entries:
        if (entry.text, entry.base_dir) in planned:
            continue
        planned.add((entry.text, entry.base_dir))
        plan = _plan_one(entry, options, deployments, warn, cache)
        name = plan.run_dir.name
        if name in plans and plans[name].spec != plan.spec and not (  # a baseline asked twice (.conf, --baselines)
                baselines.is_baseline(plan.deployment.name)
                and dataclasses.replace(plans[name].spec, entry="") == dataclasses.replace(plan.spec, entry="")):
            raise ConfigError(f"two run entries map to run '{name}' with different settings", path=entry.source)
        plans.setdefault(name, plan)
        if with_baselines and not baselines.is_baseline(plan.deployment.name):
            for extra in _baseline_entries(entry, plan.spec.benchmark.task_type):
                if (extra.text, extra.base_dir) not in planned:
                    planned.add((extra.text, extra.base_dir))
                    baseline = _plan_one(extra, options, deployments, warn, cache)
                    plans.setdefault(baseline.run_dir.name, baseline)
    return list(plans.values())


def _baseline_entries(entry: RunEntry, task) -> list[RunEntry]:
    """The entry's benchmark with each baseline that fits its task as the model (run arguments kept)."""
    kept = {k: v for k, v in entry.args.items() if k not in MODEL_KEYS}
    return [dataclasses.replace(entry, args=FrozenMap({**kept, "model": name}), text=entry.name + ":" + ",".join(
        f"{k}={v}" for k, v in sorted({**kept, "model": name}.items()))) for name in baselines.for_task(task)]


def _plan_one(entry: RunEntry, options: RunOptions, deployments: DeploymentRegistry,
              warn: Callable[[str], None], cache: dict[tuple, object] | None = None) -> RunPlan:
    cache = {} if cache is None else cache
    try:
        deployment = deployments.resolve(entry.model, entry.deployment)
    except ConfigError as err:
        raise ConfigError(f"run entry '{escape(entry.text)}': {err}", path=_where(entry)) from None
    bargs = entry.benchmark_args
    ctx = LoadContext(args=bargs, data_dir=options.data_dir, cache_dir=options.scenarios_dir,
                      offline=options.offline, base_dir=entry.base_dir, data_roots=tuple(options.data_roots),
                      any_path=options.any_data_path)
    key = ("benchmark", entry.name, bargs, entry.base_dir)
    if key not in cache:
        try:
            cache[key] = benchmarks.resolve(entry.name, ctx)
        except MedhelmError as err:
            raise _in_entry(err, entry) from None
    benchmark = cache[key]
    spec = benchmark.spec
    metrics_key = ("metrics", *key[1:], deployment.name)
    if metrics_key not in cache:
        rctx = metric_registry.ResolveContext(benchmark_args=bargs, base_dir=entry.base_dir,
                                              deployments=deployments, evaluated_deployment=deployment.name,
                                              warn=warn)
        metrics = metric_registry.resolve_all(spec.metrics, rctx)
        metric_registry.validate(metrics, where=_where(entry))
        cache[metrics_key] = metrics
    spec = dataclasses.replace(spec, metrics=cache[metrics_key])
    if not options.dry_run:  # a missing API key or GGUF file is found now, not after run_spec.json is written
        for name in (deployment.name, *_judges(spec.metrics)):
            if name != deployment.name and baselines.is_baseline(name):
                raise ConfigError(f"run entry '{escape(entry.text)}': '{escape(name)}' is a reference baseline, "
                                  f"not a judge", path=_where(entry))
            if ("usable", name) not in cache and name in deployments:
                usable = deployments.get(name)
                check_usable(usable, source=deployments.sources.get(name))
                if usable.kind is DeploymentKind.LLAMACPP and usable.gguf_path:
                    try:  # the embedded runtime answers a prompt in a child process (once per library and CPU)
                        check_runtime(resolve_gguf(usable.gguf_path))
                    except MedhelmError as err:
                        raise err.with_context(f"deployment '{escape(name)}': ") from None
                cache[("usable", name)] = True

    run_args = entry.run_args
    max_tokens = _int_arg(run_args, ("num_output_tokens", "max_tokens"), entry) or options.num_output_tokens \
        or spec.max_tokens
    max_eval = _int_arg(run_args, ("max_eval_instances",), entry) or options.max_eval_instances
    temperature = _float_arg(run_args, "temperature", entry, default=0.0)
    if not 0.0 <= temperature <= 2.0:  # NaN and inf fail this too
        raise ConfigError(f"run entry '{escape(entry.text)}': temperature must be a number from 0 to 2",
                          path=_where(entry))
    seed = _int_arg(run_args, ("seed",), entry)
    if seed is not None and not 0 <= seed < 2**32:
        raise ConfigError(f"run entry '{escape(entry.text)}': seed must be from 0 to {2**32 - 1}", path=_where(entry))
    window = deployment.max_sequence_length
    if window and max_tokens >= window:
        raise ConfigError(f"run entry '{escape(entry.text)}': max_tokens {max_tokens} leaves no room for the prompt in "
                          f"deployment '{escape(deployment.name)}' (context {window} tokens); lower max_tokens/"
                          "num_output_tokens or raise max_sequence_length", path=_where(entry))
    run_spec = RunSpec(
        entry=entry.text,
        benchmark=spec,
        benchmark_args=bargs,
        model=deployment.model_name,
        deployment=deployment.name,
        max_eval_instances=max_eval,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=options.seed if seed is None else seed,
        prompt=getattr(benchmark, "prompt_variant", ""),
    )
    name = run_spec.name
    if len(name.encode("utf-8")) > 255:  # one folder name on every filesystem we write to
        raise ConfigError(f"run entry '{escape(entry.text, 120)}': its run name is longer than a folder name may be "
                          "(255 bytes); shorten the benchmark arguments or the deployment name", path=_where(entry))
    majority = _baseline_fits(run_spec, deployment, benchmark, entry) if deployment.kind is DeploymentKind.BASELINE \
        else None
    return RunPlan(spec=run_spec, deployment=deployment, benchmark=benchmark, run_dir=options.suite_dir / name,
                   majority=majority)


def _baseline_fits(spec: RunSpec, deployment: Deployment, benchmark: Benchmark, entry: RunEntry) -> str | None:
    """A baseline run, checked against the instances it will answer (the seeded sample the run evaluates):
    the strategy fits the benchmark; for the majority baseline, the label counted from their gold answers."""
    try:
        strategy = baselines.strategy_of(deployment.name)
        instances = list(stream_run(benchmark, spec))
        baselines.check_fits(strategy, spec.benchmark.task_type, instances)
        return baselines.majority_label(map(gold_label, instances))[0] if strategy == baselines.MAJORITY else None
    except MedhelmError as err:
        raise ConfigError(f"run entry '{escape(entry.text)}': {err}", path=_where(entry)) from None


def _judges(metrics: Sequence[object]) -> list[str]:
    return [str(j.get("name")) for m in metrics for j in (getattr(m, "args", {}).get("judges") or ())
            if hasattr(j, "get")]


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
            text = args[key].strip()
            if not text.lstrip("+-").isdigit() or len(text) > 12:
                raise ConfigError(f"run entry '{escape(entry.text)}': {key} must be an integer of at most 12 digits",
                                  path=_where(entry))
            value = int(text)
            if value <= 0 and key != "seed":
                raise ConfigError(f"run entry '{escape(entry.text)}': {key} must be positive", path=_where(entry))
            return value
    return None


def _float_arg(args: FrozenMap, key: str, entry: RunEntry, *, default: float) -> float:
    if key not in args:
        return default
    try:
        return float(args[key][:40])
    except ValueError:
        raise ConfigError(f"run entry '{escape(entry.text)}': {key} must be a number", path=_where(entry)) from None
