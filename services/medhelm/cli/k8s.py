"""`medhelm k8s submit|status|logs|collect|schedule` — drive evaluation Jobs on a cluster with kubectl.

One source for the Job: the chart publishes its own Job manifest (the helper that also renders
``templates/job.yaml``, with the release's values: image, pull secrets, node selector, tolerations, TLS,
volume, services, ServiceAccount) in the ConfigMap ``<release>-medhelm-job-template``. ``submit`` reads
it (or ``--job-template FILE``, e.g. ``helm template`` output) and replaces only the suite, the run
entries, the shard counts and the name. Re-submitting a suite whose Job has finished or failed deletes the
old Job and creates it again: finished instances stay on the volume, so the shards resume where they
stopped. ``--dry-run`` prints the manifests instead of applying them. Errors are one line, exit 2.

``schedule create`` wraps the same Job (the same ``build_job``) in a CronJob ``<release>-medhelm-cron-<name>``
— exactly what the chart renders for an entry of ``values.schedules`` — whose shards write the suite
``<name>-<scheduled date>`` and whose last shard summarizes it (medhelm/cli/job.py, medhelm/schedules.py);
``schedule list`` shows each schedule with its last run's suite, ``schedule delete`` removes it (a running
Job finishes; the chart's own schedules are refused: remove them from the values).

The manifests themselves are built in ``medhelm/manifests.py``; this door parses the command line, runs
kubectl and prints.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from medhelm import files, schedules
from medhelm.cli.run import concurrency_arg
from medhelm.errors import ConfigError, MedhelmError
from medhelm.manifests import (collect_job, fullname, job_name, parse_template, schedule_manifests,
                               submit_manifests, template_name)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("submit", "start a suite as an Indexed Job"), ("status", "shards done / running / failed"),
                       ("logs", "the shards' logs"),
                       ("collect", "merge the shards and summarize them into the results store")):
        a = sub.add_parser(name, help=text, description=text)
        a.add_argument("--release", default="medhelm", help="helm release name (default: %(default)s)")
        a.add_argument("-n", "--namespace", default=None, help="namespace (default: kubectl's current)")
        a.add_argument("--suite", default="default", help="suite name (default: %(default)s)")
        a.add_argument("--kubectl", default="kubectl", help="kubectl executable (default: %(default)s)")
        if name in ("submit", "collect"):
            a.add_argument("--job-template", type=Path, metavar="FILE",
                           help="the release's Job from a file (`helm template` output, the job-template "
                                "ConfigMap, or a Job) instead of the cluster's ConfigMap")
            a.add_argument("--image", help="image (default: the release's)")
        if name == "submit":
            a.add_argument("-r", "--run-entries", nargs="+", default=[], metavar="ENTRY")
            a.add_argument("-c", "--conf-paths", nargs="+", default=[], type=Path, metavar="CONF",
                           help="run-entry files (shipped to the Job in a ConfigMap)")
            a.add_argument("--shards", type=int, default=3, help="completions = shards (default: %(default)s)")
            a.add_argument("--parallelism", type=int, help="shards at once (default: all)")
            a.add_argument("--max-concurrency", type=concurrency_arg, default="auto",
                           help="requests in flight per shard: a number, or auto (paced to each server; default)")
            a.add_argument("-m", "--max-eval-instances", type=int, help="sample at most N instances per run")
            a.add_argument("--no-services", action="store_true", help="compute everything inside the shards")
            a.add_argument("--replace", action="store_true",
                           help="replace the suite's Job even while shards still run (default: only a "
                                "finished or failed Job is replaced; its shards resume)")
            a.add_argument("--dry-run", action="store_true", help="print the manifests; apply nothing")
        if name == "status":
            a.add_argument("--metrics-port", type=int, default=9090, help="the shards' /metrics port (default: %(default)s)")
        if name == "logs":
            a.add_argument("--tail", type=int, default=200, help="lines per shard (default: %(default)s)")
        if name == "collect":
            a.add_argument("--local", type=Path, metavar="OUTPUT_PATH",
                           help="the results volume is mounted here: collect in this process")
            a.add_argument("--timeout", default="600s", help="how long to wait for the collect Job")
            a.add_argument("--no-summarize", action="store_true",
                           help="merge only (default: then `medhelm summarize` the suite for the dashboard)")


    add_schedule_arguments(sub.add_parser("schedule", help="evaluation schedules (CronJobs): create, list, delete",
                                          description="evaluation schedules (CronJobs): create, list, delete"))


def add_schedule_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="schedule_action", metavar="ACTION", required=True)
    for name, text in (("create", "create or update a schedule (a CronJob launching the release's Job)"),
                       ("list", "the release's schedules and their last runs"),
                       ("delete", "delete a schedule (a running Job finishes; results stay)")):
        a = sub.add_parser(name, help=text, description=text)
        a.add_argument("--release", default="medhelm", help="helm release name (default: %(default)s)")
        a.add_argument("-n", "--namespace", default=None, help="namespace (default: kubectl's current)")
        a.add_argument("--kubectl", default="kubectl", help="kubectl executable (default: %(default)s)")
        if name != "list":
            a.add_argument("name", help="schedule name (lowercase, digits, '-'); suites are <name>-<date>")
        if name == "delete":
            a.add_argument("--stop-running", action="store_true",
                           help="also delete a running Job of the schedule (default: it finishes)")
        if name != "create":
            continue
        a.add_argument("--schedule", required=True, metavar="CRON", help="cron expression, e.g. '0 2 * * *'")
        a.add_argument("--timezone", help="IANA time zone of the schedule and of the suite's date (default UTC)")
        a.add_argument("--job-template", type=Path, metavar="FILE",
                       help="the release's Job from a file (`helm template` output, the job-template ConfigMap, or "
                            "a Job) instead of the cluster's ConfigMap")
        a.add_argument("--image", help="image (default: the release's)")
        a.add_argument("-r", "--run-entries", nargs="+", default=[], metavar="ENTRY")
        a.add_argument("-c", "--conf-paths", nargs="+", default=[], type=Path, metavar="CONF",
                       help="run-entry files (shipped to the Job in a ConfigMap)")
        a.add_argument("--models-to-run", nargs="+", default=[], metavar="MODEL",
                       help="only the entries for these models")
        a.add_argument("--shards", type=int, default=3, help="completions = shards (default: %(default)s)")
        a.add_argument("--parallelism", type=int, help="shards at once (default: all)")
        a.add_argument("--max-concurrency", type=concurrency_arg, default="auto",
                           help="requests in flight per shard: a number, or auto (paced to each server; default)")
        a.add_argument("-m", "--max-eval-instances", type=int, help="sample at most N instances per run")
        a.add_argument("--no-services", action="store_true", help="compute everything inside the shards")
        a.add_argument("--date-format", default=schedules.DEFAULT_DATE_FORMAT,
                       help="strftime of the suite's date (default: %%Y-%%m-%%d; %%Y-%%m-%%d-%%H%%M for several "
                            "runs a day)")
        a.add_argument("--concurrency-policy", choices=("Forbid", "Allow", "Replace"), default="Forbid",
                       help="a run due while the last still runs: Forbid skips it (default), Replace stops the "
                            "last, Allow runs both")
        a.add_argument("--suspend", action="store_true", help="create it suspended (start nothing)")
        a.add_argument("--starting-deadline", type=int, default=3600, metavar="SECONDS",
                       help="skip a run missed by longer than this (default: %(default)s)")
        a.add_argument("--keep-successful", type=int, default=3, metavar="N", help="finished Jobs kept (default 3)")
        a.add_argument("--keep-failed", type=int, default=3, metavar="N", help="failed Jobs kept (default 3)")
        a.add_argument("--dry-run", action="store_true", help="print the manifests; apply nothing")


def main(args: argparse.Namespace) -> int:
    if args.action == "schedule":
        return {"create": _schedule_create, "list": _schedule_list,
                "delete": _schedule_delete}[args.schedule_action](args)
    return {"submit": _submit, "status": _status, "logs": _logs, "collect": _collect}[args.action](args)


def load_template(args: argparse.Namespace) -> tuple[dict, list]:
    if args.job_template is not None:
        docs = files.load_yaml_all(args.job_template, missing="job template not found")
        return parse_template(docs, str(args.job_template), path=args.job_template)
    name = template_name(args.release)
    doc = json.loads(_kubectl(args, "get", "configmap", name, "-o", "json"))
    return parse_template([doc], f"ConfigMap {name} (is the release '{args.release}' installed?)")


# ------------------------------------------------------------------------------------------------
# actions


def _submit(args: argparse.Namespace) -> int:
    if not args.run_entries and not args.conf_paths:  # what needs no cluster is checked first
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    job_name(args.release, args.suite)
    template, _ = load_template(args)
    docs = submit_manifests(args, template)
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.dry_run:
        print(text, end="")
        return 0
    name = docs[-1]["metadata"]["name"]
    # the chart's own Job of this suite (hash-named) must not run beside ours: both would write its shards
    listed = json.loads(_kubectl(args, "get", "jobs", "-l", _suite_selector(args), "-o", "json") or "{}")
    for other in listed.get("items") or []:
        other_name = other.get("metadata", {}).get("name")
        if other_name != name and (other.get("status") or {}).get("active"):
            raise MedhelmError(f"job {other_name} (the release's own) is running suite {args.suite}; wait for it "
                               f"(medhelm k8s status) or submit another --suite")
    existing = _kubectl(args, "get", "job", name, "-o", "json", "--ignore-not-found")
    if existing.strip():
        status = json.loads(existing).get("status", {})
        if status.get("active") and not args.replace:
            raise MedhelmError(f"job {name} still has {status['active']} shard(s) running; wait for it "
                               f"(medhelm k8s status) or pass --replace")
        # Job specs are immutable and a finished Job never re-runs: delete it; the records stay on the
        # volume, so the new Job's shards skip what is done and resume the rest.
        _kubectl(args, "delete", "job", name, "--wait=true", "--ignore-not-found")
        print(f"replaced {name}: finished instances are kept, its shards resume")
    _kubectl(args, "apply", "-f", "-", input_text=text)
    print(f"submitted {name}: {args.shards} shard(s); "
          f"follow with `medhelm k8s status --release {args.release} --suite {args.suite}`")
    return 0


def _schedule_create(args: argparse.Namespace) -> int:
    if not args.run_entries and not args.conf_paths:  # what needs no cluster is checked first
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    cron = schedules.cronjob_name(fullname(args.release), args.name)
    schedules.check_cron(args.schedule)
    template, store_env = load_template(args)
    docs = schedule_manifests(args, template, store_env)
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.dry_run:
        print(text, end="")
        return 0
    existing = _kubectl(args, "get", "cronjob", cron, "-o", "json", "--ignore-not-found")
    if existing.strip():
        _refuse_chart_owned(json.loads(existing), cron, "change")
    # a CronJob's spec may change in place: the next run uses it, a running Job is left alone
    _kubectl(args, "apply", "-f", "-", input_text=text)
    when = f"{args.schedule} {args.timezone or 'UTC'}"
    print(f"{'updated' if existing.strip() else 'created'} schedule {args.name} ({cron}): {when}, "
          f"{args.shards} shard(s); each run writes suite {args.name}-<date> and summarizes it into the release "
          f"of that name")
    return 0


def _refuse_chart_owned(cronjob: dict, name: str, what: str) -> None:
    labels = cronjob.get("metadata", {}).get("labels") or {}
    if labels.get("app.kubernetes.io/managed-by") == "Helm":
        raise MedhelmError(f"{name} is declared in the chart's values (schedules:); {what} it there and run "
                           f"`helm upgrade`")


def _schedule_list(args: argparse.Namespace) -> int:
    selector = f"app.kubernetes.io/instance={args.release},medhelm.io/schedule"
    listed = json.loads(_kubectl(args, "get", "cronjobs", "-l", selector, "-o", "json") or "{}")
    items = sorted(listed.get("items", []), key=lambda c: c["metadata"]["name"])
    if not items:
        print(f"no schedules for release {args.release}")
        return 0
    rows = [("SCHEDULE", "CRON", "TIMEZONE", "STATE", "LAST RUN (UTC)", "LAST SUITE", "RUNNING", "FROM")]
    for cj in items:
        meta, spec, st = cj["metadata"], cj.get("spec", {}), cj.get("status", {})
        rows.append((meta.get("labels", {}).get("medhelm.io/schedule", meta["name"]), spec.get("schedule", "?"),
                     spec.get("timeZone", "UTC"), "suspended" if spec.get("suspend") else "active",
                     (st.get("lastScheduleTime") or "-").replace("T", " ").rstrip("Z"), _last_suite(cj),
                     str(len(st.get("active") or [])),
                     "chart" if meta.get("labels", {}).get("app.kubernetes.io/managed-by") == "Helm" else "cli"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def _last_suite(cronjob: dict) -> str:
    """The suite (= release) the last scheduled run wrote: the CronJob's own arguments and lastScheduleTime."""
    from datetime import datetime

    last = (cronjob.get("status") or {}).get("lastScheduleTime")
    try:
        c = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        opts = dict(a.split("=", 1) for a in c.get("args", []) if a.startswith("--") and "=" in a)
        if not last or "--suite" not in opts:
            return "-"
        when = datetime.fromisoformat(last.replace("Z", "+00:00"))
        return schedules.dated_suite(opts["--suite"], when, tz=opts.get("--timezone"),
                                     date_format=opts.get("--date-format", schedules.DEFAULT_DATE_FORMAT))
    except (KeyError, IndexError, TypeError, ValueError, MedhelmError):
        return "?"


