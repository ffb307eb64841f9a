#!/usr/bin/env bash
# Regenerates the real-HELM fixture suite under tests/data/helm/ (NOT run in CI: the committed JSON is the test
# data). Real crfm-helm 0.5.16 (plain, plus its `openai` extra: the full `medhelm` extra pulls GPU/NLP stacks
# none of these runs use) in its own venv, run offline against our mock OpenAI server with scripted answers
# (scripts/helm_fixtures/responder.py):
#   * medhelm_configurable_benchmark, yes/no exact match, 20 synthetic rows (one model has refused requests),
#   * medhelm_configurable_benchmark, jury_score with two mock judges, 10 synthetic rows (one judge fails ~1/3),
#   * shc_conf_med (a private MedHELM benchmark) on 10 synthetic rows,
# three mock models, then helm-summarize. Usage: bash scripts/helm_fixtures.sh [PORT]   (default 28080)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/_env.sh
ensure_venv  # our own venv: the mock server
"$VENV/bin/python" -c "import medhelm" 2>/dev/null || pip_install -e .
VENV=$(cd "$VENV" && pwd)
PORT=${1:-28080}
HELM_VENV=${HELM_VENV:-$HOME/.cache/medhelm/helm-0.5.16-venv}
WORK=${HELM_FIXTURE_WORK:-$(mktemp -d /tmp/helm-fixtures.XXXXXX)}
OUT=$ROOT/tests/data/helm/real
SUITE=fixtures
MODELS=(gpt-4-mock-a gpt-4-mock-b gpt-4-mock-c)

step "crfm-helm 0.5.16 in $HELM_VENV"
if [ ! -x "$HELM_VENV/bin/helm-run" ]; then
  python3 -m venv "$HELM_VENV"
  # the CPU torch first and torchvision pinned to it: otherwise pip backtracks into a multi-GB CUDA build
  "$HELM_VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
  "$HELM_VENV/bin/python" -m pip install -q --disable-pip-version-check "crfm-helm[openai]==0.5.16" "torch==2.13.0" \
    "torchvision==0.28.0" 2>&1 | grep -v '^WARNING: Location' || true
fi
"$HELM_VENV/bin/helm-run" --help >/dev/null

step "inputs and HELM config in $WORK"
mkdir -p "$WORK/prod_env"
"$VENV/bin/python" scripts/helm_fixtures/data.py "$WORK"
{
  echo "model_deployments:"
  for m in "${MODELS[@]}" gpt-4-judge-1 gpt-4-judge-2; do
    cat <<YAML
  - name: mock/$m
    model_name: mockorg/$m
    tokenizer_name: mock/simple
    max_sequence_length: 8192
    client_spec:
      class_name: "helm.clients.openai_client.OpenAIClient"
      args:
        base_url: "http://127.0.0.1:$PORT/v1"
        api_key: "mock"
YAML
  done
} >"$WORK/prod_env/model_deployments.yaml"
{
  echo "models:"
  for m in "${MODELS[@]}" gpt-4-judge-1 gpt-4-judge-2; do
    cat <<YAML
  - name: mockorg/$m
    display_name: Mock $m
    description: A scripted mock model ($m)
    creator_organization_name: MockOrg
    access: open
    release_date: 2025-01-01
    tags: [TEXT_MODEL_TAG, PARTIAL_FUNCTIONALITY_TEXT_MODEL_TAG]
YAML
  done
} >"$WORK/prod_env/model_metadata.yaml"
cat >"$WORK/prod_env/tokenizer_configs.yaml" <<YAML
tokenizer_configs:
  - name: mock/simple
    tokenizer_spec:
      class_name: "helm.tokenizers.simple_tokenizer.SimpleTokenizer"
    end_of_text_token: "</s>"
    prefix_token: "<s>"
YAML
: >"$WORK/prod_env/credentials.conf"
{
  echo "entries: ["
  for m in "${MODELS[@]}"; do
    echo "  {description: \"medhelm_configurable_benchmark:config_path=yesno.yaml,model=mockorg/$m,model_deployment=mock/$m\", priority: 1}"
    echo "  {description: \"medhelm_configurable_benchmark:config_path=summary.yaml,model=mockorg/$m,model_deployment=mock/$m\", priority: 1}"
    echo "  {description: \"shc_conf_med:data_path=$WORK/shc_conf.csv,model=mockorg/$m,model_deployment=mock/$m\", priority: 1}"
  done
  echo "]"
} >"$WORK/run_entries.conf"

step "mock OpenAI server on 127.0.0.1:$PORT"
# imported, not `-m`: the responder's MockHTTPError must be the server module's own class (not __main__'s)
PYTHONPATH="$ROOT/scripts/helm_fixtures${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -c \
  "import sys; from medhelm.devtools.mock_openai import main; sys.exit(main(sys.argv[1:]))" \
  --port "$PORT" --responder responder:respond >"$WORK/mock.log" 2>&1 &
