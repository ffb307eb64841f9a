#!/usr/bin/env bash
# Regenerate the gRPC stubs from protos/: package medhelm.v1 (our services, protos/medhelm/v1/*.proto) and
# KServe's Open Inference Protocol v2 (package inference, protos/medhelm/oip/v2/*.proto, the kserve_v2
# client's gRPC transport).
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: services; tests pass a temp dir to compare bytes)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${1:-services}"
for dir in medhelm/v1 medhelm/oip/v2; do
  mkdir -p "$OUT/$dir"
  "$PYTHON" -m grpc_tools.protoc -Iprotos \
    --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" \
    protos/$dir/*.proto
done
