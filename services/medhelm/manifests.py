"""Kubernetes manifests for evaluation Jobs and CronJobs, built from the chart's own Job template.

``parse_template`` reads the release's job-template ConfigMap (or ``helm template`` output, or a bare Job)
and checks the parts filled in; ``build_job`` replaces only the suite, arguments, shard counts and name;
``submit_manifests`` / ``collect_job`` / ``schedule_manifests`` assemble what ``medhelm k8s submit``,
``collect`` and ``schedule create`` apply (the CronJob exactly as the chart's templates/cronjobs.yaml renders
a ``values.schedules`` entry). ``args`` is the door's parsed command line (``medhelm.cli.k8s``).

Failure semantics: pure functions of their inputs (plus reading the named .conf files); a bad name, count or
template is a one-line ConfigError/MedhelmError naming the field or file, raised before anything is applied.
"""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from medhelm import files, schedules
from medhelm.errors import ConfigError, MedhelmError
from medhelm.schemas import check

CONF_DIR = "/etc/medhelm/conf"
TEMPLATE_KEY = "job.yaml"
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SERVICE_ENV = ("MEDHELM_SCENARIO_SERVICE", "MEDHELM_JURY_SERVICE", "MEDHELM_METRICS_SERVICE")


def job_name(release: str, suite: str, suffix: str = "") -> str:
    name = f"{fullname(release)}-eval-{suite}{suffix}"
    if len(name) > 63 or not _DNS.match(name):
        raise ConfigError(f"job name '{name}' is not a valid Kubernetes name (lowercase, digits, '-', <= 63)",
                          field="--suite")
    return name


def fullname(release: str) -> str:
    return (release if "medhelm" in release else f"{release}-medhelm")[:50].rstrip("-")


def template_name(release: str) -> str:
    return f"{fullname(release)}-job-template"


def parse_template(docs: list, source: str, *, path: Path | None = None) -> tuple[dict, list]:
    """(the Job, the store env) from the job-template ConfigMap, `helm template` output or a bare Job; the
    parts of the Job we fill in are checked (``_Job``) so a template of another shape is one line."""
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" and TEMPLATE_KEY in (doc.get("data") or {}):
            inner = f"{path or source} (the ConfigMap's {TEMPLATE_KEY})"
            job = _yaml_value(doc["data"][TEMPLATE_KEY], inner)
            store_env = _yaml_value(doc["data"].get("store-env.yaml") or "[]", inner) or []
            check(_StoreEnv, {"env": store_env}, path=inner)
            check(_Job, job, path=inner)
            return job, store_env
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Job"]
    if len(jobs) == 1:
        check(_Job, jobs[0], path=path or source)
        return jobs[0], []
    raise ConfigError(f"no job template (a ConfigMap with '{TEMPLATE_KEY}' or one Job) in {source}")


def _yaml_value(text: object, where: str) -> object:
    if not isinstance(text, str):
        raise ConfigError("must be text (YAML)", path=where)
    return files.parse_yaml(text, Path(where)).data


class _Open(BaseModel):
    """A Kubernetes object part: the keys we read or fill in are typed; every other key is Kubernetes'."""

    model_config = ConfigDict(extra="allow", strict=True)


class _EnvVar(_Open):
    name: Annotated[str, Field(min_length=1, max_length=1000)]


class _Container(_Open):
    args: list[str] = []
    env: list[_EnvVar] = []
    volumeMounts: list[dict] = []


class _PodSpec(_Open):
    containers: Annotated[list[_Container], Field(min_length=1)]
    volumes: list[dict] = []


class _Meta(_Open):
    labels: dict[str, str] = {}


class _PodTemplate(_Open):
    metadata: _Meta = _Meta()
    spec: _PodSpec


class _JobSpec(_Open):
    template: _PodTemplate


class _Job(_Open):
    metadata: _Meta = _Meta()
    spec: _JobSpec


class _StoreEnv(_Open):
    env: list[_EnvVar]


