"""What a report says, read from the results store: aggregates only.

Read: the release's ``meta``, ``benchmarks``, ``models``, ``leaderboard``, ``cells`` (value and interval, not
the bootstrap replicates), ``group_scores``, the subgroup tables (``store/subgroups.py``: only groups that
passed small-cell suppression exist there), and per run its name, model, deployment, suite, counts and the
digest of its run spec. Never read: ``instances`` (prompts, outputs, patient text), run specs' text. So
nothing an instance says can reach the report, whatever the store holds.

Beside the main metric (``beside``): per benchmark whose card names other columns (``medhelm/cards.py``: our
``lenient_match`` beside HELM's ``exact_match``, upstream's ``<benchmark>_accuracy`` beside
``jury_score_normalized``), each model's mean of those stats (``store.read.column_values``, from ``run_stats``).
A release summarized before the multiple-choice columns were renamed is flagged (``extra["legacy_names"]``).

Per run, where and when it asked the evaluated deployment (``access``: the runs' access columns, endpoint
without credentials, served and answered model, first and last request in UTC; none from a store summarised
before they were kept). Beside them: per model its tokens, time and cost (``model_usage``, from ``models``), and per benchmark and model
the requests, tokens and request latency summed from ``run_stats`` (``usage``); the hospital's ``report.yaml``
(``about.py``, given as ``about``) and the code commit and image digest (``build_identity``).

Each part read is also hashed (``inputs``: SHA-256 of its rows as canonical JSON), so the manifest names
exactly what the report was built from, and ``medhelm report verify --store`` can tell whether the store
still holds it.

Failure semantics: an unknown release or a store without it raises ``ConfigError`` (one line); a release
without subgroups or without an accepted release to compare gives empty parts, never an error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from medhelm.report.about import AboutFile
from medhelm.store.backends import Store
from medhelm.store.compare import CompareOptions, Comparison, compare, side_from_release
from medhelm.store.read import column_values, legacy_names, resolve_release
from medhelm.store.schema import ACCESS_COLUMNS
from medhelm.store.subgroup_changes import SubgroupChange, common_cells, instance_labels, subgroup_changes
from medhelm.store.subgroups import read_subgroups, stored_min_cell
from medhelm.version import __version__

# the parts and the SQL that reads each (the release is the one parameter); column lists are explicit so that
# nothing else a table may hold (bootstrap blobs, instance text) is read
_PARTS: dict[str, str] = {
    "meta": "SELECT key, value FROM meta WHERE release = ? ORDER BY key",
    "benchmarks": "SELECT benchmark, display_name, description, category, subcategory, access, task_type, "
                  "main_metric, lower_is_better FROM benchmarks WHERE release = ? ORDER BY benchmark",
    "models": "SELECT model, deployment, redacted, suites, n_instances, cost_usd, jury_cost_usd FROM models "
              "WHERE release = ? ORDER BY model, deployment",
    "leaderboard": "SELECT model, deployment, win_rate, win_rate_low, win_rate_high, rank, rank_low, rank_high, "
                   "mean_score, n_benchmarks FROM leaderboard WHERE release = ? ORDER BY rank, model, deployment",
    "cells": "SELECT benchmark, model, deployment, value, ci_low, ci_high, n_instances, n_unscored, n_runs FROM "
             "cells WHERE release = ? ORDER BY benchmark, model, deployment",
    "group_scores": "SELECT level, grp, model, deployment, value, ci_low, ci_high, n_benchmarks FROM group_scores "
                    "WHERE release = ? ORDER BY level, grp, model, deployment",
    "runs": "SELECT suite, run_name, benchmark, model, deployment, source, redacted, instances_total, "
            "instances_done, errors, spec_json FROM runs WHERE release = ? ORDER BY suite, run_name",
    # what running each model cost: tokens, time and money (summarize's cost arithmetic, store/costs.py)
    "model_usage": "SELECT model, deployment, prompt_tokens, completion_tokens, judge_prompt_tokens, "
                   "judge_completion_tokens, inference_s, gpu_s, cost_usd, cost_basis, jury_cost_usd FROM models "
                   "WHERE release = ? ORDER BY model, deployment",
    # per benchmark and model: requests, tokens and request latency, summed over the runs' per-split stats
    "usage": "SELECT r.benchmark, r.model, r.deployment, s.stat, SUM(s.count) AS count, SUM(s.sum) AS total "
             "FROM run_stats s JOIN runs r ON r.release = s.release AND r.suite = s.suite AND "
             "r.run_name = s.run_name WHERE s.release = ? AND s.stat IN ('num_prompt_tokens', "
             "'num_completion_tokens', 'inference_runtime') GROUP BY r.benchmark, r.model, r.deployment, s.stat "
             "ORDER BY r.benchmark, r.model, r.deployment, s.stat",
}


@dataclass(frozen=True)
class ReportContent:
    release: str
    parts: dict[str, list[dict[str, Any]]]  # part -> rows (as read, except runs' spec reduced to its digest)
    inputs: dict[str, str]  # part -> sha256 of its rows
    against: str | None = None
    comparison: Comparison | None = None
    subgroup_changes: tuple[SubgroupChange, ...] = ()
    subgroup_changes_suppressed: int = 0
    code_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)
    about: AboutFile | None = None  # the hospital's report.yaml (about.py); None: not given
    build: dict[str, str] = field(default_factory=dict)  # code commit, image digest (``build_identity``)


def build_identity() -> dict[str, str]:
    """The code commit and the image digest this medhelm runs from: the environment's ``MEDHELM_CODE_COMMIT``
    and ``MEDHELM_IMAGE_DIGEST`` (what the deployment that runs the image knows), else the git commit of a source
    checkout; what is not known is said so, never guessed."""
    import os
    import re
    import subprocess
    from pathlib import Path

    commit = os.environ.get("MEDHELM_CODE_COMMIT", "").strip()
    if not commit:
        try:
            done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                                  text=True, timeout=10)
            commit = done.stdout.strip() if done.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            commit = ""
        if commit:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=Path(__file__).parent, capture_output=True, text=True, timeout=30)
            commit += " (source checkout with local changes)" if dirty.stdout.strip() else " (source checkout)"
    keep = re.compile(r"[^A-Za-z0-9@:/._+() -]")  # printed on the page: a digest or a commit, nothing else
    image = keep.sub("", os.environ.get("MEDHELM_IMAGE_DIGEST", "").strip())[:200]
    if image and not re.search(r"@sha256:[0-9a-f]{64}$", image):
        image += " (by tag, not a content digest: set image.digest)"
    return {"commit": keep.sub("", commit)[:120] or "not recorded",
            "image": image or "not recorded (not run from the medhelm image)"}


def _digest(rows: list[dict[str, Any]]) -> str:
    text = json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _run_row(row: dict[str, Any]) -> dict[str, Any]:
    """A run as the report shows it: its spec reduced to its digest and the settings that identify it."""
    spec_text = row.pop("spec_json") or "{}"
    try:
        spec = json.loads(spec_text)
    except ValueError:
        spec = {}
    spec = spec if isinstance(spec, dict) else {}
    bench = spec.get("benchmark") if isinstance(spec.get("benchmark"), dict) else {}
    row["spec_sha256"] = hashlib.sha256(spec_text.encode("utf-8")).hexdigest()
    row["entry"] = str(spec.get("entry") or "")
    row["benchmark_source"] = str(bench.get("source") or "")
    row["settings"] = {k: spec.get(k) for k in ("max_eval_instances", "max_tokens", "temperature", "seed")}
    row["custom_prompt"] = bool(spec.get("prompt"))
    return row


def _prompt_row(row: dict[str, Any]) -> dict[str, Any]:
    """A run's custom prompt (a run spec's ``prompt``), by its digest only."""
    try:
        spec = json.loads(row["spec_json"] or "{}")
    except ValueError:
        spec = {}
    prompt = spec.get("prompt") if isinstance(spec, dict) else None
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True) if prompt else ""
    return {"suite": row["suite"], "run_name": row["run_name"], "benchmark": row["benchmark"],
            "prompt_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest() if text else ""}


def read_parts(store: Store, release: str) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    parts = {name: store.query_dicts(sql, (release,)) for name, sql in _PARTS.items()}
    parts["prompts"] = [_prompt_row(r) for r in parts["runs"]]
    parts["runs"] = [_run_row(r) for r in parts["runs"]]
    parts["access"] = _access_rows(store, release)
    scores, gaps = read_subgroups(store, release)
    parts["subgroup_scores"], parts["subgroup_gaps"] = scores, gaps
    parts["beside"] = _beside(store, release, parts["benchmarks"])
    return parts, {name: _digest(rows) for name, rows in parts.items()}


def _access_rows(store: Store, release: str) -> list[dict[str, Any]]:
    """Per run where and when it asked the evaluated deployment (``schema.ACCESS_COLUMNS``; ``report/access.py``
    unites them per model); none from a store summarised before runs recorded it (read as it is)."""
    if not set(ACCESS_COLUMNS) <= set(store.columns("runs")):
        return []
    return store.query_dicts(f"SELECT suite, run_name, model, deployment, {', '.join(ACCESS_COLUMNS)} FROM runs "
                             "WHERE release = ? ORDER BY suite, run_name", (release,))


def _beside(store: Store, release: str, benchmarks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The columns shown beside each benchmark's main one, per model (numbers only)."""
    from medhelm.cards import BY_NAME

    rows = []
    for b in benchmarks:
        card = BY_NAME.get(b["benchmark"])
        if card is None or not card.beside:
            continue
        values = column_values(store, release, card.name, card.beside, card.main_split)
        rows += [{"benchmark": card.name, "model": model, "deployment": dep, "stat": stat, "value": value}
                 for (model, dep), stats in sorted(values.items()) for stat, value in sorted(stats.items())]
    return rows


