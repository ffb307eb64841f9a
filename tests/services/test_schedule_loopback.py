"""One scheduled evaluation cycle end to end on a loopback "cluster": the chart renders a schedule; the
CronJob's jobTemplate pod spec is run as real processes, one per completion index, the way the kubelet would
start them (its args and env; volumes mapped to folders; the Job's name from the downward API as the CronJob
controller names it, ``<cronjob>-<scheduled minute>``; JOB_COMPLETION_INDEX as the Job controller sets it)
against the three gRPC services and the mock OpenAI server. The shards write the suite named by the
scheduled date in the schedule's time zone, and the last shard to finish summarizes it into the release of
that name in the results store. A shard that finishes while others still owe instances leaves the summary to
them; a lock left by a killed finalizer is broken, a failed summarize releases it and fails the pod (the
Job retries it); a retried shard after the summary changes nothing; concurrent last shards summarize once.

Per-pod differences a loopback host cannot give (each pod has its own network namespace and the kubelet
reads the termination message) are the only env values changed: the /metrics port (0 = any free port, on
127.0.0.1), the metrics linger (0: no Prometheus scrapes here) and the termination-log path."""

from __future__ import annotations

import base64

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from .conftest import write_qa_benchmark
from .test_job_loopback import JURY_METRIC, _env, mock_openai  # noqa: F401  (the mock model fixture)

ROWS, SHARDS = 12, 3
RELEASE = "rel"
CRON = f"{RELEASE}-medhelm-cron-nightly"
# the schedule fires at 00:30 Berlin time: 23:30 UTC the day before (winter), so the suite's date is the
# schedule's local date, not the UTC one
CYCLES = [(datetime(2026, 11, 23, 23, 30, tzinfo=timezone.utc), "nightly-2026-11-24"),
          (datetime(2026, 11, 24, 23, 30, tzinfo=timezone.utc), "nightly-2026-11-25")]