# the image reference a pod runs, as the chart or `medhelm k8s` deployed it (report/content.py build_identity)
IMAGE_ENV = "MEDHELM_IMAGE_DIGEST"


def _container(job: dict) -> dict:
    try:
        return job["spec"]["template"]["spec"]["containers"][0]
    except (KeyError, IndexError, TypeError):
        raise ConfigError("the job template has no container") from None


def build_job(template: dict, *, release: str, suite: str, args: list[str], completions: int, parallelism: int,
              image: str | None = None, use_services: bool = True, extra_env: list | None = None,
              conf_map: str | None = None, suffix: str = "") -> dict:
    """The release's Job with this suite's name, labels, arguments and shard counts."""
    job = copy.deepcopy(template)
    name = job_name(release, suite, suffix)
    job.setdefault("metadata", {})["name"] = name
    for meta in (job["metadata"], job["spec"]["template"].setdefault("metadata", {})):
        meta.setdefault("labels", {})["medhelm.io/suite"] = suite
    job["spec"]["completions"], job["spec"]["parallelism"] = completions, parallelism
    c = _container(job)
    c["args"] = args
    if image:
        c["image"] = image
    env = [e for e in c.get("env", []) if use_services or e["name"] not in _SERVICE_ENV]
    for e in env:
        if e["name"] == "MEDHELM_SHARD_COUNT":
            e["value"] = str(completions)
        if e["name"] == "MEDHELM_SHARD_PARALLELISM":
            e["value"] = str(parallelism)
    c["env"] = env + list(extra_env or [])
    if c.get("image"):  # the image this Job runs, as deployed (a report made in its pod names it): in its place
        image_env = {"name": IMAGE_ENV, "value": str(c["image"])}
        at = next((i for i, e in enumerate(c["env"]) if e["name"] == IMAGE_ENV), None)
        if at is None:
            c["env"].append(image_env)
        else:
            c["env"][at] = image_env
    if conf_map:
        c.setdefault("volumeMounts", []).append({"name": "conf", "mountPath": CONF_DIR, "readOnly": True})
        job["spec"]["template"]["spec"].setdefault("volumes", []).append(
            {"name": "conf", "configMap": {"name": conf_map}})
    return job


def _path_args(template: dict) -> list[str]:
    return [a for a in _container(template).get("args", []) if a.startswith(("--output-path=", "--local-path="))]


def submit_manifests(args: argparse.Namespace, template: dict) -> list[dict]:
    if not args.run_entries and not args.conf_paths:
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    if args.shards < 1 or (args.parallelism is not None and args.parallelism < 1):
        raise ConfigError("must be at least 1", field="--shards/--parallelism")
    docs: list[dict] = []
    conf_map = None
    job_args = ["job", f"--suite={args.suite}", f"--max-concurrency={args.max_concurrency}", "--quiet",
                *_path_args(template)]
    if args.max_eval_instances:
        job_args.append(f"--max-eval-instances={args.max_eval_instances}")
    if args.conf_paths:
        conf_map = job_name(args.release, args.suite, "-conf")
        data = {}
        for path in args.conf_paths:
            data[path.name] = files.read_text(path, what=".conf file")
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": conf_map, "labels": {"app.kubernetes.io/instance": args.release,
                                                               "medhelm.io/suite": args.suite}},
                     "data": data})
        job_args += ["--conf-paths", *(f"{CONF_DIR}/{name}" for name in data)]
    if args.run_entries:
        job_args += ["--run-entries", *args.run_entries]
    docs.append(build_job(template, release=args.release, suite=args.suite, args=job_args, image=args.image,
                          completions=args.shards, parallelism=args.parallelism or args.shards,
                          use_services=not args.no_services, conf_map=conf_map))
    return docs


