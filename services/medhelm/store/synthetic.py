"""Synthetic finished suites in the documented run-directory format (tests and bench/bench_summarize.py).

Models have a hidden skill; each instance's main value is drawn from it, so the leaderboard has a
known order. Jury benchmarks carry three judges' scores and explanations like real records.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from medhelm.cards import CARDS
from medhelm.rundir import RECORDS, RUN_SPEC, STATS, STATUS, dump_json, write_atomic, write_atomic_lines
from medhelm.json_text import plain_json
from medhelm.records import Stat
from medhelm.specs import BenchmarkSpec, MetricSpec, RunSpec

JUDGES = ("local/judge-a", "local/judge-b", "local/judge-c")


@dataclass(frozen=True)
class SyntheticModel:
    model: str
    deployment: str
    skill: float  # expected main value, 0-1


def default_models(n: int) -> list[SyntheticModel]:
    return [SyntheticModel(f"org/model-{i:02d}", f"local/model-{i:02d}", 0.3 + 0.6 * i / max(n - 1, 1))
            for i in range(n)]


def catalogue(n: int = len(CARDS), names: Sequence[str] = ()) -> list[BenchmarkSpec]:
    """The first ``n`` (or the named) upstream MedHELM benchmarks as specs (jury ones scored by ``jury_score``)."""
    out = []
    for b in [b for b in CARDS if b.name in names] if names else CARDS[:n]:
        main = "jury_score" if b.jury else "exact_match"
        out.append(BenchmarkSpec(name=b.name, display_name=b.display_name, description=f"synthetic {b.display_name}",
                                 category=b.category, subcategory=b.subcategory, access=b.access,
                                 task_type="generation" if b.jury else "multiple_choice",
                                 metrics=(MetricSpec(main),), main_metric=main, max_tokens=256 if b.jury else 1))
    return out


def write_suite(output_path: Path, suite: str, models: Sequence[SyntheticModel], benchmarks: Sequence[BenchmarkSpec],
                instances: int, *, seed: int = 0, status: str = "complete") -> list[Path]:
    run_dirs = []
    for bench in benchmarks:
        for m in models:
            spec = RunSpec(entry=f"{bench.name}:model={m.model}", benchmark=bench, benchmark_args={}, model=m.model,
                           deployment=m.deployment, max_eval_instances=instances)
            run_dir = Path(output_path) / "runs" / suite / spec.name
            run_dir.mkdir(parents=True, exist_ok=True)
            rng = random.Random(f"{seed}/{bench.name}/{m.deployment}")
            _write_run(run_dir, spec, m, instances, rng, status)
            run_dirs.append(run_dir)
    return run_dirs


def _write_run(run_dir: Path, spec: RunSpec, m: SyntheticModel, n: int, rng: random.Random, status: str) -> None:
    jury = spec.benchmark.main_metric == "jury_score"
    sums: dict[str, list[float]] = {}
    latency = 0.0

    def lines():
        nonlocal latency
        for pos in range(n):
            rec, stats = _record(spec, m, pos, rng, jury)
            latency += rec["completion"]["usage"]["latency_s"]
            for k, v in stats.items():
                sums.setdefault(k, []).append(v)
            yield plain_json(rec) + "\n"

    # written as the pipeline writes a run folder (medhelm.rundir: the format's one owner), streamed
    write_atomic_lines(run_dir / RECORDS, lines())
    write_atomic(run_dir / RUN_SPEC, dump_json(spec.to_json()))
    stats_json = [Stat(k, "test", len(v), sum(v), sum(x * x for x in v), min(v), max(v)).to_json()
                  for k, v in sorted(sums.items())]
    write_atomic(run_dir / STATS, dump_json(stats_json))
    write_atomic(run_dir / STATUS, dump_json(
        {"status": status, "digest": spec.digest(), "instances_total": n, "instances_done": n, "errors": 0,
         "requests": n, "cache_hits": 0, "retries": 0, "wall_time_s": round(latency / 4, 3)}))


def _record(spec: RunSpec, m: SyntheticModel, pos: int, rng: random.Random, jury: bool) -> tuple[dict, dict]:
    iid = f"id{pos:05d}"
    question = f"Synthetic question {pos} for {spec.benchmark.name}: what is the answer?"
    correct = "B"
    judgements: list[dict] = []
    if jury:
        raw = [max(1, min(5, round(1 + 4 * m.skill + rng.gauss(0, 0.8)))) for _ in JUDGES]
        judgements = [{"judge": j, "criterion": "accuracy", "score": float(s), "min_score": 1.0, "max_score": 5.0,
                       "explanation": f"{j} found the answer {'adequate' if s >= 3 else 'lacking'}.",
                       "status": "ok", "weight": 1.0, "normalized": (s - 1) / 4} for j, s in zip(JUDGES, raw)]
        stats = {"jury_score": sum(raw) / len(raw), "jury_score_normalized": (sum(raw) / len(raw) - 1) / 4,
                 "jury_coverage": 1.0}
        output = f"A synthetic clinical answer number {pos}."
    else:
        hit = rng.random() < m.skill
        output = correct if hit else "A"
        stats = {"exact_match": float(hit), "quasi_exact_match": float(hit)}
    prompt_tokens, completion_tokens = 40 + pos % 17, 1 if not jury else 12
    stats.update(num_prompt_tokens=float(prompt_tokens), num_completion_tokens=float(completion_tokens),
                 inference_runtime=0.05)
    rec = {"run": spec.name, "position": pos,
           "instance": {"id": iid, "input": question, "references": [{"text": correct, "correct": True}],
                        "split": "test", "choices": [], "extra": {}},
           "prompt": {"messages": [{"role": "user", "content": question}], "truncated": False},
           "completion": {"text": output, "finish_reason": "stop",
                          "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                    "latency_s": 0.05, "cached": False, "attempts": 1}},
           "stats": stats, "judgements": judgements,
           "judge_usage": {"prompt_tokens": 300 if jury else 0, "completion_tokens": 60 if jury else 0,
                           "latency_s": 0.0, "cached": False, "attempts": 1},
           "error": None}
    return rec, stats
