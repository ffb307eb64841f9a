"""Issue 30 F: work in proportion to the input under the size caps. Each case runs in a fresh process and reports
its wall time and peak resident memory (``VmHWM``: ru_maxrss survives exec) against the input's size; writes section `input-sizes` of
docs/benchmarks.md. The target: memory within a few times the input, about 1 s per 10 MB on an idle machine.

    python bench/bench_input_sizes.py [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import write_section  # noqa: E402

PROBE = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {services!r})
from medhelm.errors import ConfigError
started = time.perf_counter()
try:
    {call}
    outcome = "read"
except ConfigError as err:
    outcome = "refused: " + str(err).split(": ", 1)[-1][:60]
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"s": time.perf_counter() - started, "rss_mb": hwm / 1024, "outcome": outcome}}))
"""


def cases(folder: Path) -> list[tuple[str, Path, str]]:
    conf = folder / "entry.conf"
    conf.write_text('entries: [{description: "medhelm_configurable_benchmark:config_path=' + "a" * 15_000_000
                    + '", priority: 1}]\n')
    yml = folder / "line.yaml"
    yml.write_text("name: " + "b" * 10_000_000 + "\n")
    stats = [{"name": {"name": f"m{j}", "split": "test"}, "count": 1, "sum": 0.5, "sum_squared": 0.25, "min": 0.5,
              "max": 0.5, "mean": 0.5} for j in range(4)]
    per_instance = folder / "per_instance_stats.json"
    per_instance.write_text(json.dumps([{"instance_id": f"id{i}", "train_trial_index": 0, "stats": stats}
                                        for i in range(200_000)]))
    deep = folder / "deep.json"
    deep.write_text('[{"instance_id": "a", "stats": ' + "[" * 100_000 + "]" * 100_000 + "}]")
    empty = folder / "empty.txt"
    empty.write_text("")
    return [
        ("nothing (the process's own baseline)", empty, "pass"),
        ("a .conf with one 15 MB run entry", conf, f"from medhelm.runentries import read_conf; read_conf({str(conf)!r})"),
        ("a YAML file with one 10 MB line", yml, f"from medhelm.files import load_yaml; load_yaml({str(yml)!r})"),
        ("a HELM per_instance_stats.json of 200,000 entries", per_instance,
         f"from medhelm.store.helm_runs import _per_instance; _per_instance(Path({str(per_instance)!r}))"),
        ("a HELM per_instance_stats.json nested 100,000 deep", deep,
         f"from medhelm.store.helm_runs import _per_instance; _per_instance(Path({str(deep)!r}))"),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for title, path, call in cases(Path(tmp)):
            code = PROBE.format(services=str(ROOT / "services"), call=call)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            mb = path.stat().st_size / 1e6
            rows.append(f"| {title} | {mb:.1f} | {r['s']:.2f} | {r['rss_mb']:.0f} | {r['outcome']} |")
            print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    body = "\n".join([f"Fresh process per case; load average {load:.1f} on {os.cpu_count()} cores at the end "
                      "(timings scale with load: measured on a shared machine).", "",
                      "| input | size (MB) | seconds | peak RSS (MB, whole process) | outcome |", "|---|---|---|---|---|",
                      *rows])
    print(body)
    if not args.no_write:
        write_section("input-sizes", "Inputs under the size caps (issue 30 F)", body)


if __name__ == "__main__":
    main()
