"""A loopback "cluster": the mock OpenAI server as the InferenceService, the three gRPC services and
three shard workers as separate processes on 127.0.0.1. The merged result equals a single-process
`medhelm run` of the same suite; a worker killed with SIGKILL mid-shard and re-run loses and
duplicates nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from medhelm.rundir import RunDir
from medhelm.v1 import metrics_pb2, metrics_pb2_grpc

from .conftest import write_qa_benchmark
from .responders import HOLD_ENV

HERE = Path(__file__).parent
ROWS, SHARDS = 24, 3
JURY_METRIC = ("  - name: jury_score\n    rubric: aci_bench\n    judges:\n"
               "      - {name: mock/judge, model_name: test/judge}\n")
VOLATILE_USAGE = ("latency_s", "cached", "attempts")  # wall-clock and cache state, not results


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "MEDHELM_OFFLINE": "1"}


@pytest.fixture
def mock_openai(tmp_path):
    """The mock in its own process on a port of its choosing (it prints it once listening). Requests whose
    prompt holds a line of ``tmp_path / "mock-hold"`` wait for ``mock-hold.release`` (responders.py)."""
    hold = tmp_path / "mock-hold"
    hold.write_text("")
    proc = subprocess.Popen([sys.executable, "-m", "medhelm.devtools.mock_openai", "--port", "0",
                             "--latency-ms", "40", "--responder", "responders:answer_holding"],
                            env={**_env(), HOLD_ENV: str(hold)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()  # blocks until it listens (or exits)
    assert "listening on http://127.0.0.1:" in line, proc.stderr.read()[-2000:] if proc.poll() is not None else line
    yield line.split("listening on ")[1].strip()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def _deployments(local: Path, base_url: str) -> None:
    local.mkdir(parents=True, exist_ok=True)
    (local / "model_deployments.yaml").write_text("model_deployments:\n" + "".join(
        f"  - name: mock/{n}\n    model_name: test/{n}\n    kind: openai\n    base_url: {base_url}\n"
        f"    served_model_name: {n}\n    max_sequence_length: 2048\n" for n in ("svc-model", "judge")))


def _medhelm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medhelm", *args], env=_env(), capture_output=True, text=True,
                          timeout=300)


def _run_dir(out: Path, suite: str) -> Path:
    (run,) = [p for p in (out / "runs" / suite).iterdir() if p.is_dir()]
    return run


def _records(run: Path) -> list[dict]:
    out = []
    for line in (run / "instances.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for key in VOLATILE_USAGE:
            rec["completion"]["usage"].pop(key)
        out.append(rec)
    return out


def _stats(run: Path) -> list[dict]:
    return [s for s in json.loads((run / "stats.json").read_text()) if s["name"]["name"] != "inference_runtime"]


def _worker(index: int, common: list[str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "medhelm", "job", *common, "--shard-index", str(index),
                             "--shard-count", str(SHARDS), *extra], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sharded_cluster_equals_single_process_and_survives_kill(tmp_path, mock_openai, start_service):
    cfg = write_qa_benchmark(tmp_path / "bench", ROWS)
    cfg.write_text(cfg.read_text() + JURY_METRIC)
    entry = f"medhelm_configurable_benchmark:model=mock/svc-model,config_path={cfg}"
    single_local, cluster_local = tmp_path / "single_env", tmp_path / "cluster_env"  # separate request caches
    _deployments(single_local, mock_openai)
    _deployments(cluster_local, mock_openai)
    out_single, out_cluster = tmp_path / "single", tmp_path / "pvc"

    done = _medhelm("run", "-r", entry, "--suite", "s", "-o", str(out_single), "--local-path", str(single_local), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    single = _run_dir(out_single, "s")
    assert len(_records(single)) == ROWS

    svc = {name: start_service(name, "--local-path", str(cluster_local), "--output-path", str(out_cluster),
                               "--offline", "--benchmark-root", str(tmp_path / "bench"), env=_env())
           for name in ("scenarios", "jury", "metrics")}
    common = ["-r", entry, "--suite", "s", "-o", str(out_cluster), "--local-path", str(cluster_local), "-q",
              "--max-concurrency", "1", "--benchmark-root", str(tmp_path / "bench"),  # shared with the services
              "--scenario-service", svc["scenarios"].address,
              "--jury-service", svc["jury"].address, "--metrics-service", svc["metrics"].address]

    # shards 0 and 2 finish; shard 1 is killed (SIGKILL) after two records: the mock holds the candidate
    # request of shard 1's third instance (one at a time there), so the kill lands there however slowly
    # this machine polls
    order = list(RunDir(single).iter_selection())
    third = [iid for pos, iid in enumerate(order) if pos % SHARDS == 1][2]
    [held] = [r for r in _records(single) if r["instance"]["id"] == third]
    (tmp_path / "mock-hold").write_text(held["prompt"]["messages"][-1]["content"].splitlines()[0] + "\n")
    workers = {i: _worker(i, common) for i in range(SHARDS)}
    shard_file = out_cluster / "runs" / "s"
    deadline = time.monotonic() + 300
    files: list[Path] = []
    try:
        while time.monotonic() < deadline and workers[1].poll() is None:
            files = list(shard_file.glob(f"*/shards/shard-00001-of-{SHARDS:05d}.jsonl"))
            if files and len(files[0].read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        workers[1].send_signal(signal.SIGKILL)
    finally:
        (tmp_path / "mock-hold.release").touch()
    for i in (0, 2):
        assert workers[i].wait(timeout=300) == 0, workers[i].stderr.read()[-3000:]
    workers[1].wait(timeout=60)
    written = len(files[0].read_text().splitlines())
    assert written == 2, "the kill must land mid-shard, at the held instance"

    partial = _medhelm("collect", "--suite", "s", "-o", str(out_cluster))
    assert partial.returncode == 2 and "re-run shard index 1" in partial.stdout, partial.stdout + partial.stderr

    rerun = _worker(1, common)
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read()[-3000:]
    collected = _medhelm("collect", "--suite", "s", "-o", str(out_cluster))
    assert collected.returncode == 0, collected.stdout + collected.stderr

    cluster = _run_dir(out_cluster, "s")
    assert cluster.name == single.name
    records = _records(cluster)
    assert [r["instance"]["id"] for r in records] == [r["instance"]["id"] for r in _records(single)]
    assert len({r["instance"]["id"] for r in records}) == ROWS  # nothing lost, nothing twice
    assert records == _records(single)
    assert _stats(cluster) == _stats(single)
    assert any(s["name"]["name"] == "jury_score" and s["count"] == ROWS for s in _stats(cluster))
    assert json.loads((cluster / "run.json").read_text())["status"] == "complete"

    # the scores really came from the services (their Prometheus counters), not from the workers
    import httpx

    def served(name: str, method: str) -> float:
        for line in httpx.get(svc[name].metrics_url, timeout=60).text.splitlines():
            if line.startswith("medhelm_rpc_requests_total{") and f'method="{method}"' in line and 'code="OK"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert served("jury", "JudgeOne") >= ROWS and served("metrics", "Score") >= ROWS
    assert served("scenarios", "StreamInstances") >= SHARDS + 1

    # the MetricsService reads the same suite off the shared volume
    with grpc.insecure_channel(svc["metrics"].address) as ch:
        suite = metrics_pb2_grpc.MetricsServiceStub(ch).AggregateSuite(metrics_pb2.AggregateSuiteRequest(suite="s"))
    assert [r.run for r in suite.runs] == [cluster.name] and suite.runs[0].instances == ROWS
    assert json.loads(suite.runs[0].stats_json) == json.loads((cluster / "stats.json").read_text())


@pytest.mark.slow
def test_shards_without_services_merge_to_the_same_run(tmp_path, mock_openai):
    cfg = write_qa_benchmark(tmp_path / "bench", 12)
    entry = f"medhelm_configurable_benchmark:model=mock/svc-model,config_path={cfg}"
    _deployments(tmp_path / "env", mock_openai)
    common = ["-r", entry, "--suite", "x", "-o", str(tmp_path / "out"), "--local-path", str(tmp_path / "env"), "-q"]
    done = _medhelm("run", "-r", entry, "--suite", "one", "-o", str(tmp_path / "out"),
                    "--local-path", str(tmp_path / "env"), "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    workers = [_worker(i, common) for i in range(SHARDS)]
    assert [w.wait(timeout=120) for w in workers] == [0] * SHARDS
    assert _medhelm("collect", "--suite", "x", "-o", str(tmp_path / "out")).returncode == 0
    one, x = _run_dir(tmp_path / "out", "one"), _run_dir(tmp_path / "out", "x")
    assert _records(x) == _records(one)  # second run hits the cache: only latency/cached differ
    assert _stats(x) == _stats(one)