MOCK=$!
trap 'kill $MOCK 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done

step "helm-run + helm-summarize (offline)"
# helm-summarize --num-threads 1: its threads compile Mako templates in parallel, which trips a CPython 3.11 race
# ("AST constructor recursion depth mismatch")
cd "$WORK"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NO_PROXY=127.0.0.1 no_proxy=127.0.0.1
"$HELM_VENV/bin/helm-run" --conf-paths run_entries.conf --suite "$SUITE" --max-eval-instances 100 \
  --local-path prod_env --output-path benchmark_output -n 1 >"$WORK/helm-run.log" 2>&1 \
  || { tail -40 "$WORK/helm-run.log"; exit 1; }
"$HELM_VENV/bin/helm-summarize" --num-threads 1 --suite "$SUITE" --output-path benchmark_output --auto-generate-schema \
  >"$WORK/helm-summarize.log" 2>&1 || { tail -40 "$WORK/helm-summarize.log"; exit 1; }
# ... and as a release (releases/<release>/: runs_to_run_suites.json, schema.json, groups/), the public layout
"$HELM_VENV/bin/helm-summarize" --num-threads 1 --release "$SUITE-release" --suites "$SUITE" --output-path benchmark_output \
  --auto-generate-schema >"$WORK/helm-summarize-release.log" 2>&1 \
  || { tail -40 "$WORK/helm-summarize-release.log"; exit 1; }

step "copying the fixture to $OUT"
rm -rf "$OUT"
mkdir -p "$OUT/runs/$SUITE"
SRC=benchmark_output/runs/$SUITE
for run in "$SRC"/*/; do
  [ -f "$run/run_spec.json" ] || continue
  name=$(basename "$run")
  mkdir -p "$OUT/runs/$SUITE/$name"
  for f in run_spec.json stats.json per_instance_stats.json scenario_state.json; do
    cp "$run/$f" "$OUT/runs/$SUITE/$name/$f"
  done
done
mkdir -p "$OUT/runs/$SUITE/groups" "$OUT/releases/$SUITE-release/groups"
cp "$SRC"/groups/*.json "$OUT/runs/$SUITE/groups/"
cp "$SRC/schema.json" "$OUT/runs/$SUITE/schema.json"
REL=benchmark_output/releases/$SUITE-release
cp "$REL"/groups/*.json "$OUT/releases/$SUITE-release/groups/"
cp "$REL/schema.json" "$REL/runs_to_run_suites.json" "$OUT/releases/$SUITE-release/"
cp "$WORK"/yesno.yaml "$WORK"/summary.yaml "$OUT/"

step "a built-in MedHELM jury run (med_dialog) in crfm-helm 0.5.16's layout, from the real jury runs"
LAYOUT=$ROOT/tests/data/helm/medhelm_layout
rm -rf "$LAYOUT" benchmark_output/runs/layout
mkdir -p "$LAYOUT/runs/layout" benchmark_output/runs/layout
for run in $(grep -l LLMJuryMetric "$SRC"/*/run_spec.json | xargs -n1 dirname); do
  "$HELM_VENV/bin/python" "$ROOT/scripts/helm_fixtures/medhelm_jury_layout.py" "$run" benchmark_output/runs/layout
done
# helm-summarize on it too, with MedHELM's own schema (auto-generating one would load the summarization metrics,
# i.e. bert_score): its groups/*.json are what the MedHELM leaderboard would show for these runs
MEDHELM_SCHEMA=$("$HELM_VENV/bin/python" -c \
  'import helm, os; print(os.path.join(os.path.dirname(helm.__file__), "benchmark/static/schema_medhelm.yaml"))')
"$HELM_VENV/bin/helm-summarize" --num-threads 1 --suite layout --output-path benchmark_output --schema-path "$MEDHELM_SCHEMA" \
  >"$WORK/helm-summarize-layout.log" 2>&1 || { tail -20 "$WORK/helm-summarize-layout.log"; exit 1; }
for run in benchmark_output/runs/layout/*/; do
  [ -f "$run/run_spec.json" ] || continue
  mkdir -p "$LAYOUT/runs/layout/$(basename "$run")"
  cp "$run"/{run_spec,stats,per_instance_stats,scenario_state}.json "$LAYOUT/runs/layout/$(basename "$run")/"
done
mkdir -p "$LAYOUT/runs/layout/groups"
cp benchmark_output/runs/layout/groups/*.json "$LAYOUT/runs/layout/groups/"
cp benchmark_output/runs/layout/schema.json "$LAYOUT/runs/layout/schema.json"
"$HELM_VENV/bin/python" -c "import helm, importlib.metadata as m; print('crfm-helm', m.version('crfm-helm'))" >"$OUT/VERSION"
echo "done: $(find "$OUT" "$LAYOUT" -type f | wc -l) files in $OUT and $LAYOUT (work dir: $WORK)"