def _schedule_delete(args: argparse.Namespace) -> int:
    cron = schedules.cronjob_name(fullname(args.release), args.name)
    existing = _kubectl(args, "get", "cronjob", cron, "-o", "json", "--ignore-not-found")
    if not existing.strip():
        raise MedhelmError(f"no schedule {args.name} (CronJob {cron}) in release {args.release}")
    _refuse_chart_owned(json.loads(existing), cron, "remove")
    # orphan: a running Job (and its pods) finishes and summarizes; foreground: it is stopped with the CronJob
    _kubectl(args, "delete", "cronjob", cron, f"--cascade={'foreground' if args.stop_running else 'orphan'}")
    _kubectl(args, "delete", "configmap", f"{cron}-conf", "--ignore-not-found")
    print(f"deleted schedule {args.name} ({cron}); its suites and releases stay"
          + ("" if args.stop_running else "; a running Job finishes"))
    return 0


def suite_job(args: argparse.Namespace) -> dict:
    """The suite's Job: the one `submit` names <release>-medhelm-eval-<suite>, else the newest the chart made
    (named with a hash of its spec, found by its labels); {} when there is none."""
    found = _kubectl(args, "get", "job", job_name(args.release, args.suite), "-o", "json", "--ignore-not-found")
    if found.strip():
        return json.loads(found)
    listed = json.loads(_kubectl(args, "get", "jobs", "-l", _suite_selector(args), "-o", "json") or "{}")
    items = sorted(listed.get("items") or [], key=lambda j: j.get("metadata", {}).get("creationTimestamp", ""))
    return items[-1] if items else {}


