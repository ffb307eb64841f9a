"""`medhelm k8s`: the submitted manifests validate against Kubernetes 1.30 (strict) and match the chart's
own Job template; status/logs drive kubectl (a recording stand-in: no API server can run here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

ENTRIES = ["pubmed_qa:model=qwen/qwen2.5-7b-instruct,max_eval_instances=100",
           "aci_bench:model=qwen/qwen2.5-7b-instruct,max_eval_instances=50"]


def _medhelm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_submit_dry_run_validates_and_matches_the_chart(repo_root, tmp_path, helm_bin, kubernetes_validate):
    conf = tmp_path / "suite.conf"
    conf.write_text('entries: [{description: "pubmed_qa:model=qwen/qwen2.5-7b-instruct", priority: 1}]\n')
    done = _medhelm("k8s", "submit", "--release", "rel", "--suite", "nightly", "--shards", "4", "--parallelism", "2",
                    "--image", "registry.local/medhelm-k8s:0.1.0", "-r", *ENTRIES, "-c", str(conf), "--dry-run")
    assert done.returncode == 0, done.stderr
    (tmp_path / "out.yaml").write_text(done.stdout)
    check = subprocess.run([*kubernetes_validate, str(tmp_path / "out.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    conf_map, job = list(yaml.safe_load_all(done.stdout))
    assert conf_map["kind"] == "ConfigMap" and conf_map["data"] == {"suite.conf": conf.read_text()}
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--conf-paths") + 1] == "/etc/medhelm/conf/suite.conf"

    # the chart's Job for the same suite: same pod, same arguments (minus the conf file), same env
    rendered = subprocess.run(
        [str(helm_bin), "template", "rel", ".", "--set", "job.enabled=true", "--set", "job.suite=nightly",
         "--set", "job.completions=4", "--set", "job.parallelism=2", "--set", "image.repository=registry.local/medhelm-k8s",
         "--set", "image.tag=0.1.0", "--set-json", f"job.runEntries={json.dumps(ENTRIES)}"],
        cwd=repo_root / "helm-charts" / "medhelm", capture_output=True, text=True, check=True).stdout
    chart_job = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job")
    assert chart_job["metadata"]["name"] == job["metadata"]["name"] == "rel-medhelm-eval-nightly"
    for key in ("completionMode", "completions", "parallelism", "backoffLimitPerIndex", "ttlSecondsAfterFinished"):
        assert chart_job["spec"][key] == job["spec"][key], key
    ours, theirs = job["spec"]["template"]["spec"], chart_job["spec"]["template"]["spec"]
    assert ours["securityContext"] == theirs["securityContext"] and ours["restartPolicy"] == theirs["restartPolicy"]
    assert ours["volumes"][:3] == theirs["volumes"]
    c_ours, c_theirs = ours["containers"][0], theirs["containers"][0]
    for key in ("image", "env", "securityContext", "resources"):
        assert c_ours[key] == c_theirs[key], key
    assert c_ours["volumeMounts"][:3] == c_theirs["volumeMounts"]
    conf_args = ["--conf-paths", "/etc/medhelm/conf/suite.conf"]
    assert [a for a in c_ours["args"] if a not in conf_args] == c_theirs["args"]


def test_submit_errors_are_one_line(tmp_path):
    done = _medhelm("k8s", "submit", "--suite", "Bad_Suite", "-r", "pubmed_qa", "--dry-run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--suite" in done.stderr
    done = _medhelm("k8s", "submit", "--dry-run")
    assert done.returncode == 2 and "nothing to run" in done.stderr


def test_status_and_logs_drive_kubectl(tmp_path):
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "kubectl"
    status = {"metadata": {"name": "medhelm-eval-s"}, "spec": {"completions": 3},
              "status": {"succeeded": 2, "failed": 1, "active": 0, "completedIndexes": "0,2", "failedIndexes": "1",
                         "conditions": [{"type": "Failed", "status": "True"}]}}
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\ncase \"$*\" in\n"
                    f"  *'get job'*) echo '{json.dumps(status)}' ;;\n  *logs*) echo '[pod/x] shard 1/3 done' ;;\nesac\n")
    fake.chmod(0o755)
    done = _medhelm("k8s", "status", "--suite", "s", "-n", "clinical-ai", "--kubectl", str(fake))
    assert done.returncode == 2  # a failed index fails the status check
    assert "2/3 shards done" in done.stdout and "failed indexes: 1" in done.stdout
    done = _medhelm("k8s", "logs", "--suite", "s", "--kubectl", str(fake))
    assert done.returncode == 0 and "shard 1/3 done" in done.stdout
    assert calls.read_text().splitlines() == [
        "-n clinical-ai get job medhelm-eval-s -o json",
        "-n clinical-ai get pods -l batch.kubernetes.io/job-name=medhelm-eval-s -o json",
        "logs -l batch.kubernetes.io/job-name=medhelm-eval-s --prefix --all-containers --tail=200"]
