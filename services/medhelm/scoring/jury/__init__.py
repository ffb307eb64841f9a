"""The LLM jury (docs/jury.md): rubric scoring by several judge deployments, robust parsing,
per-run summaries, agreement statistics and calibration against clinicians.

``FACTORIES`` registers the ``jury_score`` metric (stats ``jury_score``, ``jury_score_normalized``,
``jury_coverage``, and upstream's ``<rubric>_accuracy`` for a built-in rubric). Its ``resolve`` hook picks the judges at plan time (run entry's
``jury_config_path=``, else the spec's ``judges``, else ``config/jury_default.yaml``).
"""

from __future__ import annotations

from medhelm.scoring.base import ScoringContext
from medhelm.scoring.jury import config, rubrics
from medhelm.scoring.jury.metric import STATS, JudgeCall, JuryMetric, helm_stat
from medhelm.scoring.factory import MetricFactory, ResolveContext
from medhelm.specs import MetricSpec


def _validate(spec: MetricSpec) -> None:
    rubrics.from_args(spec.args)
    if spec.args.get("judges"):
        config.from_mapping(spec.args, deployments=None)  # shape only; the registry is checked in resolve


def _build(spec: MetricSpec, ctx: ScoringContext) -> JuryMetric:
    if not spec.args.get("judges"):  # not resolved at plan time (e.g. a spec built by hand): default jury
        spec = config.resolve(spec, ResolveContext(benchmark_args=spec.args, base_dir=ctx.base_dir,
                                                   deployments=ctx.deployments,
                                                   evaluated_deployment=ctx.evaluated_deployment))
    jury = config.from_mapping(spec.args, ctx.deployments)
    calls = [JudgeCall(j, ctx.clients.get(ctx.deployments.get(j.name), role="judge")) for j in jury.judges]
    rubric = rubrics.from_args(spec.args, style=jury.builtin_prompts, custom_style=jury.custom_prompts)
    return JuryMetric(rubric, calls, max_tokens=jury.max_tokens,
                      structured_output=jury.structured_output, helm_name=_helm_name(spec))


def _helm_name(spec: MetricSpec) -> str | None:
    """Upstream's column for a built-in rubric (named after it, as MedHELM names it after the benchmark)."""
    return helm_stat(str(spec.args["rubric"])) if "rubric" in spec.args else None


def _stat_names(spec: MetricSpec) -> tuple[str, ...]:
    name = _helm_name(spec)
    return STATS if name is None else (*STATS, name)


FACTORIES: dict[str, MetricFactory] = {
    "jury_score": MetricFactory(
        build=_build,
        stat_names=_stat_names,
        validate=_validate,
        resolve=config.resolve,
        description="mean of the valid judge x criterion rubric scores (raw and 0-1), with coverage; a built-in "
                    "rubric also gives upstream's <rubric>_accuracy (MedHELM's 1-5 mean, default 1)",
    ),
}
