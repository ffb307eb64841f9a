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
    dep = next(d for d in docs if d["kind"] in ("Deployment", "Job") and name in  # the chart's Job: <name>-<spec hash>
               (d["metadata"]["name"], d["metadata"]["name"].rsplit("-", 1)[0] if d["kind"] == "Job" else None))
    return dep["spec"]["template"]["spec"]["containers"][0], dep["spec"]["template"]["spec"]


@pytest.mark.parametrize("values", [[], ACCESS], ids=["default", "access"])
def test_lint_template_and_validate_strict(values, chart, helm_bin, kubernetes_validate, tmp_path):
    lint = _helm(helm_bin, chart, "lint", "--strict", ".", *values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = _render(helm_bin, chart, *values)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump_all(docs))
    check = subprocess.run([*kubernetes_validate, str(tmp_path / "r.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # your Secrets are referenced by name; the chart writes only the caller token and the TLS certificates it
    # generates (tests/services/test_helm_chart.py checks the certificates)
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Secret") == \
        ([] if values else ["rel-medhelm-callers", "rel-medhelm-job-tls", "rel-medhelm-tls"])


def test_default_dashboard_is_redacted_on_loopback_and_services_need_a_token(chart, helm_bin, tmp_path):
    """Secure unless told otherwise: no `--insecure-no-auth` anywhere by default. The dashboard without sign-in
    serves aggregates only on its pod's loopback (port-forward); the services admit the Job's token only."""
    import base64

    from medhelm.access.exposure import is_loopback
    from medhelm.rpc.authz import CallerPolicy

    docs = _render(helm_bin, chart)
    dash, _ = _container(docs, "rel-medhelm-dashboard")
    assert "--insecure-no-auth" not in dash["args"] and "--redacted" in dash["args"]
    (host,) = [a.split("=", 1)[1] for a in dash["args"] if a.startswith("--host=")]
    assert is_loopback(host)
    assert not [d for d in docs if d["kind"] == "Ingress"]
    (secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "rel-medhelm-callers"]
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # the services' file, read by the services' own parser, admits the Job's token and nothing else
    (tmp_path / "callers").write_text(data["callers"])
    policy = CallerPolicy.build(token_file=tmp_path / "callers")
    assert policy.caller_for_token(data["job"]) == "job" and len(data["job"]) >= 32
    assert policy.caller_for_token(data["job"][:-1] + "x") is None
    # a fresh render (a fresh install) draws another token; an upgrade keeps the stored one (lookup)
    again = next(d for d in _render(helm_bin, chart) if d["kind"] == "Secret"
                 and d["metadata"]["name"] == "rel-medhelm-callers")
    assert base64.b64decode(again["data"]["job"]).decode() != data["job"]
    for name in ("scenarios", "jury", "metrics"):
        svc, pod = _container(docs, f"rel-medhelm-{name}")
        assert "--caller-tokens=/etc/medhelm/callers/callers" in svc["args"] and "--insecure-no-auth" not in svc["args"]
        assert next(v for v in pod["volumes"] if v["name"] == "callers")["secret"] == \
            {"secretName": "rel-medhelm-callers", "optional": False, "items": [{"key": "callers", "path": "callers"}]}
    job_tpl = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-medhelm-job-template")
    job_pod = yaml.safe_load(job_tpl["data"]["job.yaml"])["spec"]["template"]["spec"]
    assert next(v for v in job_pod["volumes"] if v["name"] == "callers")["secret"]["items"] == [{"key": "job", "path": "job"}]
    # opting out is explicit
    opened = _render(helm_bin, chart, "--set", "auth.callers.generateToken=false")
    assert "rel-medhelm-callers" not in {d["metadata"]["name"] for d in opened if d["kind"] == "Secret"}
    assert "--insecure-no-auth" in _container(opened, "rel-medhelm-jury")[0]["args"]
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    egress = policies["rel-medhelm-egress"]
    # ingress is per component now; the egress policy adds only Prometheus's namespace on the metrics port
    assert [r["ports"] for r in egress["spec"].get("ingress", [])] == [[{"protocol": "TCP", "port": 9090}]]
    scen = policies["rel-medhelm-scenarios-ingress"]["spec"]["ingress"][0]
    assert {p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in scen["from"]} == {"job", "dashboard"}
    # nothing connects to a shard (its /metrics: the monitoring namespace's Prometheus, by the rule above)
    assert "ingress" not in policies["rel-medhelm-job-ingress"]["spec"]


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
    assert env["MEDHELM_OIDC_SCOPES"]["value"] == "openid email profile"  # Entra: groups from token configuration
    assert "--host=0.0.0.0" in args  # signed in: reachable through the Ingress
    keycloak = _render(helm_bin, chart, "-f", "ci/production-values.yaml")  # scopes not set: the default asks for groups
    assert {"name": "MEDHELM_OIDC_SCOPES", "value": "openid email profile groups"} in \
        _container(keycloak, "rel-medhelm-dashboard")[0]["env"]
    issuer = next(d for d in docs if d["metadata"]["name"] == "rel-medhelm-dashboard-issuer")["spec"]
    assert issuer["policyTypes"] == ["Egress"] and issuer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "dashboard"
    assert [r["to"][0]["ipBlock"]["cidr"] for r in issuer["egress"]] == ["20.190.128.0/18", "40.126.0.0/18"]
    hook = next(d for d in docs if d["kind"] == "Pod")  # `helm test` checks the signed-in dashboard too
    assert "http://rel-medhelm-dashboard:8501/_stcore/health" in hook["spec"]["containers"][0]["args"]
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
    assert "--allow-client=dns:medhelm-job.clinical-ai.svc" in svc["args"] and "--insecure-no-auth" not in svc["args"]
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


@pytest.mark.parametrize("shows_text", ["true", "false"])
def test_a_dashboard_without_sign_in_behind_an_ingress_is_refused(shows_text, chart, helm_bin):
    done = _helm(helm_bin, chart, "template", "rel", ".", "--set", "ingress.enabled=true", "--set",
                 "ingress.host=x.example", "--set", "ingress.tls.secretName=t", "--set",
                 f"auth.openDashboardShowsText={shows_text}")
    assert done.returncode != 0 and "without sign-in" in done.stderr and "auth.oidc.enabled" in done.stderr


def test_sign_in_without_issuer_egress_is_refused(chart, helm_bin):
    done = _helm(helm_bin, chart, "template", "rel", ".", *ACCESS, "--set", "auth.oidc.issuerEgress=null")
    assert done.returncode != 0 and "auth.oidc.issuerEgress is required" in done.stderr


def test_each_pod_holds_only_the_keys_it_uses_as_files(chart, helm_bin):
    """No envFrom of a whole Secret: each API key is one file, in the pods its entry lists; the store URL (with
    its password) is a file of the pods that read the store."""
    docs = _render(helm_bin, chart, "-f", "ci/full-values.yaml", "--set", "apiKeys[1].env=JUDGE_KEY", "--set",
                   "apiKeys[1].secretName=judge-keys", "--set", "apiKeys[1].usedBy[0]=metrics")
    expected = {"rel-medhelm-jury": ["OPENAI_API_KEY"], "rel-medhelm-eval-nightly": ["OPENAI_API_KEY"],
                "rel-medhelm-metrics": ["JUDGE_KEY"], "rel-medhelm-scenarios": [], "rel-medhelm-dashboard": []}
    for name, keys in expected.items():
        c, pod = _container(docs, name)
        assert "envFrom" not in c
        env = {e["name"]: e for e in c["env"]}
        assert sorted(n[:-5] for n, e in env.items() if n.endswith("_FILE")
                      and (e.get("value") or "").startswith("/etc/medhelm/keys/")) == keys, name
        assert not any("secretKeyRef" in (e.get("valueFrom") or {}) for e in c["env"]), name  # no secret as env
        projected = [s["secret"] for v in pod["volumes"] if v["name"] == "api-keys" for s in v["projected"]["sources"]]
        assert [i["path"] for s in projected for i in s["items"]] == keys, name
        for key in keys:
            assert env[f"{key}_FILE"]["value"] == f"/etc/medhelm/keys/{key}"
    dash, pod = _container(docs, "rel-medhelm-dashboard")
    assert {"name": "MEDHELM_STORE_URL_FILE", "value": "/etc/medhelm/store/url"} in dash["env"]
    assert next(v for v in pod["volumes"] if v["name"] == "store-url")["secret"] == \
        {"optional": False, "secretName": "medhelm-postgres", "items": [{"key": "url", "path": "url"}]}
    for name in ("rel-medhelm-jury", "rel-medhelm-eval-nightly"):  # the shards and services never see the store
        assert "store-url" not in {v["name"] for v in _container(docs, name)[1]["volumes"]}


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
    assert vol["secret"] == {"secretName": "medhelm-callers", "optional": False, "items": [{"key": "job", "path": "job"}]}
