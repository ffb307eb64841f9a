"""A shard outlives a restart of the service it calls: the client waits, within a bounded budget, for a
service that is down (UNAVAILABLE from the service itself) and then gets the same answers as if it had never
gone; a service that stays down fails the call as "unreachable", naming it, once the budget is spent.

The restart is played by a TCP front (tcp_front.py) in front of a real `medhelm serve` process: it closes the first N
connections at once (what a pod's port does while the pod restarts) and pipes every later one through. The
count of closed connections is the evidence the client came back after being refused (no timing)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from medhelm.benchmarks.base import PromptBudget
from medhelm.errors import ConfigError, ServerUnreachable
from medhelm.pipeline import RunOptions, plan_runs
from medhelm.pipeline.sampling import select_instances
from medhelm.rpc.remote import Endpoint, RemoteBenchmark, RemoteMetric, default_retry_s
from medhelm.runentries import parse_run_entry
from medhelm.scoring.base import ScoringItem
from medhelm.specs import Completion

from .conftest import write_deployment, write_qa_benchmark
from .tcp_front import Front


@pytest.fixture
def plan(tmp_path):
    cfg = write_qa_benchmark(tmp_path / "bench", 10)
    write_deployment(tmp_path / "prod_env", "http://127.0.0.1:9/v1")
    entry = parse_run_entry(f"medhelm_configurable_benchmark:model=mock/svc-model,config_path={cfg},"
                            "max_eval_instances=6")
    return plan_runs([entry], RunOptions(local_path=tmp_path / "prod_env", output_path=tmp_path / "out"))[0]


def test_the_instance_stream_survives_a_restart(plan, start_service, tmp_path):
    svc = start_service("scenarios", "--output-path", str(tmp_path / "out"), "--offline",
                        "--benchmark-root", str(tmp_path / "bench"))
    gate = Front(svc.address, refuse=4)
    try:
        endpoint = Endpoint(gate.address, benchmark_roots=(tmp_path / "bench",), retry_s=300)
        remote = RemoteBenchmark(plan.spec, endpoint, 60)
        got = list(remote.instances())
    finally:
        gate.close()
    local = select_instances(list(plan.benchmark.instances()), plan.spec.max_eval_instances, plan.spec.seed)
    assert got == local  # every instance once: a retried stream is read again from its start
    assert gate.refused == 4 and gate.passed >= 1
    budget = PromptBudget(max_prompt_tokens=60)
    assert [remote.prompt(i, budget) for i in local] == [plan.benchmark.prompt(i, budget) for i in local]


def test_scoring_waits_for_the_service_then_scores_as_before(plan, start_service, tmp_path):
    svc = start_service("metrics", "--output-path", str(tmp_path / "out"), "--local-path", str(tmp_path / "prod_env"),
                        "--benchmark-root", str(tmp_path / "bench"))
    instances = select_instances(list(plan.benchmark.instances()), plan.spec.max_eval_instances, plan.spec.seed)
    items = [ScoringItem(plan.spec, inst, plan.benchmark.prompt(inst, PromptBudget()), Completion("Yes"))
             for inst in instances]

    async def score(address: str) -> list:
        metric = RemoteMetric(plan.spec.benchmark.metrics, Endpoint(address, benchmark_roots=(tmp_path / "bench",),
                                                                    retry_s=300), jury=False)
        try:
            return [await metric.score(it) for it in items]
        finally:
            await metric.aclose()

    direct = asyncio.run(score(svc.address))
    gate = Front(svc.address, refuse=4)
    try:
        through_restart = asyncio.run(score(gate.address))
    finally:
        gate.close()
    assert through_restart == direct and gate.refused == 4


def test_a_service_that_stays_down_fails_once_the_budget_is_spent(plan, tmp_path):
    with socket.socket() as bound:  # bound, never listening: every connection is refused
        bound.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{bound.getsockname()[1]}"
        remote = RemoteBenchmark(plan.spec, Endpoint(address, benchmark_roots=(tmp_path / "bench",), retry_s=1.5), 60)
        with pytest.raises(ServerUnreachable) as err:
            list(remote.instances())
    message = str(err.value)
    assert address in message and "retry budget 1.5 s" in message and "\n" not in message


def test_the_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("MEDHELM_SERVICE_RETRY_S", raising=False)
    assert default_retry_s() == 120.0 and Endpoint("x:1").retry_s == 120.0
    monkeypatch.setenv("MEDHELM_SERVICE_RETRY_S", "30")
    assert Endpoint("x:1").retry_s == 30.0
    for bad in ("soon", "-1", "1e9"):
        monkeypatch.setenv("MEDHELM_SERVICE_RETRY_S", bad)
        with pytest.raises(ConfigError, match="MEDHELM_SERVICE_RETRY_S"):
            default_retry_s()
