#!/usr/bin/env bash
# One command for a developer (and CI): install everything the tests need, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_venv
step "installing medhelm with every extra the tests exercise"
# The CPU build of torch first, so bert-score does not pull a multi-GB CUDA build.
pip_install "torch==2.13.0"
pip_install -e ".[embedded,bertscore,dashboard,data,k8s,postgres,test]"
ensure_system_packages
step "running the test suite"
exec "$VENV/bin/python" -m pytest "$@"
