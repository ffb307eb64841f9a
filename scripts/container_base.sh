#!/usr/bin/env bash
# Make what `podman build` of the repository's Dockerfile needs on a machine without Docker Hub:
#   1. podman, buildah, runc, debootstrap (Debian packages; installed when missing and we are root),
#   2. podman settings this kind of VM needs (runc: crun refuses cgroups v1 hybrid; lower default ulimits,
#      the default raise is refused) in /etc/containers/containers.conf.d/medhelm.conf,
#   3. a Debian bookworm base image with Python 3.11 made by debootstrap and imported into podman as
#      $MEDHELM_BASE_IMAGE (default localhost/medhelm-base:bookworm). The root filesystem tarball is cached
#      under ~/.cache/medhelm-tools so later runs only re-import it (~5 s) or find the image (~0 s).
# Prints the base image's name on stdout as its last line; exits non-zero with a one-line reason otherwise.
# Use: bash scripts/build_images.sh (it calls this, then pins the image by its digest for the Dockerfile's
# BASE_IMAGE; the import's digest changes when the image is imported again, the pinned reference with it).
set -euo pipefail
IMAGE=${MEDHELM_BASE_IMAGE:-localhost/medhelm-base:bookworm}
CACHE=${MEDHELM_TOOLS_DIR:-$HOME/.cache/medhelm-tools}  # the one tools cache (scripts/_env.sh installs into it)
TARBALL=$CACHE/debian-bookworm-python3.tar
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { printf '%s\n' "$*" >&2; }

need=()
for tool in podman buildah runc debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages: ${need[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    say "missing ${need[*]} (install them with apt as root)"; exit 3
  fi
fi
export PATH=$PATH:/usr/sbin:/sbin

if [ "$(id -u)" = 0 ]; then
  conf=/etc/containers/containers.conf.d/medhelm.conf
  if [ ! -f "$conf" ]; then
    mkdir -p "$(dirname "$conf")"
    cat >"$conf" <<'EOF'
# Written by medhelm's scripts/container_base.sh: what podman needs on this kind of VM.
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=2048:2048"]

[engine]
runtime = "runc"
EOF
  fi
fi

if podman image exists "$IMAGE"; then
  echo "$IMAGE"; exit 0
fi
mkdir -p "$CACHE"
if [ ! -s "$TARBALL" ]; then
  [ "$(id -u)" = 0 ] || { say "debootstrap needs root to make the base image"; exit 3; }
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  say "making a Debian bookworm base image with debootstrap (~2 min, once)"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$MIRROR" \
      >"$CACHE/debootstrap.log" 2>&1; then
    say "debootstrap failed: $(tail -n 1 "$CACHE/debootstrap.log")"; exit 1
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -cf "$TARBALL.part" . && mv "$TARBALL.part" "$TARBALL"
fi
podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' "$TARBALL" "$IMAGE" >/dev/null
echo "$IMAGE"
