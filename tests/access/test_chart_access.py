"""The chart's access parts: Ingress with TLS, OIDC settings from values and a Secret (never rendered),
access.yaml ConfigMap, caller tokens for the services and the Job, NetworkPolicy ingress rules; lint,
template and strict schema validation with the access values and by default."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.services.conftest import helm_bin, kubernetes_validate  # noqa: F401 - shared fixtures

ACCESS = ["-f", "ci/access-values.yaml"]


@pytest.fixture
def chart() -> Path:
    return Path(__file__).parents[2] / "helm-charts" / "medhelm"


def _helm(helm: Path, chart: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], cwd=chart, capture_output=True, text=True, timeout=60)


def _render(helm: Path, chart: Path, *values: str) -> list[dict]:
    done = _helm(helm, chart, "template", "rel", ".", "--namespace", "clinical-ai", *values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _container(docs: list[dict], name: str) -> tuple[dict, dict]:
    dep = next(d for d in docs if d["kind"] in ("Deployment", "Job") and d["metadata"]["name"] == name)
    return dep["spec"]["template"]["spec"]["containers"][0], dep["spec"]["template"]["spec"]


@pytest.mark.parametrize("values", [[], ACCESS], ids=["default", "access"])
def test_lint_template_and_validate_strict(values, chart, helm_bin, kubernetes_validate, tmp_path):
    lint = _helm(helm_bin, chart, "lint", "--strict", ".", *values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = _render(helm_bin, chart, *values)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump_all(docs))
    check = subprocess.run([*kubernetes_validate, str(tmp_path / "r.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Secret" not in {d["kind"] for d in docs}


def test_default_dashboard_is_redacted_and_says_auth_is_off(chart, helm_bin):
    docs = _render(helm_bin, chart)
    dash, _ = _container(docs, "rel-medhelm-dashboard")
    assert "--insecure-no-auth" in dash["args"] and "--redacted" in dash["args"]
    assert not [d for d in docs if d["kind"] == "Ingress"]
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    egress = policies["rel-medhelm-egress"]
    # ingress is per component now; the egress policy adds only Prometheus's namespace on the metrics port
    assert [r["ports"] for r in egress["spec"].get("ingress", [])] == [[{"protocol": "TCP", "port": 9090}]]
    scen = policies["rel-medhelm-scenarios-ingress"]["spec"]["ingress"][0]
    assert {p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in scen["from"]} == {"job", "dashboard"}
    # nothing connects to a shard but a scrape of its /metrics (no PHI there)
    assert [r["ports"] for r in policies["rel-medhelm-job-ingress"]["spec"]["ingress"]] == \
        [[{"protocol": "TCP", "port": 9090}]]


def test_access_values_wire_oidc_roles_callers_and_ingress(chart, helm_bin):
    docs = _render(helm_bin, chart, *ACCESS)
    dash, pod = _container(docs, "rel-medhelm-dashboard")
    args = dash["args"]
    assert "--oidc-issuer=https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0" in args
    assert "--oidc-redirect-uri=https://medhelm.hospital.internal/oauth2callback" in args
    assert "--insecure-no-auth" not in args and "--access-policy=/etc/medhelm/access/access.yaml" in args
    env = {e["name"]: e for e in dash["env"]}
    assert env["MEDHELM_OIDC_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "medhelm-oidc",
                                                                             "key": "client-secret"}
    assert "value" not in env["MEDHELM_OIDC_COOKIE_SECRET"]
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-medhelm-access")
    policy = yaml.safe_load(cm["data"]["access.yaml"])
    assert policy["roles"]["analyst"] == ["clinical-ai-analysts"] and policy["releases"]
    from medhelm.access import AccessPolicy

    assert AccessPolicy.from_dict(policy).roles["clinical-ai-admins"].label == "admin"  # the app can read it
    assert "callers" not in {v["name"] for v in pod["volumes"]}  # the dashboard holds no service token
    ing = next(d for d in docs if d["kind"] == "Ingress")
    assert ing["spec"]["tls"] == [{"hosts": ["medhelm.hospital.internal"], "secretName": "medhelm-dashboard-tls"}]
    assert ing["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "internal-ca"
    svc, svc_pod = _container(docs, "rel-medhelm-metrics")
    assert "--caller-tokens=/etc/medhelm/callers/callers" in svc["args"]
    assert "--allow-client=medhelm-job.clinical-ai.svc" in svc["args"] and "--insecure-no-auth" not in svc["args"]
    vol = next(v for v in svc_pod["volumes"] if v["name"] == "callers")
    assert vol["secret"]["items"] == [{"key": "callers", "path": "callers"}]
    job, job_pod = _container(docs, "rel-medhelm-eval-nightly")
    assert {"name": "MEDHELM_SERVICE_TOKEN_FILE", "value": "/etc/medhelm/callers/job"} in job["env"]
    assert next(v for v in job_pod["volumes"] if v["name"] == "callers")["secret"]["items"] == \
        [{"key": "job", "path": "job"}]
    dash_np = next(d for d in docs if d["metadata"]["name"] == "rel-medhelm-dashboard-ingress")
    src = dash_np["spec"]["ingress"][0]["from"][0]
    assert src["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ingress-nginx"}
    assert src["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "ingress-nginx"}


def test_an_open_text_dashboard_behind_an_ingress_is_refused(chart, helm_bin):
    done = _helm(helm_bin, chart, "template", "rel", ".", "--set", "ingress.enabled=true", "--set",
                 "ingress.host=x.example", "--set", "ingress.tls.secretName=t", "--set",
                 "auth.openDashboardShowsText=true")
    assert done.returncode != 0 and "without sign-in" in done.stderr


def test_k8s_submitted_jobs_carry_only_the_jobs_token(helm_bin, chart):  # noqa: F811
    """`medhelm k8s submit` builds its Job from the chart's own job template: with auth.callers the shard gets
    the Job's token (key `job` of the Secret) and nothing else of it."""
    from medhelm.manifests import build_job, parse_template

    docs = _render(helm_bin, chart, "--set", "auth.callers.tokenSecret=medhelm-callers")
    template, _ = parse_template(docs, "helm template")
    job = build_job(template, release="rel", suite="s", args=["job"], completions=2, parallelism=2)
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MEDHELM_SERVICE_TOKEN_FILE"] == "/etc/medhelm/callers/job"
    vol = next(v for v in pod["volumes"] if v["name"] == "callers")
    assert vol["secret"] == {"secretName": "medhelm-callers", "items": [{"key": "job", "path": "job"}]}
