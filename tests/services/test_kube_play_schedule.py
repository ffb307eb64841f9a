"""A schedule's CronJob in real containers: `helm template` with one schedule → `podman kube play` of the
services and the mock model (as test_kube_play.py plays them), then the CronJob's jobTemplate pod spec played
as one Pod per completion index, labelled as the Job controller labels a CronJob's pods (the Job's name
``<cronjob>-<scheduled minute>``, the completion index): podman resolves the downward-API env
(``MEDHELM_JOB_NAME`` from the pod label), the shards write the suite named by the scheduled date in the
schedule's time zone on the shared volume, and the last one summarizes it into the release of that name in
the results store on the volume. What kube play cannot emulate (the CronJob controller's clock, Services)
is done as test_kube_play.py does: the Job's name is computed as the controller computes it, a Service is a
hostAliases entry."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.services.podman import IMAGE, run
from tests.services.test_kube_play import (JURY, Cluster, _render, by_kind_of, deployments, indexed_pods,
                                           play_services, seed_volume, service_aliases)

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(2400)]

ROWS, SHARDS = 8, 2
SCHEDULED = datetime(2026, 11, 23, 23, 30, tzinfo=timezone.utc)  # 00:30 on the 24th in Berlin
SUITE = "kp-2026-11-24"


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(f"ks{os.getpid() % 100000}", tmp_path)
    yield c
    c.close()


def test_cronjob_pod_spec_runs_a_scheduled_cycle(image, cluster, helm_bin, repo_root, tmp_path):
    release = cluster.release
    bench = tmp_path / "bench"
    cfg = write_configurable_benchmark(bench, ROWS, name="KS", answers=("Yes", "No", "Maybe"),
                                       metrics=("exact_match", "rouge_l"), max_tokens=4)
    cfg.write_text(cfg.read_text() + JURY)
    values = {
        "image": {"repository": IMAGE.rsplit(":", 1)[0], "tag": IMAGE.rsplit(":", 1)[1], "pullPolicy": "Never"},
        "modelDeployments": deployments(cluster),
        "dashboard": {"enabled": False},
        "schedules": [{"name": "kp", "schedule": "30 0 * * *", "timeZone": "Europe/Berlin", "shards": SHARDS,
                       "maxConcurrency": 2, "runEntries": [
                           "medhelm_configurable_benchmark:model=test/svc-model,config_path=/data/bench/bench.yaml"]}],
    }
    by_kind = by_kind_of(_render(helm_bin, repo_root, release, values, tmp_path))
    (cron,) = by_kind["CronJob"]
    volume = seed_volume(cluster, by_kind, bench)
    pods = play_services(cluster, by_kind, probes=("readinessProbe",))  # as test_kube_play.py plays them
    aliases = service_aliases(by_kind, pods)

    # the CronJob's Job, as the controllers make it: name <cronjob>-<scheduled minute>, one pod per index
    job_name = f"{cron['metadata']['name']}-{int(SCHEDULED.timestamp()) // 60}"
    job = cron["spec"]["jobTemplate"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == SHARDS
    shard_pods = indexed_pods(job, job_name, aliases, labels={"batch.kubernetes.io/job-name": job_name},
                              env={"MEDHELM_METRICS_LINGER_S": "0"})
    cluster.play("cron-job", [*by_kind["ConfigMap"], *shard_pods])
    logs = []
    for pod in shard_pods:
        cname = f"{pod['metadata']['name']}-shard"
        code = run("podman", "wait", cname, timeout=900).stdout.strip()
        out = run("podman", "logs", cname)
        assert code == "0", out.stdout[-2000:] + out.stderr[-3000:]
        logs.append(out.stdout)
    assert all(f"scheduled suite {SUITE}" in text for text in logs), logs
    assert sum(f"summarized into release {SUITE}" in text for text in logs) == 1, logs

    store = volume / "benchmark_output" / "results.sqlite"
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT r.release, r.suite, COUNT(i.instance_id) FROM runs r JOIN instances i "
                          "ON i.run_id = r.run_id WHERE i.error IS NULL GROUP BY r.release, r.suite").fetchall()
    assert rows == [(SUITE, SUITE, ROWS)]
    assert (volume / "benchmark_output" / "runs" / SUITE / ".summarized").is_file()