def _render(helm_bin: Path, repo: Path, values: dict, tmp: Path) -> list[dict]:
    vf = tmp / "values.yaml"
    vf.write_text(yaml.safe_dump(values))
    done = subprocess.run([str(helm_bin), "template", RELEASE, str(repo / "helm-charts" / "medhelm"),
                           "--namespace", "clinical-ai", "-f", str(vf)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


class Kubelet:
    """Starts a pod template's one container as a local process: volumes become folders (a PVC one shared
    folder, a ConfigMap its files, an emptyDir a fresh folder), mount paths in args and env are mapped to
    them, env valueFrom resolved (fieldRef from the pod's labels, Service names to loopback addresses)."""

    def __init__(self, root: Path, configmaps: dict[str, dict], services: dict[str, str],
                 secrets: dict[str, dict] | None = None) -> None:
        self.root, self.configmaps, self.services = root, configmaps, services
        self.secrets = secrets or {}
        self.pvc = root / "pvc"

    def _mounts(self, pod_spec: dict, container: dict, pod_name: str) -> dict[str, Path]:
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        out = {}
        for m in container.get("volumeMounts", []):
            vol = volumes[m["name"]]
            if "persistentVolumeClaim" in vol:
                host = self.pvc
            elif "configMap" in vol:
                host = self.root / "configmaps" / vol["configMap"]["name"]
                host.mkdir(parents=True, exist_ok=True)
                for key, text in self.configmaps[vol["configMap"]["name"]]["data"].items():
                    (host / key).write_text(text)
            elif "secret" in vol:  # the chart's own Secrets (the caller token): their keys as files, items only
                source = vol["secret"]
                host = self.root / "secrets" / pod_name / m["name"]
                host.mkdir(parents=True, exist_ok=True)
                data = self.secrets[source["secretName"]]["data"]
                for item in source.get("items") or [{"key": k, "path": k} for k in data]:
                    (host / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
            elif "emptyDir" in vol:
                host = self.root / "pods" / pod_name / m["name"]
            else:
                raise AssertionError(f"volume kind not emulated: {vol}")
            host.mkdir(parents=True, exist_ok=True)
            out[m["mountPath"]] = host
        return out

    def start(self, template: dict, pod_name: str, labels: dict, extra_env: dict) -> subprocess.Popen:
        spec = template["spec"]
        (c,) = spec["containers"]
        mounts = self._mounts(spec, c, pod_name)

        def host(value: str) -> str:  # one mount per value (a path, or a key=path argument)
            for mount, path in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
                if f"={mount}/" in value:
                    return value.replace(f"={mount}/", f"={path}/")
                if value == mount or value.startswith(mount + "/"):
                    return str(path) + value[len(mount):]
            return value

        env = dict(_env())
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = self.services.get(e["value"], host(e["value"]))
            else:
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                key = path.split("['", 1)[1].rstrip("']")
                env[e["name"]] = labels[key]
        env.update({"MEDHELM_METRICS_PORT": "0", "MEDHELM_METRICS_HOST": "127.0.0.1", "MEDHELM_METRICS_LINGER_S": "0",
                    "MEDHELM_TERMINATION_LOG": str(self.root / "pods" / pod_name / "termination-log"), **extra_env})
        args = [host(a) for a in c["args"]]
        return subprocess.Popen([sys.executable, "-m", "medhelm", *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


def _releases(store: Path) -> dict[str, tuple[int, int]]:
    """release -> (runs, scored instances) in the results store the dashboard reads."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT r.release, COUNT(DISTINCT r.run_id), COUNT(i.instance_id) FROM runs r "
                          "JOIN instances i ON i.run_id = r.run_id WHERE i.error IS NULL GROUP BY r.release").fetchall()
    return {r: (n, k) for r, n, k in rows}


@pytest.mark.slow
def test_one_scheduled_cycle_end_to_end(tmp_path, mock_openai, start_service, helm_bin, repo_root):  # noqa: F811
    deployments = "model_deployments:\n" + "".join(
        f"  - name: mock/{n}\n    model_name: test/{n}\n    kind: openai\n    base_url: {mock_openai}\n"
        f"    served_model_name: {n}\n    max_sequence_length: 2048\n" for n in ("svc-model", "judge"))
    # the services started here speak plaintext; the chart's default (mutual TLS) is proven by
    # test_kube_play's default-tls mode
    values = {"modelDeployments": deployments, "tls": {"enabled": False}, "schedules": [{
        "name": "nightly", "schedule": "30 0 * * *", "timeZone": "Europe/Berlin", "shards": SHARDS,
        "maxConcurrency": 2,
        "runEntries": ["medhelm_configurable_benchmark:model=test/svc-model,config_path=/data/bench/bench.yaml"]}]}
    docs = _render(helm_bin, repo_root, values, tmp_path)
    (cron,) = [d for d in docs if d["kind"] == "CronJob"]
    assert cron["metadata"]["name"] == CRON and cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == SHARDS
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}

    # the volume, seeded with the benchmark (as the data team would); the services read the same volume
    pvc = tmp_path / "pvc"
    cfg = write_qa_benchmark(pvc / "bench", ROWS)
    cfg.write_text(cfg.read_text() + JURY_METRIC)
    (pvc / "prod_env").mkdir(parents=True)
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "model_deployments.yaml").write_text(configmaps[f"{RELEASE}-medhelm-deployments"]["data"]
                                                     ["model_deployments.yaml"])
    svc_env = {**_env(), "MEDHELM_MODEL_DEPLOYMENTS": str(registry / "model_deployments.yaml")}
    svc = {name: start_service(name, "--local-path", str(pvc / "prod_env"), "--output-path",
                               str(pvc / "benchmark_output"), "--offline",
                               "--benchmark-root", str(pvc),  # the volume's mount, as the chart sets it
                               env=svc_env)
           for name in ("scenarios", "jury", "metrics")}
    services = {f"{RELEASE}-medhelm-{n}:50051": svc[n].address for n in svc}  # cluster DNS + kube-proxy
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    kubelet = Kubelet(tmp_path, configmaps, services, secrets)

    def shard(when: datetime, index: int, **env: str) -> subprocess.Popen:
        job_name = f"{CRON}-{int(when.timestamp()) // 60}"  # the CronJob controller's name for this run
        labels = {**job["spec"]["template"]["metadata"]["labels"], "batch.kubernetes.io/job-name": job_name,
                  "batch.kubernetes.io/job-completion-index": str(index)}
        return kubelet.start(job["spec"]["template"], f"{job_name}-{index}", labels,
                             {"JOB_COMPLETION_INDEX": str(index), **env})

    def finish(proc: subprocess.Popen) -> str:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-2000:] + err[-3000:]
        return out

    out = pvc / "benchmark_output"
    store = out / "results.sqlite"

    # cycle 1: shards 0 and 1 finish while shard 2 has not run (parallelism < completions, or a retry
    # pending): neither summarizes; shard 2 finishes last and summarizes the suite into its release
    (when, suite) = CYCLES[0]
    first = [finish(p) for p in [shard(when, i) for i in (0, 1)]]
    checked = 0
    for index, text in enumerate(first):
        # the two run at once: whichever finishes first may still see the other one owing instances; one
        # that finds the other checking (holding the finalize lock) leaves the check to it
        assert f"scheduled suite {suite}" in text, text
        owed = re.search(r"shard\(s\) ([\d, ]+) still owe instances", text)
        if owed is None:
            assert f"suite {suite}: another shard is checking or summarizing it" in text, text
            continue
        checked += 1
        owing = {int(i) for i in owed.group(1).split(",")}
        assert 2 in owing and index not in owing and owing <= {0, 1, 2}, text
    assert checked >= 1, first
    assert not store.exists() or suite not in _releases(store)
    suite_dir = out / "runs" / suite
    # another shard holds the finalize lock: shard 2 leaves the summary to it
    lock = suite_dir / ".finalize.lock"
    lock.write_text('{"holder": "rel-medhelm-cron-nightly-x-1"}\n')
    held = finish(shard(when, 2))
    assert f"suite {suite}: another shard is checking or summarizing it" in held and not store.exists()
    # ... but that pod was killed mid-summarize: its lock is stale after --finalize-stale-minutes; the
    # retried shard 2 breaks it, and its summarize fails (the store is down): the lock is released, the pod
    # fails (the Job retries it), nothing is marked summarized
    os.utime(lock, (time.time() - 3 * 3600, time.time() - 3 * 3600))
    down = shard(when, 2, MEDHELM_STORE_URL="postgresql://medhelm@127.0.0.1:1/results")
    text, err = down.communicate(timeout=300)
    assert down.returncode == 2 and "broke a finalize lock 180 min old" in text, text + err
    errors = [line for line in err.splitlines() if line.startswith("medhelm: ")]
    assert errors == [err.strip().splitlines()[-1]] and "cannot connect to the results store" in errors[0]
    assert "***" in errors[0] and "Traceback" not in err
    assert not lock.exists() and not (suite_dir / ".summarized").exists()
    last = finish(shard(when, 2))  # the Job's next retry of index 2
    assert f"summarized into release {suite}" in last, last
    (run_dir,) = [p for p in (out / "runs" / suite).iterdir() if p.is_dir()]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
    records = [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines()]
    assert len({r["instance"]["id"] for r in records}) == ROWS and not any(r.get("error") for r in records)
    assert _releases(store) == {suite: (1, ROWS)}
    with sqlite3.connect(store) as db:
        (stats,) = db.execute("SELECT COUNT(*) FROM runs WHERE release = ? AND suite = ?", (suite, suite)).fetchone()
    assert stats == 1

    # a shard retried after the summary (e.g. its pod was evicted after writing) changes nothing
    again = finish(shard(when, 0))
    assert f"suite {suite}: already summarized" in again
    assert _releases(store) == {suite: (1, ROWS)}
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"

    # cycle 2, the next night: all shards at once, as the Job runs them; exactly one summarizes
    (when2, suite2) = CYCLES[1]
    texts = [finish(p) for p in [shard(when2, i) for i in range(SHARDS)]]
    assert sum(f"summarized into release {suite2}" in t for t in texts) == 1, texts
    assert all(f"scheduled suite {suite2}" in t for t in texts)
    assert _releases(store) == {suite: (1, ROWS), suite2: (1, ROWS)}  # last night's release is untouched
    assert not list((out / "runs" / suite2).glob(".finalize.lock*"))

    # the shards really went through the services (their Prometheus counters)
    import httpx

    def served(name: str, method: str) -> float:
        for line in httpx.get(svc[name].metrics_url, timeout=60).text.splitlines():
            if line.startswith("medhelm_rpc_requests_total{") and f'method="{method}"' in line and 'code="OK"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert served("scenarios", "StreamInstances") >= 2 * SHARDS
    assert served("jury", "JudgeOne") >= ROWS and served("metrics", "Score") >= ROWS
