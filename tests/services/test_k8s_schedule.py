"""Evaluation schedules: the chart's CronJobs (values.schedules) and `medhelm k8s schedule create|list|delete`.

The CronJob the chart renders and the one the CLI builds validate against Kubernetes 1.30 (strict) and are
the same object field by field; their Job is the Job `medhelm k8s submit` launches (only the dated suite,
the last shard's summarize, the Job's name from the downward API and the store env are added). kubectl is
a recording stand-in (no API server can run here), as in test_k8s_cli.py. The suite's date comes from the
scheduled time the CronJob controller encodes in each Job's name, in the schedule's time zone."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from medhelm import schedules
from medhelm.errors import ConfigError

from .conftest import write_deployment, write_qa_benchmark

ENTRIES = ["pubmed_qa:model=qwen/qwen2.5-7b-instruct,max_eval_instances=100"]
CONF = 'entries: [{description: "medcalc_bench:model=qwen/qwen2.5-7b-instruct", priority: 1}]\n'
# 00:30 in Berlin on 24 Nov 2026 is 23:30 UTC on the 23rd: the suite takes the schedule's local date
SCHEDULED = datetime(2026, 11, 23, 23, 30, tzinfo=timezone.utc)
MINUTE = int(SCHEDULED.timestamp()) // 60
SCHEDULE_ARGS = ["--schedule", "30 0 * * *", "--timezone", "Europe/Berlin", "--shards", "4", "--parallelism", "2",
                 "-m", "200", "--models-to-run", "qwen/qwen2.5-7b-instruct", "--concurrency-policy", "Forbid",
                 "--keep-successful", "5", "--keep-failed", "2"]
CHART_SCHEDULE = {"name": "nightly", "schedule": "30 0 * * *", "timeZone": "Europe/Berlin", "shards": 4,
                  "parallelism": 2, "maxEvalInstances": 200, "models": ["qwen/qwen2.5-7b-instruct"],
                  "runEntries": ENTRIES, "conf": CONF, "successfulJobsHistoryLimit": 5, "failedJobsHistoryLimit": 2}
SCHEDULE_ONLY_ARGS = {"--suite-date", "--date-format=%Y-%m-%d", "--timezone=Europe/Berlin",
                      "--summarize-when-complete", "--max-eval-instances=200", "--models-to-run",
                      "qwen/qwen2.5-7b-instruct", "--conf-paths", "/etc/medhelm/conf/nightly.conf"}


def _medhelm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def _helm(helm_bin, repo_root, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm_bin), *args], cwd=repo_root / "helm-charts" / "medhelm", capture_output=True,
                          text=True, timeout=60)


def _template(helm_bin, repo_root, values_file: str | None, *sets: str) -> list[dict]:
    extra = ["-f", values_file] if values_file else []
    done = _helm(helm_bin, repo_root, "template", "rel", ".", "--namespace", "clinical-ai", *extra, *sets)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _validate(kubernetes_validate, docs: list[dict], path: Path) -> None:
    path.write_text(yaml.safe_dump_all(docs))
    check = subprocess.run([*kubernetes_validate, str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


# ------------------------------------------------------------------------------------------------
# names and dates


def test_scheduled_time_and_dated_suite():
    # the CronJob controller names each Job <cronjob>-<scheduled time in minutes since the epoch>
    assert schedules.scheduled_time(f"rel-medhelm-cron-nightly-{MINUTE}") == SCHEDULED
    assert schedules.scheduled_time("rel-medhelm-cron-nightly-manual") is None  # `kubectl create job --from`
    assert schedules.scheduled_time("rel-medhelm-cron-nightly-12") is None
    assert schedules.scheduled_time(None) is None
    assert schedules.dated_suite("nightly", SCHEDULED) == "nightly-2026-11-23"  # UTC
    assert schedules.dated_suite("nightly", SCHEDULED, tz="Europe/Berlin") == "nightly-2026-11-24"
    assert schedules.dated_suite("nightly", SCHEDULED, tz="America/New_York",
                                 date_format="%Y-%m-%d-%H%M") == "nightly-2026-11-23-1830"
    for bad in (lambda: schedules.dated_suite("n", SCHEDULED, tz="Mars/Olympus"),
                lambda: schedules.dated_suite("n", SCHEDULED, date_format="%Y/%m/%d"),
                lambda: schedules.dated_suite("n", SCHEDULED, date_format="daily"),
                lambda: schedules.check_cron("0 2 * *"), lambda: schedules.check_cron("CRON_TZ=UTC 0 2 * * *"),
                lambda: schedules.cronjob_name("rel-medhelm", "Nightly"),
                lambda: schedules.cronjob_name("a-very-long-release-name-medhelm", "and-a-long-schedule")):
        with pytest.raises(ConfigError):
            bad()
    assert schedules.check_cron("@daily") == "@daily" and schedules.check_cron(" 0 2 * * 1-5 ") == "0 2 * * 1-5"


def test_job_suite_date_from_the_jobs_name(tmp_path, refused_url):
    """`medhelm job --suite-date` names the suite from MEDHELM_JOB_NAME (what the downward API gives the pod),
    the same in every shard; --dry-run plans without calling a model."""
    cfg = write_qa_benchmark(tmp_path / "bench", 6)
    write_deployment(tmp_path / "env", f"{refused_url}/v1")
    conf = tmp_path / "x.conf"
    conf.write_text(f'entries: [{{description: "medhelm_configurable_benchmark:model=mock/svc-model,'
                    f'config_path={cfg}", priority: 1}}]\n')
    for index in (0, 3):
        done = _medhelm("job", "--suite", "nightly", "--suite-date", "--timezone", "Europe/Berlin", "-c", str(conf),
                        "--shard-index", str(index), "--shard-count", "4", "--dry-run", "-o", str(tmp_path / "out"),
                        "--local-path", str(tmp_path / "env"),
                        env={"MEDHELM_JOB_NAME": f"rel-medhelm-cron-nightly-{MINUTE}"})
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "scheduled suite nightly-2026-11-24"
    done = _medhelm("job", "--suite", "nightly", "--suite-date", "--timezone", "Nowhere/City", "-c", str(conf),
                    "--shard-index", "0", "--shard-count", "1", "--dry-run",
                    env={"MEDHELM_JOB_NAME": f"x-{MINUTE}"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--timezone" in done.stderr


# ------------------------------------------------------------------------------------------------
# the chart's CronJobs


@pytest.mark.parametrize("values_file", [None, "ci/full-values.yaml"])
def test_chart_schedule_and_cli_schedule_are_the_same_cronjob(values_file, repo_root, tmp_path, helm_bin,
                                                              kubernetes_validate):
    """The chart's CronJob for a schedule and `schedule create --dry-run` with the same settings are one
    object (CronJob spec, Job spec, pod template); with default values and with every option on (mutual TLS,
    PostgreSQL store, pull secrets, node selector...)."""
    sets = ["--set-json", f"schedules={json.dumps([CHART_SCHEDULE])}"]
    docs = _template(helm_bin, repo_root, values_file, *sets)
    _validate(kubernetes_validate, docs, tmp_path / "chart.yaml")
    chart_cron = next(d for d in docs if d["kind"] == "CronJob" and d["metadata"]["name"] == "rel-medhelm-cron-nightly")
    chart_conf = next(d for d in docs if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"] == "rel-medhelm-cron-nightly-conf")
    assert chart_conf["data"] == {"nightly.conf": CONF}

    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(yaml.safe_dump_all(_template(helm_bin, repo_root, values_file)))
    conf = tmp_path / "nightly.conf"
    conf.write_text(CONF)
    done = _medhelm("k8s", "schedule", "create", "nightly", "--release", "rel", "--job-template", str(release_yaml),
                    *SCHEDULE_ARGS, "-r", *ENTRIES, "-c", str(conf), "--dry-run")
    assert done.returncode == 0, done.stderr
    cli_docs = list(yaml.safe_load_all(done.stdout))
    _validate(kubernetes_validate, cli_docs, tmp_path / "cli.yaml")
    cli_conf, cli_cron = cli_docs
    assert cli_conf["metadata"]["name"] == chart_conf["metadata"]["name"] and cli_conf["data"] == chart_conf["data"]
    assert cli_cron["metadata"]["name"] == chart_cron["metadata"]["name"]
    assert cli_cron["spec"] == chart_cron["spec"]  # schedule, zone, policy, limits, the whole Job: field by field
    assert chart_cron["spec"]["timeZone"] == "Europe/Berlin" and chart_cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert chart_cron["spec"]["successfulJobsHistoryLimit"] == 5 and chart_cron["spec"]["failedJobsHistoryLimit"] == 2

    job_spec = chart_cron["spec"]["jobTemplate"]["spec"]
    pod = job_spec["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["MEDHELM_JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['batch.kubernetes.io/job-name']"
    store = env.get("MEDHELM_STORE_URL")  # the last shard summarizes: the store's Secret, never a literal
    assert (store is not None) == bool(values_file) and (store is None or "value" not in store)
    # least privilege: no API token, non-root, read-only root; the ServiceAccount is the release's
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False

    # ... and the Job is the one `medhelm k8s submit` launches, plus the schedule's pieces
    sub = _medhelm("k8s", "submit", "--release", "rel", "--suite", "nightly", "--shards", "4", "--parallelism", "2",
                   "--job-template", str(release_yaml), "-r", *ENTRIES, "--dry-run")
    assert sub.returncode == 0, sub.stderr
    (submitted,) = list(yaml.safe_load_all(sub.stdout))
    ours = copy.deepcopy(job_spec)
    oc = ours["template"]["spec"]["containers"][0]
    oc["args"] = [a for a in oc["args"] if a not in SCHEDULE_ONLY_ARGS]
    oc["env"] = [e for e in oc["env"] if e["name"] not in ("MEDHELM_JOB_NAME", "MEDHELM_STORE_URL")]
    oc["volumeMounts"] = [m for m in oc["volumeMounts"] if m["name"] != "conf"]
    ours["template"]["spec"]["volumes"] = [v for v in ours["template"]["spec"]["volumes"] if v["name"] != "conf"]
    del ours["template"]["metadata"]["labels"]["medhelm.io/schedule"]
    assert ours == submitted["spec"]
    assert chart_cron["spec"]["jobTemplate"]["metadata"]["labels"]["medhelm.io/schedule"] == "nightly"
    # the shards carry the Job's pod labels: the same NetworkPolicy rules and PodMonitor select them
    policies = [d for d in docs if d["kind"] in ("NetworkPolicy", "PodMonitor")]
    job_labels = {k: v for k, v in job_spec["template"]["metadata"]["labels"].items() if k != "medhelm.io/schedule"}
    assert job_labels == submitted["spec"]["template"]["metadata"]["labels"]
    for pol in policies:
        sel = (pol["spec"].get("podSelector") or pol["spec"].get("selector") or {}).get("matchLabels", {})
        labels = job_spec["template"]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in sel.items()) == all(job_labels.get(k) == v for k, v in sel.items())


def test_chart_schedule_values_are_checked(repo_root, helm_bin):
    for bad, expect in (
            ({"name": "x", "schedule": "0 2 * * *"}, "give runEntries and/or conf"),
            ({"name": "x", "schedule": "0 2 * * *", "runEntries": ENTRIES, "concurrencyPolicy": "Never"},
             "concurrencyPolicy"),
            ({"name": "Nightly", "schedule": "0 2 * * *", "runEntries": ENTRIES}, "schedules.0.name"),
            ({"name": "x", "runEntries": ENTRIES}, "schedule"),
            ({"name": "x", "schedule": "0 2 * * *", "runEntries": ENTRIES, "shard": 3}, "shard"),
            ({"name": "a-rather-long-schedule-name-x", "schedule": "0 2 * * *", "runEntries": ENTRIES},
             "longer than 52 characters")):
        done = _helm(helm_bin, repo_root, "template", "a-long-release-name", ".", "--set-json",
                     f"schedules={json.dumps([bad])}")
        assert done.returncode != 0 and expect in done.stderr, (bad, done.stderr)
    # defaults: Forbid, not suspended, a starting deadline, three Jobs of history each
    docs = _template(helm_bin, repo_root, None, "--set-json",
                     "schedules=" + json.dumps([{"name": "d", "schedule": "@daily", "runEntries": ENTRIES}]))
    (cron,) = [d for d in docs if d["kind"] == "CronJob"]
    assert {k: v for k, v in cron["spec"].items() if k != "jobTemplate"} == {
        "schedule": "@daily", "concurrencyPolicy": "Forbid", "suspend": False, "startingDeadlineSeconds": 3600,
        "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3}
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-conf")]


def test_submitter_role_may_manage_schedules_and_nothing_more(repo_root, helm_bin):
    docs = _template(helm_bin, repo_root, None)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    cron_rules = [r for r in role["rules"] if "cronjobs" in r["resources"]]
    assert cron_rules == [{"apiGroups": ["batch"], "resources": ["cronjobs"],
                           "verbs": ["get", "list", "create", "delete", "patch"]}]
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "RoleBinding")]


# ------------------------------------------------------------------------------------------------
# `medhelm k8s schedule` against a recording kubectl


def _fake_kubectl(tmp_path: Path, replies: dict[str, str]) -> tuple[Path, Path]:
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    fake = tmp_path / "kubectl"
    cases = "".join(f"  {pattern}) cat <<'EOF'\n{reply}\nEOF\n  ;;\n" for pattern, reply in replies.items())
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\ncase \"$*\" in\n"
                    f"  *apply*) cat > {tmp_path}/applied.yaml ;;\n{cases}esac\n")
    fake.chmod(0o755)
    return fake, calls


def test_schedule_create_list_delete_drive_kubectl(repo_root, tmp_path, helm_bin, kubernetes_validate):
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(yaml.safe_dump_all(_template(helm_bin, repo_root, None)))
    template_cm = next(d for d in yaml.safe_load_all(release_yaml.read_text()) if d["kind"] == "ConfigMap"
                       and d["metadata"]["name"] == "rel-medhelm-job-template")

    # create: the job template from the cluster's ConfigMap, then apply
    fake, calls = _fake_kubectl(tmp_path, {"*'get configmap rel-medhelm-job-template'*": json.dumps(template_cm)})
    done = _medhelm("k8s", "schedule", "create", "nightly", "--release", "rel", "-n", "clinical-ai",
                    "--kubectl", str(fake), *SCHEDULE_ARGS, "-r", *ENTRIES)
    assert done.returncode == 0, done.stderr
    assert "created schedule nightly (rel-medhelm-cron-nightly)" in done.stdout
    assert calls.read_text().splitlines() == [
        "-n clinical-ai get configmap rel-medhelm-job-template -o json",
        "-n clinical-ai get cronjob rel-medhelm-cron-nightly -o json --ignore-not-found",
        "-n clinical-ai apply -f -"]
    applied = list(yaml.safe_load_all((tmp_path / "applied.yaml").read_text()))
    _validate(kubernetes_validate, applied, tmp_path / "applied-check.yaml")
    (cron,) = applied
    assert cron["kind"] == "CronJob" and cron["spec"]["schedule"] == "30 0 * * *"
    assert cron["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "medhelm-k8s-schedule"

    # list: the last run's suite is the schedule's local date of lastScheduleTime
    listed = {"items": [
        {**cron, "status": {"lastScheduleTime": "2026-11-23T23:30:00Z", "active": [{"name": f"x-{MINUTE}"}]}},
        {"metadata": {"name": "rel-medhelm-cron-weekly", "labels": {"medhelm.io/schedule": "weekly",
                                                                    "app.kubernetes.io/managed-by": "Helm"}},
         "spec": {"schedule": "0 3 * * 6", "suspend": True, "jobTemplate": cron["spec"]["jobTemplate"]},
         "status": {}}]}
    fake, calls = _fake_kubectl(tmp_path, {"*'get cronjobs'*": json.dumps(listed)})
    done = _medhelm("k8s", "schedule", "list", "--release", "rel", "--kubectl", str(fake))
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        "get cronjobs -l app.kubernetes.io/instance=rel,medhelm.io/schedule -o json"]
    header, nightly, weekly = done.stdout.splitlines()
    assert header.split()[:3] == ["SCHEDULE", "CRON", "TIMEZONE"]
    assert nightly.split() == ["nightly", "30", "0", "*", "*", "*", "Europe/Berlin", "active", "2026-11-23",
                               "23:30:00", "nightly-2026-11-24", "1", "cli"]
    assert weekly.split()[-4:] == ["-", "-", "0", "chart"] and "suspended" in weekly

    # delete: a CLI schedule goes (a running Job finishes), its .conf ConfigMap with it
    fake, calls = _fake_kubectl(tmp_path, {"*'get cronjob rel-medhelm-cron-nightly'*": json.dumps(cron)})
    done = _medhelm("k8s", "schedule", "delete", "nightly", "--release", "rel", "--kubectl", str(fake))
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        "get cronjob rel-medhelm-cron-nightly -o json --ignore-not-found",
        "delete cronjob rel-medhelm-cron-nightly --cascade=orphan",
        "delete configmap rel-medhelm-cron-nightly-conf --ignore-not-found"]

    # the chart's own schedules are the chart's: neither replaced nor deleted behind helm's back
    helm_owned = json.dumps(listed["items"][1])
    fake, calls = _fake_kubectl(tmp_path, {"*'get cronjob rel-medhelm-cron-weekly'*": helm_owned,
                                           "*'get configmap rel-medhelm-job-template'*": json.dumps(template_cm)})
    for cmd in (["delete", "weekly"], ["create", "weekly", "--schedule", "0 4 * * *", "-r", ENTRIES[0]]):
        done = _medhelm("k8s", "schedule", *cmd, "--release", "rel", "--kubectl", str(fake))
        assert done.returncode == 2 and "declared in the chart's values" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
    assert not [c for c in calls.read_text().splitlines() if c.startswith(("apply", "delete"))]
    fake, calls = _fake_kubectl(tmp_path, {})
    done = _medhelm("k8s", "schedule", "delete", "gone", "--release", "rel", "--kubectl", str(fake))
    assert done.returncode == 2 and "no schedule gone" in done.stderr


@pytest.mark.parametrize("args, expect", [
    (["create", "nightly", "--schedule", "0 2 * *", "-r", "x"], "--schedule"),
    (["create", "nightly", "--schedule", "0 2 * * *", "--timezone", "Mars/Base", "-r", "x"], "--timezone"),
    (["create", "Nightly", "--schedule", "0 2 * * *", "-r", "x"], "--name"),
    (["create", "nightly-but-with-a-name-much-too-long-really", "--schedule", "0 2 * * *", "-r", "x"], "52"),
    (["create", "nightly", "--schedule", "0 2 * * *"], "nothing to run"),
    (["create", "nightly", "--schedule", "0 2 * * *", "--date-format", "%d/%m", "-r", "x"], "--date-format"),
    (["create", "nightly", "--schedule", "0 2 * * *", "--shards", "0", "-r", "x"], "--shards"),
])
def test_schedule_errors_are_one_line(args, expect, repo_root, tmp_path, helm_bin):
    release_yaml = tmp_path / "release.yaml"
    release_yaml.write_text(yaml.safe_dump_all(_template(helm_bin, repo_root, None)))
    done = _medhelm("k8s", "schedule", *args, "--release", "medhelm", "--job-template", str(release_yaml),
                    "--dry-run", "--kubectl", "/nonexistent/kubectl")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expect in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_finalize_leaves_a_suite_with_a_run_being_prepared(tmp_path, capsys):
    """A shard that finishes while another shard is still creating a run (run_spec.json written, its
    selection not yet) does not summarize and does not fail: that run is owed."""
    from medhelm.cli.job import finalize_when_complete, owed_shards

    run = tmp_path / "runs" / "s" / "r"
    run.mkdir(parents=True)
    (run / "run_spec.json").write_text("{}")
    assert owed_shards(tmp_path / "runs" / "s") == {"r": [-1]}
    assert owed_shards(tmp_path / "runs" / "nothing") is None
    assert finalize_when_complete("s", tmp_path) == 0
    assert "still owe instances" in capsys.readouterr().out
    assert not (tmp_path / "runs" / "s" / ".finalize.lock").exists() and not (tmp_path / "results.sqlite").exists()
