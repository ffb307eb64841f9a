"""Issue 30 F: work in proportion to the input under the size caps. Each case runs in a fresh process and reports
its wall and CPU time and the memory it added (peak ``VmHWM`` minus ``VmRSS`` once its modules are imported;
ru_maxrss would carry the parent's peak across exec) against the input's size; writes section `input-sizes` of
docs/benchmarks.md. The target: memory within a few times the input, about 1 s per 10 MB on an idle machine.
CPU seconds are what compare across runs on a shared machine (wall time grows with the load).

HELM's per_instance_stats.json in two shapes: 200,000 entries of 4 stats (the issue's case) and entries copied
from crfm-helm 0.5.16's own file (tests/data/helm/real: ~21 stats each, as HELM writes them); each read alone
(``helm_stats.per_instance``) and through the whole ``medhelm import-helm`` (read, store, leaderboard), whose
baseline is the same command on the 20-instance fixture run.

    python bench/bench_input_sizes.py [--no-write] [--bootstrap 100] [--services DIR] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import write_section  # noqa: E402

FIXTURE = next((ROOT / "tests/data/helm/real/runs/fixtures").glob("followup_yesno:*mock-c*"))

PROBE = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {services!r})
from medhelm.errors import ConfigError
{setup}
def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":")) / 1024
rss = status("VmRSS")
started, cpu = time.perf_counter(), time.process_time()
try:
    {call}
    outcome = "read"
except ConfigError as err:
    outcome = "refused: " + str(err).split(": ", 1)[-1][:60]
print(json.dumps({{"s": time.perf_counter() - started, "cpu": time.process_time() - cpu, "rss_mb": status("VmHWM"),
                  "added_mb": status("VmHWM") - rss, "outcome": outcome}}))
"""


def _per_instance_file(path: Path, entries: int, real: bool) -> None:
    """``entries`` entries: 4 stats each, or the crfm-helm fixture's entries in turn with new instance ids."""
    source = json.loads((FIXTURE / "per_instance_stats.json").read_text())
    four = [{"name": {"name": f"m{j}", "split": "test"}, "count": 1, "sum": 0.5, "sum_squared": 0.25, "min": 0.5,
             "max": 0.5, "mean": 0.5} for j in range(4)]
    with open(path, "w") as f:
        f.write("[")
        for i in range(entries):
            entry = {**source[i % len(source)], "instance_id": f"id{i}"} if real else \
                {"instance_id": f"id{i}", "train_trial_index": 0, "stats": four}
            f.write(("," if i else "") + json.dumps(entry))
        f.write("]")


def _helm_suite(folder: Path, per_instance: Path | None) -> Path:
    """A suite folder with the fixture run, its per_instance_stats.json replaced by ``per_instance``."""
    run = folder / "runs" / "bench" / FIXTURE.name
    run.mkdir(parents=True)
    for name in ("run_spec.json", "stats.json"):
        shutil.copy(FIXTURE / name, run)
    shutil.copy(per_instance or FIXTURE / "per_instance_stats.json", run / "per_instance_stats.json")
    return run.parent


