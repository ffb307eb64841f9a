"""The differential run against crfm-helm, in full (issue 54): every public MedHELM benchmark with a case, on its real
data slice where it is on the machine, else on an invented slice in the upstream file's format (tests/data/helm_diff),
every item of the slice, through crfm-helm 0.5.16's own `helm-run` and through `medhelm run`, both
answered by one KeyedAnswers mock (a hash of the item the prompt names), compared per instance and per run by
`medhelm.devtools.helm_differential`. Writes the `helm-differential` section of docs/benchmarks.md: the table
benchmark x {prompts, other request fields, references, completions, metrics to 1e-9, aggregates, main metric,
jury, differences explained} and every difference with its reason and an example with both values. A benchmark
whose real data is not on the machine runs on an invented slice in the upstream format (tests/data/helm_diff).

crfm-helm's venv is the one tests/providers/test_helm_differential.py builds (MEDHELM_ENGINES_DIR/helm-0.5.16);
helm-run's further dependencies are installed beside it on first use (--run-deps). The CI part (a few instances
per benchmark) is tests/providers/test_helm_run_differential.py.

Usage: python bench/bench_helm_differential.py [--benchmarks pubmed_qa medec] [--limit N] [--work DIR]
Exit status 1 when a difference is not explained (or an explained one vanished), 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_sections import ROOT, write_section  # noqa: E402

from medhelm.devtools import helm_differential as diff  # noqa: E402

ENGINES = Path(os.environ.get("MEDHELM_ENGINES_DIR", Path.home() / ".cache" / "medhelm-engines"))


def differences(report: diff.Report) -> str:
    lines = []
    for row in report.rows:
        for kind, examples in sorted(row.differences.items()):
            why = row.explained.get(kind, "**not explained**")
            n, of = row.equal.get(kind, 0), row.total.get(kind, 0)
            lines.append(f"* `{row.benchmark}` — {kind} differs on {of - n} of {of}: {why}. "
                         f"Example: {examples[0][:400]}")
        for kind in row.vanished:
            lines.append(f"* `{row.benchmark}` — {kind}: listed as known but equal in this run")
    return "\n".join(lines) or "* none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmarks", nargs="+", help="default: every case of helm_differential.CASES")
    parser.add_argument("--limit", type=int, help="items per benchmark (default: the whole slice)")
    parser.add_argument("--work", type=Path, help="keep both sides' run folders here (default: a temp folder)")
    parser.add_argument("--shared-data", type=Path,
                        default=Path(os.environ.get("MEDHELM_SHARED_DATA", ROOT.parent / "shared" / "data")))
    parser.add_argument("--helm-venv", type=Path, default=ENGINES / f"helm-{diff.HELM_VERSION}")
    parser.add_argument("--run-deps", type=Path, default=Path(os.environ.get(
        "MEDHELM_HELM_RUN_DEPS") or ENGINES / f"helm-{diff.HELM_VERSION}-run"))
    parser.add_argument("--no-doc", action="store_true", help="print the table, leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)

    python = args.helm_venv / "bin" / "python"
    if not (args.helm_venv / "bin" / "helm-run").is_file():
        print(f"no crfm-helm venv at {args.helm_venv}: run tests/providers/test_helm_differential.py once to build "
              "it (or pass --helm-venv)", file=sys.stderr)
        return 2
    try:
        cases = diff.select(args.benchmarks)
        helm = diff.HelmRun(python, diff.ensure_run_deps(python, args.run_deps))
    except (ValueError, diff.DiffError) as err:
        print(err, file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="helm-diff-") as tmp:
        work = args.work or Path(tmp)
        try:
            report = diff.run_differential(cases, helm, args.shared_data, work, args.limit)
        except diff.DiffError as err:
            print(err, file=sys.stderr)
            return 2
    took = time.monotonic() - started
    table = report.table()
    synthetic = [f"`{c.name}`" for c in cases if c.synthetic]
    invented = (f" {', '.join(synthetic)}: the real data is not on the machine, so these run on invented slices in "
                "the upstream file format (tests/data/helm_diff/README.md), which show that both sides read, "
                "prompt and score the format alike, not the published items." if synthetic else "")
    print(table)
    body = (f"`python bench/bench_helm_differential.py{'' if args.limit is None else f' --limit {args.limit}'}`, "
            f"{datetime.now(timezone.utc):%Y-%m-%d}, crfm-helm {diff.HELM_VERSION} (`helm-run` in its own venv) "
            f"against this tree's `medhelm run`, one KeyedAnswers mock for both, the real public slices "
            f"({'every item' if args.limit is None else f'the first {args.limit} items'}); {took:.0f} s.{invented}\n\n"
            "Per instance: the request as the server received it (the prompt byte for byte; every other body "
            "field: max tokens, stop sequences, temperature, ...), the references, the completion, every metric "
            "both compute (token counts and timings are accounting, not compared); per run the mean of every "
            "shared stat and the leaderboard's main metric; for the jury, the judges asked, each judge's "
            "request and the verdicts as parsed. `n/N` counts equal instances (stats for the aggregates). Every "
            "difference is explained in [metrics.md](metrics.md#the-differential-against-crfm-helm).\n\n"
            f"{table}\n\nDifferences found, with an example of each:\n\n{differences(report)}\n")
    if not args.no_doc:
        write_section("helm-differential", "Differential run against crfm-helm (issue 54)", body)
    bad = report.unexplained() or report.vanished()
    if bad:
        print(f"not explained or vanished: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
