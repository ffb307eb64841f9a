"""A report made in the cluster names the code commit and the image it ran from (issue 51, item 5): the image
carries MEDHELM_CODE_COMMIT (a build argument scripts/build_images.sh sets from `git rev-parse HEAD`), and every
pod the chart or `medhelm k8s` makes carries MEDHELM_IMAGE_DIGEST, the image reference it deployed. Checked on
the rendered chart (helm template: the Job, a schedule's CronJob, the services, the dashboard; by tag and by
digest), on `medhelm k8s submit --image`, and end to end: `medhelm report` run with the environment of the
rendered Job's container says both on the page and in its manifest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.leaderboard.subgroup_helpers import make_subgroup_suite

DIGEST = "sha256:" + "ab" * 32
ENTRIES = ["pubmed_qa:model=qwen/qwen2.5-7b-instruct"]
SCHEDULE = {"name": "nightly", "schedule": "0 2 * * *", "runEntries": ENTRIES}
JOB = ["--set", "job.enabled=true", "--set-json", f"job.runEntries={json.dumps(ENTRIES)}"]


def _template(helm: Path, chart: Path, *args: str) -> list[dict]:
    done = subprocess.run([str(helm), "template", "rel", ".", "--namespace", "clinical-ai", *args], cwd=chart,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _pods(docs: list[dict]) -> dict[str, dict]:
    """kind/name -> pod spec of every workload."""
    out = {}
    for d in docs:
        spec = d.get("spec") or {}
        if d["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        pod = (spec.get("template") or {}).get("spec")
        if pod and d["kind"] in ("Job", "CronJob", "Deployment"):
            out[f"{d['kind']}/{d['metadata']['name']}"] = pod
    return out


def _image_env(container: dict) -> list[str]:
    return [e.get("value") for e in container.get("env", []) if e["name"] == "MEDHELM_IMAGE_DIGEST"]


@pytest.mark.parametrize("pin", ["tag", "digest"])
def test_every_pod_names_the_image_it_runs(pin, repo_root, helm_bin):
    chart = repo_root / "helm-charts" / "medhelm"
    sets = [*JOB, "--set-json", f"schedules={json.dumps([SCHEDULE])}",
            "--set", "image.repository=registry.hospital.internal/medhelm-k8s"]
    if pin == "digest":
        sets += ["--set", f"image.digest={DIGEST}", "--set", f"dashboard.image.digest={DIGEST.replace('ab', 'cd')}"]
    pods = _pods(_template(helm_bin, chart, *sets))
    kinds = {name.split("/")[0] for name in pods}
    assert {"Job", "CronJob", "Deployment"} <= kinds, sorted(pods)
    for name, pod in pods.items():
        for c in pod["containers"]:
            if not c["image"].split("@")[0].split(":")[0].endswith(("medhelm-k8s", "medhelm-k8s-dashboard")):
                continue
            assert _image_env(c) == [c["image"]], (name, c["name"])  # once, and the very image of the container
            if pin == "digest":
                assert re.fullmatch(r"(registry\.hospital\.internal/)?medhelm-k8s(-dashboard)?@sha256:[0-9a-f]{64}",
                                    c["image"]), c["image"]
    job = next(p for n, p in pods.items() if n.startswith("Job/"))
    assert _image_env(job["containers"][0]) == [
        f"registry.hospital.internal/medhelm-k8s@{DIGEST}" if pin == "digest"
        else "registry.hospital.internal/medhelm-k8s:0.2.0"]


def _medhelm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    services = Path(__file__).resolve().parents[2] / "services"
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=600,
                          env={**base, "PYTHONPATH": str(services), **(env or {})})


def test_submit_with_another_image_names_that_image(repo_root, tmp_path, helm_bin):
    """`medhelm k8s submit --image` replaces the template's image, and the variable with it (in its place)."""
    chart = repo_root / "helm-charts" / "medhelm"
    release = tmp_path / "release.yaml"
    release.write_text(yaml.safe_dump_all(_template(helm_bin, chart)))
    image = f"registry.hospital.internal/medhelm-k8s@{DIGEST}"
    done = _medhelm("k8s", "submit", "--release", "rel", "--suite", "nightly", "--job-template", str(release),
                    "-r", "pubmed_qa:model=qwen/qwen2.5-7b-instruct", "--image", image, "--dry-run")
    assert done.returncode == 0, done.stderr
    (job,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == image and _image_env(c) == [image]
    plain = _medhelm("k8s", "submit", "--release", "rel", "--suite", "nightly", "--job-template", str(release),
                     "-r", "pubmed_qa:model=qwen/qwen2.5-7b-instruct", "--dry-run")
    (chart_job,) = [d for d in yaml.safe_load_all(plain.stdout) if d]
    names = [e["name"] for e in chart_job["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names == [e["name"] for e in c["env"]]  # the same variables in the same order: only the value moved


def test_a_report_made_in_the_jobs_pod_names_its_commit_and_image(repo_root, tmp_path, helm_bin):
    chart = repo_root / "helm-charts" / "medhelm"
    docs = _template(helm_bin, chart, *JOB, "--set", f"image.digest={DIGEST}")
    (job,) = [d for d in docs if d["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    pod_env = {e["name"]: e["value"] for e in container["env"] if "value" in e and e["name"].startswith("MEDHELM_IMAGE")}
    commit = subprocess.run(["git", "-C", str(repo_root), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "0" * 40
    # what the image's ENV holds (Dockerfile: ENV MEDHELM_CODE_COMMIT=${MEDHELM_CODE_COMMIT}) and the pod's env
    env = {"MEDHELM_CODE_COMMIT": commit, **pod_env}
    s = make_subgroup_suite(tmp_path)
    assert _medhelm("summarize", "--suite", "s", "-o", str(s["out"]), "--store", str(s["store"]), "--bootstrap",
                    "50").returncode == 0
    out = tmp_path / "report.html"
    done = _medhelm("report", "--out", str(out), "--store", str(s["store"]), env=env)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text[:text.index("<!-- medhelm-manifest")]))
    assert f"Code commit {commit} " in page
    assert f"Image digest {container['image']} " in page  # pinned by digest: no "by tag" note
    manifest = json.loads(re.search(r"<!-- medhelm-manifest (\{.*\}) -->", text).group(1))
    assert manifest["code_commit"] == commit and manifest["image_digest"] == container["image"]
    assert container["image"].endswith("@" + DIGEST)
    # run outside the image (no variables): said so, never guessed
    bare = tmp_path / "bare.html"
    assert _medhelm("report", "--out", str(bare), "--store", str(s["store"])).returncode == 0
    assert "not recorded (not run from the medhelm image)" in bare.read_text()


def test_the_build_passes_the_commit_into_both_images(repo_root):
    """Statically (tests/services/test_container.py builds images): both final stages declare the build argument
    and keep it as the environment and the OCI revision label; the build script passes git's HEAD."""
    text = (repo_root / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)
    finals = {s.split()[2]: s for s in stages[1:] if s.split()[1] == "AS" and s.split()[2] in ("service", "dashboard")}
    assert set(finals) == {"service", "dashboard"}
    for name, body in finals.items():
        assert 'ARG MEDHELM_CODE_COMMIT=""' in body, name
        assert "ENV MEDHELM_CODE_COMMIT=${MEDHELM_CODE_COMMIT}" in body, name
        assert 'org.opencontainers.image.revision="${MEDHELM_CODE_COMMIT}"' in body, name
    script = (repo_root / "scripts" / "build_images.sh").read_text()
    assert "commit=$(git rev-parse HEAD" in script and '--build-arg "MEDHELM_CODE_COMMIT=$commit"' in script
