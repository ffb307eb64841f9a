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
