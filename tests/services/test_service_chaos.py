"""Chaos on the loopback "cluster" (test_job_loopback.py's): while three shards run, ten rounds each kill
(SIGKILL) the jury or the metrics service - started again at once, reached through a stable front as a
Kubernetes Service keeps its name - and every other round also kills a running shard, which is run again
as its Job would. Every shard index ends with exit 0, and the merged run equals a single-process run:
0 records lost, 0 duplicated. Rounds are triggered by progress (records written), never by time."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from .conftest import Service, write_qa_benchmark
from .tcp_front import Front
from .test_job_loopback import (JURY_METRIC, _deployments, _env, _medhelm, _records, _run_dir, _stats,  # noqa: F401
                                mock_openai)

ROWS, SHARDS, ROUNDS = 60, 3, 10


def _shard(index: int, common: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "medhelm", "job", *common, "--shard-index", str(index),
                             "--shard-count", str(SHARDS)], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_ten_rounds_of_service_and_shard_kills_lose_and_duplicate_nothing(tmp_path, mock_openai):
    cfg = write_qa_benchmark(tmp_path / "bench", ROWS)
    cfg.write_text(cfg.read_text() + JURY_METRIC)
    entry = f"medhelm_configurable_benchmark:model=mock/svc-model,config_path={cfg}"
    single_local, cluster_local = tmp_path / "single_env", tmp_path / "cluster_env"
    _deployments(single_local, mock_openai)
    _deployments(cluster_local, mock_openai)
    out_single, out_cluster = tmp_path / "single", tmp_path / "pvc"
    done = _medhelm("run", "-r", entry, "--suite", "c", "-o", str(out_single), "--local-path", str(single_local), "-q")
    assert done.returncode == 0, done.stderr[-3000:]

    service_args = ["--local-path", str(cluster_local), "--output-path", str(out_cluster), "--offline",
                    "--benchmark-root", str(tmp_path / "bench")]
    services = {name: Service(name, *service_args, env=_env()) for name in ("scenarios", "jury", "metrics")}
    fronts = {name: Front(services[name].address) for name in ("jury", "metrics")}
    common = ["-r", entry, "--suite", "c", "-o", str(out_cluster), "--local-path", str(cluster_local), "-q",
              "--max-concurrency", "2", "--benchmark-root", str(tmp_path / "bench"),
              "--scenario-service", services["scenarios"].address,
              "--jury-service", fronts["jury"].address, "--metrics-service", fronts["metrics"].address]
    shards = {i: _shard(i, common) for i in range(SHARDS)}
    reruns = 0
    try:
        def written() -> int:
            return sum(len(p.read_text().splitlines())
                       for p in (out_cluster / "runs" / "c").glob(f"*/shards/shard-*-of-{SHARDS:05d}.jsonl"))

        deadline = time.monotonic() + 900  # a safety net only: rounds are triggered by progress
        for round_ in range(ROUNDS):
            while written() < (round_ + 1) * ROWS // (ROUNDS + 2) and time.monotonic() < deadline:
                time.sleep(0.02)
            name = ("jury", "metrics")[round_ % 2]
            services[name].proc.send_signal(signal.SIGKILL)  # no drain: calls in flight are cut
            services[name].stop()
            services[name] = Service(name, *service_args, env=_env())
            fronts[name].backend = services[name].address
            if round_ % 2:  # and a shard: its Job runs the index again, which resumes from its records
                index = round_ % SHARDS
                if shards[index].poll() is None:
                    shards[index].send_signal(signal.SIGKILL)
                    shards[index].wait(timeout=30)
                    shards[index].stderr.close()
                    shards[index] = _shard(index, common)
                    reruns += 1
        for index, proc in shards.items():
            code = proc.wait(timeout=600)
            assert code == 0, (index, proc.stderr.read()[-3000:])
    finally:
        for proc in shards.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for front in fronts.values():
            front.close()
        for svc in services.values():
            svc.stop()
    assert reruns >= 1, "at least one shard must have been killed mid-run"
    collected = _medhelm("collect", "--suite", "c", "-o", str(out_cluster))
    assert collected.returncode == 0, collected.stdout + collected.stderr
    cluster, single = _run_dir(out_cluster, "c"), _run_dir(out_single, "c")
    records = _records(cluster)
    assert len(records) == ROWS and len({r["instance"]["id"] for r in records}) == ROWS  # 0 lost, 0 twice
    assert records == _records(single) and _stats(cluster) == _stats(single)
