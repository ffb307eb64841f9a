"""helm lint / helm template of the chart (default and full values), manifests validated against the
Kubernetes 1.30 schemas (strict), KServe/NetworkPolicy/security checked field by field, and a broken
template or value makes these checks fail."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

VALUE_SETS = {"default": [], "full": ["-f", "ci/full-values.yaml"], "production": ["-f", "ci/production-values.yaml"]}


def _helm(helm: Path, chart: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], cwd=chart, capture_output=True, text=True, timeout=60)


def _render(helm: Path, chart: Path, values: list[str]) -> list[dict]:
    done = _helm(helm, chart, "template", "rel", ".", "--namespace", "clinical-ai", *values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture
def chart(repo_root: Path) -> Path:
    return repo_root / "helm-charts" / "medhelm"


@pytest.mark.parametrize("values", VALUE_SETS)
def test_lint_template_and_validate_strict(values, chart, helm_bin, kubernetes_validate, tmp_path):
    lint = _helm(helm_bin, chart, "lint", "--strict", ".", *VALUE_SETS[values])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = _render(helm_bin, chart, VALUE_SETS[values])
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    check = subprocess.run([*kubernetes_validate, str(rendered)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    kinds = sorted({d["kind"] for d in docs})
    expected = {"Deployment", "Service", "PersistentVolumeClaim", "ConfigMap", "NetworkPolicy"}
    if values == "full":
        expected |= {"InferenceService", "Job", "ServiceMonitor"}
    assert expected <= set(kinds)
    # secrets are referenced, never rendered, but for the caller token the chart generates (auth.callers) and,
    # without your own TLS Secret, the certificates of its self-signed bootstrap (test_tls_is_on_by_default)
    own_tls = bool(yaml.safe_load((chart / VALUE_SETS[values][1]).read_text()).get("tls", {}).get("secretName")) \
        if VALUE_SETS[values] else False
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Secret") == \
        ["rel-medhelm-callers"] + ([] if own_tls else ["rel-medhelm-job-tls", "rel-medhelm-tls"])
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    assert deployments == {f"rel-medhelm-{n}" for n in ("scenarios", "jury", "metrics", "dashboard")}
    for d in docs:
        pod = (d.get("spec", {}).get("template", {}) or {}).get("spec")
        if d["kind"] in ("Deployment", "Job") and pod:
            assert pod["securityContext"]["runAsNonRoot"] is True
            for c in pod["containers"]:
                assert c["securityContext"]["readOnlyRootFilesystem"] is True
                assert c["securityContext"]["allowPrivilegeEscalation"] is False


def _quantity(q) -> float:
    """A Kubernetes quantity as a number (cpu in cores, memory in bytes)."""
    q = str(q)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * factor
    return float(q)


def test_inference_services_and_job_from_values(chart, helm_bin):
    docs = _render(helm_bin, chart, VALUE_SETS["full"])
    isvcs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "InferenceService"}
    assert set(isvcs) == {"qwen25-7b", "qwen2-5-7b-instruct", "llama-3-1-8b-instruct", "meditron-mig"}
    cand = isvcs["qwen25-7b"]
    assert cand["apiVersion"] == "serving.kserve.io/v1beta1"
    model = cand["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "huggingface"
    assert model["storageUri"] == "pvc://models/qwen2.5-7b-instruct"
    assert model["args"] == ["--model_name=qwen25-7b", "--backend=vllm", "--max-model-len=16384",
                             "--gpu-memory-utilization=0.90", "--enable-prefix-caching"]
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "1" and model["resources"]["limits"]["memory"] == "32Gi"
    predictor = isvcs["llama-3-1-8b-instruct"]["spec"]["predictor"]
    judge = predictor["model"]
    assert judge["resources"]["requests"]["nvidia.com/gpu"] == "2"
    # the gated download's token: a ServiceAccount listing the Secret (KServe's storage initializer reads the
    # Secrets of its pod's ServiceAccount), never an env var of the model server
    assert [e["name"] for e in judge["env"]] == ["HOME"]  # the emptyDir for caches; no token
    assert predictor["serviceAccountName"] == "llama-3-1-8b-instruct-model-store"
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == predictor["serviceAccountName"]]
    assert sa["secrets"] == [{"name": "hf-token"}] and sa["automountServiceAccountToken"] is False
    # scheduling knobs reach the predictor pod
    assert predictor["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert predictor["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert (predictor["priorityClassName"], predictor["runtimeClassName"]) == ("medhelm-models", "nvidia")
    mig = isvcs["meditron-mig"]["spec"]["predictor"]
    assert mig["model"]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == 1
    assert "nvidia.com/gpu" not in mig["model"]["resources"]["limits"]  # a MIG slice, not a whole GPU
    assert mig["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # complete resources: KServe would merge its runtime defaults (cpu 1 / 2Gi) into any gap
    for name, isvc in isvcs.items():
        res = isvc["spec"]["predictor"]["model"]["resources"]
        assert isvc["spec"]["predictor"]["labels"]["app.kubernetes.io/component"] == "model"
        gpu = [k for k in res["limits"] if k.startswith("nvidia.com/")]
        assert len(gpu) == 1, (name, gpu)
        for what in ("cpu", "memory", *gpu):
            assert what in res["requests"] and what in res["limits"], (name, what)
            assert _quantity(res["requests"][what]) <= _quantity(res["limits"][what]), (name, what)
    # the Job and the jury reach each model through KServe's OpenAI route
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-deployments"))
    deployments = yaml.safe_load(cm["data"]["model_deployments.yaml"])["model_deployments"]
    assert deployments[0] == {"name": "kserve/qwen25-7b", "model_name": "qwen/qwen2.5-7b-instruct", "kind": "openai",
                              "base_url": "http://qwen25-7b-predictor.clinical-ai.svc.cluster.local/openai/v1",
                              "served_model_name": "qwen25-7b", "max_sequence_length": 16384}
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["completionMode"] == "Indexed"
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 2)
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MEDHELM_SHARD_COUNT"] == "4" and env["MEDHELM_JURY_SERVICE"] == "rel-medhelm-jury:50051"
    assert env["MEDHELM_TLS_CERT"] == "/etc/medhelm/tls/tls.crt"


def test_default_jury_reaches_judges_in_the_cluster(chart, helm_bin):
    """Every judge of the built-in default jury resolves (user file over built-ins, as DeploymentRegistry
    merges them) to a deployment whose URL is a predictor Service of a rendered InferenceService and whose
    served_model_name is exactly the runtime's --model_name."""
    from medhelm.deployments import DeploymentRegistry

    docs = _render(helm_bin, chart, VALUE_SETS["full"])
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-deployments"))
    served = {}
    for d in docs:
        if d["kind"] == "InferenceService":
            args = d["spec"]["predictor"]["model"]["args"]
            served[f"{d['metadata']['name']}-predictor.clinical-ai.svc.cluster.local"] = next(
                a.split("=", 1)[1] for a in args if a.startswith("--model_name="))
    jury = yaml.safe_load((Path(__file__).resolve().parents[2] / "services/medhelm/config/jury_default.yaml")
                          .read_text())
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "model_deployments.yaml").write_text(cm["data"]["model_deployments.yaml"])
        registry = DeploymentRegistry.load(Path(tmp))
    assert jury["judges"]
    for judge in jury["judges"]:
        dep = registry.get(judge["name"])
        host = dep.base_url.split("//", 1)[1].split("/", 1)[0]
        assert host in served, (judge["name"], dep.base_url)
        assert dep.served_model_name == served[host], judge["name"]


