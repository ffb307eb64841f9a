#!/usr/bin/env bash
# Build MedHELM's two images from the Dockerfile, the base pinned by its content digest, and store each image's
# CycloneDX SBOM next to it:
#   the service image   (--target service:   gRPC services, Job, collect/summarize; no dashboard stack)
#   the dashboard image (--target dashboard: the leaderboard)
#
#   bash scripts/build_images.sh                 # both, on the Debian base scripts/container_base.sh makes
#   BASE_IMAGE=registry.hospital.internal/python@sha256:<digest> bash scripts/build_images.sh
#
# Environment (all optional):
#   BASE_IMAGE               the base: <name>@sha256:<digest> is used as it is; <name>:<tag> is pulled if missing
#                            and pinned to the digest it has now. Default: scripts/container_base.sh's image.
#   MEDHELM_IMAGE_SERVICE    default localhost/medhelm-k8s:0.2.0
#   MEDHELM_IMAGE_DASHBOARD  default localhost/medhelm-k8s-dashboard:0.2.0
#   MEDHELM_IMAGES           which to build: "service dashboard" (default), or one of them
#   MEDHELM_IMAGE_OUT        where the SBOMs and the build record go (default dist/images)
#   EXTRAS                   the service venv's extras (default postgres; e.g. postgres,bertscore)
#   MEDHELM_PIP_INDEX_URL, MEDHELM_PIP_CA   a package mirror and its CA bundle (a build secret, never a layer)
#   MEDHELM_BUILD_NICE       niceness of the build (default 5)
# Writes <out>/<image name>_<tag>.cdx.json per image and <out>/images.json, the build record: the base's
# digest-pinned reference, and per image its reference, id, local digest, size and SBOM file. Prints the
# record's path as its last line. Any failure exits non-zero with a one-line reason.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '%s\n' "$*" >&2; }
fail() { say "build_images: $*"; exit 1; }
SERVICE=${MEDHELM_IMAGE_SERVICE:-localhost/medhelm-k8s:0.2.0}
DASHBOARD=${MEDHELM_IMAGE_DASHBOARD:-localhost/medhelm-k8s-dashboard:0.2.0}
IMAGES=${MEDHELM_IMAGES:-service dashboard}
OUT=${MEDHELM_IMAGE_OUT:-dist/images}
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

# 1. the base, pinned by digest
base=${BASE_IMAGE:-}
if [ -z "$base" ]; then
  base=$(bash scripts/container_base.sh | tail -n 1)
fi
if [[ "$base" != *@sha256:* ]]; then
  podman image exists "$base" || podman pull --quiet "$base" >/dev/null || fail "cannot pull the base $base"
  digest=$(podman image inspect --format '{{.Digest}}' "$base")
  [[ "$digest" == sha256:* ]] || fail "the base $base has no content digest"
  name=$base
  [[ "${name##*/}" == *:* ]] && name=${name%:*}  # drop the tag (not a registry's :port)
  base="$name@$digest"
fi
[[ "$base" =~ @sha256:[0-9a-f]{64}$ ]] || fail "BASE_IMAGE must end in @sha256:<64 hex digits>, got $base"
podman image exists "$base" || podman pull --quiet "$base" >/dev/null || fail "cannot pull the base $base"
say "base pinned: $base"

# 2. the images (the service first: the dashboard's build reuses its dependency layers), with the commit they are
#    built from (MEDHELM_CODE_COMMIT in the image: a report made in it names the code; marked when the checkout
#    has local changes, which the build context copies in)
commit=$(git rev-parse HEAD 2>/dev/null || true)
if [ -n "$commit" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit (source checkout with local changes)"
fi
[ -n "$commit" ] || say "not a git checkout: the images record no code commit"
args=(--build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$VERSION" --build-arg "MEDHELM_CODE_COMMIT=$commit"
      --label "org.opencontainers.image.base.name=${base%@*}"
      --label "org.opencontainers.image.base.digest=${base#*@}")
[ -n "${EXTRAS:-}" ] && args+=(--build-arg "EXTRAS=$EXTRAS")
[ -n "${MEDHELM_PIP_INDEX_URL:-}" ] && args+=(--build-arg "PIP_INDEX_URL=$MEDHELM_PIP_INDEX_URL")
ca=${MEDHELM_PIP_CA:-${PIP_CERT:-}}
[ -z "$ca" ] && [ -f /etc/ssl/certs/ca-certificates.crt ] && ca=/etc/ssl/certs/ca-certificates.crt
[ -n "$ca" ] && args+=(--secret "id=pip_ca,src=$ca")
mkdir -p "$OUT"
built=()
for flavor in $IMAGES; do
  case "$flavor" in
    service) tag=$SERVICE ;;
    dashboard) tag=$DASHBOARD ;;
    *) fail "MEDHELM_IMAGES: unknown image '$flavor' (service, dashboard)" ;;
  esac
  say "building the $flavor image $tag"
  log="$OUT/build-$flavor.log"
  if ! nice -n "${MEDHELM_BUILD_NICE:-5}" podman build --target "$flavor" "${args[@]}" -t "$tag" . >"$log" 2>&1; then
    fail "podman build of the $flavor image failed: $(grep -v '^\s*$' "$log" | tail -n 1) (log: $log)"
  fi
  # 3. its SBOM (made inside the build, from the image's own venv and dpkg status) stored next to it
  repo=${tag%:*}; [[ "${tag##*/}" == *:* ]] || repo=$tag
  sbom="$OUT/${repo##*/}_${tag##*:}.cdx.json"
  path=$(podman image inspect --format '{{index .Config.Labels "io.medhelm.sbom"}}' "$tag")
  podman run --rm --entrypoint cat "$tag" "$path" >"$sbom.part" || fail "cannot read $path from $tag"
  mv "$sbom.part" "$sbom"
  built+=("$flavor=$tag=$sbom")
done

# 4. the build record
python3 - "$OUT/images.json" "$base" "${built[@]}" <<'EOF'
import json, os, subprocess, sys
record_path, base, built = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    with open(record_path) as f:
        record = json.load(f)
except (OSError, ValueError):
    record = {}
record.setdefault("images", {})
for item in built:
    flavor, tag, sbom = item.split("=", 2)
    facts = json.loads(subprocess.run(["podman", "image", "inspect", tag], capture_output=True, text=True,
                                      check=True).stdout)[0]
    record["images"][flavor] = {"reference": tag, "id": facts["Id"], "digest": facts.get("Digest", ""),
                                "size_bytes": facts["Size"], "base_image": base,
                                "code_commit": (facts.get("Labels") or {}).get("org.opencontainers.image.revision", ""),
                                "sbom": os.path.basename(sbom)}
record["base_image"] = base
with open(record_path + ".part", "w") as f:
    json.dump(record, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(record_path + ".part", record_path)
EOF
echo "$OUT/images.json"
