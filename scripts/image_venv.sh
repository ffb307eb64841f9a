#!/bin/sh
# The steps of the Dockerfile's build stages that both images share (run inside the build, never on a host):
#   image_venv.sh deps EXTRAS              the venv /opt/medhelm with the base install and EXTRAS (a,b,...),
#                                          resolved from pyproject.toml; run again, it adds EXTRAS to it
#   image_venv.sh finish FLAVOR BASE_IMAGE the package itself (no deps), `pip check`, pip removed, bytecode,
#                                          then the CycloneDX SBOM of the result at /out/sbom.cdx.json
# The package index's CA, when given, is the build secret pip_ca (never a layer). Any failure fails the build.
set -eu
if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi
VENV=/opt/medhelm
case "$1" in
deps)
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  python3 -c 'import sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = [e for e in sys.argv[1].split(",") if e]
unknown = [e for e in extras if e not in p["optional-dependencies"]]
if unknown:
    sys.exit(f"image_venv.sh: unknown extra(s) {unknown} (pyproject.toml [project.optional-dependencies])")
print("\n".join(p["dependencies"] + [d for e in extras for d in p["optional-dependencies"][e]]))' "$2" \
    >/tmp/requirements.txt
  "$VENV/bin/python" -m pip install --no-compile -r /tmp/requirements.txt
  rm -f /tmp/requirements.txt
  ;;
finish)
  flavor=$2 base=$3
  cd /src
  "$VENV/bin/python" -m pip install --no-compile --no-deps .
  "$VENV/bin/python" -m pip check
  "$VENV/bin/python" -m pip uninstall --yes pip
  "$VENV/bin/python" -m compileall -q "$VENV/lib"
  mkdir -p /out
  # --output-reproducible: no timestamp, no random serial number: the same venv gives the same SBOM
  /opt/sbom/bin/cyclonedx-py environment --spec-version 1.6 --output-reproducible --mc-type application \
    --pyproject pyproject.toml --output-file /out/python.cdx.json "$VENV/bin/python"
  /opt/sbom/bin/python scripts/image_sbom.py /out/python.cdx.json --flavor "$flavor" --base-image "$base" \
    --output /out/sbom.cdx.json
  rm -rf /src /out/python.cdx.json
  ;;
*)
  echo "usage: image_venv.sh deps EXTRAS | finish FLAVOR BASE_IMAGE" >&2; exit 2 ;;
esac
