"""The chart's monitoring objects: the PrometheusRule passes `promtool check rules` (and its alerts fire as
meant on `promtool test rules` series), every metric the Grafana dashboard and the rules query exists in a
real scrape of a real `medhelm run`, the Job pods serve /metrics for the PodMonitor, and `medhelm k8s
status` shows each shard's progress."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from medhelm.devtools.fault_proxy import FaultProxy
from medhelm.devtools.mock_openai import MockOpenAIServer
from tests.services.conftest import helm_bin  # noqa: F401 - the fixture, reused

from .conftest import MedhelmProcess, check_metrics, fetch, samples
from .test_exact_counters import _setup, responder

MONITORING = ["--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.grafanaDashboard.enabled=true",
              "--set", "monitoring.prometheusRule.enabled=true", "--set", "job.enabled=true",
              "--set-json", 'job.runEntries=["pubmed_qa:model=qwen/qwen2.5-7b-instruct"]']
# names in the queries that are labels (target labels from the PodMonitor), not metrics
LABELS = {"medhelm_io_suite"}
NAME = re.compile(r"\b((?:medhelm|process|python)_[a-z0-9_]+)\b")


@pytest.fixture(scope="module")
def rendered(repo_root: Path, helm_bin: Path) -> list[dict]:  # noqa: F811
    done = subprocess.run([str(helm_bin), "template", "rel", ".", "--namespace", "clinical-ai", *MONITORING],
                          cwd=repo_root / "helm-charts" / "medhelm", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _rules(rendered: list[dict]) -> dict:
    (rule,) = [d for d in rendered if d["kind"] == "PrometheusRule"]
    return rule["spec"]


def _dashboard(rendered: list[dict]) -> dict:
    (cm,) = [d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("grafana-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    return json.loads(cm["data"]["medhelm-evaluation.json"])


def _queries(rendered: list[dict]) -> list[str]:
    exprs = [r["expr"] for g in _rules(rendered)["groups"] for r in g["rules"]]
    dash = _dashboard(rendered)
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return exprs


def test_rules_pass_promtool(rendered, promtool, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_rules(rendered)))
    done = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 rules found" in done.stdout


def test_stalled_and_judge_alerts_fire_on_their_series(rendered, promtool, tmp_path):
    """`promtool test rules`: a shard whose last progress stops while its run is in progress fires
    MedhelmSuiteStalled after stalledMinutes (+ for: 5m); a judge whose scores are all unscored fires
    MedhelmJudgeStoppedScoring; a healthy shard fires nothing."""
    spec = _rules(rendered)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(spec))
    annotations = {r["alert"]: r["annotations"] for g in spec["groups"] for r in g["rules"]}

    def expected(alert: str, **labels: str) -> dict:
        notes = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], v)
                 for k, v in annotations[alert].items()}
        return {"exp_labels": {"severity": "warning", **labels}, "exp_annotations": notes}

    pod = 'namespace="ns",pod="eval-0"'
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # progress stops at minute 10 (timestamp 600 s), the run stays in progress
            {"series": f"medhelm_last_progress_timestamp_seconds{{{pod}}}", "values": "0+60x10 600x60"},
            {"series": f"medhelm_runs_in_progress{{{pod}}}", "values": "1x70"},
            {"series": 'medhelm_judgements_total{namespace="ns",judge="j"}', "values": "0+30x70"},
            {"series": 'medhelm_judge_failures_total{namespace="ns",judge="j",criterion="accuracy",status="unscored"}',
             "values": "0+30x70"},
            {"series": 'medhelm_instances_done_total{namespace="ns",deployment="d",benchmark="b"}', "values": "0+10x70"},
            {"series": 'medhelm_instances_failed_total{namespace="ns",deployment="d",benchmark="b",reason="error"}',
             "values": "0x70"},
        ],
        "alert_rule_test": [
            {"eval_time": "30m", "alertname": "MedhelmSuiteStalled", "exp_alerts": []},
            {"eval_time": "50m", "alertname": "MedhelmSuiteStalled",
             "exp_alerts": [expected("MedhelmSuiteStalled", namespace="ns", pod="eval-0")]},
            {"eval_time": "40m", "alertname": "MedhelmJudgeStoppedScoring",
             "exp_alerts": [expected("MedhelmJudgeStoppedScoring", namespace="ns", judge="j")]},
            {"eval_time": "40m", "alertname": "MedhelmInstanceFailureRate", "exp_alerts": []},
        ],
    }]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run([str(promtool), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_every_queried_metric_exists_in_a_real_scrape(rendered, promtool, tmp_path):
    with MockOpenAIServer(responder=responder) as mock, \
            FaultProxy(mock.base_url, unparseable_marker="FAULTJUDGE", unparseable_models={"judge"}) as proxy:
        entry, local, out = _setup(tmp_path, proxy)  # unparseable judge answers: judge failures are exported
        proc = MedhelmProcess("run", "-r", entry, "-o", str(out), "--local-path", str(local), "-q",
                              "--metrics-port", "0", "--metrics-linger", "900")
        try:
            url = proc.metrics_url()
            proc.wait_for("Results:")
            text = fetch(url)  # lingering: up until finish() ends it
        finally:
            assert proc.finish() == 0, proc.stderr
    check_metrics(promtool, text)
    scraped = {name for name, _ in samples(text)}
    queried = {n for expr in _queries(rendered) for n in NAME.findall(expr)} - LABELS
    assert len(queried) >= 15
    missing = sorted(queried - scraped)
    assert not missing, f"queried but never exported: {missing}"


def test_job_pods_serve_metrics_for_the_pod_monitor(rendered):
    (job,) = [d for d in rendered if d["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MEDHELM_METRICS_PORT"] == "9090" and env["MEDHELM_METRICS_HOST"] == "0.0.0.0"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090}]
    (pm,) = [d for d in rendered if d["kind"] == "PodMonitor"]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/instance": "rel",
                                                     "app.kubernetes.io/component": "job"}
    assert set(job["spec"]["template"]["metadata"]["labels"].items()) >= set(pm["spec"]["selector"]["matchLabels"].items())


def test_k8s_status_shows_each_shards_progress(tmp_path):
    """Through a recording kubectl stand-in (no API server here): a running shard's counters come from a
    real medhelm scrape via the pod proxy, a finished shard's from its termination message."""
    from prometheus_client import generate_latest

    from medhelm.specs import Deployment
    from medhelm.telemetry import Telemetry

    t = Telemetry("job")
    run = t.bind_run("mock/cand", "OBS")
    run.started(planned=40, resumed=10)
    for i in range(12):
        run.recorded(error=i == 0, unscored=False)
    t.bind_client(Deployment(name="mock/cand", model_name="m", kind="openai"), "candidate").retried()
    (tmp_path / "scrape.txt").write_bytes(generate_latest(t.registry))
    job = {"metadata": {"name": "rel-medhelm-eval-s"}, "spec": {"completions": 2},
           "status": {"succeeded": 1, "active": 1, "completedIndexes": "1"}}
    pods = {"items": [
        {"metadata": {"name": "eval-s-1-abc", "namespace": "ns",
                      "annotations": {"batch.kubernetes.io/job-completion-index": "1"}},
         "status": {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {
             "exitCode": 0, "message": "shard 1/2 done=40 total=40 failed=0 runs=1 stopped=0\n"}}}]}},
        {"metadata": {"name": "eval-s-0-xyz", "namespace": "ns",
                      "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
         "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}}]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "kubectl"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\ncase \"$*\" in\n"
                    f"  *'get job'*) cat {tmp_path / 'job.json'} ;;\n  *'get pods'*) cat {tmp_path / 'pods.json'} ;;\n"
                    f"  *'get --raw'*) cat {tmp_path / 'scrape.txt'} ;;\nesac\n")
    fake.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "medhelm", "k8s", "status", "--release", "rel", "--suite", "s",
                           "--kubectl", str(fake)], capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "1/2 shards done, 1 running" in lines[0]
    shard0 = next(line for line in lines if "eval-s-0-xyz" in line)
    assert "Running" in shard0 and "done 21/40 (1 failed, 10 resumed), 1 retries" in shard0
    shard1 = next(line for line in lines if "eval-s-1-abc" in line)
    assert "Succeeded" in shard1 and "done=40 total=40" in shard1
    assert "get --raw /api/v1/namespaces/ns/pods/eval-s-0-xyz:9090/proxy/metrics" in calls.read_text()


