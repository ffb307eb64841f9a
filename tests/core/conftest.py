"""Core fixtures: a small configurable benchmark on disk and deployments pointing at the mock server."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark, write_openai_deployment
from medhelm.devtools.mock_openai import MockOpenAIServer


def generate_once(dep, text: str = "Say hi", max_tokens: int = 4):
    """One request through the deployment's own client (its kind's, as a run makes it), then closed."""
    import asyncio

    from medhelm.inference import make_client
    from medhelm.specs import GenerationRequest, Message

    async def go():
        client = make_client(dep)
        try:
            return await client.generate(GenerationRequest((Message("user", text),), max_tokens=max_tokens))
        finally:
            await client.aclose()

    return asyncio.run(go())


def write_benchmark(folder: Path, rows: int) -> Path:
    """A yes/no configurable benchmark in the seeds' format; row i's answer is Yes iff i % 3 == 0."""
    return write_configurable_benchmark(folder, rows, name="YESNO", answers=("Yes", "No", "No"))


def yes_responder(body: dict) -> str:
    return "Yes"


def write_deployment(local_path: Path, base_url: str, name: str = "mock/yes-model") -> str:
    return write_openai_deployment(local_path, base_url, name=name, model_name="test/yes-model")


@pytest.fixture
def mock_server():
    with MockOpenAIServer(responder=yes_responder) as srv:
        yield srv


@pytest.fixture
def workspace(tmp_path, mock_server):
    """A benchmark of 30 rows, a prod_env pointing at the mock server, and an output dir."""
    cfg = write_benchmark(tmp_path / "bench", 30)
    write_deployment(tmp_path / "prod_env", mock_server.base_url)
    return {"config": cfg, "local": tmp_path / "prod_env", "out": tmp_path / "out", "server": mock_server,
            "entry": f"medhelm_configurable_benchmark:model=mock/yes-model,config_path={cfg}"}
