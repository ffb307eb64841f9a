"""``summarize``: finished runs -> the results store, then the pre-aggregated leaderboard tables.

One transaction per release: a failure leaves the previous release untouched (never half-written).
A release is never replaced by an empty one, nor by one with fewer runs unless ``allow_fewer_runs``
(a suite folder that could not be read must not wipe a leaderboard); a run whose records are fewer than
its ``run.json`` says is an error naming the run, and folders that are not runs are named in a note.
Instances stream from disk into the store in batches; per-benchmark cells are then computed from
the stored leaderboard values, one benchmark at a time, so memory follows the largest benchmark,
not the whole release.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from medhelm.errors import ConfigError, escape
from medhelm.store.backends import Store
from medhelm.store.cells import write_cells
from medhelm.store.costs import PriceTable, Usage, cost_per_point, jury_cost, total_cost
from medhelm.store.helm_runs import HelmSchema, is_helm_run, read_helm_run
from medhelm.store.migrate import migrate
from medhelm.store.read import load_cells
from medhelm.store.schema import SCHEMA_VERSION
from medhelm.store.sources import JURY_STAT, JURY_STAT_NORMALIZED, RunSource, list_suite, read_medhelm_run
from medhelm.store.subgroups import MIN_CELL, write_labels, write_subgroups
from medhelm.store.subgroups import delete_release as delete_subgroups
from medhelm.store.tables import group_scores, leaderboard

Note = Callable[[str], None]


@dataclass(frozen=True)
class SummarizeOptions:
    release: str
    suites: tuple[str, ...] = ()
    replicates: int = 1000
    seed: int = 0
    redact: bool = False  # keep no instance text for any run
    redacted_deployments: frozenset[str] = frozenset()  # deployments marked `redacted: true`
    prices: PriceTable = field(default_factory=PriceTable.empty)
    batch_size: int = 5000
    allow_fewer_runs: bool = False  # replace a release even when this summarize found fewer runs
    # model name -> HELM model_metadata.yaml fields (display_name, creator_organization_name, access,
    # release_date, ...) shown beside the model on the leaderboard; kept in the release's meta
    model_metadata: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    rank_baselines: bool = False  # reference baselines in the models' win rates and ranks (off: marked apart)
    min_cell: int = MIN_CELL  # subgroups with fewer scored instances are never stored (store/subgroups.py)


@dataclass(frozen=True)
class SummaryReport:
    release: str
    runs: int
    instances: int
    benchmarks: int
    models: int
    skipped: tuple[str, ...]
    seconds: float


def suite_sources(output_path: Path, suites: Iterable[str], note: Note | None = None) -> Iterator[RunSource]:
    """Every run directory of the suites, the LAST suite first (a run repeated in a later suite wins)."""
    for suite in reversed(list(suites)):
        suite_dir = Path(output_path) / "runs" / suite
        runs, others = list_suite(suite_dir)
        for other in others:
            if note is not None:
                note(f"skipped {suite}/{escape(other.name)}: no run_spec.json (not a run folder, or a damaged one)")
        schema = HelmSchema.load(suite_dir / "schema.json") if any(map(is_helm_run, runs)) else None
        for run_dir in runs:
            yield read_helm_run(run_dir, suite, schema) if is_helm_run(run_dir) else read_medhelm_run(run_dir, suite)


def summarize(store: Store, sources: Iterable[RunSource], options: SummarizeOptions,
              note: Note = lambda msg: None) -> SummaryReport:
    started = time.perf_counter()
    with store.transaction(exclusive=True):  # a concurrent summarize into this store waits here
        migrate(store)
        before = int(store.query("SELECT COUNT(*) FROM runs WHERE release = ?", (options.release,))[0][0])
        delete_subgroups(store, options.release)  # first: it finds the labels by the release's run ids
        store.delete_release(options.release)
        ingested = _Ingest(store, options, note)
        for src in sources:
            ingested.add(src)
        _keep_or_replace(options, ingested, before)
        write_cells(store, options.release, options.replicates, options.seed)
        write_subgroups(store, options.release, options.replicates, options.seed, options.min_cell)
        _write_models(store, options, ingested)
        _write_meta(store, options, ingested)
        _write_leaderboard(store, options.release, rank_baselines=options.rank_baselines)
    return SummaryReport(options.release, ingested.runs, ingested.instances, len(ingested.benchmarks),
                         len(ingested.usage), tuple(ingested.skipped), time.perf_counter() - started)


def _keep_or_replace(options: SummarizeOptions, ingested: _Ingest, before: int) -> None:
    """Raise (rolling the transaction back) rather than replace a release with an empty or smaller one."""
    where = f"suite(s) {', '.join(escape(s) for s in options.suites) or '?'}"
    if ingested.runs == 0:
        raise ConfigError(f"no complete run in {where} ({len(ingested.skipped)} skipped, see the notes); release "
                          f"'{escape(options.release)}' left unchanged")
    if ingested.runs < before and not options.allow_fewer_runs:
        raise ConfigError(f"release '{escape(options.release)}' has {before} runs but {where} gave only "
                          f"{ingested.runs} ({len(ingested.skipped)} skipped, see the notes); left unchanged; "
                          "pass --allow-fewer-runs to replace it anyway")


class _Ingest:
    """Streams runs into the store and keeps only per-row totals in memory."""

    def __init__(self, store: Store, options: SummarizeOptions, note: Note) -> None:
        self.store, self.options, self.note = store, options, note
        self.benchmarks: dict[str, str] = {}  # name -> suite it was first described in
        self.seen: dict[tuple[str, str, str, str], str] = {}
        self.usage: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # (model, deployment) -> judge deployment -> [prompt, completion, reasoning] tokens its judges spent on it
        self.judge_tokens: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(
            lambda: defaultdict(lambda: [0.0, 0.0, 0.0]))
        # rows whose judges' usage is not known: HELM never records what its jury spent (unknown, never 0 tokens)
        self.judge_usage_unknown: set[tuple[str, str]] = set()
        self.redacted: dict[tuple[str, str], bool] = {}
        self.suites: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.runs = self.instances = 0
        self.next_run_id = 1 + int(store.query("SELECT COALESCE(MAX(run_id), 0) FROM runs")[0][0])
        self.skipped: list[str] = []
        self.custom_prompts: set[tuple[str, str, str]] = set()  # (benchmark, model, deployment) not on default

    def add(self, src: RunSource) -> None:
        where = f"{src.suite}/{src.run_name}"
        if not src.complete:
            self._skip(f"{where}: status '{src.status.get('status', 'unknown')}', not complete (finish or collect it)")
            return
        key = (src.benchmark.name, src.stratum, src.model, src.deployment)
        if key in self.seen:
            self._skip(f"{where}: also in suite '{self.seen[key]}', which is listed later and wins")
            return
        self.seen[key] = src.suite
        row = (src.model, src.deployment)
        redacted = self.options.redact or src.deployment in self.options.redacted_deployments
        self.redacted[row] = self.redacted.get(row, False) or redacted
        self.suites[row].add(src.suite)
        if src.source == "helm" and src.main_stat in (JURY_STAT, JURY_STAT_NORMALIZED):
            self.judge_usage_unknown.add(row)
        self._add_benchmark(src)
        self._add_run(src, redacted)
        if _custom_prompt(src.spec_json):
            self.custom_prompts.add((src.benchmark.name, src.model, src.deployment))
        self.runs += 1
        note = src.summary.note() if src.summary is not None else None
        if note:
            self.note(f"{where}: {note}")

    def _skip(self, message: str) -> None:
        self.skipped.append(message)
        self.note(f"skipped {message}")

    def _add_benchmark(self, src: RunSource) -> None:
        b = src.benchmark
        if b.name in self.benchmarks:
            return
        self.benchmarks[b.name] = src.suite
        self.store.insert_many("benchmarks", ("release", "benchmark", "display_name", "description", "category",
                                              "subcategory", "access", "task_type", "main_metric", "lower_is_better"),
                               [(self.options.release, b.name, b.display_name, b.description, b.category,
                                 b.subcategory, b.access.value, b.task_type.value, src.main_stat,
                                 int(b.lower_is_better))])

    def _add_run(self, src: RunSource, redacted: bool) -> None:
        release, st = self.options.release, src.status
        run_id, self.next_run_id = self.next_run_id, self.next_run_id + 1
        self.store.insert_many(
            "runs", ("run_id", "release", "suite", "run_name", "benchmark", "stratum", "model", "deployment", "source",
                     "redacted", "instances_total", "instances_done", "errors", "wall_time_s", "spec_json"),
            [(run_id, release, src.suite, src.run_name, src.benchmark.name, src.stratum, src.model, src.deployment,
              src.source, int(redacted), st.get("instances_total"), st.get("instances_done"),
              _count(st.get("errors")), st.get("wall_time_s"), src.spec_json)])
        access = access_columns(st.get("access"))
        if access:
            self.store.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in access)} WHERE run_id = ?",
                               (*access.values(), run_id))
        self.store.insert_many(
            "run_stats", ("release", "suite", "run_name", "stat", "split", "count", "sum", "sum_squared", "min", "max",
                          "unscored"),
            [(release, src.suite, src.run_name, s.name, s.split, s.count, s.sum, s.sum_squared, s.min, s.max,
              s.unscored) for s in {(s.name, s.split): s for s in src.stats}.values()])
        totals = self.usage[(src.model, src.deployment)]
        ids, values, latency, errors = self._add_instances(src, run_id, redacted, totals,
                                                           self.judge_tokens[(src.model, src.deployment)])
        self.store.execute("UPDATE runs SET value_ids = ?, value_blob = ? WHERE run_id = ?",
                           (json.dumps(ids), np.asarray(values, dtype=np.float64).tobytes(), run_id))
        if st.get("errors") is None:  # imported runs: the errored instances their records name
            self.store.execute("UPDATE runs SET errors = ? WHERE run_id = ?", (errors, run_id))
        wall = st.get("wall_time_s")
        totals["gpu_s"] += float(wall) if isinstance(wall, (int, float)) and wall > 0 else latency

    def _add_instances(self, src: RunSource, run_id: int, redacted: bool, totals: dict[str, float],
                       judge_tokens: dict[str, list[float]]) -> tuple[list[str], list[float], float, int]:
        columns = ("run_id", "instance_id", "position", "main_value", "error", "stats_json", "record_json")
        batch: list[tuple] = []
        seen: set[str] = set()
        ids: list[str] = []
        values: list[float] = []
        latency = 0.0
        errors = 0
        labels: dict[str, list[str | None]] = {}  # attribute -> label per kept instance (None: none given)
        for r in src.rows(not redacted):
            if r.instance_id in seen:
                continue  # one value per instance (a finished run has no repeats; HELM trials)
            seen.add(r.instance_id)
            errors += r.error is not None
            if r.subgroups:
                for attr, label in r.subgroups.items():
                    labels.setdefault(str(attr), [None] * len(ids)).append(None if label is None else str(label))
            for column in labels.values():
                if len(column) <= len(ids):  # an instance without this attribute
                    column.append(None)
            ids.append(r.instance_id)
            values.append(np.nan if r.main_value is None else r.main_value)
            batch.append((run_id, r.instance_id, r.position, r.main_value, r.error, r.stats_json, r.record_json))
            totals["prompt_tokens"] += r.prompt_tokens
            totals["completion_tokens"] += r.completion_tokens
            totals["reasoning_tokens"] += r.reasoning_tokens
            totals["reasoning_estimated"] += r.reasoning_estimated  # records whose thinking count is estimated
            totals["judge_reasoning_estimated"] += r.judge_reasoning_estimated
            totals["judge_prompt_tokens"] += r.judge_prompt_tokens
            totals["judge_completion_tokens"] += r.judge_completion_tokens
            totals["judge_reasoning_tokens"] += r.judge_reasoning_tokens
            if r.judge_prompt_tokens or r.judge_completion_tokens:
                # records keep one usage for the whole jury: each judge saw the same prompt, so share it equally
                judges = r.judges or ("",)
                for j in judges:
                    t = judge_tokens[j]
                    t[0] += r.judge_prompt_tokens / len(judges)
                    t[1] += r.judge_completion_tokens / len(judges)
                    t[2] += r.judge_reasoning_tokens / len(judges)
            latency += r.latency_s
            if len(batch) >= self.options.batch_size:
                self.store.insert_many("instances", columns, batch)
                batch = []
        if batch:
            self.store.insert_many("instances", columns, batch)
        done = src.status.get("instances_done")
        if src.source == "medhelm" and isinstance(done, int) and len(seen) < done:
            raise ConfigError(f"{src.suite}/{src.run_name}: instances.jsonl holds {len(seen)} instance(s) but "
                              f"run.json says {done} are done; the run folder is damaged (run it again to resume)")
        write_labels(self.store, run_id, labels)
        totals["inference_s"] += latency
        totals["n_instances"] += len(seen)
        self.instances += len(seen)
        return ids, values, latency, errors


def access_columns(access: object) -> dict[str, object]:
    """run.json's ``access`` (``RunDir.access``) as the runs table's columns (``schema.ACCESS_COLUMNS``); only
    the fields of their kind (text is cut to one short line; a time must carry its zone), nothing else of it.
    {} when the run recorded none."""
    if not isinstance(access, dict):
        return {}

    def text(key: str, limit: int = 300) -> str | None:
        value = access.get(key)
        return " ".join(value.split())[:limit] or None if isinstance(value, str) else None

    def when(key: str) -> str | None:
        value = text(key, 40)
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
        except ValueError:
            return None
        return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds") if moment and moment.tzinfo else None

    answered = access.get("answered_models")
    answered = [" ".join(m.split())[:200] for m in answered if isinstance(m, str) and m.strip()][:8] \
        if isinstance(answered, list) else []
    out = {"endpoint": text("endpoint"), "served_model": text("served_model"),
           "answered_models": json.dumps(answered, ensure_ascii=False) if answered else None,
           "model_file": text("model_file"), "engine": text("engine", 120), "first_request": when("first_request"),
           "last_request": when("last_request"), "access_requests": _count(access.get("requests")),
           "access_interrupted": _count(access.get("interrupted", 0))}
    return {k: v for k, v in out.items() if v is not None}


def _count(value: object) -> int | None:
    if isinstance(value, (list, dict)):
        return len(value)
    return value if isinstance(value, int) else None


def _write_models(store: Store, options: SummarizeOptions, ingested: _Ingest) -> None:
    out = []
    for (model, dep), t in sorted(ingested.usage.items()):
        cost = options.prices.cost(dep, model, Usage(int(t["prompt_tokens"]), int(t["completion_tokens"]),
                                                     t["gpu_s"], int(t["reasoning_tokens"])))
        unknown = (model, dep) in ingested.judge_usage_unknown  # NULL: unknown, shown as such (never 0 / $0)
        out.append((options.release, model, dep, int(ingested.redacted[(model, dep)]),
                    ",".join(sorted(ingested.suites[(model, dep)])), int(t["n_instances"]), int(t["prompt_tokens"]),
                    int(t["completion_tokens"]), None if unknown else int(t["judge_prompt_tokens"]),
                    None if unknown else int(t["judge_completion_tokens"]), t["inference_s"], t["gpu_s"], cost.usd,
                    cost.basis, None if unknown else jury_cost(options.prices, ingested.judge_tokens.get((model, dep),
                                                                                                        {}))))
    store.insert_many("models", ("release", "model", "deployment", "redacted", "suites", "n_instances",
                                 "prompt_tokens", "completion_tokens", "judge_prompt_tokens",
                                 "judge_completion_tokens", "inference_s", "gpu_s", "cost_usd", "cost_basis",
                                 "jury_cost_usd"), out)


def _write_leaderboard(store: Store, release: str, *, rank_baselines: bool = False) -> None:
    table = load_cells(store, release)
    costs = {(m, d): total_cost(c, j) for m, d, c, j in store.query(
        "SELECT model, deployment, cost_usd, jury_cost_usd FROM models WHERE release = ?", (release,))}
    store.insert_many("leaderboard", ("release", "model", "deployment", "win_rate", "win_rate_low", "win_rate_high",
                                      "rank", "rank_low", "rank_high", "mean_score", "n_benchmarks", "cost_per_point"),
                      [(release, r.model, r.deployment, r.win_rate, r.win_rate_low, r.win_rate_high, r.rank,
                        r.rank_low, r.rank_high, r.mean_score, r.n_benchmarks,
                        cost_per_point(costs.get((r.model, r.deployment)), r.mean_score))
                       for r in leaderboard(table, rank_baselines=rank_baselines)])
    store.insert_many("group_scores", ("release", "level", "grp", "model", "deployment", "value", "ci_low", "ci_high",
                                       "n_benchmarks"),
                      [(release, g.level, g.group, g.model, g.deployment, g.value, g.ci_low, g.ci_high, g.n_benchmarks)
                       for level in ("category", "subcategory") for g in group_scores(table, level)])


def _custom_prompt(spec_json: str | None) -> bool:
    """Whether a run's spec says its instructions came from prompt_path= (RunSpec.prompt)."""
    try:
        return bool(spec_json) and bool(json.loads(spec_json).get("prompt"))
    except (ValueError, AttributeError):
        return False


