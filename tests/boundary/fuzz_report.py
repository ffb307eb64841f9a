"""Counts of a fuzzing log (``MEDHELM_FUZZ_LOG``): cases, exit codes, tracebacks, multi-line errors, per kind.

``python -m tests.boundary.fuzz_report <log.jsonl>`` prints the table docs/benchmarks.md records.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict


def report(path: str) -> str:
    kinds: dict[str, Counter] = defaultdict(Counter)
    for line in open(path, encoding="utf-8"):
        case = json.loads(line)
        c = kinds[case["kind"]]
        c["cases"] += 1
        c[f"exit {case['code']}"] += 1
        c["tracebacks"] += bool(case["traceback"])
        c["multi-line"] += case["code"] not in (0,) and case["lines"] != 1
        c["seconds"] = max(c["seconds"], case["seconds"])
    rows = ["| input | cases | exit 0 | exit 2 | other exits | tracebacks | multi-line | slowest (s) |",
            "|---|---|---|---|---|---|---|---|"]
    total: Counter = Counter()
    for kind in sorted(kinds):
        c = kinds[kind]
        other = c["cases"] - c["exit 0"] - c["exit 2"]
        rows.append(f"| {kind} | {c['cases']} | {c['exit 0']} | {c['exit 2']} | {other} | {c['tracebacks']} | "
                    f"{c['multi-line']} | {c['seconds']:.1f} |")
        for k in ("cases", "exit 0", "exit 2", "tracebacks", "multi-line"):
            total[k] += c[k]
        total["other"] += other
        total["seconds"] = max(total["seconds"], c["seconds"])
    rows.append(f"| **all** | {total['cases']} | {total['exit 0']} | {total['exit 2']} | {total['other']} | "
                f"{total['tracebacks']} | {total['multi-line']} | {total['seconds']:.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(report(sys.argv[1]))
