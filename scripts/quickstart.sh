#!/usr/bin/env bash
# One command for a new user: create the environment, install, evaluate the embedded model on both
# example benchmarks (the jury demo judged by the embedded model too) next to the reference baselines
# (random/majority answers, empty/copied answers: the examples' .conf files name them), build the leaderboard.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_venv
start_llama_build
step "installing medhelm with the dashboard"
pip_install -e ".[dashboard]"
finish_llama_build

OUT=${OUTPUT_PATH:-benchmark_output}
step "evaluating SmolLM2-135M-Instruct (embedded, llama.cpp) and the reference baselines on the example benchmarks"
"$VENV/bin/medhelm" run --conf-paths examples/exact_match_demo/exact_match_demo.conf \
  --suite DEMO --max-eval-instances "${MAX_EVAL_INSTANCES:-10}" --output-path "$OUT"
# The jury demo on fewer instances: the embedded judge writes five explained verdicts per answer on the CPU,
# the slowest step of the quickstart (JURY_EVAL_INSTANCES=10 for a fuller demo).
"$VENV/bin/medhelm" run --conf-paths examples/llm_jury_score_demo/llm_jury_score_demo.conf \
  --suite DEMO --max-eval-instances "${JURY_EVAL_INSTANCES:-4}" --output-path "$OUT"
step "building the leaderboard"
# One model alone has nothing to win against: rank it with the baselines, so the demo shows where it
# stands against chance (the dashboard's sidebar switch shows the models apart again).
"$VENV/bin/medhelm" summarize --suite DEMO --output-path "$OUT" --rank-baselines
cat <<MSG

Done. Results:      $(pwd)/$OUT/runs/DEMO
Open the leaderboard:  $VENV/bin/medhelm serve --suite DEMO --output-path $OUT
MSG
