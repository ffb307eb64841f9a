# Shared by quickstart.sh and test.sh (sourced, not run).
VENV=${MEDHELM_VENV:-.venv}
step() { printf '\n==> %s\n' "$*" >&2; }

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating the virtual environment $VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip wheel
  fi
  "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "medhelm needs Python >= 3.11 (set PYTHON=python3.11)" >&2; exit 2; }
}

# pip, quietly; llama-cpp-python builds from source once (~8 min on 2 cores), then pip's wheel cache serves it.
# Quiet on success; the whole log on failure.
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

# Debian packages and the npm package some tests drive: PostgreSQL (store parity), Chromium + Playwright
# (the browser test of the dashboard), podman/buildah/runc/debootstrap (the image built and the chart's
# workloads played for real; scripts/container_base.sh then makes the base image once). Installed when
# missing and we are root; otherwise those tests skip with a reason.
ensure_system_packages() {
  local need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
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
  if command -v npm >/dev/null 2>&1 && [ ! -d "$tools/node_modules/playwright-core" ]; then
    step "installing playwright-core (npm) into $tools"
    mkdir -p "$tools" && npm install --silent --prefix "$tools" playwright-core >/dev/null
  fi
}