def cases(folder: Path, bootstrap: int) -> list[tuple[str, Path, str, str]]:
    """(title, input file, setup, call)."""
    folder.mkdir(parents=True)
    conf = folder / "entry.conf"
    conf.write_text('entries: [{description: "medhelm_configurable_benchmark:config_path=' + "a" * 15_000_000
                    + '", priority: 1}]\n')
    yml = folder / "line.yaml"
    yml.write_text("name: " + "b" * 10_000_000 + "\n")
    compact, real = folder / "compact.json", folder / "real.json"
    _per_instance_file(compact, 200_000, real=False)
    _per_instance_file(real, 30_000, real=True)
    deep = folder / "deep.json"
    deep.write_text('[{"instance_id": "a", "stats": ' + "[" * 100_000 + "]" * 100_000 + "}]")
    empty = folder / "empty.txt"
    empty.write_text("")
    read = "from medhelm.store.helm_stats import per_instance"
    cli = "from medhelm.cli import main"
    suites = {name: _helm_suite(folder / name, path) for name, path in
              (("fixture", None), ("compact", compact), ("real", real))}

    def import_helm(name: str) -> str:
        args = ["import-helm", str(suites[name]), "-o", str(folder / f"out-{name}"), "--bootstrap", str(bootstrap)]
        return f"assert main({args!r}) == 0"

    return [
        ("nothing (the process's own baseline)", empty, "", "pass"),
        ("a .conf with one 15 MB run entry", conf, "from medhelm.runentries import read_conf",
         f"read_conf({str(conf)!r})"),
        ("a YAML file with one 10 MB line", yml, "from medhelm.files import load_yaml", f"load_yaml({str(yml)!r})"),
        ("a HELM per_instance_stats.json of 200,000 entries (4 stats each), read", compact, read,
         f"per_instance(Path({str(compact)!r}))"),
        ("a HELM per_instance_stats.json of 30,000 entries as crfm-helm writes them, read", real, read,
         f"per_instance(Path({str(real)!r}))"),
        ("a HELM per_instance_stats.json nested 100,000 deep", deep, read, f"per_instance(Path({str(deep)!r}))"),
        ("`import-helm` of the 20-instance fixture run (the baseline of the next two)",
         FIXTURE / "per_instance_stats.json", cli, import_helm("fixture")),
        ("`import-helm` of the 200,000-entry run", compact, cli, import_helm("compact")),
        ("`import-helm` of the 30,000-entry crfm-helm-shaped run", real, cli, import_helm("real")),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--bootstrap", type=int, default=100, help="import-helm's --bootstrap (default 100)")
    p.add_argument("--services", type=Path, default=ROOT / "services",
                   help="the medhelm package's parent folder to measure (default: this checkout's)")
    p.add_argument("--before", type=Path, metavar="DIR",
                   help="also measure another commit's services folder (`git archive <commit> services | tar -x "
                        "-C DIR`, then DIR/services) and show its ratios beside")
    args = p.parse_args()
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        measured = {}  # services folder -> (title, size, result, cpu above its baseline, memory added)
        for services in [args.services, *([args.before] if args.before else [])]:
            baseline, measured[services] = None, []
            for title, path, setup, call in cases(Path(tmp) / services.parent.name, args.bootstrap):
                code = PROBE.format(services=str(services), setup=setup, call=call)
                done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{title}: {done.stderr[-2000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                cpu, added = r["cpu"], r["added_mb"]
                if path == FIXTURE / "per_instance_stats.json":  # the import-helm baseline
                    baseline = r
                elif title.startswith("`import-helm`") and baseline is not None:
                    cpu, added = cpu - baseline["cpu"], r["rss_mb"] - baseline["rss_mb"]
                measured[services].append((title, path.stat().st_size / 1e6, r, cpu, added))
                print(services, title, r, flush=True)
        before = measured.get(args.before, [])
        for i, (title, mb, r, cpu, added) in enumerate(measured[args.services]):
            ratios = [f"{cpu / mb * 10:.2f}" if mb >= 1 else "–", f"{added / mb:.1f}" if mb >= 1 else "–"]
            if before:
                _, _, _, cpu_b, added_b = before[i]
                ratios += [f"{cpu_b / mb * 10:.2f}" if mb >= 1 else "–", f"{added_b / mb:.1f}" if mb >= 1 else "–"]
            rows.append(f"| {title} | {mb:.1f} | {r['s']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} | {added:.0f} | "
                        + " | ".join(ratios) + f" | {r['outcome']} |")
    load = os.getloadavg()[0]
    head = ("| input | size (MB) | wall s | CPU s | peak RSS (MB, whole process) | memory added (MB) | CPU s per 10 MB "
            "| added / input |" + (" before: CPU s per 10 MB | before: added / input |" if before else "")
            + " outcome |")
    body = "\n".join([
        f"`bench/bench_input_sizes.py --bootstrap {args.bootstrap}"
        + (f" --before <{args.before.parent.name}>`" if before else "`")
        + f": a fresh process per case; load average {load_before:.1f} before and {load:.1f} after on "
        f"{os.cpu_count()} cores (a shared machine: wall time grows with the load, CPU time much less). \"CPU s per "
        "10 MB\" and \"added / input\" are the ratios the target is about (≈ 1 s per 10 MB, a few times the "
        "input); for the `import-helm` rows they are counted above the fixture run's (the command's own start-up, "
        "imports and store)." + (" \"before\": the same cases with the services folder given to --before, "
                                  "measured in the same run." if before else ""), "",
        head, "|" + "---|" * head.count(" |"), *rows, "",
        "The per_instance_stats.json reading (`helm_stats.per_instance`): a well-formed file is cut into pieces of "
        "whole entries by one vectorised pass (which also bounds nesting) and each piece decoded by msgspec into "
        "the fields used; a file with anything unusual is read again by ijson entry by entry, which names what is "
        "wrong. What the `import-helm` rows add beyond the reading is the store (one row per instance) and the "
        "leaderboard's bootstrap, which grows with instances x replicates, not with the file: these rows use "
        f"--bootstrap {args.bootstrap}; the default is 1000."])
    print(body)
    if not args.no_write:
        write_section("input-sizes", "Inputs under the size caps (issue 30 F)", body)


if __name__ == "__main__":
    main()
