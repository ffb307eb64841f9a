#!/usr/bin/env bash
# Regenerate the gRPC stubs (package medhelm.v1) from protos/medhelm/v1/*.proto.
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: services; tests pass a temp dir to compare bytes)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${1:-services}"
mkdir -p "$OUT/medhelm/v1"
"$PYTHON" -m grpc_tools.protoc -Iprotos \
  --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" \
  protos/medhelm/v1/*.proto