@pytest.mark.slow
def test_dashboard_queries_run_on_a_real_prometheus(rendered, tmp_path):
    """A real Prometheus (Debian's binary) scrapes a real `medhelm run` every second; every dashboard query
    evaluates without error, and suite progress reaches 100 % with the run's instance counts."""
    import urllib.parse

    from .conftest import prometheus_tool, start_tool

    exe = prometheus_tool("prometheus")
    if exe is None:
        pytest.skip("prometheus missing: scripts/_env.sh unpacks it from Debian's prometheus package")
    api = ""

    def query(expr: str) -> dict:
        return json.loads(fetch(api + "?" + urllib.parse.urlencode({"query": expr})))

    progress = next(p for p in _dashboard(rendered)["panels"] if p["title"] == "Suite progress")["targets"][0]["expr"]
    progress = progress.replace("$__range", "10m").replace("$namespace", "ns")
    prom = None
    try:
        with MockOpenAIServer(responder=responder, latency_s=0.2) as mock, \
                FaultProxy(mock.base_url, unparseable_marker="FAULTJUDGE", unparseable_models={"judge"}) as proxy:
            entry, local, out = _setup(tmp_path, proxy)
            # the run's metrics port is its own pick (it prints it); it lingers until Prometheus has scraped
            # the final values (asked below), not for a fixed time a loaded machine might not keep to
            proc = MedhelmProcess("run", "-r", entry, "-o", str(out), "--local-path", str(local), "-q", "-n", "2",
                                  "--metrics-port", "0", "--metrics-linger", "900")
            try:
                target = urllib.parse.urlsplit(proc.metrics_url()).netloc
                (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [{"job_name": "medhelm", "static_configs": [{
                        "targets": [target], "labels": {"namespace": "ns", "pod": "eval-0"}}]}]}))
                prom, prom_url = start_tool(exe, lambda port: [f"--config.file={tmp_path / 'prometheus.yml'}",
                                                               f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
                                            tmp_path / "prometheus.log")
                api = prom_url + "/api/v1/query"
                proc.wait_for("Results:")
                deadline = time.monotonic() + 600  # only a hung test: a scrape a second normally sees it in seconds
                while True:  # until a scrape after the last instance is in Prometheus
                    result = query(progress)["data"]["result"]
                    if result and float(result[0]["value"][1]) == 1.0:
                        break
                    assert time.monotonic() < deadline, "Prometheus never saw the finished run"
                    time.sleep(0.5)
            finally:
                assert proc.finish() == 0, proc.stderr  # SIGTERM ends the linger
        dash = _dashboard(rendered)
        for panel in dash["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$__range", "10m").replace("$namespace", "ns")
                answer = query(expr)
                assert answer["status"] == "success", (panel["title"], expr, answer)
        result = query(progress)["data"]["result"]
        assert len(result) == 1 and float(result[0]["value"][1]) == 1.0
        tokens = query('sum(last_over_time(medhelm_tokens_total{namespace="ns"}[10m]))')["data"]["result"]
        assert tokens and float(tokens[0]["value"][1]) > 0
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
