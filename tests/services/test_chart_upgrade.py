"""An upgrade from the previous chart version (0.1.0: tests/previous_release.py) to this one, and the rollback:
both charts rendered with the same values files (the previous version's own ``ci/`` files and the defaults, as a
hospital's values written for 0.1.0 are), both validated against the Kubernetes 1.30 schemas, and every field
the API server refuses to change checked across the pair in both directions: the selectors of Deployments, a Job
kept under its name keeps its whole spec, a claim keeps its spec (its size may only grow). The store migration
hook: runs before anything else of the upgrade (hook ordering: its ServiceAccount first), with the new image,
needs nothing the release itself makes (no claim, no Secret of the chart: it must run at pre-install), and is
fenced like the other pods. `podman kube play` of the same pair, in sequence and back, is
``test_kube_play_upgrade.py``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.previous_release import previous_tree

VALUES = {"default": None, "full": "ci/full-values.yaml", "production": "ci/production-values.yaml",
          "access": "ci/access-values.yaml"}
IMMUTABLE_SELECTORS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")


@pytest.fixture(scope="module")
def charts(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The previous chart (from git) and this one."""
    folder = previous_tree(tmp_path_factory.mktemp("previous-chart"), "helm-charts/medhelm")
    return {"previous": folder / "helm-charts" / "medhelm", "current": repo_root / "helm-charts" / "medhelm"}


def render(helm: Path, chart: Path, values: Path | None, *extra: str) -> list[dict]:
    args = [str(helm), "template", "rel", str(chart), "--namespace", "clinical-ai", *extra]
    if values is not None:
        args += ["-f", str(values)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def hooks(docs: list[dict]) -> list[dict]:
    return [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]


def released(docs: list[dict]) -> dict[tuple[str, str], dict]:
    """What Helm applies (and later patches) by kind and name: everything but hooks."""
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d not in hooks(docs)}


def _storage(claim: dict) -> float:
    from tests.services.test_helm_chart import _quantity

    return _quantity(claim["spec"]["resources"]["requests"]["storage"])


def change_problems(before: list[dict], after: list[dict]) -> list[str]:
    """What the API server would refuse when ``before`` is patched into ``after`` (helm upgrade or rollback)."""
    problems = []
    old, new = released(before), released(after)
    for key in sorted(set(old) & set(new)):
        kind, name = key
        a, b = old[key]["spec"] if "spec" in old[key] else {}, new[key].get("spec", {})
        if kind in IMMUTABLE_SELECTORS and a.get("selector") != b.get("selector"):
            problems.append(f"{kind} {name}: spec.selector changed")
        if kind == "Job" and a != b:  # the pod template, completions, modes: patched in place is refused
            problems.append(f"Job {name}: spec changed under the same name")
        if kind == "PersistentVolumeClaim":
            strip = [{**s, "resources": {k: v for k, v in s["resources"].items() if k != "requests"}} for s in (a, b)]
            if strip[0] != strip[1] or _storage(new[key]) < _storage(old[key]):
                problems.append(f"PersistentVolumeClaim {name}: spec changed (only a larger size is allowed)")
        if kind == "Service" and a.get("clusterIP") != b.get("clusterIP"):
            problems.append(f"Service {name}: clusterIP changed")
    return problems