def _suite_selector(args: argparse.Namespace) -> str:
    return f"app.kubernetes.io/instance={args.release},medhelm.io/suite={args.suite}"


def _status(args: argparse.Namespace) -> int:
    job = suite_job(args)
    if not job:
        raise MedhelmError(f"no Job for suite {args.suite} of release {args.release}")
    spec, st = job.get("spec", {}), job.get("status", {})
    print(f"{job['metadata']['name']}: {st.get('succeeded', 0)}/{spec.get('completions', '?')} shards done, "
          f"{st.get('active', 0)} running, {st.get('failed', 0)} failed")
    if st.get("completedIndexes"):
        print(f"  done indexes:   {st['completedIndexes']}")
    if st.get("failedIndexes"):
        print(f"  failed indexes: {st['failedIndexes']} (re-submit to resume them: finished instances are kept)")
    for line in shard_progress(args, job["metadata"]["name"]):
        print(line)
    conditions = {c["type"]: c.get("status") for c in st.get("conditions", [])}
    if conditions.get("Failed") == "True":
        return 2
    return 0


def shard_progress(args: argparse.Namespace, job: str) -> list[str]:
    """One line per shard pod: a running shard's counters from its /metrics (through the API server's pod
    proxy), a finished shard's from its termination message. Counts only, never instance text."""
    listed = _kubectl(args, "get", "pods", "-l", f"batch.kubernetes.io/job-name={job}", "-o", "json", check=False)
    try:
        pods = json.loads(listed) if listed.strip() else {}
    except ValueError:
        return ["  (could not list the shard pods)"]
    lines = []
    for pod in sorted(pods.get("items", []), key=_pod_index):
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        phase = status.get("phase", "?")
        index = _pod_index(pod)
        terminated = next((cs.get("state", {}).get("terminated") for cs in status.get("containerStatuses", [])
                           if cs.get("state", {}).get("terminated")), None)
        detail = ""
        if terminated and terminated.get("message"):
            detail = terminated["message"].strip().splitlines()[-1]
        elif phase == "Running" and args.metrics_port:
            path = (f"/api/v1/namespaces/{meta.get('namespace', 'default')}/pods/"
                    f"{meta.get('name')}:{args.metrics_port}/proxy/metrics")
            scrape = _kubectl(args, "get", "--raw", path, check=False)
            detail = progress_line(scrape) if scrape else "(no metrics yet)"
        lines.append(f"  shard {index:>3}  {phase:<9}  {meta.get('name', '?')}  {detail}".rstrip())
    return lines


