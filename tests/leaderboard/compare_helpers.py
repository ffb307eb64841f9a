"""Hand-made finished runs with chosen per-instance values (the documented run-directory format), so the
comparison's numbers can be checked against hand calculations."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

from medhelm.records import Stat
from medhelm.specs import RunSpec
from medhelm.store.synthetic import catalogue

EXACT = catalogue(names=("medcalc_bench",))[0]  # main metric exact_match (0/1)
JURY = catalogue(names=("aci_bench",))[0]  # main metric jury_score (normalised 0-1 on the board)


def write_run(output: Path, suite: str, bench, model: str, deployment: str, values: Sequence[float | None],
              *, subset: str | None = None, ids: Sequence[str] | None = None, tokens: tuple[int, int] = (100, 10)
              ) -> Path:
    """One complete run of ``bench`` whose instance k has main value ``values[k]`` (None = unscored)."""
    args = {"subset": subset} if subset else {}
    entry = f"{bench.name}:{'subset=' + subset + ',' if subset else ''}model={model}"
    spec = RunSpec(entry=entry, benchmark=bench, benchmark_args=args, model=model, deployment=deployment,
                   max_eval_instances=len(values))
    run_dir = output / "runs" / suite / spec.name
    run_dir.mkdir(parents=True, exist_ok=True)
    main = "jury_score_normalized" if bench.main_metric == "jury_score" else bench.main_metric
    got = []
    with open(run_dir / "instances.jsonl", "w", encoding="utf-8") as f:
        for pos, v in enumerate(values):
            stats = {} if v is None else {main: v}
            if v is not None and main == "jury_score_normalized":
                stats["jury_score"] = 1 + 4 * v
            if v is not None:
                got.append(v)
            iid = ids[pos] if ids else f"id{pos:04d}"
            rec = {"run": spec.name, "position": pos,
                   "instance": {"id": iid, "input": f"question {pos}", "references": [], "split": "test",
                                "choices": [], "extra": {}},
                   "prompt": {"messages": [{"role": "user", "content": f"question {pos}"}], "truncated": False},
                   "completion": {"text": "answer", "finish_reason": "stop",
                                  "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1],
                                            "latency_s": 0.1, "cached": False, "attempts": 1}},
                   "stats": stats, "judgements": [], "judge_usage": None, "error": None}
            f.write(json.dumps(rec) + "\n")
    (run_dir / "run_spec.json").write_text(json.dumps(spec.to_json()), encoding="utf-8")
    stat = [Stat(main, "test", len(got), sum(got), sum(x * x for x in got), min(got, default=0.0),
                 max(got, default=0.0)).to_json()]
    (run_dir / "stats.json").write_text(json.dumps(stat), encoding="utf-8")
    (run_dir / "run.json").write_text(json.dumps({"status": "complete", "instances_total": len(values),
                                                  "instances_done": len(values), "errors": 0,
                                                  "wall_time_s": 1.0}), encoding="utf-8")
    return run_dir


def table_pairs(both: int, a_only: int, b_only: int, neither: int) -> tuple[list[float], list[float]]:
    """A 2x2 paired table as two 0/1 vectors (A right, B right)."""
    a = [1.0] * both + [1.0] * a_only + [0.0] * b_only + [0.0] * neither
    b = [1.0] * both + [0.0] * a_only + [1.0] * b_only + [0.0] * neither
    return a, b


def lower_is_better(bench):  # noqa: ANN001, ANN201
    return dataclasses.replace(bench, name=bench.name + "_err", display_name="error rate", lower_is_better=True)


def binom_two_sided(b: int, c: int) -> float:
    """McNemar's exact p by hand: 2 * sum_{k <= min(b, c)} C(b + c, k) / 2^(b + c), capped at 1."""
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n)
