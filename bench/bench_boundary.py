"""Issue 18's fuzzing, re-run: the long Hypothesis budget of tests/boundary over every input kind, counted;
writes section `boundary` of docs/benchmarks.md.

Every case is the real CLI in a fresh process under ``prlimit`` (30 s, 1 GiB); ``MEDHELM_FUZZ_LOG`` gives one
line per case (exit code, traceback seen, error lines, seconds). Also measured: what checking a SQLite results
store's integrity before reading it costs (``PRAGMA quick_check``, once per file version per process).

    python bench/bench_boundary.py [--examples 250] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import write_section  # noqa: E402
from tests.boundary.fuzz_report import report  # noqa: E402


KINDS = ("benchmark_files", "cli_flags", "configs", "import_helm", "run_entries", "run_folders", "schema_configs",
         "stores")


def fuzz(examples: int, log: Path, kinds: list[str]) -> dict[str, str]:
    """The long fuzz of each kind in its own pytest (cases appended to ``log``); kind -> "passed" | "FAILED"."""
    env = {**os.environ, "MEDHELM_FUZZ_EXAMPLES": str(examples), "MEDHELM_FUZZ_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "services"), os.environ.get("PYTHONPATH", "")])}
    out = {}
    for kind in kinds:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "fuzz_long",
                               f"tests/boundary/test_fuzz.py::test_fuzz_long[{kind}]"], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        out[kind] = "passed" if proc.returncode == 0 else "FAILED"
        if proc.returncode:
            (log.parent / f"{log.name}.{kind}.txt").write_text(proc.stdout[-20000:])
    return out


def quick_check_cost(mb: int = 256) -> tuple[float, float]:
    """(store size in MB, seconds of PRAGMA quick_check) on a store-like file of about ``mb`` MB."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.sqlite"
        con = sqlite3.connect(path)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("CREATE TABLE instances (run_id BIGINT, instance_id TEXT, record_json TEXT, "
                    "PRIMARY KEY (run_id, instance_id))")
        rows = mb * 1024 * 1024 // 1500
        con.executemany("INSERT INTO instances VALUES (?, ?, ?)",
                        ((i // 1000, str(i), "x" * 1400) for i in range(rows)))
        con.commit()
        con.close()
        size = path.stat().st_size / 1e6
        times = []
        for _ in range(3):
            con = sqlite3.connect(path)
            started = time.monotonic()
            assert con.execute("PRAGMA quick_check(5)").fetchall() == [("ok",)]
            times.append(time.monotonic() - started)
            con.close()
        return size, sorted(times)[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--examples", type=int, default=250, help="Hypothesis examples per input kind")
    p.add_argument("--log", type=Path, help="keep the per-case log here (default: a temporary file)")
    p.add_argument("--kinds", help="run only these kinds (comma-separated) and replace their cases in --log")
    p.add_argument("--no-write", action="store_true", help="print, do not rewrite docs/benchmarks.md")
    args = p.parse_args()
    log = args.log or Path(tempfile.mkstemp(prefix="medhelm-fuzz-", suffix=".jsonl")[1])
    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    status_file = log.with_name(log.name + ".status.json")
    status = json.loads(status_file.read_text()) if args.kinds and status_file.exists() else {}
    # a kind run again replaces its earlier cases (e.g. after a fix)
    kept = [ln for ln in (log.read_text().splitlines() if args.kinds and log.exists() else [])
            if json.loads(ln)["kind"] not in kinds]
    log.write_text("".join(ln + "\n" for ln in kept))
    load = os.getloadavg()[0]
    started = time.monotonic()
    status.update(fuzz(args.examples, log, kinds))
    seconds = time.monotonic() - started
    status_file.write_text(json.dumps(status))
    summary = ", ".join(f"{k} {v}" for k, v in sorted(status.items()))
    size, qc = quick_check_cost()
    body = (f"Measured by `bench/bench_boundary.py` on {time.strftime('%Y-%m-%d %H:%M')} ({os.cpu_count()} cores, "
            f"load {load:.1f} at start; other work shared the machine). `pytest -m fuzz_long tests/boundary` with "
            f"{args.examples} Hypothesis examples per kind, fresh randomness; every case the real CLI in a new "
            "process under `prlimit` (30 s, 1 GiB), a patient marker in every CSV row and an API-key-like "
            "variable in the environment. A case passes when it exits 0 (the input happened to be valid) or 2 "
            "with one line naming the file and no traceback, no marker, the output folder (and a refused store) "
            f"unchanged. Kinds: {summary} (each kind in its own pytest; the last invocation took {seconds / 60:.0f} "
            "min).\n\n"
            + report(str(log)) + "\n\n"
            "Issue 18 started from 298 tracebacks in 1,721 cases (906 clean). Kinds: `run_entries` (run entries "
            "and `.conf`), `benchmark_files` (YAML/CSV/prompt, byte mutations), `configs` (deployments, jury, "
            "prices: byte mutations and loose documents), `schema_configs` (deployments, jury, prices, "
            "`access.yaml`, benchmark YAML generated from each schema's keys), `run_folders`, `import_helm`, "
            "`cli_flags`, `stores` (a real store damaged as bytes or by SQL, read by `export`, `audit`, "
            "`summarize`). \"other exits\" are 74 (output folder unwritable) or 70 (a bug: one line and a log); "
            "both fail the assertion unless the kind allows them (`import_helm` allows 70).\n\n"
            f"Checking a SQLite store before reading it: `PRAGMA quick_check` takes {qc:.2f} s on a {size:.0f} MB "
            f"file ({qc / size * 1000:.1f} ms per MB, median of 3, warm page cache); once per file version per "
            "process, and `medhelm serve dashboard` hands the version it checked to the Streamlit process.")
    print(body)
    if not args.no_write:
        write_section("boundary", "Bad-input boundary: the fuzz of issue 18, re-run", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