def test_network_policy_lets_each_pod_reach_dns_and_only_what_it_calls(chart, helm_bin):
    policies = {d["metadata"]["name"]: d["spec"] for d in _render(helm_bin, chart, []) if d["kind"] == "NetworkPolicy"}
    spec = policies["rel-medhelm-egress"]  # every medhelm pod: DNS and nothing else (ingress: Prometheus only)
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert [r["ports"] for r in spec["ingress"]] == [[{"protocol": "TCP", "port": 9090}]]
    (rule,) = spec["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": MONITORING},
                             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    (dns,) = spec["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    # the Job reaches the services' gRPC ports; `helm test` the health and dashboard ports; nothing else by default
    # (no model outside KServe configured, no KServe, SQLite): no namespace-wide rule anywhere
    assert sorted(policies) == ["rel-medhelm-dashboard-ingress", "rel-medhelm-egress", "rel-medhelm-egress-services",
                                "rel-medhelm-egress-test", "rel-medhelm-job-ingress", "rel-medhelm-jury-ingress",
                                "rel-medhelm-metrics-ingress", "rel-medhelm-scenarios-ingress"]
    for name, pol in policies.items():
        for r in pol.get("egress", []) + pol.get("ingress", []):
            for peer in r.get("to", []) + r.get("from", []):
                assert peer != {"podSelector": {}} or name == "rel-medhelm-dashboard-ingress", name  # port-forward


def test_broken_template_or_value_fails(chart, helm_bin, kubernetes_validate, tmp_path):
    broken = tmp_path / "medhelm"
    shutil.copytree(chart, broken)
    # values.schema.json refuses a wrong type or an unknown kind at render time, naming the value
    for bad, field in (("services:\n  jury:\n    replicas: two\n", "services.jury.replicas"),
                       ("resultsStore:\n  kind: postgress\n", "resultsStore.kind"),
                       ("tls:\n  enabld: true\n", "enabld"),
                       ("colour: red\n", "colour"),  # unknown keys, at the top and deep down
                       ("auth:\n  oidc:\n    issuerr: x\n", "issuerr"),
                       ("monitoring:\n  podMonitor:\n    intervall: 1m\n", "intervall"),
                       ("envFrom: [{secretRef: {name: keys}}]\n", "envFrom"),  # gone: apiKeys, one file each
                       ("services:\n  jury:\n    resources: {requests: {cpu: lots}}\n", "services.jury.resources.requests.cpu"),
                       ("job:\n  resources: {limits: {memory: 4 GB}}\n", "job.resources.limits.memory"),
                       ("services:\n  jury:\n    resources: {requests: {gpu: 1}}\n", "gpu"),
                       ("inferenceServices: [{name: m, modelName: a/b, storageUri: 'pvc://m', "
                        "resources: {limits: {nvidia.com/mig-big: 1}}}]\n", "nvidia.com/mig-big")):
        bad_value = tmp_path / "bad.yaml"
        bad_value.write_text(bad)
        done = _helm(helm_bin, broken, "template", "rel", ".", "-f", str(bad_value))
        assert done.returncode != 0 and field in done.stderr, done.stderr
    # without the schema the manifest validation still catches the wrong type
    (broken / "values.schema.json").unlink()
    bad_value.write_text("services:\n  jury:\n    replicas: two\n")
    docs = _render(helm_bin, broken, ["-f", str(bad_value)])
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    check = subprocess.run([*kubernetes_validate, str(rendered)], capture_output=True, text=True)
    assert check.returncode != 0 and "replicas" in check.stdout + check.stderr
    job = broken / "templates" / "job.yaml"
    job.write_text(job.read_text().replace("{{- end }}\n", "", 1))
    lint = _helm(helm_bin, broken, "lint", ".")
    assert lint.returncode != 0
    missing = _helm(helm_bin, chart, "template", "rel", ".", "--set", "job.enabled=true")
    assert missing.returncode != 0 and "job.runEntries" in missing.stderr


DIGEST = "sha256:" + "ab" * 32


def _images(docs: list[dict]) -> dict[str, set[str]]:
    """Component (or the helm test hook, the Job template's ConfigMap) -> the images its containers run."""
    out: dict[str, set[str]] = {}
    for d in docs:
        if d["kind"] == "ConfigMap" and "job.yaml" in d.get("data", {}):
            docs_inside = [yaml.safe_load(d["data"]["job.yaml"])]
            key = "job-template"
        elif d["kind"] in ("Deployment", "Job", "Pod"):
            docs_inside, key = [d], d["metadata"]["labels"].get("app.kubernetes.io/component", d["kind"])
        else:
            continue
        for doc in docs_inside:
            pod = doc["spec"]["template"]["spec"] if "template" in doc["spec"] else doc["spec"]
            out.setdefault(key, set()).update(c["image"] for c in pod["containers"] + pod.get("initContainers", []))
    return out


def test_slim_and_dashboard_images_by_tag_or_digest(chart, helm_bin, tmp_path):
    """The services, the Job (and the Job template `submit` reads) and the helm test hook run the slim service
    image; the dashboard its own. A digest pins either by content (repository@sha256:...), winning over tag."""
    job = ["--set", "job.enabled=true", "--set", "job.runEntries[0]=pubmed_qa:model=a/b"]
    version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    images = _images(_render(helm_bin, chart, job))
    assert images.pop("dashboard") == {f"medhelm-k8s-dashboard:{version}"}
    assert set(images) >= {"scenarios", "jury", "metrics", "job", "job-template", "test"}  # test: the helm test hook
    assert set().union(*images.values()) == {f"medhelm-k8s:{version}"}

    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(f"image: {{repository: registry.hospital.internal/medhelm-k8s, tag: '0.1.0', digest: '{DIGEST}'}}\n"
                      f"dashboard:\n  image: {{repository: registry.hospital.internal/medhelm-k8s-dashboard, "
                      f"digest: 'sha256:{'cd' * 32}'}}\n")
    images = _images(_render(helm_bin, chart, [*job, "-f", str(pinned)]))
    assert images.pop("dashboard") == {f"registry.hospital.internal/medhelm-k8s-dashboard@sha256:{'cd' * 32}"}
    assert set().union(*images.values()) == {f"registry.hospital.internal/medhelm-k8s@{DIGEST}"}
    production = _images(_render(helm_bin, chart, VALUE_SETS["production"]))  # ci/production-values.yaml pins both
    assert all("@sha256:" in i for refs in production.values() for i in refs), production

    for bad, field in ((f"image: {{digest: 'sha256:{'ab' * 31}'}}\n", "image.digest"),  # 62 hex digits
                       (f"image: {{digest: '{DIGEST.upper()}'}}\n", "image.digest"),
                       ("dashboard:\n  image: {digest: 'md5:0123'}\n", "dashboard.image.digest"),
                       ("dashboard:\n  image: {repo: x}\n", "repo"),
                       ("image: {repository: ''}\n", "image.repository")):
        bad_value = tmp_path / "bad.yaml"
        bad_value.write_text(bad)
        done = _helm(helm_bin, chart, "template", "rel", ".", "-f", str(bad_value))
        assert done.returncode != 0 and field in done.stderr, (bad, done.stderr)


def test_every_value_is_documented(chart):
    values = yaml.safe_load((chart / "values.yaml").read_text())
    readme = (chart / "README.md").read_text()

    def paths(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            if isinstance(value, dict) and value and not path.endswith(("resources", "Context", "labels",
                                                                         "requests", "limits", "seccompProfile",
                                                                         "capabilities", "Selector",
                                                                         "defaultResources")):
                yield from paths(value, path + ".")

    generic = {re.sub(r"^services\.(scenarios|jury|metrics)", "services.<name>", p) for p in paths(values)}
    undocumented = sorted(p for p in generic if f"`{p}`" not in readme)
    assert not undocumented, f"values missing from the chart README: {undocumented}"
    assert re.search(r"helm install", readme)


# ------------------------------------------------------------------------------------------------
# Render-and-check: what kube play cannot emulate (Service routing, NetworkPolicy), traced over the rendered
# YAML for the default values and every file in ci/.

NS = {"kubernetes.io/metadata.name": "clinical-ai"}
GRPC_NAMES = {"scenarios": "medhelm.v1.ScenarioService", "jury": "medhelm.v1.JuryService",
              "metrics": "medhelm.v1.MetricsService"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
ALL_VALUES = ["default", *sorted(p.name for p in (Path(__file__).resolve().parents[2] / "helm-charts/medhelm/ci")
                                 .glob("*.yaml"))]


def _values_args(name: str) -> list[str]:
    return [] if name == "default" else ["-f", f"ci/{name}"]


def _selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against labels; {} selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        value, op = labels.get(e["key"]), e["operator"]
        if (op == "In" and value not in e["values"]) or (op == "NotIn" and value in e.get("values", [])) \
                or (op == "Exists" and e["key"] not in labels) or (op == "DoesNotExist" and e["key"] in labels):
            return False
    return True


def _peer_matches(peer: dict, ns_labels: dict, pod_labels: dict | None, ip: str | None) -> bool:
    import ipaddress

    if "ipBlock" in peer:
        if ip is None:
            return False
        block = peer["ipBlock"]
        addr = ipaddress.ip_address(ip)
        return addr in ipaddress.ip_network(block["cidr"]) and not any(
            addr in ipaddress.ip_network(c) for c in block.get("except", []))
    if pod_labels is None:  # an IP outside the cluster is matched by ipBlock only
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], ns_labels):
            return False
    elif ns_labels != NS:  # a podSelector alone means the policy's own namespace
        return False
    return _selects(peer.get("podSelector"), pod_labels) if "podSelector" in peer else True


def _port_matches(rule: dict, port: int, named: dict) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p.get("port") is None or p["port"] == port or named.get(p["port"]) == port for p in ports)


