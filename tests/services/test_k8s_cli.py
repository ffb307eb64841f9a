"""`medhelm k8s`: the submitted manifests validate against Kubernetes 1.30 (strict) and match the chart's
own Job template; status/logs drive kubectl (a recording stand-in: no API server can run here)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ENTRIES = ["pubmed_qa:model=qwen/qwen2.5-7b-instruct,max_eval_instances=100",
           "aci_bench:model=qwen/qwen2.5-7b-instruct,max_eval_instances=50"]


def _medhelm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def _fake_kubectl(tmp_path: Path, calls: Path, cases: dict[str, str]) -> Path:
    """A recording kubectl: every call's args appended to ``calls``; ``cases`` maps a shell ``case`` pattern to
    what that call prints (``apply`` reads its manifest from stdin)."""
    fake = tmp_path / "kubectl"
    arms = "".join(f"  {pattern}) {action} ;;\n" for pattern, action in cases.items())
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\ncase \"$*\" in\n{arms}esac\n")
    fake.chmod(0o755)
    return fake


def _helm_template(helm_bin, repo_root, tmp_path, values_file: str | None, *sets: str) -> str:
    extra = ["-f", values_file] if values_file else []
    done = subprocess.run([str(helm_bin), "template", "rel", ".", "--namespace", "clinical-ai", *extra, *sets],
                          cwd=repo_root / "helm-charts" / "medhelm", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("values_file", [None, "ci/full-values.yaml"])
def test_submit_renders_the_charts_own_job(values_file, repo_root, tmp_path, helm_bin, kubernetes_validate):
    """The submitted Job is the chart's Job (from its job-template ConfigMap) with only the suite, entries,
    shard counts and name replaced: with default values and with every option on (pull secrets, node
    selector, tolerations, mutual TLS with the Job's own client certificate, PostgreSQL, ServiceAccount)."""
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(_helm_template(helm_bin, repo_root, tmp_path, values_file))
    conf = tmp_path / "suite.conf"
    conf.write_text('entries: [{description: "pubmed_qa:model=qwen/qwen2.5-7b-instruct", priority: 1}]\n')
    done = _medhelm("k8s", "submit", "--release", "rel", "--suite", "nightly", "--shards", "4", "--parallelism", "2",
                    "--job-template", str(release_yaml), "-r", *ENTRIES, "-c", str(conf), "--dry-run")
    assert done.returncode == 0, done.stderr
    (tmp_path / "out.yaml").write_text(done.stdout)
    check = subprocess.run([*kubernetes_validate, str(tmp_path / "out.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    conf_map, job = list(yaml.safe_load_all(done.stdout))
    assert conf_map["kind"] == "ConfigMap" and conf_map["data"] == {"suite.conf": conf.read_text()}
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--conf-paths") + 1] == "/etc/medhelm/conf/suite.conf"

    # the chart's own Job for the same suite, rendered with the same values
    rendered = _helm_template(helm_bin, repo_root, tmp_path, values_file, "--set", "job.enabled=true",
                              "--set", "job.suite=nightly", "--set", "job.completions=4", "--set", "job.parallelism=2",
                              "--set-json", f"job.runEntries={json.dumps(ENTRIES)}")
    chart_job = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job")
    # the chart's Job carries a hash of its spec (a helm upgrade that changes it makes a new Job, docs/kubernetes.md)
    assert job["metadata"]["name"] == "rel-medhelm-eval-nightly"
    assert re.fullmatch(r"rel-medhelm-eval-nightly-[0-9a-f]{6}", chart_job["metadata"]["name"])
    chart_job["metadata"]["name"] = job["metadata"]["name"]
    ours = copy.deepcopy(job)
    ours_pod = ours["spec"]["template"]["spec"]
    c = ours_pod["containers"][0]
    c["args"] = [a for a in c["args"] if a not in ("--conf-paths", "/etc/medhelm/conf/suite.conf")]
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "conf"]
    ours_pod["volumes"] = [v for v in ours_pod["volumes"] if v["name"] != "conf"]
    assert ours == chart_job  # everything else identical, field by field
    pod = chart_job["spec"]["template"]["spec"]
    if values_file:  # non-default values really reached the submitted Job
        assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["nodeSelector"] == {"medhelm.io/pool": "eval"}
        assert pod["tolerations"][0]["key"] == "dedicated"
        assert {"name": "tls", "secret": {"optional": False, "secretName": "medhelm-job-tls"}} in pod["volumes"]
        assert c["image"] == "registry.hospital.internal/medhelm-k8s:0.2.0"
    assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "rel-medhelm"
    assert not any(e["name"] == "MEDHELM_STORE_URL" for e in c["env"])  # shards never see the store's password


def test_collect_job_summarizes_with_the_store_secret(repo_root, tmp_path, helm_bin):
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(_helm_template(helm_bin, repo_root, tmp_path, "ci/full-values.yaml"))
    calls = tmp_path / "calls.txt"
    done_job = json.dumps({"metadata": {"name": "rel-medhelm-eval-nightly-collect"},
                           "status": {"conditions": [{"type": "Complete", "status": "True"}]}})
    fake = _fake_kubectl(tmp_path, calls, {"apply*": f"cat > {tmp_path}/applied.yaml",
                                           "'get job rel-medhelm-eval-nightly-collect'*": f"echo '{done_job}'",
                                           "logs*": "echo 'complete 4/4 run'"})
    done = _medhelm("k8s", "collect", "--release", "rel", "--suite", "nightly", "--kubectl", str(fake),
                    "--job-template", str(release_yaml))
    assert done.returncode == 0, done.stderr
    job = yaml.safe_load((tmp_path / "applied.yaml").read_text())
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert job["metadata"]["name"] == "rel-medhelm-eval-nightly-collect"
    assert c["args"] == ["collect", "--suite=nightly", "--output-path=/data/benchmark_output", "--summarize",
                         "--local-path=/data/prod_env"]  # prices.yaml on the volume, as the shards used
    store = [e for e in c["env"] if e["name"] == "MEDHELM_STORE_URL"]
    assert store == [{"name": "MEDHELM_STORE_URL",
                      "valueFrom": {"secretKeyRef": {"name": "medhelm-postgres", "key": "url"}}}]
    assert calls.read_text().splitlines()[:2] == [
        "get job rel-medhelm-eval-nightly -o json --ignore-not-found",  # the suite's Job: not failed (none here)
        "get jobs -l app.kubernetes.io/instance=rel,medhelm.io/suite=nightly -o json"]  # nor one of the chart's
    assert "delete job rel-medhelm-eval-nightly-collect --ignore-not-found --wait=true" in calls.read_text()


@pytest.mark.parametrize("which", ["suite", "collect"])
def test_collect_stops_as_soon_as_a_job_fails_naming_its_indexes(which, repo_root, tmp_path, helm_bin):
    """A failed suite Job is named with its failed indexes before anything is collected; a collect Job that
    fails ends the wait at once (the first poll sees it), not after --timeout (1h here)."""
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(_helm_template(helm_bin, repo_root, tmp_path, None))
    calls = tmp_path / "calls.txt"
    failed = {"spec": {"completions": 4}, "status": {"failed": 2, "failedIndexes": "1,3", "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "FailedIndexes"},
        {"type": "Failed", "status": "True", "reason": "FailedIndexes"}]}}
    suite = {**failed, "metadata": {"name": "rel-medhelm-eval-nightly"}} if which == "suite" else {}
    collect = {"metadata": {"name": "rel-medhelm-eval-nightly-collect"}, "status": {
        "failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    fake = _fake_kubectl(tmp_path, calls, {"'get job rel-medhelm-eval-nightly -o'*": f"echo '{json.dumps(suite)}'",
                                           "'get job rel-medhelm-eval-nightly-collect'*": f"echo '{json.dumps(collect)}'",
                                           "apply*": "cat > /dev/null", "logs*": "echo 'collect: missing instances'"})
    done = _medhelm("k8s", "collect", "--release", "rel", "--suite", "nightly", "--kubectl", str(fake),
                    "--job-template", str(release_yaml), "--timeout", "1h")
    assert done.returncode == 2
    lines = calls.read_text().splitlines()
    if which == "suite":
        assert done.stderr.count("\n") == 1 and "rel-medhelm-eval-nightly failed (failed indexes: 1,3)" in done.stderr
        assert lines == ["get job rel-medhelm-eval-nightly -o json --ignore-not-found"]  # nothing collected
    else:
        assert "collect job rel-medhelm-eval-nightly-collect: failed (BackoffLimitExceeded)" in done.stderr
        assert lines.count("get job rel-medhelm-eval-nightly-collect -o json") == 1  # the first poll ends it


def test_resubmit_replaces_a_finished_job_and_refuses_a_running_one(repo_root, tmp_path, helm_bin):
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(_helm_template(helm_bin, repo_root, tmp_path, None))
    calls = tmp_path / "calls.txt"
    for active, expect in ((0, 0), (2, 2)):
        calls.write_text("")
        status = {"status": {"active": active, "failed": 1, "failedIndexes": "1"}}
        fake = _fake_kubectl(tmp_path, calls, {"'get job'*": f"echo '{json.dumps(status)}'", "apply*": "cat > /dev/null"})
        done = _medhelm("k8s", "submit", "--release", "rel", "--suite", "s", "--kubectl", str(fake),
                        "--job-template", str(release_yaml), "-r", ENTRIES[0])
        assert done.returncode == expect, done.stderr
        lines = calls.read_text().splitlines()
        if active:
            assert "still has 2 shard(s) running" in done.stderr and not any(x.startswith("apply") for x in lines)
        else:  # the failed Job is deleted and created again: its shards resume from the volume
            assert lines == ["get jobs -l app.kubernetes.io/instance=rel,medhelm.io/suite=s -o json",
                             "get job rel-medhelm-eval-s -o json --ignore-not-found",
                             "delete job rel-medhelm-eval-s --wait=true --ignore-not-found", "apply -f -"]
            assert "shards resume" in done.stdout


def test_submit_refuses_to_run_beside_the_charts_own_job_of_the_suite(repo_root, tmp_path, helm_bin):
    """The chart's Job is hash-named, so `submit` finds it by its labels: while it runs the suite, a submitted
    Job of the same suite (which would write the same shard files) is refused, one line naming it; `status`
    reports the chart's Job when no submitted one exists."""
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(_helm_template(helm_bin, repo_root, tmp_path, None))
    calls = tmp_path / "calls.txt"
    chart_job = {"metadata": {"name": "rel-medhelm-eval-s-1a2b3c", "creationTimestamp": "2026-11-27T01:00:00Z"},
                 "spec": {"completions": 3}, "status": {"active": 2, "succeeded": 1, "completedIndexes": "0"}}
    older = {"metadata": {"name": "rel-medhelm-eval-s-999999", "creationTimestamp": "2026-11-20T01:00:00Z"},
             "spec": {"completions": 3}, "status": {"succeeded": 3}}
    listed = json.dumps({"items": [chart_job, older]})
    fake = _fake_kubectl(tmp_path, calls, {"'get jobs -l'*": f"echo '{listed}'", "apply*": "cat > /dev/null"})
    done = _medhelm("k8s", "submit", "--release", "rel", "--suite", "s", "--kubectl", str(fake),
                    "--job-template", str(release_yaml), "-r", ENTRIES[0])
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "rel-medhelm-eval-s-1a2b3c (the release's own) is running suite s" in done.stderr
    assert not any(line.startswith("apply") for line in calls.read_text().splitlines())
    done = _medhelm("k8s", "status", "--release", "rel", "--suite", "s", "--kubectl", str(fake))
    assert done.returncode == 0 and "rel-medhelm-eval-s-1a2b3c: 1/3 shards done, 2 running" in done.stdout


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
        "-n clinical-ai get job medhelm-eval-s -o json --ignore-not-found",
        "-n clinical-ai get pods -l batch.kubernetes.io/job-name=medhelm-eval-s -o json",
        "get job medhelm-eval-s -o json --ignore-not-found",
        "logs -l batch.kubernetes.io/job-name=medhelm-eval-s --prefix --all-containers --tail=200"]
