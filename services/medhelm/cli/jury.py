"""``medhelm jury stats`` (jury score, judge failures, token cost, agreement between judges) and
``medhelm jury calibrate`` (agreement with clinicians' ratings: a CSV, or the ratings the dashboard's
Review page stored in the results store with ``--store``). Reads finished or partial run directories
or the store; writes nothing. Output is plain text, or JSON with ``--json``; never instance text.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from medhelm.cli import SEED_MAX, int_in
from medhelm.errors import ConfigError
from medhelm.scoring.jury import agreement as ag


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="jury_command", metavar="ACTION", required=True)
    stats = sub.add_parser("stats", help="jury score, judge failure rates, token cost, agreement between judges")
    src = stats.add_mutually_exclusive_group(required=True)
    src.add_argument("--run-dir", nargs="+", type=Path, metavar="DIR", help="run directories")
    src.add_argument("--suite", help="every jury run of this suite (under --output-path)")
    stats.add_argument("-o", "--output-path", default="benchmark_output", type=Path,
                       help="where suites live (default: %(default)s)")
    cal = sub.add_parser("calibrate", help="agreement with clinicians: clinician ICC, jury ICC, per-judge bias")
    where = cal.add_mutually_exclusive_group(required=True)
    where.add_argument("--ratings", type=Path, metavar="CSV",
                       help="clinician ratings: columns instance_id, rater, criterion, score")
    where.add_argument("--store", metavar="STORE", nargs="?", const="",
                       help="read the ratings clinicians gave on the dashboard's Review page from this results store "
                            "(sqlite:///path, a path, or postgresql://...; --store alone: env MEDHELM_STORE_URL, so a "
                            "password never sits in argv)")
    cal.add_argument("--run-dir", type=Path, metavar="DIR",
                     help="the judged run (needed with --ratings; with --store: only this run's ratings, its records "
                          "from the folder)")
    cal.add_argument("--release", help="with --store: the release (default: the latest summarised)")
    cal.add_argument("--benchmark", help="with --store: the benchmark whose ratings to use (needed when ratings "
                                         "cover several)")
    for q in (stats, cal):
        q.add_argument("--bootstrap", type=int_in(0, 100_000), default=ag.DEFAULT_BOOTSTRAP, metavar="N",
                       help="bootstrap resamples for 95%% CIs (default: %(default)s; 0 = none)")
        q.add_argument("--seed", type=int_in(0, SEED_MAX), default=0, help="bootstrap seed (default: %(default)s)")
        q.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    if args.jury_command == "calibrate":
        return _calibrate(args)
    return _stats(args)


def _records(run_dir: Path) -> list:
    from medhelm.rundir import RunDir

    rd = RunDir(run_dir)
    if not rd.exists():
        raise ConfigError("not a run directory (no run_spec.json)", path=run_dir)
    return list(rd.latest_records().values())


def _run_dirs(args: argparse.Namespace) -> list[Path]:
    if args.run_dir:
        return list(args.run_dir)
    from medhelm.files import plain_name

    suite = args.output_path / "runs" / plain_name(args.suite, what="--suite")
    if not suite.is_dir():
        raise ConfigError("suite not found", path=suite)
    return sorted(p for p in suite.iterdir() if (p / "run_spec.json").is_file())


def _stats(args: argparse.Namespace) -> int:
    from medhelm.scoring.jury.summary import judge_agreement, summarize

    report, pooled = [], []
    for run_dir in _run_dirs(args):
        records = [r for r in _records(run_dir) if r.judgements]
        if not records:
            continue  # not a jury run
        pooled += records
        report.append({"run": run_dir.name,
                       "summary": summarize(records, n_boot=args.bootstrap, seed=args.seed).to_json(),
                       "agreement": judge_agreement(records, n_boot=args.bootstrap, seed=args.seed).to_json()})
    if not report:
        raise ConfigError("no jury-scored runs here", path=str(args.run_dir[0]) if args.run_dir else args.suite)
    out: dict = {"runs": report}
    if len(report) > 1:
        out["pooled_agreement"] = judge_agreement(pooled, n_boot=args.bootstrap, seed=args.seed).to_json()
    print(json.dumps(out, indent=1) if args.json else _stats_text(out))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from medhelm.scoring.jury.calibration import calibrate, read_ratings

    if args.store is not None:
        ratings, records, source = _store_ratings(args)
    else:
        if args.run_dir is None:
            raise ConfigError("--ratings needs --run-dir (the judged run the ratings are about)")
        ratings, records, source = read_ratings(args.ratings), _records(args.run_dir), str(args.ratings)
    report = calibrate(ratings, records, source=source, n_boot=args.bootstrap, seed=args.seed).to_json()
    print(json.dumps(report, indent=1) if args.json else _calibration_text(report))
    return 0


def _store_ratings(args: argparse.Namespace) -> tuple[list, list, str]:
    """(ratings, records, source) from the results store's ``review_ratings`` (latest per rater x item x
    criterion); the records from the store, or from ``--run-dir``."""

    from medhelm.store import open_store, read, review
    from medhelm.errors import without_password

    from medhelm.files import env_secret

    location = args.store or env_secret("MEDHELM_STORE_URL") or ""
    if not location:
        raise ConfigError("--store without a location needs env MEDHELM_STORE_URL (or MEDHELM_STORE_URL_FILE)")
    with open_store(location) as store:
        release = read.resolve_release(store, args.release)
        stored = review.stored_ratings(store, release=release, benchmark=args.benchmark)
        where = f"release '{release}'" + (f", benchmark '{args.benchmark}'" if args.benchmark else "")
        if args.run_dir is not None:
            stored = [r for r in stored if r.run_name == args.run_dir.name]
            where += f", run '{args.run_dir.name}'"
        if not stored:
            raise ConfigError(f"no clinician ratings in {without_password(store.url)} for {where} (clinicians rate on "
                              "the dashboard's Review page)")
        benchmarks = sorted({r.benchmark for r in stored})
        if len(benchmarks) > 1:
            raise ConfigError(f"the ratings cover several benchmarks ({', '.join(benchmarks)}); "
                              "name one with --benchmark")
        ratings = review.clinician_ratings(store, release, benchmarks[0])
        ratings = [r for r in ratings if args.run_dir is None or r.run == args.run_dir.name]
        records = _records(args.run_dir) if args.run_dir is not None else \
            review.rated_records(store, release, benchmarks[0])
        return ratings, records, without_password(store.url)


# ------------------------------------------------------------------------------------------------
# text rendering (from the JSON form, so both outputs say the same thing)


def _est(e: dict) -> str:
    return str(ag.Estimate.from_json(e))


def _agreement_text(a: dict, indent: str = "  ") -> list[str]:
    methods = a.get("methods") or {}
    lines = [f"{indent}agreement between judges ({', '.join(a['judges'])}; 0-1 scores; 95% CI):",
             f"{indent}  (ICC intervals: {methods.get('icc', ag.ICC_METHOD)}; "
             f"alpha, Spearman and the rest: {methods.get('other', ag.BOOTSTRAP_METHOD)})"]
    lines += [f"{indent}  note: {note}" for note in a.get("notes", ())]
    lines += [f"{indent}  ICC(2,1) {_est(a['icc2_1'])}   ICC(2,k) {_est(a['icc2_k'])}   ICC(3,k) {_est(a['icc3_k'])}",
              f"{indent}  Krippendorff alpha ({a.get('alpha_level', 'ordinal')}) "
              f"{_est(a.get('alpha') or a['alpha_ordinal'])}   targets {a['targets']}"]
    lines += [f"{indent}  Spearman {p['a']} vs {p['b']}: {_est(p['spearman'])}" for p in a["pairs"]]
    for c in a["criteria"]:
        lo, hi = c.get("scale") or (None, None)
        scale = "" if lo is None else f" ({lo:g}-{hi:g})"
        lines += [f"{indent}  {c['criterion'] + scale:<20} ICC(2,1) {_est(c['icc2_1'])}  "
                  f"alpha ({c.get('alpha_level', 'ordinal')}) {_est(c['alpha'])}",
                  f"{indent}  {'':<20} mean |diff| {_est(c['mean_abs_difference'])}  "
                  f"exact agreement {_est(c['exact_agreement'])}"]
    return lines


def _stats_text(out: dict) -> str:
    lines: list[str] = []
    for run in out["runs"]:
        s = run["summary"]
        cov = "n/a" if s["coverage"] is None else f"{s['coverage']:.3f}"
        lines += [f"run {run['run']}",
                  f"  instances {s['instances']} (unscored {s['unscored_instances']}, empty responses "
                  f"{s['empty_responses']}), coverage {cov}",
                  f"  jury_score {_est(s['jury_score'])}   jury_score_normalized {_est(s['jury_score_normalized'])}",
                  f"  judge tokens: prompt {s['judge_prompt_tokens']}, completion {s['judge_completion_tokens']}"
                  + ("" if s.get("judge_reasoning_tokens") is None else
                     f" (of which reasoning {'≈' if s.get('judge_reasoning_tokens_estimated') else ''}"
                     f"{s['judge_reasoning_tokens']})"),
                  "  judge failures (unscored + error / requested):"]
        lines += [f"    {j['judge']:<32} {j['criterion']:<14} {j['unscored']:>4} + {j['error']:>4} / "
                  f"{j['requested']:<5} ({(j['failure_rate'] or 0) * 100:.1f}%)" for j in s["judges"]]
        lines += _agreement_text(run["agreement"])
        lines.append("")
    if "pooled_agreement" in out:
        lines += ["all runs pooled:"] + _agreement_text(out["pooled_agreement"])
    return "\n".join(lines).rstrip()


def _calibration_text(r: dict) -> str:
    lines = [f"clinicians: {', '.join(r['clinicians'])}; rated targets in the run: {r['targets']} "
             f"(ratings not in the run: {r['unmatched']})",
             f"95% CI: ICC by {ag.ICC_METHOD}; bias, alpha and Spearman by {ag.BOOTSTRAP_METHOD}",
             f"clinician-clinician  ICC(2,1) {_est(r['clinician_icc2_1'])}  ICC(2,k) {_est(r['clinician_icc2_k'])}  "
             f"alpha(ordinal) {_est(r['clinician_alpha_ordinal'])}",
             f"jury-clinician       ICC(2,1) {_est(r['jury_icc2_1'])}  Spearman {_est(r['jury_spearman'])}  "
             f"bias {_est(r['jury_bias'])} points",
             "per judge (bias = judge - clinician mean, rubric points; > 0 = more lenient):"]
    lines += [f"  {j['judge']:<32} bias {_est(j['bias'])}  ICC(2,1) vs clinicians {_est(j['icc2_1'])}"
              for j in r["judges"]]
    if r.get("criteria"):
        lines.append("per criterion (jury mean vs clinician mean):")
        lines += [f"  {c['criterion']:<32} ICC(2,1) {_est(c['jury_icc2_1'])}  targets {c['targets']}"
                  for c in r["criteria"]]
    return "\n".join(lines)