def read_content(store: Store, release: str | None, against: str | None = None, *, replicates: int = 2000,
                 seed: int = 0, about: AboutFile | None = None, about_path: Any = None) -> ReportContent:
    release = resolve_release(store, release)
    parts, inputs = read_parts(store, release)
    if about is not None:
        from medhelm.report.about import check_names

        check_names(about, about_path, {b["benchmark"] for b in parts["benchmarks"]},
                    {(m["model"], m["deployment"]) for m in parts["models"]})
    extra = {"legacy_names": legacy_names(store, release)}
    more = {"about": about, "build": build_identity()}
    comparison = None
    if against is not None:
        against = resolve_release(store, against)
        if against == release:
            from medhelm.errors import ConfigError

            raise ConfigError(f"--against names the release being reported ('{release}'); give the accepted one")
        side_a, side_b = side_from_release(store, against), side_from_release(store, release)
        options = CompareOptions(replicates=replicates, seed=seed, adjust="holm")
        comparison = compare(side_a, side_b, options)
        labels = instance_labels(store, against, instance_labels(store, release))
        min_cell = max(stored_min_cell(store, release), stored_min_cell(store, against))
        changes, hidden = subgroup_changes(side_a, side_b, labels, options,
                                           common_cells(store, (against, release), min_cell))
        inputs.update(_accepted_inputs(store, against))
        return ReportContent(release, parts, inputs, against, comparison, tuple(changes), hidden, extra=extra, **more)
    return ReportContent(release, parts, inputs, extra=extra, **more)


def _accepted_inputs(store: Store, against: str) -> dict[str, str]:
    """What the change against the accepted release was computed from: its runs' value vectors."""
    rows = store.query_dicts("SELECT suite, run_name, value_ids, value_blob FROM runs WHERE release = ? ORDER BY "
                             "suite, run_name", (against,))
    rows = [{**r, "value_blob": hashlib.sha256(r["value_blob"] or b"").hexdigest()} for r in rows]
    return {f"accepted:{against}:runs": _digest(rows)}


def input_digests(store: Store, release: str, against: str | None) -> dict[str, str]:
    """The digests a report of ``release`` (against ``against``) records, recomputed from the store."""
    inputs = read_parts(store, release)[1]
    if against:
        inputs.update(_accepted_inputs(store, against))
    return inputs
