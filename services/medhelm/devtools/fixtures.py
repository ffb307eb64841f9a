"""Synthetic inputs for tests and benchmarks: a configurable benchmark in the seeds' format and a
``prod_env`` deployment pointing at an OpenAI-compatible server (usually ``mock_openai``). No patient data."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path


def write_configurable_benchmark(folder: Path, rows: int, *, name: str = "YESNO",
                                 answers: Sequence[str] = ("Yes", "No", "No"),
                                 metrics: Sequence[str] = ("exact_match",), max_tokens: int = 2,
                                 prompt: str = "Note: {note}\nQuestion: {question}\nAnswer Yes or No.") -> Path:
    """``bench.yaml`` + ``prompt.txt`` + ``dataset.csv``; row i's answer is ``answers[i % len(answers)]``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prompt.txt").write_text(prompt)
    with open(folder / "dataset.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
        for i in range(rows):
            answer = answers[i % len(answers)]
            w.writerow([f"{i:04d}", f"Synthetic note {i}: BP {110 + i} mmHg, creatinine {0.5 + i / 10:.1f}.",
                        f"Is item {i} flagged?", answer, json.dumps([a for a in ("Yes", "No") if a != answer])])
    cfg = folder / "bench.yaml"
    cfg.write_text(f"name: {name}\ndescription: synthetic benchmark\nprompt_file: prompt.txt\n"
                   f"dataset_file: dataset.csv\nmax_tokens: {max_tokens}\nmetrics:\n"
                   + "".join(f"  - name: {m}\n" for m in metrics))
    return cfg


def write_openai_deployment(local_path: Path, base_url: str, *, name: str, model_name: str,
                            max_sequence_length: int = 4096) -> str:
    """``<local_path>/model_deployments.yaml`` with one OpenAI-compatible deployment; returns its name."""
    local_path.mkdir(parents=True, exist_ok=True)
    (local_path / "model_deployments.yaml").write_text(
        f"model_deployments:\n  - name: {name}\n    model_name: {model_name}\n    kind: openai\n"
        f"    base_url: {base_url}\n    served_model_name: {model_name.split('/')[-1]}\n"
        f"    max_sequence_length: {max_sequence_length}\n")
    return name
