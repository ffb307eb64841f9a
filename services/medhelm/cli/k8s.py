"""`medhelm k8s submit|status|logs|collect` — drive an evaluation Job on a cluster with kubectl.

`submit` builds the same Indexed Job as the chart's ``templates/job.yaml`` (the tests keep the two in
step) for a release installed with ``helm install``: the release's volume, model registry, services and
image. ``--dry-run`` prints the manifests instead of applying them.
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

from medhelm import files
from medhelm.errors import ConfigError, MedhelmError

MOUNT = "/data"
METRICS_LINGER_S = 45  # the chart's monitoring.jobMetrics.lingerSeconds
CONF_DIR = "/etc/medhelm/conf"
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("submit", "start a suite as an Indexed Job"), ("status", "shards done / running / failed"),
                       ("logs", "the shards' logs"), ("collect", "merge the shards (a one-off Job, or --local)")):
        a = sub.add_parser(name, help=text, description=text)
        a.add_argument("--release", default="medhelm", help="helm release name (default: %(default)s)")
        a.add_argument("-n", "--namespace", default=None, help="namespace (default: kubectl's current)")
        a.add_argument("--suite", default="default", help="suite name (default: %(default)s)")
        a.add_argument("--kubectl", default="kubectl", help="kubectl executable (default: %(default)s)")
        if name == "submit":
            a.add_argument("-r", "--run-entries", nargs="+", default=[], metavar="ENTRY")
            a.add_argument("-c", "--conf-paths", nargs="+", default=[], type=Path, metavar="CONF",
                           help="run-entry files (shipped to the Job in a ConfigMap)")
            a.add_argument("--shards", type=int, default=3, help="completions = shards (default: %(default)s)")
            a.add_argument("--parallelism", type=int, help="shards at once (default: all)")
            a.add_argument("--max-concurrency", type=int, default=8, help="requests in flight per shard")
            a.add_argument("-m", "--max-eval-instances", type=int, help="sample at most N instances per run")
            a.add_argument("--image", help="image (default: the release's scenarios Deployment's image)")
            a.add_argument("--no-services", action="store_true", help="compute everything inside the shards")
            a.add_argument("--tls", choices=("off", "on", "mutual"), default="off", help="TLS to the services")
            a.add_argument("--tls-secret", default="", help="the chart's tls.secretName (default: <release>-medhelm-tls)")
            a.add_argument("--metrics-port", type=int, default=9090,
                           help="shards serve /metrics here (chart: metricsPort); 0 = off (default: %(default)s)")
            a.add_argument("--pushgateway", default="", help="shards push final metrics here (chart: "
                                                                 "monitoring.pushgateway.url)")
            a.add_argument("--service-token-secret", default="",
                           help="the chart's auth.callers.tokenSecret: the Job sends its key `job` as bearer token")
            a.add_argument("--dry-run", action="store_true", help="print the manifests; apply nothing")
        if name == "status":
            a.add_argument("--metrics-port", type=int, default=9090, help="the shards' /metrics port (default: %(default)s)")
        if name == "logs":
            a.add_argument("--tail", type=int, default=200, help="lines per shard (default: %(default)s)")
        if name == "collect":
            a.add_argument("--local", type=Path, metavar="OUTPUT_PATH",
                           help="the results volume is mounted here: collect in this process")
            a.add_argument("--image", help="image (default: the release's)")
            a.add_argument("--timeout", default="600s", help="how long to wait for the collect Job")


def main(args: argparse.Namespace) -> int:
    return {"submit": _submit, "status": _status, "logs": _logs, "collect": _collect}[args.action](args)


# ------------------------------------------------------------------------------------------------
# manifests


def job_name(release: str, suite: str, suffix: str = "") -> str:
    name = f"{_fullname(release)}-eval-{suite}{suffix}"
    if len(name) > 63 or not _DNS.match(name):
        raise ConfigError(f"job name '{name}' is not a valid Kubernetes name (lowercase, digits, '-', <= 63)",
                          field="--suite")
    return name


def _fullname(release: str) -> str:
    return (release if "medhelm" in release else f"{release}-medhelm")[:50].rstrip("-")


def eval_job(*, release: str, suite: str, image: str, args: list[str], completions: int, parallelism: int,
             use_services: bool, tls: str = "off", tls_secret: str = "", conf_map: str | None = None,
             suffix: str = "", metrics_port: int = 0, pushgateway: str = "",
             service_token_secret: str = "") -> dict:
    """The Indexed Job of one suite (``suffix`` names one-off companions such as ``-collect``)."""
    full = _fullname(release)
    labels = {"app.kubernetes.io/name": "medhelm", "app.kubernetes.io/instance": release,
              "app.kubernetes.io/component": "job", "medhelm.io/suite": suite}
    env = [{"name": "HOME", "value": "/tmp"}, {"name": "MEDHELM_OFFLINE", "value": "1"},
           {"name": "MEDHELM_DATA_DIR", "value": f"{MOUNT}/data"}]
    if metrics_port:  # as the chart's medhelm.jobMetricsEnv (templates/_monitoring.tpl)
        env += [{"name": "MEDHELM_METRICS_PORT", "value": str(metrics_port)},
                {"name": "MEDHELM_METRICS_HOST", "value": "0.0.0.0"},
                {"name": "MEDHELM_METRICS_LINGER_S", "value": str(METRICS_LINGER_S)}]
    if pushgateway:
        env.append({"name": "MEDHELM_PUSHGATEWAY", "value": pushgateway})
    env += [{"name": "MEDHELM_TERMINATION_LOG", "value": "/dev/termination-log"},
            {"name": "MEDHELM_SHARD_COUNT", "value": str(completions)}]
    if use_services:
        env += [{"name": f"MEDHELM_{var}_SERVICE", "value": f"{full}-{svc}:50051"}
                for var, svc in (("SCENARIO", "scenarios"), ("JURY", "jury"), ("METRICS", "metrics"))]
    if tls != "off":
        env.append({"name": "MEDHELM_TLS_CA", "value": "/etc/medhelm/tls/ca.crt"})
    if tls == "mutual":
        env += [{"name": "MEDHELM_TLS_CERT", "value": "/etc/medhelm/tls/tls.crt"},
                {"name": "MEDHELM_TLS_KEY", "value": "/etc/medhelm/tls/tls.key"}]
    mounts = [{"name": "data", "mountPath": MOUNT},
              {"name": "model-deployments", "mountPath": f"{MOUNT}/prod_env/model_deployments.yaml",
               "subPath": "model_deployments.yaml", "readOnly": True},
              {"name": "tmp", "mountPath": "/tmp"}]
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": f"{full}-data"}},
               {"name": "model-deployments", "configMap": {"name": f"{full}-deployments"}},
               {"name": "tmp", "emptyDir": {}}]
    if tls != "off":
        mounts.append({"name": "tls", "mountPath": "/etc/medhelm/tls", "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": tls_secret or f"{full}-tls"}})
    if service_token_secret and use_services:  # caller authorization (docs/access.md): only the Job's own key
        env.append({"name": "MEDHELM_SERVICE_TOKEN_FILE", "value": "/etc/medhelm/callers/job"})
        mounts.append({"name": "callers", "mountPath": "/etc/medhelm/callers", "readOnly": True})
        volumes.append({"name": "callers", "secret": {"secretName": service_token_secret,
                                                      "items": [{"key": "job", "path": "job"}]}})
    if conf_map:
        mounts.append({"name": "conf", "mountPath": CONF_DIR, "readOnly": True})
        volumes.append({"name": "conf", "configMap": {"name": conf_map}})
    container = {
        "name": "shard", "image": image, "imagePullPolicy": "IfNotPresent", "args": args, "env": env,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "volumeMounts": mounts,
    }
    if metrics_port:
        container["ports"] = [{"name": "metrics", "containerPort": metrics_port}]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(release, suite, suffix), "labels": labels},
        "spec": {
            "completionMode": "Indexed", "completions": completions, "parallelism": parallelism,
            "backoffLimitPerIndex": 2, "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": dict(labels)}, "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [container], "volumes": volumes}},
        },
    }


def _paths() -> list[str]:
    return [f"--output-path={MOUNT}/benchmark_output", f"--local-path={MOUNT}/prod_env"]


def submit_manifests(args: argparse.Namespace, image: str) -> list[dict]:
    if not args.run_entries and not args.conf_paths:
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    if args.shards < 1 or (args.parallelism is not None and args.parallelism < 1):
        raise ConfigError("must be at least 1", field="--shards/--parallelism")
    docs: list[dict] = []
    conf_map = None
    job_args = ["job", f"--suite={args.suite}", f"--max-concurrency={args.max_concurrency}", "--quiet", *_paths()]
    if args.max_eval_instances:
        job_args.append(f"--max-eval-instances={args.max_eval_instances}")
    if args.conf_paths:
        conf_map = job_name(args.release, args.suite, "-conf")
        data = {}
        for path in args.conf_paths:
            data[path.name] = files.read_text(path, what=".conf file")
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": conf_map, "labels": {"app.kubernetes.io/instance": args.release}},
                     "data": data})
        job_args += ["--conf-paths", *(f"{CONF_DIR}/{name}" for name in data)]
    if args.run_entries:
        job_args += ["--run-entries", *args.run_entries]
    docs.append(eval_job(release=args.release, suite=args.suite, image=image, args=job_args,
                         completions=args.shards, parallelism=args.parallelism or args.shards,
                         use_services=not args.no_services, tls=args.tls, tls_secret=args.tls_secret,
                         service_token_secret=getattr(args, "service_token_secret", ""),
                         conf_map=conf_map, metrics_port=args.metrics_port, pushgateway=args.pushgateway))
    return docs


# ------------------------------------------------------------------------------------------------
# actions


def _submit(args: argparse.Namespace) -> int:
    image = args.image or ("medhelm-k8s:" + _version() if args.dry_run else _release_image(args))
    docs = submit_manifests(args, image)
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.dry_run:
        print(text, end="")
        return 0
    _kubectl(args, "apply", "-f", "-", input_text=text)
    print(f"submitted {docs[-1]['metadata']['name']}: {args.shards} shard(s); "
          f"follow with `medhelm k8s status --release {args.release} --suite {args.suite}`")
    return 0


def _status(args: argparse.Namespace) -> int:
    job = json.loads(_kubectl(args, "get", "job", job_name(args.release, args.suite), "-o", "json"))
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
    name = job_name(args.release, args.suite)
    print(_kubectl(args, "logs", "-l", f"batch.kubernetes.io/job-name={name}", "--prefix", "--all-containers",
                   f"--tail={args.tail}"), end="")
    return 0


def _collect(args: argparse.Namespace) -> int:
    if args.local is not None:
        from medhelm.cli.job import main_collect

        return main_collect(argparse.Namespace(suite=args.suite, output_path=args.local / "benchmark_output"
                                               if (args.local / "benchmark_output").is_dir() else args.local))
    image = args.image or _release_image(args)
    job = eval_job(release=args.release, suite=args.suite, image=image, completions=1, parallelism=1,
                   use_services=False, args=["collect", f"--suite={args.suite}", f"--output-path={MOUNT}/benchmark_output"],
                   suffix="-collect")
    name = job["metadata"]["name"]
    _kubectl(args, "delete", "job", name, "--ignore-not-found")
    _kubectl(args, "apply", "-f", "-", input_text=yaml.safe_dump(job, sort_keys=False))
    waited = _kubectl(args, "wait", "--for=condition=complete", f"job/{name}", f"--timeout={args.timeout}",
                      check=False)
    print(_kubectl(args, "logs", f"job/{name}", check=False), end="")
    return 0 if "condition met" in waited else 2


def _release_image(args: argparse.Namespace) -> str:
    return _kubectl(args, "get", "deployment", f"{_fullname(args.release)}-scenarios",
                    "-o", "jsonpath={.spec.template.spec.containers[0].image}").strip()


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


def _version() -> str:
    from medhelm.version import __version__

    return __version__
