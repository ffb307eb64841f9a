"""The checked-in stubs are exactly what scripts/gen_protos.sh makes from the protos."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
from pathlib import Path

PROTOS = ("common", "scenarios", "jury", "metrics")
_VERSION_LINE = re.compile(r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*|    \d+,)$", re.M)


def test_stubs_match_protos(repo_root: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": str(Path(os.sys.executable))}
    subprocess.run(["bash", str(repo_root / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True, env=env)
    fresh = sorted(p.name for p in (tmp_path / "medhelm" / "v1").iterdir())
    checked_in = sorted(p.name for p in (repo_root / "services" / "medhelm" / "v1").iterdir()
                        if p.name != "__init__.py" and p.suffix in (".py", ".pyi"))
    assert fresh == checked_in and len(fresh) == 3 * len(PROTOS)
    tools = importlib.metadata.version("grpcio-tools")
    stamped = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'",
                        (repo_root / "services" / "medhelm" / "v1" / "jury_pb2_grpc.py").read_text()).group(1)
    for name in fresh:
        new = (tmp_path / "medhelm" / "v1" / name).read_text()
        old = (repo_root / "services" / "medhelm" / "v1" / name).read_text()
        if tools == stamped:  # the generator that made the stubs: byte for byte
            assert new == old, f"{name} is stale: run scripts/gen_protos.sh"
        else:  # another grpcio-tools release stamps other version numbers; everything else must match
            assert _VERSION_LINE.sub("", new) == _VERSION_LINE.sub("", old), f"{name} is stale: run scripts/gen_protos.sh"

def test_protos_are_versioned(repo_root: Path) -> None:
    for name in PROTOS:
        text = (repo_root / "protos" / "medhelm" / "v1" / f"{name}.proto").read_text()
        assert 'syntax = "proto3";' in text and "package medhelm.v1;" in text
