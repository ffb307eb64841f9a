"""Prometheus gauges of evaluation results, pushed to a Pushgateway by `medhelm summarize --pushgateway`
(a release's scores) and `medhelm compare --pushgateway` (the candidate's scores and the flags).

Each push replaces its group (``job=medhelm-release`` / ``job=medhelm-compare``), so the gateway always
holds the latest score per model x benchmark and the latest comparison's flags; the chart's optional
PrometheusRule (``monitoring.regressionRule``) alerts on ``medhelm_eval_regression == 1``. Labels are
model, deployment, benchmark and category names (bounded by configuration); release names go in an info
metric, never on the scores (a new release must not start new series). No instance id or text.

Failure semantics: building a registry never raises on data (None/NaN values are left out); pushing is
best effort and returns a one-line reason instead of raising (the command's result and exit code do not
depend on it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge

from medhelm.store.backends import Store

CELL = ("model", "deployment", "benchmark", "category")


def _set(g: Gauge, labels: tuple[str, ...], value: float | None) -> None:
    if value is not None and not (isinstance(value, float) and math.isnan(value)):
        g.labels(*labels).set(float(value))


def release_registry(store: Store, release: str) -> CollectorRegistry:
    """A release's cells: score, CI bounds and instance count per model x benchmark."""
    from medhelm.store import read

    reg = CollectorRegistry()
    score = Gauge("medhelm_release_score", "Latest summarized score (main metric) per model and benchmark",
                  CELL, registry=reg)
    low = Gauge("medhelm_release_score_ci_low", "Lower bound of the score's 95% bootstrap CI", CELL, registry=reg)
    high = Gauge("medhelm_release_score_ci_high", "Upper bound of the score's 95% bootstrap CI", CELL, registry=reg)
    n = Gauge("medhelm_release_instances", "Instances behind the score", CELL, registry=reg)
    info = Gauge("medhelm_release_info", "The release the scores come from (always 1)", ("release",), registry=reg)
    stamp = Gauge("medhelm_release_timestamp_seconds", "When the gauges were pushed", registry=reg)
    cats = {b["benchmark"]: b["category"] or "" for b in read.benchmarks(store, release)}
    for c in read.cells(store, release):
        labels = (c["model"], c["deployment"], c["benchmark"], cats.get(c["benchmark"], ""))
        _set(score, labels, c["value"])
        _set(low, labels, c["ci_low"])
        _set(high, labels, c["ci_high"])
        _set(n, labels, c["n_instances"])
    info.labels(release).set(1)
    stamp.set(time.time())
    return reg


def comparison_registry(comparison: object) -> CollectorRegistry:
    """A ``compare.Comparison``: per candidate model x benchmark its score on the paired instances, the
    change and its CI bounds, and 0/1 flags (significant drop, gate)."""
    reg = CollectorRegistry()
    g = {name: Gauge(name, doc, CELL, registry=reg) for name, doc in (
        ("medhelm_eval_score", "Candidate's score on the instances both evaluations scored"),
        ("medhelm_eval_score_change", "Candidate minus baseline on the paired instances"),
        ("medhelm_eval_score_change_ci_low", "Lower bound of the change's paired bootstrap CI"),
        ("medhelm_eval_score_change_ci_high", "Upper bound of the change's paired bootstrap CI"),
        ("medhelm_eval_compared_instances", "Instances both evaluations scored"),
        ("medhelm_eval_regression", "1 = a significant drop (worse for the benchmark's direction), else 0"),
        ("medhelm_eval_gate_failed_cell", "1 = a significant drop larger than the gate's threshold, else 0"))}
    info = Gauge("medhelm_eval_compare_info", "Which evaluations were compared (always 1)",
                 ("baseline", "candidate"), registry=reg)
    gate = Gauge("medhelm_eval_gate_failed", "1 = the comparison's gate failed", registry=reg)
    stamp = Gauge("medhelm_eval_compare_timestamp_seconds", "When the comparison was pushed", registry=reg)
    results: Iterable = getattr(comparison, "results")
    for r in results:
        labels = (r.model_b, r.deployment_b, r.benchmark, r.category)
        _set(g["medhelm_eval_score"], labels, r.score_b)
        _set(g["medhelm_eval_score_change"], labels, r.diff)
        _set(g["medhelm_eval_score_change_ci_low"], labels, r.ci_low)
        _set(g["medhelm_eval_score_change_ci_high"], labels, r.ci_high)
        _set(g["medhelm_eval_compared_instances"], labels, r.n_pairs)
        _set(g["medhelm_eval_regression"], labels, float(r.change == "drop"))
        _set(g["medhelm_eval_gate_failed_cell"], labels, float(r.gate))
    info.labels(getattr(comparison, "a"), getattr(comparison, "b")).set(1)
    gate.set(float(bool(getattr(comparison, "gate_failed"))))
    stamp.set(time.time())
    return reg


def push(registry: CollectorRegistry, gateway: str, job: str) -> str | None:
    """Replace the group ``job`` on the Pushgateway; None = pushed, else a one-line reason."""
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(gateway, job=job, registry=registry, timeout=10)
    except Exception as err:  # noqa: BLE001 - best effort: report, never fail the command for it
        return f"could not push metrics to the Pushgateway: {type(err).__name__}"
    return None