def _allowed(policies: list[dict], direction: str, pod: dict, peer_ns: dict, peer_pod: dict | None,
             port: int, ip: str | None = None) -> bool:
    """Whether a connection is allowed for ``pod`` (its labels and named ports) in one direction."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies if direction in p["spec"]["policyTypes"]
                 and _selects(p["spec"]["podSelector"], pod["labels"])]
    if not selecting:
        return True
    for pol in selecting:
        for rule in pol["spec"].get(key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(_peer_matches(p, peer_ns, peer_pod, ip) for p in peers)
            if peer_ok and _port_matches(rule, port, pod.get("ports", {})):
                return True
    return False


def _workloads(docs: list[dict]) -> dict[str, dict]:
    """Pod labels and named ports of every pod the release makes (KServe predictors: the predictor's own
    ``labels`` are set on its pods, plus KServe's own component label)."""
    out = {}
    for d in docs:
        kind = d["kind"]
        if kind in ("Deployment", "Job"):
            tpl = d["spec"]["template"]
            ports = {p["name"]: p["containerPort"] for c in tpl["spec"]["containers"] for p in c.get("ports", [])}
            out[d["metadata"]["name"]] = {"kind": kind, "labels": tpl["metadata"]["labels"], "ports": ports}
        elif kind == "Pod":
            out[d["metadata"]["name"]] = {"kind": kind, "labels": d["metadata"]["labels"], "ports": {}}
        elif kind == "InferenceService":
            out[d["metadata"]["name"] + "-predictor"] = {
                "kind": kind, "labels": {**d["spec"]["predictor"].get("labels", {}), "component": "predictor"},
                "ports": {"http": 8080}}
    return out


@pytest.mark.parametrize("values", ALL_VALUES)
def test_every_service_selector_routes_to_its_pods(values, chart, helm_bin):
    docs = _render(helm_bin, chart, _values_args(values))
    pods = _workloads(docs)
    deployments = {n: w for n, w in pods.items() if w["kind"] == "Deployment"}
    services = [d for d in docs if d["kind"] == "Service"]
    routed = set()
    for svc in services:
        selected = [n for n, w in pods.items() if _selects({"matchLabels": svc["spec"]["selector"]}, w["labels"])]
        assert [n for n in selected] == [svc["metadata"]["name"]], (svc["metadata"]["name"], selected)
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert target in pods[selected[0]]["ports"] or target in pods[selected[0]]["ports"].values(), \
                (svc["metadata"]["name"], target)
        routed.update(selected)
    assert routed == set(deployments)  # every Deployment is reachable through a Service, and only those
    # the Job's service addresses name Services and their gRPC ports
    for job in (d for d in docs if d["kind"] == "Job"  # the evaluation Job (not the store-migrate hook)
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "job"):
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        by_name = {s["metadata"]["name"]: s for s in services}
        for var in ("MEDHELM_SCENARIO_SERVICE", "MEDHELM_JURY_SERVICE", "MEDHELM_METRICS_SERVICE"):
            host, port = env[var].rsplit(":", 1)
            assert int(port) in [p["port"] for p in by_name[host]["spec"]["ports"] if p["name"] == "grpc"]
    # probes point at ports the containers listen on; the gRPC probes at the plaintext health port
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            assert c.get("startupProbe"), (d["metadata"]["name"], "a slow start must not be killed by liveness")
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.get(kind)
                if probe and "grpc" in probe:
                    # readiness and start-up name the service: the health port then asks the port that serves;
                    # liveness names "" (a wedged loop only: a busy one is not restarted)
                    assert probe["grpc"]["port"] == ports["health"]
                    assert probe["grpc"]["service"] == ("" if kind == "livenessProbe" else
                                                        next(v for k, v in GRPC_NAMES.items() if k in c["name"]))
                elif probe and "exec" in probe:  # a dashboard on loopback: probed from inside its container
                    assert f"http://127.0.0.1:{ports['http']}/_stcore/health" in probe["exec"]["command"][-1]
                    assert "--host=127.0.0.1" in c["args"]
                elif probe:
                    assert probe["httpGet"]["port"] in ports and "--host=0.0.0.0" in c["args"]
    # the ServiceMonitor selects the gRPC Services and names a port they have
    for sm in (d for d in docs if d["kind"] == "ServiceMonitor"):
        selected = [s for s in services if _selects(sm["spec"]["selector"], s["metadata"]["labels"])]
        assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected} == \
            {"scenarios", "jury", "metrics"}
        for s in selected:
            assert sm["spec"]["endpoints"][0]["port"] in [p["name"] for p in s["spec"]["ports"]]


