"""Core fixtures: a small configurable benchmark on disk and deployments pointing at the mock server."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer


def write_benchmark(folder: Path, rows: int, *, name: str = "YESNO", metrics: str = "  - name: exact_match\n",
                    prompt: str = "Note: {note}\nQuestion: {question}\nAnswer Yes or No.") -> Path:
    """A yes/no configurable benchmark in the seeds' format; row i's answer is Yes iff i % 3 == 0."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prompt.txt").write_text(prompt)
    with open(folder / "dataset.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
        for i in range(rows):
            ans = "Yes" if i % 3 == 0 else "No"
            w.writerow([f"{i:04d}", f"Synthetic note {i}: BP {110 + i} mmHg.", f"Is item {i} flagged?", ans,
                        json.dumps(["No" if ans == "Yes" else "Yes"])])
    cfg = folder / "bench.yaml"
    cfg.write_text(f"name: {name}\ndescription: test benchmark\nprompt_file: prompt.txt\n"
                   f"dataset_file: dataset.csv\nmax_tokens: 2\nmetrics:\n{metrics}")
    return cfg


def yes_responder(body: dict) -> str:
    return "Yes"


def write_deployment(local_path: Path, base_url: str, name: str = "mock/yes-model") -> str:
    local_path.mkdir(parents=True, exist_ok=True)
    (local_path / "model_deployments.yaml").write_text(
        "model_deployments:\n"
        f"  - name: {name}\n    model_name: test/yes-model\n    kind: openai\n    base_url: {base_url}\n"
        "    served_model_name: yes-model\n    max_sequence_length: 4096\n")
    return name


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
