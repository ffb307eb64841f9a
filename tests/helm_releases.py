"""Upstream HELM's own prod_env files, from the crfm-helm wheels on PyPI, for tests that must read the real thing.

``release(version)`` -> a folder holding that release's ``helm/config/{model_deployments,model_metadata,
tokenizer_configs}.yaml`` and ``helm/clients/*.py`` (the oracle for what each client class sends), unchanged.
Fetched once with ``pip download --no-deps crfm-helm==<version>`` into the tools cache (``MEDHELM_TOOLS_DIR``,
default ``~/.cache/medhelm-tools``, as the services tests keep their PyPI tools) and read from there after:
offline, a release not yet fetched is a skip naming the command that fetches it, never a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# two or more releases: the file grew from 488 to 609 deployments between them, with duplicates and new classes
VERSIONS = ("0.5.6", "0.5.10", "0.5.16")
TOOLS = Path(os.environ.get("MEDHELM_TOOLS_DIR", Path.home() / ".cache" / "medhelm-tools"))
_KEEP = ("helm/config/", "helm/clients/")


def release(version: str) -> Path:
    folder = TOOLS / "crfm-helm" / version
    if (folder / "helm" / "config" / "model_deployments.yaml").is_file():
        return folder
    wheels = TOOLS / "crfm-helm" / "wheels"
    wheel = wheels / f"crfm_helm-{version}-py3-none-any.whl"
    if not wheel.is_file():
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               "--disable-pip-version-check", "-d", str(wheels), f"crfm-helm=={version}"],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not wheel.is_file():
            pytest.skip(f"crfm-helm {version} is not in {wheels} and PyPI cannot be reached "
                        f"(fetch it once: pip download --no-deps -d {wheels} crfm-helm=={version})")
    tmp = folder.with_name(f"{version}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp, [n for n in z.namelist() if n.startswith(_KEEP)])
    try:
        os.replace(tmp, folder)
    except OSError:  # another worker extracted it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