@pytest.mark.parametrize("values", ALL_VALUES)
def test_network_policy_traced_rule_by_rule(values, chart, helm_bin):
    docs = _render(helm_bin, chart, _values_args(values))
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    if not policies:
        pytest.skip("networkPolicy.enabled is false in these values")
    pods = _workloads(docs)
    ours = {n: w for n, w in pods.items() if w["kind"] != "InferenceService"}
    predictors = {n: w for n, w in pods.items() if w["kind"] == "InferenceService"}
    selected = {n for n, w in pods.items() if any(_selects(p["spec"]["podSelector"], w["labels"]) for p in policies)}
    assert selected == set(pods)  # every pod of the release, the KServe predictors too
    svc = {w["labels"]["app.kubernetes.io/component"]: w for w in ours.values()
           if w["labels"]["app.kubernetes.io/component"] in ("scenarios", "jury", "metrics", "dashboard")}
    jobs = [w for w in ours.values() if w["kind"] == "Job" and w["labels"]["app.kubernetes.io/component"] == "job"] or [
        {"labels": {"app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "job"}, "ports": {}}]
    for job in jobs:
        for name in ("scenarios", "jury", "metrics"):
            port = svc[name]["ports"]["grpc"]
            assert _allowed(policies, "Egress", job, NS, svc[name]["labels"], port)
            assert _allowed(policies, "Ingress", svc[name], NS, job["labels"], port)
        for pred in predictors.values():  # shards and the jury call the models in the namespace
            assert _allowed(policies, "Egress", job, NS, pred["labels"], 8080)
            assert _allowed(policies, "Egress", svc["jury"], NS, pred["labels"], 8080)
        assert _allowed(policies, "Egress", job, {"kubernetes.io/metadata.name": "kube-system"},
                        {"k8s-app": "kube-dns"}, 53)
        # PHI stays in: nothing else leaves, except what extraEgress opens explicitly
        extra = yaml.safe_load((chart / "ci" / values).read_text()).get("networkPolicy", {}).get("extraEgress", []) \
            if values != "default" else []
        opened = [r for r in extra for p in r.get("to", []) if "ipBlock" in p]
        assert not _allowed(policies, "Egress", job, {}, None, 443, ip="8.8.8.8")
        assert not _allowed(policies, "Egress", job, {"kubernetes.io/metadata.name": "other"}, {"app": "x"}, 443)
        if opened:
            cidr = opened[0]["to"][0]["ipBlock"]["cidr"]
            inside = cidr.split("/")[0].rsplit(".", 1)[0] + ".7"
            assert _allowed(policies, "Egress", job, {}, None, opened[0]["ports"][0]["port"], ip=inside)
    # ingress: the namespace yes, another namespace no, Prometheus on the metrics port only
    for name in ("scenarios", "jury", "metrics"):
        w = svc[name]
        assert not _allowed(policies, "Ingress", w, {"kubernetes.io/metadata.name": "other"}, {"app": "x"},
                            w["ports"]["grpc"])
        prom = {"app.kubernetes.io/name": "prometheus"}
        assert _allowed(policies, "Ingress", w, MONITORING, prom, w["ports"]["metrics"])
        assert not _allowed(policies, "Ingress", w, MONITORING, prom, w["ports"]["grpc"])
    _check_predictor_fence(values, policies, predictors, ours)
    _check_dashboard_paths(values, policies, ours)


def _check_predictor_fence(values: str, policies: list[dict], predictors: dict, ours: dict) -> None:
    """A model is called by the Job, the jury and metrics only; it reaches DNS and its model store only."""
    by_component = {w["labels"]["app.kubernetes.io/component"]: w for w in ours.values()}
    store = yaml.safe_load((Path(__file__).resolve().parents[2] / "helm-charts/medhelm/ci" / values).read_text()) \
        .get("networkPolicy", {}).get("models", {}).get("storeEgress", []) if values != "default" else []
    for pred in predictors.values():
        for caller in ("job", "jury", "metrics"):
            labels = by_component.get(caller, {"labels": {"app.kubernetes.io/instance": "rel",
                                                          "app.kubernetes.io/component": caller}})["labels"]
            assert _allowed(policies, "Ingress", pred, NS, labels, 8080), caller
        for other in ("dashboard", "scenarios", "test"):
            assert not _allowed(policies, "Ingress", pred, NS, by_component[other]["labels"], 8080), other
        assert not _allowed(policies, "Ingress", pred, NS, {"app": "anything"}, 8080)
        assert not _allowed(policies, "Ingress", pred, {"kubernetes.io/metadata.name": "other"},
                            {"app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "job"}, 8080)
        assert not _allowed(policies, "Ingress", pred, {"kubernetes.io/metadata.name": "knative-serving"},
                            {"app": "activator"}, 8012)  # RawDeployment: no system namespace needs to
        assert _allowed(policies, "Egress", pred, {"kubernetes.io/metadata.name": "kube-system"},
                        {"k8s-app": "kube-dns"}, 53)
        assert not _allowed(policies, "Egress", pred, {}, None, 443, ip="8.8.8.8")
        assert not _allowed(policies, "Egress", pred, NS, {"app.kubernetes.io/component": "jury"}, 50051)
        for rule in store:
            cidr = rule["to"][0]["ipBlock"]["cidr"]
            assert _allowed(policies, "Egress", pred, {}, None, rule["ports"][0]["port"],
                            ip=cidr.split("/")[0].rsplit(".", 1)[0] + ".9")


def _check_dashboard_paths(values: str, policies: list[dict], ours: dict) -> None:
    """`helm test` reaches the dashboard; with sign-in the dashboard reaches its issuer and nothing else outside."""
    by_component = {w["labels"]["app.kubernetes.io/component"]: w for w in ours.values()}
    dash, test = by_component["dashboard"], by_component["test"]
    assert _allowed(policies, "Ingress", dash, NS, test["labels"], dash["ports"]["http"])
    assert _allowed(policies, "Egress", test, NS, dash["labels"], dash["ports"]["http"])
    oidc = (yaml.safe_load((Path(__file__).resolve().parents[2] / "helm-charts/medhelm/ci" / values).read_text())
            .get("auth", {}).get("oidc", {}) if values != "default" else {})
    for peer in oidc.get("issuerEgress", []) if oidc.get("enabled") else []:
        ip = peer["cidr"].split("/")[0]
        assert _allowed(policies, "Egress", dash, {}, None, peer.get("port", 443), ip=ip)
        assert not _allowed(policies, "Egress", dash, {}, None, 80, ip=ip)
        assert not _allowed(policies, "Egress", by_component["scenarios"], {}, None, peer.get("port", 443), ip=ip)
    assert not _allowed(policies, "Egress", dash, {}, None, 443, ip="8.8.8.8")


def test_serverless_predictors_admit_the_knative_namespace(chart, helm_bin):
    docs = _render(helm_bin, chart, [*VALUE_SETS["full"], "--set", "kserve.deploymentMode=Serverless"])
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    pred = _workloads(docs)["qwen25-7b-predictor"]
    assert _allowed(policies, "Ingress", pred, {"kubernetes.io/metadata.name": "knative-serving"}, {"app": "activator"}, 8012)
    assert not _allowed(policies, "Ingress", pred, {"kubernetes.io/metadata.name": "kserve"}, {"app": "x"}, 8012)


def test_a_downloaded_model_needs_its_store_egress(chart, helm_bin, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("kserve: {enabled: true}\ninferenceServices:\n"
                      "  - {name: m1, modelName: a/b, storageUri: 'hf://org/model'}\n")
    done = _helm(helm_bin, chart, "template", "rel", ".", "-f", str(values))
    assert done.returncode != 0 and "networkPolicy.models.storeEgress" in done.stderr and "m1" in done.stderr
    # pvc:// needs no egress; with networkPolicy off nothing is fenced (and nothing is asked)
    assert _helm(helm_bin, chart, "template", "rel", ".", "-f", str(values), "--set",
                 "networkPolicy.enabled=false").returncode == 0


def test_names_longer_than_a_dns_label_fail_naming_the_value(chart, helm_bin):
    """Kubernetes refuses names over 63 characters only when the object is created, half-way through an
    install; the chart refuses them at render, naming what to shorten (it never truncates: two releases
    could collide)."""
    longest_ok = "r" * 37  # rel + "-medhelm" = 45: the longest prefix whose every name fits
    docs = _render_named(helm_bin, chart, longest_ok, [*VALUE_SETS["full"], "--set", "job.suite=n", "--set",
                                                       "schedules=null"])  # a CronJob has its own limit, 52
    names = [d["metadata"]["name"] for d in docs]
    assert max(len(n) for n in names) <= 63 and f"{longest_ok}-medhelm-dashboard-ingress" in names
    done = _helm(helm_bin, chart, "template", longest_ok + "r", ".")
    assert done.returncode != 0 and "shorten the release name to at most 37 characters" in done.stderr
    suite = "s" * 40  # valid by the schema, but rel-medhelm-eval-<40> is 57; a 26-character release makes it 80
    done = _helm(helm_bin, chart, "template", "r" * 26, ".", "--set", "job.enabled=true", "--set",
                 f"job.suite={suite}", "--set", "job.runEntries[0]=pubmed_qa:model=a/b")
    assert done.returncode != 0 and "80 characters" in done.stderr and "shorten job.suite" in done.stderr


def _render_named(helm: Path, chart: Path, release: str, values: list[str]) -> list[dict]:
    done = _helm(helm, chart, "template", release, ".", "--namespace", "clinical-ai", *values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("bad, message", [
    ("services: {jury: {resources: {requests: {cpu: '2'}, limits: {cpu: 1500m}}}}",
     "services.jury.resources.requests.cpu (2) is above its limit (1500m)"),
    ("job: {resources: {requests: {memory: 5Gi}, limits: {memory: 4Gi}}}",
     "job.resources.requests.memory (5Gi) is above its limit (4Gi)"),
    ("dashboard: {resources: {requests: {memory: 3000M}, limits: {memory: 2Gi}}}",
     "dashboard.resources.requests.memory (3000M) is above its limit (2Gi)"),
    ("kserve: {enabled: true}\ninferenceServices: [{name: m, modelName: a/b, storageUri: 'pvc://m', "
     "resources: {requests: {cpu: '9'}}}]", "inferenceServices[m].resources.requests.cpu (9) is above its limit (8)"),
    ("kserve: {enabled: true}\ninferenceServices: [{name: m, modelName: a/b, storageUri: 'pvc://m', gpus: 0, "
     "resources: {requests: {nvidia.com/mig-1g.10gb: 2}, limits: {nvidia.com/mig-1g.10gb: 1}}}]",
     "requests and limits of nvidia.com/mig-1g.10gb must be equal"),
])
def test_requests_above_limits_are_refused_at_render(bad, message, chart, helm_bin, tmp_path):
    values = tmp_path / "bad.yaml"
    values.write_text(bad + "\n")
    done = _helm(helm_bin, chart, "template", "rel", ".", "-f", str(values))
    assert done.returncode != 0 and message in done.stderr, done.stderr
    # the same quantities the right way round render
    ok = _helm(helm_bin, chart, "template", "rel", ".", "--set", "services.jury.resources.requests.cpu=1500m",
               "--set", "services.jury.resources.limits.cpu=2")
    assert ok.returncode == 0, ok.stderr


def test_job_rides_out_disruptions_and_fails_fast_on_bad_input(chart, helm_bin):
    for values in ALL_VALUES:
        for job in (d for d in _render(helm_bin, chart, _values_args(values)) if d["kind"] in ("Job", "CronJob")):
            spec = job["spec"]["jobTemplate"]["spec"] if job["kind"] == "CronJob" else job["spec"]
            rules = spec["podFailurePolicy"]["rules"]
            assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
            # the store-migrate hook is one pod: bad input (a newer store, a refused role) fails the whole Job
            fail = ("FailJob", "migrate") if job["metadata"]["name"].endswith("-store-migrate") else ("FailIndex", "shard")
            assert rules[1] == {"action": fail[0], "onExitCodes": {"containerName": fail[1], "operator": "In",
                                                                   "values": [2]}}
            assert spec["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy requires it


def test_the_charts_job_survives_helm_upgrade(chart, helm_bin):
    """A Job's pod template is immutable: an upgrade that patched it would fail. The chart's Job is named with a
    hash of its spec, so an upgrade that leaves the Job's spec alone renders the very same Job (nothing to patch)
    and one that changes it (an image tag) renders a Job of a new name (Helm creates it and removes the old)."""
    base = [*VALUE_SETS["full"], "--set", "schedules=null"]

    def job(*extra: str) -> dict:
        (j,) = [d for d in _render(helm_bin, chart, [*base, *extra])
                if d["kind"] == "Job" and "helm.sh/hook" not in d["metadata"].get("annotations", {})]
        return j

    first = job()
    assert re.fullmatch(r"rel-medhelm-eval-nightly-[0-9a-f]{6}", first["metadata"]["name"])
    assert job("--set", "services.jury.replicas=5", "--set", "dashboard.replicas=3") == first  # not the Job's
    retagged = job("--set", "image.tag=0.3.0")
    assert retagged["metadata"]["name"] != first["metadata"]["name"]
    assert retagged["metadata"]["name"].rsplit("-", 1)[0] == first["metadata"]["name"].rsplit("-", 1)[0]
    assert job("--set", "job.runEntries[0]=pubmed_qa:model=a/b")["metadata"]["name"] != first["metadata"]["name"]


def test_production_values_keep_two_of_everything_through_a_drain(chart, helm_bin):
    docs = _render(helm_bin, chart, _values_args("production-values.yaml"))
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == "Deployment"}
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert set(deployments) == {"scenarios", "jury", "metrics", "dashboard"}
    for name, dep in deployments.items():
        assert dep["spec"]["replicas"] >= 2, name
        (pdb,) = [p for p in pdbs if _selects(p["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])]
        assert pdb["spec"]["maxUnavailable"] == 1  # one at a time: the other replica keeps serving


def test_documented_admission_policy_is_valid_and_pins_what_the_chart_renders(chart, helm_bin, kubernetes_validate):
    """docs/k8s/job-admission-policy.yaml: strict Kubernetes 1.30 schema; the names it pins (ServiceAccount, claim,
    container, caller-token key) are the ones the chart renders for a release called medhelm."""
    policy_file = chart.parents[1] / "docs" / "k8s" / "job-admission-policy.yaml"
    check = subprocess.run([*kubernetes_validate, str(policy_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    text = policy_file.read_text()
    docs = _render_named(helm_bin, chart, "medhelm", ["--set", "job.enabled=true", "--set",
                                                      "job.runEntries[0]=pubmed_qa:model=a/b"])
    job = next(d for d in docs if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    assert f"variables.pod.serviceAccountName == '{pod['serviceAccountName']}'" in text
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    assert c["name"] == "shard" and "command" not in c and c["args"][0] == "job"
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)["persistentVolumeClaim"]["claimName"]
    assert f"v.persistentVolumeClaim.claimName == '{claim}'" in text
    callers = next(v for v in pod["volumes"] if v["name"] == "callers")["secret"]
    assert callers["secretName"] in text and callers["items"] == [{"key": "job", "path": "job"}]
    # the image it pins is what the chart renders with image.digest set to the registry copy's digest
    pinned = re.search(r"c\.image == '([^']+)'", text).group(1)
    repository, digest = pinned.split("@")
    docs = _render_named(helm_bin, chart, "medhelm", ["--set", "job.enabled=true", "--set",
                                                      "job.runEntries[0]=pubmed_qa:model=a/b", "--set",
                                                      f"image.repository={repository}", "--set", f"image.digest={digest}"])
    assert next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]["image"] == pinned


# Checks the chart does not follow, each for a reason a platform team can read (everything else must pass):
CHECKOV_SKIPS = {
    "CKV_K8S_11": "no CPU limits on purpose: CFS throttling stalls gRPC deadlines and probes; CPU requests are set",
    "CKV_K8S_15": "pullPolicy is a value (IfNotPresent with a pinned tag by default)",
    "CKV_K8S_21": "`helm template` output carries no namespace; `helm install -n` sets it",
    "CKV_K8S_35": "the store URL / HF token / API keys are read from env by their libraries; never argv or logs",
    "CKV_K8S_43": "a digest is a value (image.digest, dashboard.image.digest: repository@sha256:...), set it in "
                  "production (docs/kubernetes.md); a chart cannot know a registry copy's digest",
}


def test_policy_scanner_checkov(chart, helm_bin, checkov_bin, tmp_path):
    """checkov's Kubernetes policies (security context, privilege, capabilities, seccomp, service-account
    tokens, probes, resources, host namespaces...) over the default and every ci/ rendering."""
    import json

    files = []
    for values in ALL_VALUES:
        docs = _render(helm_bin, chart, _values_args(values))
        path = tmp_path / f"{values}.rendered.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        files += ["-f", str(path)]
    done = subprocess.run([str(checkov_bin), *files, "--framework", "kubernetes", "--quiet", "--compact",
                           "-o", "json", "--skip-check", ",".join(CHECKOV_SKIPS)],
                          capture_output=True, text=True, timeout=600)
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [(f["check_id"], f["resource"]) for r in reports for f in r["results"]["failed_checks"]]
    passed = sum(r["summary"]["passed"] for r in reports)
    assert not failed, failed
    assert passed > 300 and not any(r["summary"]["parsing_errors"] for r in reports)


# ------------------------------------------------------------------------------------------------
# Secure by default (issue 52, item 5): TLS between the services and the Job, /metrics and egress fenced, every
# pod non-root with a read-only root and no capabilities. Each default proved on the rendered YAML; the TLS
# default also by a real service speaking it (and by `podman kube play` in test_kube_play.py).

def _pod_specs(docs: list[dict]) -> list[tuple[str, dict, list[dict]]]:
    """(what, pod-level securityContext, containers) of every pod the release can make, the KServe predictors and
    the Job template `medhelm k8s submit` reads included."""
    out = []
    for d in docs:
        name = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] == "ConfigMap" and "job.yaml" in d.get("data", {}):
            d = yaml.safe_load(d["data"]["job.yaml"])
        if d["kind"] == "InferenceService":
            pred = d["spec"]["predictor"]
            out.append((name, pred.get("securityContext"), [pred["model"]]))
            continue
        if d["kind"] == "CronJob":
            pod = d["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif d["kind"] in ("Deployment", "Job"):
            pod = d["spec"]["template"]["spec"]
        elif d["kind"] == "Pod":
            pod = d["spec"]
        else:
            continue
        out.append((name, pod.get("securityContext"), pod["containers"] + pod.get("initContainers", [])))
    return out


KSERVE = ["--set", "kserve.enabled=true", "--set", "inferenceServices[0].name=m", "--set",
          "inferenceServices[0].modelName=a/b", "--set", "inferenceServices[0].storageUri=pvc://models/m"]


@pytest.mark.parametrize("values", [*ALL_VALUES, "kserve"])
def test_every_pod_runs_non_root_read_only_without_capabilities(values, chart, helm_bin):
    docs = _render(helm_bin, chart, KSERVE if values == "kserve" else _values_args(values))
    pods = _pod_specs(docs)
    assert any(w.startswith("InferenceService/") for w, _, _ in pods) or values not in ("kserve", "full-values.yaml")
    for what, pod_ctx, containers in pods:
        assert pod_ctx and pod_ctx["runAsNonRoot"] is True and pod_ctx.get("runAsUser", 1) != 0, what
        assert pod_ctx["seccompProfile"] == {"type": "RuntimeDefault"}, what
        for c in containers:
            ctx = c.get("securityContext") or {}
            assert ctx.get("readOnlyRootFilesystem") is True, (what, c.get("name"))
            assert ctx.get("allowPrivilegeEscalation") is False, (what, c.get("name"))
            assert ctx.get("capabilities", {}).get("drop") == ["ALL"] and not ctx["capabilities"].get("add"), what
            assert not ctx.get("privileged") and ctx.get("runAsUser", 1) != 0, what
    # a read-only root still leaves the model server somewhere to write: HOME and caches on an emptyDir
    for d in (d for d in docs if d["kind"] == "InferenceService"):
        pred = d["spec"]["predictor"]
        mounts = {m["mountPath"]: m["name"] for m in pred["model"]["volumeMounts"]}
        volumes = {v["name"]: v for v in pred["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]] and volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
        assert {"name": "HOME", "value": "/tmp"} in pred["model"]["env"]


def _secret_files(docs: list[dict], name: str, folder: Path) -> dict[str, Path]:
    import base64

    (secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == name]
    assert secret["type"] == "kubernetes.io/tls"
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, value in secret["data"].items():
        (folder / key).write_bytes(base64.b64decode(value))
        out[key] = folder / key
    return out


def test_tls_is_on_by_default_and_its_certificates_work(chart, helm_bin, tmp_path, start_service):
    """Default values: every service serves mutual TLS only, from the chart's self-signed bootstrap (a CA, the
    services' certificate for every Service name, the Job's client certificate); a real service started with
    the rendered Secret's files answers the Job's certificate under the Service's name, and refuses plaintext, no
    client certificate and a certificate of another install's CA. With cert-manager served, Certificates (from a
    CA it makes, or your issuer) replace the bootstrap, under the same Secret names."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    docs = _render(helm_bin, chart, [])
    for name in ("scenarios", "jury", "metrics"):
        dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == f"rel-medhelm-{name}")
        pod = dep["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert {"--tls-cert=/etc/medhelm/tls/tls.crt", "--tls-key=/etc/medhelm/tls/tls.key",
                "--tls-client-ca=/etc/medhelm/tls/ca.crt"} <= set(c["args"])
        assert next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]["secretName"] == "rel-medhelm-tls"
    job_tpl = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-medhelm-job-template")
    job_pod = yaml.safe_load(job_tpl["data"]["job.yaml"])["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in job_pod["containers"][0]["env"]}
    assert env["MEDHELM_TLS_CA"] == "/etc/medhelm/tls/ca.crt" and env["MEDHELM_TLS_CERT"] == "/etc/medhelm/tls/tls.crt"
    secrets = {v["secret"]["secretName"] for v in job_pod["volumes"] if "secret" in v}
    assert "rel-medhelm-job-tls" in secrets and "rel-medhelm-tls" not in secrets  # never the server's key

    server = _secret_files(docs, "rel-medhelm-tls", tmp_path / "server")
    job = _secret_files(docs, "rel-medhelm-job-tls", tmp_path / "job")
    other = _secret_files(_render(helm_bin, chart, []), "rel-medhelm-job-tls", tmp_path / "other")  # another install
    assert server["ca.crt"].read_bytes() == job["ca.crt"].read_bytes() != other["ca.crt"].read_bytes()
    svc = start_service("metrics", "--output-path", str(tmp_path / "out"), "--local-path", str(tmp_path / "env"),
                        "--tls-cert", str(server["tls.crt"]), "--tls-key", str(server["tls.key"]),
                        "--tls-client-ca", str(server["ca.crt"]), "--health-port", "0")
    port = svc.address.rsplit(":", 1)[1]

    def health(creds: grpc.ChannelCredentials | None, name: str = "rel-medhelm-metrics") -> str:
        options = [("grpc.ssl_target_name_override", name)]
        with (grpc.secure_channel(f"127.0.0.1:{port}", creds, options=options) if creds
              else grpc.insecure_channel(f"127.0.0.1:{port}")) as ch:
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=30)
            except grpc.RpcError as err:
                return err.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    def creds(files: dict[str, Path], client: bool = True) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(files["ca.crt"].read_bytes(),
                                            files["tls.key"].read_bytes() if client else None,
                                            files["tls.crt"].read_bytes() if client else None)

    for host in ("rel-medhelm-metrics", "rel-medhelm-metrics.clinical-ai.svc.cluster.local"):
        assert health(creds(job), host) == "SERVING"  # the Job, by the Service's name
    assert health(creds(job), "rel-medhelm-elsewhere") == "UNAVAILABLE"  # not a name of this certificate
    assert health(None) == "UNAVAILABLE"  # plaintext
    assert health(creds(job, client=False)) == "UNAVAILABLE"  # no client certificate
    assert health(grpc.ssl_channel_credentials(job["ca.crt"].read_bytes(), other["tls.key"].read_bytes(),
                                               other["tls.crt"].read_bytes())) == "UNAVAILABLE"  # another CA's
    # readiness on the health port asks the TLS port itself, with the chart's certificate as its own client's
    from tests.services.podman import grpc_probe

    health_port = int(svc.health_address.rsplit(":", 1)[1])
    assert grpc_probe(health_port, "medhelm.v1.MetricsService", timeout_s=30) == "SERVING"

    # cert-manager in the cluster: its Certificates, the same Secret names, no bootstrap Secret
    managed = _render(helm_bin, chart, ["--api-versions", "cert-manager.io/v1"])
    certs = {d["metadata"]["name"]: d["spec"] for d in managed if d["kind"] == "Certificate"}
    assert {n for n in certs} == {"rel-medhelm-ca", "rel-medhelm-tls", "rel-medhelm-job-tls"}
    assert certs["rel-medhelm-ca"]["isCA"] is True
    assert certs["rel-medhelm-tls"]["secretName"] == "rel-medhelm-tls"
    assert {"server auth", "client auth"} <= set(certs["rel-medhelm-tls"]["usages"])
    assert "rel-medhelm-metrics" in certs["rel-medhelm-tls"]["dnsNames"]
    assert certs["rel-medhelm-job-tls"]["usages"][0] == "client auth"
    assert certs["rel-medhelm-tls"]["issuerRef"] == {"name": "rel-medhelm-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert [d["metadata"]["name"] for d in managed if d["kind"] == "Secret"] == ["rel-medhelm-callers"]
    yours = _render(helm_bin, chart, ["--api-versions", "cert-manager.io/v1", "--set",
                                      "tls.certManager.issuerRef.name=hospital-ca", "--set",
                                      "tls.certManager.issuerRef.kind=ClusterIssuer"])
    assert not [d for d in yours if d["kind"] == "Issuer"]
    assert {d["spec"]["issuerRef"]["name"] for d in yours if d["kind"] == "Certificate"} == {"hospital-ca"}
    forced_off = _render(helm_bin, chart, ["--api-versions", "cert-manager.io/v1", "--set",
                                           "tls.certManager.enabled=false"])
    assert not [d for d in forced_off if d["kind"] == "Certificate"]
    # your own Secret for the services and mutual TLS: the Job's own is required, named
    done = _helm(helm_bin, chart, "template", "rel", ".", "--set", "tls.secretName=mine")
    assert done.returncode != 0 and "tls.clientSecretName is required" in done.stderr
    plain = _render(helm_bin, chart, ["--set", "tls.enabled=false"])  # opting out is explicit
    assert not [d for d in plain if d["kind"] == "Secret" and "tls" in d["metadata"]["name"]]


def test_metrics_and_egress_are_fenced_by_default(chart, helm_bin, tmp_path):
    """/metrics answers the monitoring namespace's Prometheus only (not a pod of the namespace, not another pod of
    the monitoring namespace); each pod's egress reaches DNS and what it calls: the Job the services, the Job,
    jury and metrics the models (KServe's and the configured endpoints outside it), the store's users the store,
    and nothing else: not a pod of the namespace, not the internet."""
    values = tmp_path / "v.yaml"
    values.write_text("kserve: {enabled: true}\n"
                      "inferenceServices: [{name: m, modelName: a/b, storageUri: 'pvc://models/m'}]\n"
                      "networkPolicy:\n  modelEgress: [{to: [{ipBlock: {cidr: 10.44.0.0/24}}], "
                      "ports: [{protocol: TCP, port: 443}]}]\n"
                      "resultsStore: {kind: postgres, postgres: {secretName: pg}}\n"
                      "monitoring: {pushgateway: {url: 'http://pushgateway.monitoring:9091'}}\n")
    for args in ([], ["-f", str(values)]):
        docs = _render(helm_bin, chart, args)
        policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
        pods = _workloads(docs)
        by = {w["labels"]["app.kubernetes.io/component"]: w for w in pods.values() if w["kind"] != "InferenceService"}
        job = by.get("job", {"labels": {"app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "job"},
                             "ports": {"metrics": 9090}})
        prom, other_ns = {"app.kubernetes.io/name": "prometheus"}, {"kubernetes.io/metadata.name": "other"}
        for w in (by["scenarios"], by["jury"], by["metrics"], job):
            assert _allowed(policies, "Ingress", w, MONITORING, prom, 9090)
            assert not _allowed(policies, "Ingress", w, NS, {"app": "anything"}, 9090)  # a pod of the namespace
            assert not _allowed(policies, "Ingress", w, NS, by["dashboard"]["labels"], 9090)
            assert not _allowed(policies, "Ingress", w, MONITORING, {"app": "grafana"}, 9090)
            assert not _allowed(policies, "Ingress", w, other_ns, prom, 9090)
        for w in (*by.values(), job):
            assert _allowed(policies, "Egress", w, {"kubernetes.io/metadata.name": "kube-system"},
                            {"k8s-app": "kube-dns"}, 53)
            assert not _allowed(policies, "Egress", w, {}, None, 443, ip="8.8.8.8")
            assert not _allowed(policies, "Egress", w, NS, {"app": "anything"}, 443)
            assert not _allowed(policies, "Egress", w, other_ns, {"app": "x"}, 443)
        for name in ("scenarios", "jury", "metrics"):
            assert _allowed(policies, "Egress", job, NS, by[name]["labels"], 50051)
            assert not _allowed(policies, "Egress", job, NS, by[name]["labels"], 9090)
            assert not _allowed(policies, "Egress", by["dashboard"], NS, by[name]["labels"], 50051)
        callers, others = (job, by["jury"], by["metrics"]), (by["scenarios"], by["dashboard"])
        for pred in (w for w in pods.values() if w["kind"] == "InferenceService"):
            assert all(_allowed(policies, "Egress", w, NS, pred["labels"], 8080) for w in callers)
            assert not any(_allowed(policies, "Egress", w, NS, pred["labels"], 8080) for w in others)
        if args:
            assert all(_allowed(policies, "Egress", w, {}, None, 443, ip="10.44.0.7") for w in callers)
            assert not any(_allowed(policies, "Egress", w, {}, None, 443, ip="10.44.0.7") for w in others)
            assert not _allowed(policies, "Egress", job, {}, None, 80, ip="10.44.0.7")  # the endpoint's port only
            pg = {"app": "postgres"}
            assert _allowed(policies, "Egress", by["dashboard"], NS, pg, 5432)
            assert _allowed(policies, "Egress", job, NS, pg, 5432)
            assert not _allowed(policies, "Egress", by["scenarios"], NS, pg, 5432)
            assert _allowed(policies, "Egress", job, MONITORING, {"app": "pushgateway"}, 9091)
            assert not _allowed(policies, "Egress", by["jury"], MONITORING, {"app": "pushgateway"}, 9091)