def _pod_index(pod: dict) -> int:
    meta = pod.get("metadata", {})
    raw = (meta.get("annotations", {}) or {}).get("batch.kubernetes.io/job-completion-index") \
        or (meta.get("labels", {}) or {}).get("batch.kubernetes.io/job-completion-index") or "-1"
    try:
        return int(raw)
    except ValueError:
        return -1


def progress_line(scrape: str) -> str:
    """``done 40/100 (3 failed, 10 resumed), 2 retries`` from a shard's Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(scrape):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except ValueError:
        return "(unreadable metrics)"
    planned = int(sums.get("medhelm_instances_planned_total", 0))
    done = int(sums.get("medhelm_instances_done_total", 0))
    failed = int(sums.get("medhelm_instances_failed_total", 0))
    resumed = int(sums.get("medhelm_instances_resumed_total", 0))
    retries = int(sums.get("medhelm_model_retries_total", 0))
    return (f"done {done + resumed}/{planned} ({failed} failed, {resumed} resumed), {retries} retries, "
            f"{int(sums.get('medhelm_model_requests_in_flight', 0))} requests in flight")


def _logs(args: argparse.Namespace) -> int:
    name = (suite_job(args).get("metadata") or {}).get("name") or job_name(args.release, args.suite)
    print(_kubectl(args, "logs", "-l", f"batch.kubernetes.io/job-name={name}", "--prefix", "--all-containers",
                   f"--tail={args.tail}"), end="")
    return 0


def _collect(args: argparse.Namespace) -> int:
    if args.local is not None:
        from medhelm.cli.job import main_collect

        out = args.local / "benchmark_output" if (args.local / "benchmark_output").is_dir() else args.local
        return main_collect(argparse.Namespace(suite=args.suite, output_path=out, summarize=not args.no_summarize))
    template, store_env = load_template(args)
    job = collect_job(args, template, store_env)
    name = job["metadata"]["name"]
    limit_s = _seconds(args.timeout)
    # the suite's own Job: a failed one is named with its failed indexes at once (collecting it would only
    # report the same instances missing after the collect Job ran)
    suites = suite_job(args)
    failed = _failed(suites)
    if failed is not None:
        raise MedhelmError(f"job {suites['metadata']['name']} failed ({failed}); re-submit the suite to resume "
                           f"them (finished instances are kept), then collect")
    _kubectl(args, "delete", "job", name, "--ignore-not-found", "--wait=true")
    _kubectl(args, "apply", "-f", "-", input_text=yaml.safe_dump(job, sort_keys=False))
    state = _wait_job(args, name, limit_s)
    print(_kubectl(args, "logs", f"job/{name}", check=False), end="")
    if state != "Complete":
        print(f"collect job {name}: {state}", file=sys.stderr)
        return 2
    return 0


def _seconds(text: str) -> float:
    """``--timeout`` as kubectl writes durations: 600s, 10m, 1h, or a bare number of seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", str(text).strip())
    if not m:
        raise ConfigError(f"--timeout {str(text)[:20]!r}: a duration such as 600s, 10m or 1h", field="--timeout")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _failed(job: dict) -> str | None:
    """What failed in a Job (its failed indexes, or its Failed condition's reason), None while it has not."""
    st = job.get("status") or {}
    conditions = {c.get("type"): c for c in st.get("conditions", [])}
    failure = conditions.get("Failed") or conditions.get("FailureTarget")
    if not failure or failure.get("status") != "True":
        return None
    indexes = st.get("failedIndexes")
    return f"failed indexes: {indexes}" if indexes else (failure.get("reason") or "Failed")