@pytest.mark.parametrize("values", VALUES)
def test_upgrade_from_the_previous_chart_and_back_is_valid(values, charts, helm_bin, kubernetes_validate, tmp_path):
    file = charts["previous"] / VALUES[values] if VALUES[values] else None
    before = render(helm_bin, charts["previous"], file)
    # a values file that pins the image (ci/ pins 0.1.0) is upgraded with the new tag, as docs/kubernetes.md says
    pins = file is not None and (yaml.safe_load(file.read_text()).get("image") or {}).get("tag")
    new_tag = yaml.safe_load((charts["current"] / "Chart.yaml").read_text())["appVersion"]
    after = render(helm_bin, charts["current"], file, *(["--set", f"image.tag={new_tag}"] if pins else []))
    for name, docs in (("previous", before), ("current", after)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        check = subprocess.run([*kubernetes_validate, str(path)], capture_output=True, text=True)
        assert check.returncode == 0, (name, check.stdout + check.stderr)
    assert change_problems(before, after) == []  # helm upgrade
    assert change_problems(after, before) == []  # helm rollback to the previous revision
    # the chart's own evaluation Job, when enabled, is a new Job under a new name (its labels carry the version)
    jobs = [{n for k, n in released(d) if k == "Job"} for d in (before, after)]
    assert not jobs[0] & jobs[1] or values == "default"
    # the previous chart has no hook but the test: a rollback runs nothing against the store
    assert [h["kind"] for h in hooks(before)] == ["Pod"]


def test_the_store_migration_hook_runs_first_with_the_new_image_and_needs_nothing_of_the_release(charts, helm_bin):
    docs = render(helm_bin, charts["current"], charts["current"] / "ci" / "production-values.yaml")
    migrate = [h for h in hooks(docs) if h["metadata"]["name"].endswith("-store-migrate")]
    assert sorted(h["kind"] for h in migrate) == ["Job", "ServiceAccount"]
    account, job = sorted(migrate, key=lambda h: h["kind"] != "ServiceAccount")
    for h in migrate:
        notes = h["metadata"]["annotations"]
        assert notes["helm.sh/hook"] == "pre-install,pre-upgrade"  # never pre-rollback: an older image refuses it
        assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # Helm runs hooks by weight: the account exists before the Job's pod is made
    assert int(account["metadata"]["annotations"]["helm.sh/hook-weight"]) < \
        int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False
    assert not [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and any(s.get("name") == account["metadata"]["name"] for s in d.get("subjects", []))]
    (container,) = pod["containers"]
    assert container["args"] == ["store", "migrate"]
    # the services' image (the slim one; the dashboard runs from an image of its own)
    deployments = [d for d in docs if d["kind"] == "Deployment" and not d["metadata"]["name"].endswith("-dashboard")]
    images = {c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]}
    assert deployments and images == {container["image"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["restartPolicy"] == "Never"
    # nothing of the release (made after pre-install hooks): no claim, no Secret or ConfigMap the chart renders
    ours = {(d["kind"], d["metadata"]["name"]) for d in released(docs).values()}
    for volume in pod["volumes"]:
        assert "persistentVolumeClaim" not in volume and "configMap" not in volume
        if "secret" in volume:
            assert ("Secret", volume["secret"]["secretName"]) not in ours
            assert volume["secret"]["optional"] is False  # (podman 4.3's kube play needs it said)
    assert not [e for e in container["env"] if "valueFrom" in e or "PASSWORD" in e["name"] or e["name"] ==
                "MEDHELM_STORE_URL"]  # the URL is a file, never an env var
    # fenced like every pod of the release: the egress policy selects it
    (egress,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-egress")]
    expr = egress["spec"]["podSelector"]["matchExpressions"][0]
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] in expr["values"]


def test_the_hook_is_postgres_only_and_takes_the_owners_secret(charts, helm_bin):
    chart = charts["current"]
    assert not [h for h in hooks(render(helm_bin, chart, None)) if h["kind"] == "Job"]  # SQLite: no hook
    pg = ["--set", "resultsStore.kind=postgres", "--set", "resultsStore.postgres.secretName=app-url"]
    (job,) = [h for h in hooks(render(helm_bin, chart, None, *pg)) if h["kind"] == "Job"]
    (vol,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert vol["secret"]["secretName"] == "app-url" and vol["secret"]["items"] == [{"key": "url", "path": "url"}]
    owner = [*pg, "--set", "resultsStore.migrate.secretName=owner-url", "--set", "resultsStore.migrate.secretKey=dsn"]
    (job,) = [h for h in hooks(render(helm_bin, chart, None, *owner)) if h["kind"] == "Job"]
    (vol,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert vol["secret"]["secretName"] == "owner-url" and vol["secret"]["items"] == [{"key": "dsn", "path": "url"}]
    off = hooks(render(helm_bin, chart, None, *pg, "--set", "resultsStore.migrate.enabled=false"))
    assert [h["kind"] for h in off] == ["Pod"]
    # the strict values schema knows the new keys and refuses a typo among them
    bad = subprocess.run([str(helm_bin), "template", "rel", str(chart), *pg, "--set",
                          "resultsStore.migrate.enable=true"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "enable" in bad.stderr


def test_the_checks_catch_what_the_api_server_refuses(charts, helm_bin):
    """The pair checks above can fail: a changed selector, a Job patched under its name, a smaller claim."""
    import copy

    base = render(helm_bin, charts["current"], charts["current"] / "ci" / "full-values.yaml")
    assert change_problems(base, base) == []
    changed = copy.deepcopy(base)
    dep = next(d for d in changed if d["kind"] == "Deployment")
    dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/version"] = "9"
    job = next(d for d in released(changed).values() if d["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    claim = next(d for d in changed if d["kind"] == "PersistentVolumeClaim")
    claim["spec"]["resources"]["requests"]["storage"] = "1Gi"
    problems = change_problems(base, changed)
    assert len(problems) == 3 and any("spec.selector" in p for p in problems), problems
    assert any(p.startswith("Job ") for p in problems) and any("only a larger size" in p for p in problems)
    claim["spec"]["resources"]["requests"]["storage"] = "100Gi"  # growing a claim is allowed
    assert len(change_problems(base, changed)) == 2