def collect_job(args: argparse.Namespace, template: dict, store_env: list) -> dict:
    out = next((a.split("=", 1)[1] for a in _path_args(template) if a.startswith("--output-path=")),
               "/data/benchmark_output")
    cmd = ["collect", f"--suite={args.suite}", f"--output-path={out}"]
    if not args.no_summarize:
        # summarize prices with the prices.yaml the shards' --local-path holds (the volume), not ./prod_env
        cmd += ["--summarize", *(a for a in _path_args(template) if a.startswith("--local-path="))]
    job = build_job(template, release=args.release, suite=args.suite, args=cmd, image=args.image, completions=1,
                    parallelism=1, use_services=False, extra_env=store_env if not args.no_summarize else [],
                    suffix="-collect")
    job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "job"
    return job


def schedule_manifests(args: argparse.Namespace, template: dict, store_env: list) -> list[dict]:
    """[the .conf ConfigMap,] the CronJob: the release's Job (``build_job``, as ``submit``) with the dated suite,
    the last shard's summarize and the store env it needs, wrapped as the chart's templates/cronjobs.yaml does."""
    if not args.run_entries and not args.conf_paths:
        raise MedhelmError("nothing to run: give --run-entries and/or --conf-paths")
    if args.shards < 1 or (args.parallelism is not None and args.parallelism < 1):
        raise ConfigError("must be at least 1", field="--shards/--parallelism")
    if min(args.keep_successful, args.keep_failed) < 0 or args.starting_deadline < 10:
        raise ConfigError("history limits must be >= 0 and the starting deadline >= 10 s",
                          field="--keep-successful/--keep-failed/--starting-deadline")
    cron = schedules.cronjob_name(fullname(args.release), args.name)
    expr = schedules.check_cron(args.schedule)
    schedules.zone(args.timezone)
    schedules.check_date_format(args.date_format)
    job_args = ["job", f"--suite={args.name}", f"--max-concurrency={args.max_concurrency}", "--quiet",
                *_path_args(template), "--suite-date", f"--date-format={args.date_format}"]
    if args.timezone:
        job_args.append(f"--timezone={args.timezone}")
    job_args.append("--summarize-when-complete")
    if args.max_eval_instances:
        job_args.append(f"--max-eval-instances={args.max_eval_instances}")
    if args.models_to_run:
        job_args += ["--models-to-run", *args.models_to_run]
    labels = {"app.kubernetes.io/name": "medhelm", "app.kubernetes.io/instance": args.release,
              "app.kubernetes.io/managed-by": "medhelm-k8s-schedule", "app.kubernetes.io/component": "schedule",
              "medhelm.io/schedule": args.name}
    docs: list[dict] = []
    conf_map = None
    if args.conf_paths:
        conf_map = f"{cron}-conf"
        data = {path.name: files.read_text(path, what=".conf file") for path in args.conf_paths}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": conf_map, "labels": labels},
                     "data": data})
        job_args += ["--conf-paths", *(f"{CONF_DIR}/{name}" for name in data)]
    if args.run_entries:
        job_args += ["--run-entries", *args.run_entries]
    job_name_env = {"name": "MEDHELM_JOB_NAME", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}}}
    job = build_job(template, release=args.release, suite=args.name, args=job_args, image=args.image,
                    completions=args.shards, parallelism=args.parallelism or args.shards,
                    use_services=not args.no_services, extra_env=[job_name_env, *store_env], conf_map=conf_map)
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        meta["labels"]["medhelm.io/schedule"] = args.name
    spec: dict = {"schedule": expr}
    if args.timezone:
        spec["timeZone"] = args.timezone
    spec.update({"concurrencyPolicy": args.concurrency_policy, "suspend": bool(args.suspend),
                 "startingDeadlineSeconds": args.starting_deadline,
                 "successfulJobsHistoryLimit": args.keep_successful, "failedJobsHistoryLimit": args.keep_failed,
                 "jobTemplate": {"metadata": {"annotations": dict(job["metadata"].get("annotations") or {}),
                                              "labels": job["metadata"]["labels"]},
                                 "spec": job["spec"]}})
    docs.append({"apiVersion": "batch/v1", "kind": "CronJob",
                 "metadata": {"name": cron, "annotations": dict(job["metadata"].get("annotations") or {}),
                              "labels": labels},
                 "spec": spec})
    return docs
