"""The checked-in stubs are exactly what scripts/gen_protos.sh makes from the protos."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
from pathlib import Path

PROTOS = ("common", "scenarios", "jury", "metrics")
STUB_DIRS = {"v1": 3 * len(PROTOS), "oip/v2": 3}  # under medhelm/: our services; KServe's Open Inference Protocol
_VERSION_LINE = re.compile(r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*|    \d+,)$", re.M)


def test_stubs_match_protos(repo_root: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": str(Path(os.sys.executable))}
    subprocess.run(["bash", str(repo_root / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True, env=env)
    tools = importlib.metadata.version("grpcio-tools")
    stamped = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'",
                        (repo_root / "services" / "medhelm" / "v1" / "jury_pb2_grpc.py").read_text()).group(1)
    for sub, count in STUB_DIRS.items():
        fresh_dir, checked_dir = tmp_path / "medhelm" / sub, repo_root / "services" / "medhelm" / sub
        fresh = sorted(p.name for p in fresh_dir.iterdir())
        checked_in = sorted(p.name for p in checked_dir.iterdir()
                            if p.name != "__init__.py" and p.suffix in (".py", ".pyi"))
        assert fresh == checked_in and len(fresh) == count
        for name in fresh:
            new, old = (fresh_dir / name).read_text(), (checked_dir / name).read_text()
            if tools == stamped:  # the generator that made the stubs: byte for byte
                assert new == old, f"{sub}/{name} is stale: run scripts/gen_protos.sh"
            else:  # another grpcio-tools release stamps other version numbers; everything else must match
                assert _VERSION_LINE.sub("", new) == _VERSION_LINE.sub("", old), \
                    f"{sub}/{name} is stale: run scripts/gen_protos.sh"


def test_protos_are_versioned(repo_root: Path) -> None:
    for name in PROTOS:
        text = (repo_root / "protos" / "medhelm" / "v1" / f"{name}.proto").read_text()
        assert 'syntax = "proto3";' in text and "package medhelm.v1;" in text


def test_oip_proto_is_kserves_wire_contract(repo_root: Path) -> None:
    """Service and message names are the protocol's (package inference), and the source and license are cited."""
    from medhelm.oip.v2 import grpc_predict_v2_pb2 as pb

    text = (repo_root / "protos" / "medhelm" / "oip" / "v2" / "grpc_predict_v2.proto").read_text()
    assert "package inference;" in text and "Apache License 2.0" in text and "kserve/kserve" in text
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    assert {m.name for m in service.methods} >= {"ServerLive", "ServerReady", "ModelReady", "ModelInfer"}
    fields = pb.ModelInferRequest.DESCRIPTOR.fields_by_name
    assert (fields["model_name"].number, fields["inputs"].number, fields["raw_input_contents"].number) == (1, 5, 7)
    assert pb.InferTensorContents.DESCRIPTOR.fields_by_name["bytes_contents"].number == 8
