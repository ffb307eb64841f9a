"""Issue 30 E: how often the 95 % intervals of ICC(2,1) cover the true ICC, ours against the reference's.

A two-way random-effects model with a known ICC(2,1) = var_t / (var_t + var_j + var_e): n targets x k judges,
``y = t_i + j_r + e_ir`` with normal effects; every design and variance setting is simulated ``--reps`` times with a
fixed seed. "F (pingouin)" is the Satterthwaite F interval of McGraw & Wong (1996) that pingouin and R psych give;
"ours" is what ``agreement.icc_interval`` gives (the hull of that interval and the generalized confidence interval).
Writes the table into docs/jury.md between the ``icc-coverage`` markers (a measurement, not a timed test).

    python bench/bench_icc_coverage.py [--reps 400] [--seed 30] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))

from medhelm.scoring.jury import agreement as ag  # noqa: E402

DESIGNS = ((30, 2), (30, 5), (100, 2), (100, 3), (300, 4), (1000, 3), (1000, 5))
VARIANCES = ((1.0, 0.5, 1.0), (1.0, 0.1, 0.5), (1.0, 1.0, 0.25))  # (targets, judges, residual)
DOC = ROOT / "docs" / "jury.md"
START, END = "<!-- bench:icc-coverage -->", "<!-- /bench:icc-coverage -->"


def simulate(reps: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    rows = []
    for n, k in DESIGNS:
        for var_t, var_j, var_e in VARIANCES:
            truth = var_t / (var_t + var_j + var_e)
            hit_f = hit_ours = 0
            width_f = width_ours = 0.0
            for _ in range(reps):
                m = (rng.normal(0, var_t ** 0.5, (n, 1)) + rng.normal(0, var_j ** 0.5, (1, k))
                     + rng.normal(0, var_e ** 0.5, (n, k)))
                r = ag.icc(m)
                low, high, _ = ag._f_interval(r, "2,1")
                if low is not None:
                    hit_f += low <= truth <= high
                    width_f += high - low
                low, high, _ = ag.icc_interval(r, "2,1")
                if low is not None:
                    hit_ours += low <= truth <= high
                    width_ours += high - low
            rows.append((n, k, var_j, var_e, truth, hit_f / reps, hit_ours / reps, width_f / reps, width_ours / reps))
            print(f"{n:5d} x {k}  var_j {var_j:4}  var_e {var_e:4}  ICC {truth:.3f}  F {hit_f / reps:.3f}  "
                  f"ours {hit_ours / reps:.3f}", flush=True)
    return rows


def table(rows: list[tuple], reps: int, seed: int, seconds: float) -> str:
    lines = [f"Coverage of the true ICC(2,1) by 95 % intervals: {reps} simulated data sets per row (seed {seed}), "
             f"two-way random model, targets' variance 1 ({seconds:.0f} s; `python bench/bench_icc_coverage.py`).",
             "", "| targets × judges | judges' variance | residual variance | true ICC(2,1) | F (pingouin) "
             "coverage | ours coverage | F mean width | ours mean width |", "|---|---|---|---|---|---|---|---|"]
    for n, k, var_j, var_e, truth, f_cov, our_cov, f_w, our_w in rows:
        lines.append(f"| {n} × {k} | {var_j} | {var_e} | {truth:.3f} | {f_cov:.3f} | {our_cov:.3f} | {f_w:.3f} | "
                     f"{our_w:.3f} |")
    worst = min(rows, key=lambda r: r[6])
    lines += ["", f"Lowest coverage of ours: {worst[6]:.3f} ({worst[0]} × {worst[1]}, judges' variance {worst[2]}); "
              f"of the F interval: {min(r[5] for r in rows):.3f}. With {reps} data sets a coverage of 0.95 is "
              f"measured within ±{1.96 * (0.95 * 0.05 / reps) ** 0.5:.3f} (95 %)."]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=400)
    p.add_argument("--seed", type=int, default=30)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    started = time.perf_counter()
    rows = simulate(args.reps, args.seed)
    body = table(rows, args.reps, args.seed, time.perf_counter() - started)
    print(body)
    if not args.no_write:
        text = DOC.read_text()
        block = f"{START}\n{body}\n{END}"
        text = text[:text.index(START)] + block + text[text.index(END) + len(END):] if START in text \
            else text.rstrip("\n") + "\n\n" + block + "\n"
        DOC.write_text(text)


if __name__ == "__main__":
    main()
