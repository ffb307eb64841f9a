"""A full or read-only output folder (a real small tmpfs): one line naming it, whole records kept, resume later."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer

EXAMPLES = Path(__file__).parents[2] / "examples"
N = 300


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (needs root and mount rights: the CI machine has both; skipped elsewhere)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()[:200]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def benchmark(tmp_path: Path) -> Path:
    shutil.copy(EXAMPLES / "exact_match_demo" / "exact_match_demo_prompt.txt", tmp_path)
    with open(tmp_path / "data.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
        for i in range(N):
            w.writerow([f"{i:04d}", "Patient with hypertension. " * 20, "Hypertension?", "Yes", '["No"]'])
    cfg = tmp_path / "em.yaml"
    cfg.write_text("name: FULL-DISK\ndescription: d\nprompt_file: exact_match_demo_prompt.txt\n"
                   "dataset_file: data.csv\nmax_tokens: 1\nmetrics:\n  - name: exact_match\n")
    return cfg


def _run(cfg: Path, out: Path, local: Path, base_url: str) -> subprocess.CompletedProcess:
    (local / "model_deployments.yaml").write_text(
        f"model_deployments:\n  - name: mock/m\n    model_name: test/m\n    kind: openai\n    base_url: {base_url}\n"
        "    served_model_name: m\n    max_sequence_length: 4096\n")
    entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={cfg}"
    return subprocess.run([sys.executable, "-m", "medhelm", "run", "-q", "--run-entries", entry, "--suite", "s",
                           "-o", str(out), "--local-path", str(local), "--disable-cache"],
                          capture_output=True, text=True, timeout=300)


def _records(out: Path) -> list[str]:
    (run,) = (out / "runs" / "s").iterdir()
    return (run / "instances.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)


def test_a_full_disk_stops_with_one_line_keeps_whole_records_and_resumes(small_fs: Path, benchmark: Path,
                                                                         tmp_path: Path) -> None:
    out, local = small_fs / "out", tmp_path / "prod"
    local.mkdir()
    with MockOpenAIServer(responder=lambda body: "Yes") as srv:
        full = _run(benchmark, out, local, srv.base_url)
        assert full.returncode == 74, full.stderr[-800:]
        lines = full.stderr.strip().splitlines()
        assert len(lines) == 1 and str(out) in lines[0] and "no space left" in lines[0]
        kept = _records(out)
        assert 0 < len(kept) < N and all(line.endswith("\n") for line in kept)
        ids = [json.loads(line)["instance"]["id"] for line in kept]  # every kept line is a whole record
        subprocess.run(["mount", "-o", "remount,size=8m", str(small_fs)], check=True)  # space is back
        again = _run(benchmark, out, local, srv.base_url)
    assert again.returncode == 0, again.stderr[-800:]
    final = [json.loads(line)["instance"]["id"] for line in _records(out)]
    assert len(final) == N == len(set(final)) and set(ids) <= set(final)
    (run,) = (out / "runs" / "s").iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "complete"


def test_a_read_only_output_folder_is_one_line(small_fs: Path, benchmark: Path, tmp_path: Path) -> None:
    local = tmp_path / "prod"
    local.mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with MockOpenAIServer(responder=lambda body: "Yes") as srv:
        done = _run(benchmark, small_fs / "out", local, srv.base_url)
    assert done.returncode == 74, done.stderr[-800:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(small_fs / "out") in lines[0] and "read-only" in lines[0]


def test_a_full_request_cache_folder_is_one_line_naming_it(small_fs: Path, benchmark: Path, tmp_path: Path) -> None:
    """The request cache (SQLite, under --local-path) on the full disk: named the same way, exit 74."""
    local = small_fs / "prod"
    local.mkdir()
    with MockOpenAIServer(responder=lambda body: "Yes") as srv:
        (local / "model_deployments.yaml").write_text(
            f"model_deployments:\n  - name: mock/m\n    model_name: test/m\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: m\n    max_sequence_length: 4096\n")
        fs = os.statvfs(small_fs)
        (small_fs / "filler").write_bytes(b"\0" * max(0, fs.f_bavail * fs.f_frsize - 24 * 1024))  # 24 KiB left
        entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={benchmark}"
        done = subprocess.run([sys.executable, "-m", "medhelm", "run", "-q", "--run-entries", entry, "--suite", "s",
                               "-o", str(tmp_path / "out"), "--local-path", str(local)],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 74, done.stderr[-800:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(local / "cache") in lines[0], lines
