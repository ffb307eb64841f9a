"""`medhelm serve jury` plus the scenarios and metrics services on loopback, with a real vLLM judge
behind the jury service: a `medhelm job` worker evaluates a configurable benchmark through the three
services, the judge's json_schema request is honoured by vLLM, and the scores come from the service."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.engines.conftest import records, vllm_deployment, write_deployments

pytestmark = [pytest.mark.engines, pytest.mark.slow]

ROWS = 4
JURY = ("  - name: jury_score\n    rubric: aci_bench\n    max_tokens: 200\n    structured_output: true\n"
        "    judges:\n      - {name: vllm/judge, model_name: huggingface/smollm2-135m-instruct}\n")


class Service:
    """A `medhelm serve <name>` child process on 127.0.0.1 with free ports (as in tests/services)."""

    def __init__(self, name: str, *args: str, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "medhelm", "serve", name, "--port", "0",
                                      "--metrics-port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"service {name} did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        words = line.split()
        self.address = words[words.index("on") + 1]
        self.metrics_url = next(w for w in words if w.startswith("http://"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()


def _served(svc: Service, method: str) -> float:
    for line in httpx.get(svc.metrics_url, timeout=60).text.splitlines():
        if line.startswith("medhelm_rpc_requests_total{") and f'method="{method}"' in line and 'code="OK"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_job_through_scenarios_jury_and_metrics_services_with_a_vllm_judge(vllm, tmp_path):
    cfg = write_configurable_benchmark(tmp_path / "bench", ROWS, name="QA_VLLM", max_tokens=16,
                                       metrics=("exact_match",),
                                       prompt="Record: {note}\nQuestion: {question}\nAnswer briefly.")
    cfg.write_text(cfg.read_text() + JURY)
    local, out = tmp_path / "env", tmp_path / "pvc"
    write_deployments(local, [vllm_deployment(vllm), vllm_deployment(vllm, name="vllm/judge")])
    env = {**os.environ, "MEDHELM_OFFLINE": "1"}
    services = {}
    try:
        for name in ("scenarios", "jury", "metrics"):
            services[name] = Service(name, "--local-path", str(local), "--output-path", str(out), "--offline",
                                     "--benchmark-root", str(cfg.parent), env=env)  # services own their paths
        entry = f"medhelm_configurable_benchmark:model=huggingface/smollm2-135m-instruct,config_path={cfg}"
        job = subprocess.run(
            [sys.executable, "-m", "medhelm", "job", "-r", entry, "--suite", "s", "-o", str(out), "--local-path",
             str(local), "-q", "--shard-index", "0", "--shard-count", "1",
             "--benchmark-root", str(cfg.parent),  # shared with the services: config_path is sent as a name
             "--scenario-service", services["scenarios"].address, "--jury-service", services["jury"].address,
             "--metrics-service", services["metrics"].address], capture_output=True, text=True, timeout=900, env=env)
        assert job.returncode == 0, job.stderr[-3000:]
        collected = subprocess.run([sys.executable, "-m", "medhelm", "collect", "--suite", "s", "-o", str(out)],
                                   capture_output=True, text=True, timeout=120, env=env)
        assert collected.returncode == 0, collected.stdout + collected.stderr
        (run_dir,) = [p for p in (out / "runs" / "s").iterdir() if p.is_dir()]
        recs = records(run_dir)
        assert len({r["instance"]["id"] for r in recs}) == ROWS
        judgements = [j for r in recs for j in r["judgements"]]
        assert {j["judge"] for j in judgements} == {"vllm/judge"}
        assert not [j for j in judgements if j["status"] == "error"], judgements
        ok = [j for j in judgements if j["status"] == "ok"]
        print(f"\nvLLM judge behind `medhelm serve jury`: parse rate {len(ok)}/{len(judgements)}")
        assert len(ok) / len(judgements) >= 0.5
        assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
        # the judgements and scores were made by the services, not in the worker
        assert _served(services["jury"], "JudgeOne") >= ROWS
        assert _served(services["metrics"], "Score") >= ROWS
    finally:
        for svc in services.values():
            svc.stop()
