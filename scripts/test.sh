#!/usr/bin/env bash
# One command for a developer (and CI): install everything the tests need, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_venv
step "installing medhelm with every extra the tests exercise"
start_llama_build  # the same install path as quickstart.sh: llama.cpp compiles while the rest installs
# The CPU build of torch first, so bert-score does not pull a multi-GB CUDA build.
pip_install "torch==2.13.0"
pip_install -e ".[bertscore,dashboard,data,k8s,postgres,test]"
finish_llama_build
ensure_system_packages
# The real engines (vLLM, KServe) for the `engines` tests live in their own venvs (scripts/engines.sh,
# cached in ~/.cache/medhelm-engines). On a full run they are built in the background while the other
# tests run; the engines tests (ordered last) wait for that build through its lock.
if [ $# -eq 0 ] && [ "${MEDHELM_ENGINES:-1}" != 0 ]; then
  step "building the real engines in the background (log: ${TMPDIR:-/tmp}/medhelm-engines-build.log)"
  nohup bash scripts/engines.sh build >"${TMPDIR:-/tmp}/medhelm-engines-build.log" 2>&1 &
fi
step "running the test suite"
# --durations: every run lists its slowest tests, so CI shows where its time goes (a later --durations wins).
# A full run goes on pytest-xdist workers: much of the suite waits on subprocesses, servers and browsers, so two
# workers finish sooner even on 2 cores; tests/conftest.py keeps podman's tests on one worker and the engines'
# on one (--dist loadgroup), each other file on one, handed out in the order tests/conftest.py sets. MEDHELM_TEST_WORKERS=N sets the number (0: in-process).
workers=()
if [ $# -eq 0 ]; then
  cores=$(nproc)
  n=${MEDHELM_TEST_WORKERS:-$(( cores < 2 ? 2 : (cores > 4 ? 4 : cores) ))}
  [ "$n" = 0 ] || workers=(-n "$n" --dist loadgroup --no-loadscope-reorder)
fi
exec "$VENV/bin/python" -m pytest --durations=25 "${workers[@]}" "$@"
