"""Issue 6's summarize targets, measured in one run; writes section `summarize` of docs/benchmarks.md.

A synthetic release of 10 models x 37 benchmarks x 1,000 instances (370,000 records, the documented
run-directory format, jury benchmarks with three judges) is summarised by `medhelm summarize` in a child
process (default SQLite store, 1,000 bootstrap replicates):

1. wall time < 15 s;
2. peak RSS of that process < 400 MB (``os.wait4`` rusage);
3. ratio to the floor: the same process reading every record line and ``json.loads``-ing it, nothing else.

    .venv/bin/python bench/bench_summarize.py [--models 10 --benchmarks 37 --instances 1000] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
TARGET_S, TARGET_MB = 15.0, 400.0

FLOOR = """
import json, sys
from pathlib import Path
n = 0
for f in Path(sys.argv[1]).glob("runs/bench/*/instances.jsonl"):
    with open(f, encoding="utf-8") as fh:
        for line in fh:
            json.loads(line); n += 1
print(n)
"""


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, stdout) of a child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    out, err = proc.stdout.read(), proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[:3]} failed: {err.strip()[-400:]}")
    return wall, usage.ru_maxrss / 1024, out


def generate(root: Path, models: int, benchmarks: int, instances: int) -> None:
    from medhelm.store.synthetic import catalogue, default_models, write_suite

    write_suite(root, "bench", default_models(models), catalogue(benchmarks), instances)


def write_section(name: str, title: str, body: str) -> None:
    """Replace this bench's own section of docs/benchmarks.md (between its markers), nothing else."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n## {title}\n\n{body}\n{end}"
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)


def table(rows: list[tuple[str, str, str, bool | None]]) -> list[str]:
    """Markdown rows: (measure, result, target, met or None when there is no target)."""
    out = ["| measure | result | target | met |", "|---|---|---|---|"]
    for measure, result, target, met in rows:
        out.append(f"| {measure} | {result} | {target or '—'} | {'—' if met is None else 'yes' if met else '**NO**'} |")
    return out


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load:.1f} at start"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--benchmarks", type=int, default=37)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workdir", type=Path, help="keep the generated suite and store here (reused if present)")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = p.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-summarize-"))
    try:
        if not (root / "runs" / "bench").is_dir():
            generate(root, args.models, args.benchmarks, args.instances)
        (root / "results.sqlite").unlink(missing_ok=True)
        records = args.models * args.benchmarks * args.instances
        env_machine = machine()
        floor_s, floor_mb, n = timed([sys.executable, "-c", FLOOR, str(root)])
        assert int(n) == records, (n, records)
        wall, rss, out = timed([sys.executable, "-m", "medhelm", "summarize", "--suites", "bench", "-o", str(root)])
        size_mb = (root / "results.sqlite").stat().st_size / 1e6
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    body = "\n".join([
        f"{args.models} models x {args.benchmarks} benchmarks x {args.instances} instances = {records:,} records "
        f"(synthetic, `medhelm.store.synthetic`); SQLite store, 1,000 bootstrap replicates. Machine: {env_machine}.",
        "",
        *table([("`medhelm summarize` wall time", f"{wall:.1f} s ({records / wall:,.0f} records/s)",
                 f"< {TARGET_S:.0f} s", wall < TARGET_S),
                ("peak RSS of that process", f"{rss:.0f} MB", f"< {TARGET_MB:.0f} MB", rss < TARGET_MB),
                ("floor: read + `json.loads` every record, nothing else", f"{floor_s:.1f} s, {floor_mb:.0f} MB",
                 "", None),
                ("ratio to the floor", f"{wall / floor_s:.1f} x", "", None),
                ("store size", f"{size_mb:.0f} MB", "", None)]),
        "",
        "Peer: upstream `helm-summarize` holds every run's display JSON in memory and is reported to need "
        "20–64 GB on large suites (issue 6); ours streams instances and keeps one benchmark's value matrix at a time.",
    ])
    print(body)
    print(out.strip().splitlines()[0] if out.strip() else "")
    if not args.no_write:
        write_section("summarize", "Summarize: 370k records into the results store", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
