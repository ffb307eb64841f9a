"""`medhelm import-helm` on a HELM run whose scenario_state.json is large: peak memory must follow the number
of instances, not the size of the prompts HELM keeps (scenario_state.json reaches gigabytes on real runs).

The run is the real crfm-helm 0.5.16 fixture run with failed requests (tests/data/helm/real), blown up to N
instances with a long synthetic prompt per request state. Two sizes, same instance count ratio; each import is
a fresh `medhelm import-helm` process; peak RSS from getrusage. Writes the `import-helm` section of
docs/benchmarks.md.

Usage: python bench/bench_import_helm.py [--instances 20000] [--prompt-kb 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_sections import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCE = next((ROOT / "tests/data/helm/real/runs/fixtures").glob("followup_yesno:*mock-c*"))


def blow_up(dst: Path, instances: int, prompt_kb: int) -> int:
    """A copy of the fixture run with `instances` instances; returns scenario_state.json's size in bytes."""
    dst.mkdir(parents=True)
    shutil.copy(SOURCE / "run_spec.json", dst)
    shutil.copy(SOURCE / "stats.json", dst)
    states = json.loads((SOURCE / "scenario_state.json").read_text())
    entries = json.loads((SOURCE / "per_instance_stats.json").read_text())
    pad = "Synthetic note text. " * (prompt_kb * 1024 // 21)
    with open(dst / "scenario_state.json", "w") as f:
        f.write('{"adapter_spec": ' + json.dumps(states["adapter_spec"]) + ', "request_states": [')
        for i in range(instances):
            rs = dict(states["request_states"][i % len(states["request_states"])])
            rs["instance"] = {**rs["instance"], "id": f"id{i}", "input": {"text": pad}}
            rs["request"] = {**rs["request"], "prompt": pad}
            f.write(("," if i else "") + json.dumps(rs))
        f.write("]}")
    with open(dst / "per_instance_stats.json", "w") as f:
        f.write("[")
        for i in range(instances):
            e = entries[i % len(entries)]
            f.write(("," if i else "") + json.dumps({**e, "instance_id": f"id{i}"}))
        f.write("]")
    return (dst / "scenario_state.json").stat().st_size


def run_import(suite: Path, out: Path) -> tuple[float, float, str]:
    medhelm = Path(sys.executable).parent / "medhelm"
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([str(medhelm), "import-helm", str(suite), "-o", str(out), "--bootstrap", "100"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return wall, max(peak, before) / 1024, proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else ""


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--instances", type=int, default=20000)
    p.add_argument("--prompt-kb", type=int, default=10)
    args = p.parse_args()
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # the small case first: getrusage's children peak only grows
        for n in (args.instances // 10, args.instances):
            suite = Path(tmp) / f"s{n}"
            size = blow_up(suite / SOURCE.name, n, args.prompt_kb)
            wall, peak, note = run_import(suite, Path(tmp) / f"o{n}")
            rows.append((n, size / 1e6, wall, peak, note))
    (n1, mb1, _, rss1, _), (n2, mb2, wall2, rss2, note) = rows
    growth = rss2 - rss1
    ok = rss2 < 250 and growth < 0.25 * (mb2 - mb1)
    body = "\n".join([
        f"Measured by `bench/bench_import_helm.py` on {datetime.now():%Y-%m-%d %H:%M} (2 cores, Python "
        f"{sys.version.split()[0]}, load average {load:.1f} before: other work shared the machine). The real "
        "crfm-helm 0.5.16 fixture run with refused requests (`tests/data/helm/real`), blown up with a "
        f"{args.prompt_kb} KB synthetic prompt per request state; each import is a fresh process.",
        "",
        "| scenario_state.json | instances | wall time | peak RSS |",
        "|---|---|---|---|",
        *[f"| {mb:.0f} MB | {n:,} | {w:.1f} s | {r:.0f} MB |" for n, mb, w, r, _ in rows],
        "",
        f"Target: peak RSS < 250 MB at {mb2:.0f} MB, and growing by less than a quarter of the file's growth "
        f"(streamed with ijson, not loaded): +{growth:.0f} MB for +{mb2 - mb1:.0f} MB of file — "
        f"{'met' if ok else 'NOT met'}. Import note: `{note[:160]}`",
    ])
    write_section("import-helm", "import-helm: a large scenario_state.json, streamed", body)
    print(body)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