def _wait_job(args: argparse.Namespace, name: str, limit_s: float, every_s: float = 3.0) -> str:
    """Poll the Job until it completes or fails - whichever comes first, so a failure stops the wait at once
    (``kubectl wait --for=condition=complete`` would sit out the whole timeout) - or the time is up."""
    import time

    deadline = time.monotonic() + limit_s
    while True:
        job = json.loads(_kubectl(args, "get", "job", name, "-o", "json"))
        failed = _failed(job)
        if failed is not None:
            return f"failed ({failed})"
        if any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions", [])):
            return "Complete"
        if time.monotonic() >= deadline:
            return f"not complete after {args.timeout}"
        time.sleep(min(every_s, max(deadline - time.monotonic(), 0.0)))


def _kubectl(args: argparse.Namespace, *cmd: str, input_text: str | None = None, check: bool = True) -> str:
    exe = shutil.which(args.kubectl) or args.kubectl
    full = [exe, *(["-n", args.namespace] if args.namespace else []), *cmd]
    try:
        done = subprocess.run(full, input=input_text, capture_output=True, text=True, timeout=900)
    except FileNotFoundError:
        raise ConfigError(f"kubectl not found ('{args.kubectl}'); install it or pass --kubectl") from None
    if check and done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise MedhelmError(f"kubectl {cmd[0]} failed: {last}")
    if done.stderr and not check:
        print(done.stderr, end="", file=sys.stderr)
    return done.stdout

