"""Complete an image's CycloneDX SBOM inside its build (Dockerfile, scripts/image_venv.sh): the Python
environment's SBOM that `cyclonedx-py environment` wrote gains the Debian packages of the base image (from dpkg's
status file) and which image and base it describes; the result is validated against the CycloneDX JSON schema
before it is written.

Runs with the SBOM tool's own interpreter (cyclonedx-bom's venv: cyclonedx-python-lib validates, packageurl
spells the purls). cyclonedx-py has no reader for dpkg, so the Debian part is ours: one component per installed
package, ``pkg:deb/<os id>/<name>@<version>?arch=<arch>&distro=<os id>-<version id>`` (the purl spec's deb type).
Failure semantics: any unreadable input or a document the schema refuses exits non-zero with a one-line reason
and writes nothing (the build fails); the output is written to a temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL


def os_release(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value.strip().strip('"')
    return out


def dpkg_installed(status: Path) -> list[dict[str, str]]:
    """The packages dpkg's status file says are installed (deb822 paragraphs; continuation lines skipped)."""
    packages = []
    for paragraph in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line and not line[0].isspace():
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            packages.append(fields)
    return packages


def debian_components(status: Path, release: dict[str, str]) -> list[dict]:
    distro = release.get("ID", "debian")
    components = []
    for pkg in sorted(dpkg_installed(status), key=lambda p: p["Package"]):
        purl = PackageURL(type="deb", namespace=distro, name=pkg["Package"], version=pkg["Version"],
                          qualifiers={"arch": pkg.get("Architecture", "all"),
                                      "distro": f"{distro}-{release.get('VERSION_ID', '')}"}).to_string()
        component = {"type": "library", "bom-ref": purl, "name": pkg["Package"], "version": pkg["Version"],
                     "purl": purl}
        if pkg.get("Source"):  # "src" or "src (version)": the source package Debian builds it from
            component["properties"] = [{"name": "deb:source", "value": pkg["Source"].split()[0]}]
        components.append(component)
    return components


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("python_sbom", type=Path, help="what `cyclonedx-py environment` wrote (JSON)")
    p.add_argument("--flavor", required=True, choices=("service", "dashboard"))
    p.add_argument("--base-image", required=True, help="the base image reference (<name>@sha256:<digest>)")
    p.add_argument("--dpkg-status", type=Path, default=Path("/var/lib/dpkg/status"))
    p.add_argument("--os-release", type=Path, default=Path("/etc/os-release"))
    p.add_argument("--output", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        bom = json.loads(args.python_sbom.read_text())
        debs = debian_components(args.dpkg_status, os_release(args.os_release))
    except (OSError, ValueError) as err:
        print(f"image_sbom: {err}", file=sys.stderr)
        return 1
    if not debs:
        print(f"image_sbom: {args.dpkg_status}: no installed Debian package found", file=sys.stderr)
        return 1
    bom["components"] = bom.get("components", []) + debs
    bom["dependencies"] = bom.get("dependencies", []) + [{"ref": c["bom-ref"]} for c in debs]
    image = "medhelm-k8s" if args.flavor == "service" else "medhelm-k8s-dashboard"
    bom["metadata"].setdefault("properties", []).extend([
        {"name": "medhelm:image", "value": image},
        {"name": "medhelm:base-image", "value": args.base_image},
    ])
    text = json.dumps(bom, indent=2, sort_keys=True) + "\n"
    error = JsonStrictValidator(SchemaVersion.from_version(bom["specVersion"])).validate_str(text)
    if error is not None:
        print(f"image_sbom: the SBOM does not match the CycloneDX {bom['specVersion']} schema: "
              f"{str(error).splitlines()[0][:300]}", file=sys.stderr)
        return 1
    tmp = args.output.with_name(args.output.name + ".part")
    tmp.write_text(text)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
