"""The results store's tables: one schema for SQLite and PostgreSQL.

Everything is keyed by ``release`` (a leaderboard built from one or more suites), so one store holds
many releases and ``summarize`` replaces a release as a whole. ``instances`` keeps one row per
instance with the leaderboard value (for bootstrap CIs) and, unless redacted, the whole record as
written by the run (``record_json``: prompt, output, references, judgements) for drill-down;
``runs.value_ids``/``value_blob`` repeat each run's leaderboard values as one vector (float64, NaN =
unscored) so cells and their bootstrap are computed from 1 row per run, not 1 per instance. Every
other table is a pre-aggregate the dashboard reads directly.

Versions (``SCHEMA_VERSION``, recorded in ``meta`` under release '' and key 'schema_version'; the steps
between them are ``migrate.migrate``; ``medhelm store migrate`` runs them, docs/kubernetes.md
"Upgrades"):

* v1 (chart 0.1.0): the tables below; the ratings, audit and subgroup tables and ``models.jury_cost_usd``
  were made on first use, and the version was recorded at the first summarize.
* v2 (medhelm and chart 0.2.0): every relation (``backends.Store.relations``: the tables below, the ratings,
  the audit trail, the subgroup tables) is made when the store is created or migrated, never on first use,
  so the pods' database role needs no right to change the schema; the version is recorded at creation; each
  migration is noted in ``meta`` ('migrated_to_v<n>': when, from which version, by which medhelm).
* v3: each run's access record (run.json ``access``, docs/output-format.md): ``runs.endpoint`` (without
  credentials or query string; ``in-process`` for the embedded engine), ``served_model``, ``answered_models``
  (a JSON list: the model/version the server said answered), ``model_file`` and ``engine`` (an in-process
  model's GGUF file name and engine version), ``first_request`` / ``last_request`` (ISO 8601, UTC with its
  zone), ``access_requests``, ``access_interrupted``; NULL for a run that recorded none (made before, or
  imported from HELM). The release's ``meta.created_at`` is written in UTC with its zone from this version
  on; an older row has no zone and is shown as "time zone not recorded".
"""

from __future__ import annotations

SCHEMA_VERSION = 3
VERSIONS = {1: "tables made on first use", 2: "every relation made at creation or migration",
            3: "each run's endpoint and access window"}

TABLES: dict[str, str] = {
    "meta": """
        release TEXT NOT NULL, key TEXT NOT NULL, value TEXT,
        PRIMARY KEY (release, key)""",
    "benchmarks": """
        release TEXT NOT NULL, benchmark TEXT NOT NULL, display_name TEXT, description TEXT,
        category TEXT, subcategory TEXT, access TEXT, task_type TEXT, main_metric TEXT,
        lower_is_better INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (release, benchmark)""",
    "runs": """
        run_id BIGINT NOT NULL UNIQUE, release TEXT NOT NULL, suite TEXT NOT NULL, run_name TEXT NOT NULL, benchmark TEXT NOT NULL,
        stratum TEXT NOT NULL, model TEXT NOT NULL, deployment TEXT NOT NULL, source TEXT NOT NULL,
        redacted INTEGER NOT NULL DEFAULT 0, instances_total BIGINT, instances_done BIGINT, errors BIGINT,
        wall_time_s DOUBLE PRECISION, spec_json TEXT,
        value_ids TEXT, value_blob {blob},
        endpoint TEXT, served_model TEXT, answered_models TEXT, model_file TEXT, engine TEXT, first_request TEXT,
        last_request TEXT, access_requests BIGINT, access_interrupted BIGINT,
        PRIMARY KEY (release, suite, run_name)""",
    "run_stats": """
        release TEXT NOT NULL, suite TEXT NOT NULL, run_name TEXT NOT NULL, stat TEXT NOT NULL,
        split TEXT NOT NULL, count BIGINT, sum DOUBLE PRECISION, sum_squared DOUBLE PRECISION,
        min DOUBLE PRECISION, max DOUBLE PRECISION, unscored BIGINT,
        PRIMARY KEY (release, suite, run_name, stat, split)""",
    "instances": """
        run_id BIGINT NOT NULL, instance_id TEXT NOT NULL,
        position BIGINT, main_value DOUBLE PRECISION, error TEXT, stats_json TEXT, record_json TEXT,
        PRIMARY KEY (run_id, instance_id)""",
    "cells": """
        release TEXT NOT NULL, benchmark TEXT NOT NULL, model TEXT NOT NULL, deployment TEXT NOT NULL,
        suites TEXT, value DOUBLE PRECISION, ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION,
        n_instances BIGINT, n_unscored BIGINT, n_runs BIGINT, boot {blob},
        PRIMARY KEY (release, benchmark, model, deployment)""",
    "models": """
        release TEXT NOT NULL, model TEXT NOT NULL, deployment TEXT NOT NULL, redacted INTEGER NOT NULL,
        suites TEXT, n_instances BIGINT, prompt_tokens BIGINT, completion_tokens BIGINT,
        judge_prompt_tokens BIGINT, judge_completion_tokens BIGINT, inference_s DOUBLE PRECISION,
        gpu_s DOUBLE PRECISION, cost_usd DOUBLE PRECISION, cost_basis TEXT, jury_cost_usd DOUBLE PRECISION,
        PRIMARY KEY (release, model, deployment)""",
    "leaderboard": """
        release TEXT NOT NULL, model TEXT NOT NULL, deployment TEXT NOT NULL,
        win_rate DOUBLE PRECISION, win_rate_low DOUBLE PRECISION, win_rate_high DOUBLE PRECISION,
        rank BIGINT, rank_low DOUBLE PRECISION, rank_high DOUBLE PRECISION, mean_score DOUBLE PRECISION,
        n_benchmarks BIGINT, cost_per_point DOUBLE PRECISION,
        PRIMARY KEY (release, model, deployment)""",
    "group_scores": """
        release TEXT NOT NULL, level TEXT NOT NULL, grp TEXT NOT NULL, model TEXT NOT NULL,
        deployment TEXT NOT NULL, value DOUBLE PRECISION, ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION,
        n_benchmarks BIGINT,
        PRIMARY KEY (release, level, grp, model, deployment)""",
}

