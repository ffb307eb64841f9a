"""The three gRPC services as real processes on 127.0.0.1: same results as the in-process parts,
health, reflection, Prometheus, one-line errors, message limits, TLS/mTLS, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from medhelm.benchmarks.base import PromptBudget
from medhelm.deployments import DeploymentRegistry
from medhelm.pipeline import RunOptions, plan_runs
from medhelm.pipeline.execute import merge_results
from medhelm.pipeline.aggregate import aggregate
from medhelm.pipeline.sampling import select_instances
from medhelm.rpc import codec
from medhelm.rpc.remote import Endpoint, RemoteBenchmark, RemoteMetric, names_for
from medhelm.runentries import parse_run_entry
from medhelm.scoring import registry
from medhelm.scoring.base import ScoringContext, ScoringItem
from medhelm.records import InstanceResult
from medhelm.specs import Completion
from medhelm.v1 import common_pb2, jury_pb2_grpc, metrics_pb2, metrics_pb2_grpc, scenarios_pb2, scenarios_pb2_grpc

from .conftest import write_deployment, write_qa_benchmark


@pytest.fixture
def plan(tmp_path, refused_url):
    cfg = write_qa_benchmark(tmp_path / "bench", 20)
    local = tmp_path / "prod_env"
    write_deployment(local, f"{refused_url}/v1")
    entry = parse_run_entry(f"medhelm_configurable_benchmark:model=mock/svc-model,config_path={cfg},"
                            "max_eval_instances=12")
    return plan_runs([entry], RunOptions(local_path=local, output_path=tmp_path / "out"))[0]


def _answer(i: int) -> str:
    return ("Yes", "No", "Maybe", "yes.")[i % 4]


def test_scenario_shards_partition_the_runs_selection(plan, start_service, tmp_path):
    svc = start_service("scenarios", "--output-path", str(tmp_path / "out"), "--offline",
                        "--benchmark-root", str(tmp_path / "bench"))
    spec = names_for(plan.spec, (tmp_path / "bench",))  # file arguments as names under the service's root
    assert spec.benchmark_args["config_path"] == "bench.yaml"
    budget = PromptBudget(max_prompt_tokens=60)
    local = select_instances(list(plan.benchmark.instances()), spec.max_eval_instances, spec.seed)
    seen: dict[int, tuple[str, str]] = {}
    with grpc.insecure_channel(svc.address) as ch:
        stub = scenarios_pb2_grpc.ScenarioServiceStub(ch)
        for index in range(3):
            req = scenarios_pb2.StreamInstancesRequest(run_spec_json=codec.dumps(spec.to_json()), shard_index=index,
                                                       shard_count=3, max_prompt_tokens=60)
            for item in stub.StreamInstances(req):
                assert item.position % 3 == index and item.position not in seen
                seen[item.position] = (item.instance_json, item.prompt_json)
        info = stub.DescribeBenchmark(scenarios_pb2.DescribeBenchmarkRequest(
            name="medhelm_configurable_benchmark", args=dict(spec.benchmark_args)))
    assert sorted(seen) == list(range(12))
    for pos, inst in enumerate(local):
        assert json.loads(seen[pos][0]) == inst.to_json()
        assert json.loads(seen[pos][1]) == plan.benchmark.prompt(inst, budget).to_json()
    assert info.name == "QA_SVC" and json.loads(info.spec_json)["main_metric"] == spec.benchmark.main_metric
    # the job's adapter: the same instances and prompts as the local benchmark
    remote = RemoteBenchmark(plan.spec, Endpoint(svc.address, benchmark_roots=(tmp_path / "bench",)), 60)
    assert list(remote.instances()) == local
    assert [remote.prompt(i, budget) for i in local] == [plan.benchmark.prompt(i, budget) for i in local]


def test_metrics_service_scores_and_aggregates_like_the_registry(plan, start_service, tmp_path):
    svc = start_service("metrics", "--output-path", str(tmp_path / "out"), "--local-path", str(tmp_path / "prod_env"),
                        "--benchmark-root", str(tmp_path / "bench"))
    spec = plan.spec
    instances = select_instances(list(plan.benchmark.instances()), spec.max_eval_instances, spec.seed)
    items = [ScoringItem(spec, inst, plan.benchmark.prompt(inst, PromptBudget()), Completion(_answer(i)))
             for i, inst in enumerate(instances)]

    async def local_and_remote():
        ctx = ScoringContext(deployments=DeploymentRegistry.load(tmp_path / "prod_env"), clients=None,
                             evaluated_deployment=spec.deployment)
        metrics = registry.build_all(spec.benchmark.metrics, ctx)
        local = [merge_results(await asyncio.gather(*(m.score(it) for m in metrics))) for it in items]
        shared = Endpoint(svc.address, benchmark_roots=(tmp_path / "bench",))
        remote_metric = RemoteMetric(spec.benchmark.metrics, shared, jury=False)
        remote = await asyncio.gather(*(remote_metric.score(it) for it in items))
        await remote_metric.aclose()
        return local, remote, remote_metric.stat_names

    local, remote, names = asyncio.run(local_and_remote())
    assert remote == local and {"exact_match", "rouge_l"} <= set(names)
    assert sum(r.stats["exact_match"] for r in remote) == 3  # rows 0, 4, 8: "Yes" where the answer is Yes

    records = [InstanceResult(run=spec.name, instance=it.instance, prompt=it.prompt, completion=it.completion,
                              stats=r.stats, position=i) for i, (it, r) in enumerate(zip(items, local))]
    with grpc.insecure_channel(svc.address) as ch:
        stub = metrics_pb2_grpc.MetricsServiceStub(ch)
        batches = [metrics_pb2.AggregateRunRequest(run_spec_json=codec.dumps(spec.to_json()),
                                                   instance_result_json=[codec.dumps(r.to_json()) for r in records[:5]]),
                   metrics_pb2.AggregateRunRequest(instance_result_json=[codec.dumps(r.to_json()) for r in records[5:]])]
        stats = stub.AggregateRun(iter(batches))
        stream = list(stub.ScoreStream(iter(
            [common_pb2.ScoreStreamRequest(setup=codec.setup_message(names_for(spec, (tmp_path / "bench",))))]
            + [common_pb2.ScoreStreamRequest(item=codec.item_message(it, i)) for i, it in enumerate(items)])))
    assert json.loads(stats.stats_json) == [s.to_json() for s in aggregate(records)]
    assert stats.run == spec.name and stats.instances == 12
    assert sorted(m.position for m in stream) == list(range(12))
    assert all(codec.metric_result(m) == local[m.position] for m in stream)

    text = httpx.get(svc.metrics_url, timeout=60).text  # Prometheus: counts and latency, never instance text
    assert 'medhelm_rpc_requests_total{code="OK",method="Score",service="metrics"} 12.0' in text
    assert 'medhelm_rpc_latency_seconds_count{method="AggregateRun",service="metrics"} 1.0' in text
    assert 'medhelm_items_total{method="ScoreStream",service="metrics"} 12.0' in text
    assert "Heart rate" not in text and "finding" not in text


def test_errors_are_one_line_statuses(plan, start_service, tmp_path):
    metrics = start_service("metrics", "--output-path", str(tmp_path / "out"), "--max-message-mb", "1",
                            "--local-path", str(tmp_path / "prod_env"))
    jury = start_service("jury", "--local-path", str(tmp_path / "prod_env"))
    scen = start_service("scenarios", "--offline", "--output-path", str(tmp_path / "out"))
    spec = plan.spec
    item = common_pb2.ScoringItem(instance_json="{}", prompt_json="{}", completion_json="{}")
    with grpc.insecure_channel(metrics.address) as ch:
        stub = metrics_pb2_grpc.MetricsServiceStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(common_pb2.ScoreRequest(setup=common_pb2.ScoringSetup(run_spec_json="{"), item=item))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "field 'setup.run_spec_json': is not a valid payload (JSONDecodeError)"
        with pytest.raises(grpc.RpcError) as err:
            stub.AggregateSuite(metrics_pb2.AggregateSuiteRequest(suite="../etc"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        big = common_pb2.ScoringItem(completion_json="x" * (2 * 1024 * 1024))
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(common_pb2.ScoreRequest(setup=codec.setup_message(spec), item=big))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with grpc.insecure_channel(jury.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            jury_pb2_grpc.JuryServiceStub(ch).JudgeOne(common_pb2.ScoreRequest(
                setup=codec.setup_message(spec, spec.benchmark.metrics), item=item))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'exact_match' is not a jury metric" in err.value.details()
    with grpc.insecure_channel(scen.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            scenarios_pb2_grpc.ScenarioServiceStub(ch).DescribeBenchmark(
                scenarios_pb2.DescribeBenchmarkRequest(name="medhelm_configurable_benchmark",
                                                       args={"config_path": "missing.yaml"}))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "missing.yaml" in err.value.details() and "\n" not in err.value.details()
        assert str(tmp_path) not in err.value.details()


def test_health_reflection_and_graceful_sigterm(start_service, tmp_path):
    svc = start_service("jury", "--local-path", str(tmp_path / "prod_env"))
    with grpc.insecure_channel(svc.address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for name in ("", "medhelm.v1.JuryService"):
            assert health.Check(health_pb2.HealthCheckRequest(service=name)).status == \
                health_pb2.HealthCheckResponse.SERVING
        services = set(ProtoReflectionDescriptorDatabase(ch).get_services())
    assert {"medhelm.v1.JuryService", "grpc.health.v1.Health"} <= services
    svc.proc.terminate()
    assert svc.proc.wait(timeout=120) == 0
    assert "stopped" in svc.proc.stderr.read()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=medhelm-test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", f"{who}.key",
                 "-out", f"{who}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "san.cnf", "-out", f"{who}.pem", cwd=d)
    return d


def test_mutual_tls(start_service, certs, tmp_path):
    svc = start_service("metrics", "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                        "--tls-client-ca", str(certs / "ca.pem"), "--output-path", str(tmp_path / "out"),
                        "--local-path", str(tmp_path / "prod_env"))
    good = Endpoint(svc.address, ca=certs / "ca.pem", cert=certs / "client.pem", key=certs / "client.key")
    with good.channel() as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    for bad in (Endpoint(svc.address, ca=certs / "ca.pem"), Endpoint(svc.address)):  # no client cert / plaintext
        with bad.channel() as ch, pytest.raises(grpc.RpcError) as err:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=3)
        # refused at the handshake (retried as UNAVAILABLE until the deadline)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_serve_rejects_half_tls(tmp_path):
    from medhelm.cli import main

    assert main(["serve", "metrics", "--tls-cert", str(tmp_path / "c.pem")]) == 2