def _write_meta(store: Store, options: SummarizeOptions, ingested: _Ingest) -> None:
    meta = {"schema_version": SCHEMA_VERSION,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "suites": json.dumps(list(options.suites)), "replicates": options.replicates, "seed": options.seed,
            "redact": int(options.redact), "rank_baselines": int(options.rank_baselines), "runs": ingested.runs,
            "instances": ingested.instances,
            "skipped": json.dumps(ingested.skipped),
            # cells whose prompt is not the benchmark's default (prompt_path=): the dashboard marks them
            "custom_prompts": json.dumps(sorted(ingested.custom_prompts))}
    shown = {m for m, _ in ingested.usage}  # only the models of this release
    metadata = {m: dict(v) for m, v in sorted(options.model_metadata.items()) if m in shown}
    if metadata:
        meta["model_metadata"] = json.dumps(metadata, ensure_ascii=False)
    # of the completion tokens, reasoning models' thinking (model and judges'), per "model|deployment"; kept in
    # the release's meta, and only when some model thought: a store without reasoning keeps its layout and bytes
    # ([own, judges'], then [own estimated?, judges' estimated?] when any of it is our estimate: shown as "≈")
    reasoning = {f"{m}|{d}": [int(t["reasoning_tokens"]), int(t["judge_reasoning_tokens"])]
                 + ([bool(t["reasoning_estimated"]), bool(t["judge_reasoning_estimated"])]
                    if t["reasoning_estimated"] or t["judge_reasoning_estimated"] else [])
                 for (m, d), t in sorted(ingested.usage.items()) if t["reasoning_tokens"] or t["judge_reasoning_tokens"]}
    if reasoning:
        meta["reasoning_tokens"] = json.dumps(reasoning, ensure_ascii=False)
    store.insert_many("meta", ("release", "key", "value"), [(options.release, k, str(v)) for k, v in meta.items()])