# Columns added after a table first shipped: (table, column, type), added to an older store by its migration
# (readers of an older SQLite store, read as it is, see the column missing and show "no value").
ACCESS_COLUMNS = ("endpoint", "served_model", "answered_models", "model_file", "engine", "first_request",
                  "last_request", "access_requests", "access_interrupted")
ADDED_COLUMNS = (("models", "jury_cost_usd", "DOUBLE PRECISION"),
                 *(("runs", c, "BIGINT" if c.startswith("access_") else "TEXT") for c in ACCESS_COLUMNS))

INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_by_benchmark ON runs (release, benchmark)",
)


def ddl(blob_type: str) -> list[str]:
    tables = [f"CREATE TABLE IF NOT EXISTS {name} ({cols.format(blob=blob_type)})" for name, cols in TABLES.items()]
    return tables + list(INDEXES)


# The clinicians' ratings (store/review.py): outside the release tables, kept across re-summarise like the
# audit trail; here so that migrate.create_schema makes it without importing review.py (imports point down).
REVIEW_TABLE = "review_ratings"
REVIEW_INDEX = "review_by_benchmark"  # made after the table: when it exists, both do
REVIEW_SCHEMA_VERSION = 1
REVIEW_COLUMNS = ("at", "rater", "role", "source", "blind", "release", "benchmark", "suite", "run_name",
                  "instance_id", "criterion", "score", "min_score", "max_score")
REVIEW_DDL = (
    f"CREATE TABLE IF NOT EXISTS {REVIEW_TABLE} (at TEXT NOT NULL, rater TEXT NOT NULL, role TEXT NOT NULL, "
    "source TEXT NOT NULL, blind INTEGER NOT NULL, release TEXT NOT NULL, benchmark TEXT NOT NULL, "
    "suite TEXT NOT NULL, run_name TEXT NOT NULL, instance_id TEXT NOT NULL, criterion TEXT NOT NULL, "
    "score DOUBLE PRECISION NOT NULL, min_score DOUBLE PRECISION NOT NULL, max_score DOUBLE PRECISION NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {REVIEW_INDEX} ON {REVIEW_TABLE} (release, benchmark)")

# Patient subgroups (store/subgroups.py holds the math): here so that every relation of a store is made in one
# place, at creation or migration (imports point down: backends cannot import subgroups.py).
SUBGROUP_LABELS, SUBGROUP_SCORES, SUBGROUP_GAPS = "subgroup_labels", "subgroup_scores", "subgroup_gaps"
SUBGROUP_DDL = (
    f"CREATE TABLE IF NOT EXISTS {SUBGROUP_LABELS} (run_id BIGINT NOT NULL, attribute TEXT NOT NULL, "
    "labels TEXT NOT NULL, PRIMARY KEY (run_id, attribute))",
    f"CREATE TABLE IF NOT EXISTS {SUBGROUP_SCORES} (release TEXT NOT NULL, benchmark TEXT NOT NULL, "
    "model TEXT NOT NULL, deployment TEXT NOT NULL, attribute TEXT NOT NULL, grp TEXT NOT NULL, n BIGINT NOT NULL, "
    "value DOUBLE PRECISION, ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, "
    "PRIMARY KEY (release, benchmark, model, deployment, attribute, grp))",
    f"CREATE TABLE IF NOT EXISTS {SUBGROUP_GAPS} (release TEXT NOT NULL, benchmark TEXT NOT NULL, "
    "model TEXT NOT NULL, deployment TEXT NOT NULL, attribute TEXT NOT NULL, n_groups BIGINT NOT NULL, "
    "n_suppressed BIGINT NOT NULL, min_cell BIGINT NOT NULL, high_group TEXT, low_group TEXT, gap DOUBLE PRECISION, "
    "gap_low DOUBLE PRECISION, gap_high DOUBLE PRECISION, ratio DOUBLE PRECISION, p_holm DOUBLE PRECISION, "
    "n_pairs BIGINT, PRIMARY KEY (release, benchmark, model, deployment, attribute))",
)
