"""The chart's own workloads in real containers: `helm template` → `podman kube play` of the rendered
Deployments and ConfigMaps (the PVC as a podman volume, the TLS Secrets as podman secrets), the chart's
probes run from the host against the pod IPs the way the kubelet runs them, then the Job's pod template
played as one Pod per completion index (JOB_COMPLETION_INDEX set as an Indexed Job sets it) against the
services and the mock OpenAI server (in a pod of the same image): the shards write their records to the
shared volume and `medhelm collect` merges them. Three modes: the chart's default values (mutual TLS from the
self-signed bootstrap the chart generates: its Secrets become podman secrets), mutual TLS from Secrets of
one's own, and plaintext (tls.enabled false, the explicit opt-out).

What kube play cannot emulate stays in render-and-check tests (test_helm_chart.py): a Service is emulated
by a hostAliases entry mapping its name to the pod its selector selects (as cluster DNS + kube-proxy would);
NetworkPolicies and KServe CRDs are not played."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.services.podman import DASHBOARD_IMAGE, IMAGE, grpc_probe, make_tls, run, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(2400)]

ROWS, SHARDS = 12, 2
JURY = "  - name: jury_score\n    rubric: aci_bench\n    judges:\n      - {name: mock/judge, model_name: test/judge}\n"
def mock_host(cluster: "Cluster") -> str:
    """The mock model server's pod: named for the release (pod names are one namespace per machine: two runs at
    once would clash on a fixed one), reached by that name on the release's network."""
    return f"{cluster.release}-mock"


def deployments(cluster: "Cluster") -> str:
    """The deployments file the chart's ``modelDeployments`` carries: a candidate and a judge on the mock."""
    return "model_deployments:\n" + "".join(
        f"  - name: mock/{n}\n    model_name: test/{n}\n    kind: openai\n"
        f"    base_url: http://{mock_host(cluster)}:8000/v1\n"
        f"    served_model_name: {n}\n    max_sequence_length: 2048\n" for n in ("svc-model", "judge"))


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Cluster:
    """Everything one test plays, torn down (pods, volume, network, secrets) whatever happens."""

    def __init__(self, release: str, tmp: Path) -> None:
        self.release, self.tmp = release, tmp
        self.network = f"{release}-net"
        self.played: list[Path] = []
        self.secrets: list[str] = []
        self.volumes: list[str] = []
        run("podman", "network", "create", self.network)

    def volume(self, name: str) -> Path:
        run("podman", "volume", "create", name)
        self.volumes.append(name)
        return Path(run("podman", "volume", "inspect", "--format", "{{.Mountpoint}}", name).stdout.strip())

    def secret(self, name: str, files: dict[str, Path]) -> None:
        # podman 4.3's kube play reads a secret volume from a podman secret holding a Secret object whose
        # data values are the files' raw text (it writes them as they are, without base64-decoding)
        data = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                           "data": {k: p.read_text() for k, p in files.items()}})
        run("podman", "secret", "create", name, "-", input_text=data)
        self.secrets.append(name)

    def play(self, name: str, docs: list[dict], *args: str) -> None:
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        self.played.append(path)
        # --replace: a pod of the same name a killed run of the same process id left behind is taken down first
        run("podman", "kube", "play", "--replace", "--network", self.network, *args, str(path), timeout=300)

    def static_ip(self, host: int) -> str:
        """An address of the network's /24 for ``--ip`` (pods played without one take the low ones)."""
        subnet = run("podman", "network", "inspect", "--format", "{{range .Subnets}}{{.Subnet}}{{end}}",
                     self.network).stdout.strip()
        assert subnet.endswith(".0/24"), subnet
        return f"{subnet[:-len('0/24')]}{host}"

    def pod_ip(self, pod: str) -> str:
        infra = run("podman", "pod", "inspect", "--format", "{{.InfraContainerID}}", pod).stdout.strip()
        return run("podman", "inspect", "--format",
                   f'{{{{(index .NetworkSettings.Networks "{self.network}").IPAddress}}}}', infra).stdout.strip()

    def close(self) -> None:
        for path in reversed(self.played):
            run("podman", "kube", "down", str(path), check=False, timeout=120)
        # kube play also makes a volume per ConfigMap and secret volume, which kube down leaves behind
        names = run("podman", "volume", "ls", "--format", "{{.Name}}", check=False).stdout.split()
        for v in {*self.volumes, *(n for n in names if n.startswith(self.release))}:
            run("podman", "volume", "rm", "--force", v, check=False)
        for s in self.secrets:
            run("podman", "secret", "rm", s, check=False)
        run("podman", "network", "rm", "--force", self.network, check=False)


@pytest.fixture
def cluster(tmp_path, request):
    c = Cluster(f"kp{os.getpid() % 100000}{request.node.callspec.id[:1]}", tmp_path)
    yield c
    c.close()


def _render(helm_bin: Path, repo: Path, release: str, values: dict, tmp: Path) -> list[dict]:
    vf = tmp / "values.yaml"
    vf.write_text(yaml.safe_dump(values))
    done = subprocess.run([str(helm_bin), "template", release, str(repo / "helm-charts" / "medhelm"),
                           "--namespace", "clinical-ai", "-f", str(vf)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _probe(spec: dict, container: dict, ip: str, played_name: str = "") -> bool:
    """One kubelet probe (grpc or httpGet against the pod IP; exec inside the played container), with the
    probe's own timeout."""
    timeout = spec.get("timeoutSeconds", 1)
    if "exec" in spec:  # the dashboard on its pod's loopback (no sign-in) is probed from inside
        return run("podman", "exec", played_name, *spec["exec"]["command"], check=False,
                   timeout=timeout + 5).returncode == 0
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if "grpc" in spec:
        return grpc_probe(spec["grpc"]["port"], spec["grpc"].get("service", ""), timeout_s=timeout,
                          host=ip) == "SERVING"
    get = spec["httpGet"]
    port = ports.get(get["port"], get["port"])
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}{get['path']}", timeout=timeout) as reply:
            return 200 <= reply.status < 400
    except OSError:
        return False


def by_kind_of(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def seed_volume(cluster: Cluster, by_kind: dict[str, list[dict]], bench: Path) -> Path:
    """The PVC becomes a podman volume of the claim's name, seeded with the benchmark (as a data team would)."""
    (claim,) = by_kind["PersistentVolumeClaim"]
    volume = cluster.volume(claim["metadata"]["name"])
    subprocess.run(["cp", "-r", str(bench), str(volume / "bench")], check=True)
    (volume / "prod_env").mkdir()  # the rest is made by the pods' prepare-volume init container
    subprocess.run(["chown", "-R", "10001:10001", str(volume)], check=True)
    return volume


def play_services(cluster: Cluster, by_kind: dict[str, list[dict]],
                  probes: tuple[str, ...] = ("readinessProbe", "livenessProbe"), *,
                  static_ips: bool = False, mock_latency_ms: int = 20) -> dict[str, str]:
    """Play the chart's Deployments (with its ConfigMaps) and the mock model server; wait for each
    container's ``probes`` from the host against its pod's IP (the kubelet's view). -> Deployment name: IP.
    ``static_ips``: each pod at a fixed address, kept when its container is killed and started again (podman
    stops a played pod's network with its last container), as a Service's address outlives its pods."""
    mock = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": mock_host(cluster)}, "spec": {
        "containers": [{"name": "server", "image": IMAGE, "command": ["python", "-m", "medhelm.devtools.mock_openai"],
                        "args": ["--host", "0.0.0.0", "--port", "8000", "--latency-ms", str(mock_latency_ms)],
                        "securityContext": {"runAsUser": 10001, "readOnlyRootFilesystem": True}}]}}
    # containerPort is informational in Kubernetes, but podman 4.3 publishes each one on the host (0.0.0.0):
    # the played copies leave it out; the pods are reached on their own IPs, as in a cluster
    played = copy.deepcopy(by_kind["Deployment"])
    for dep in played:
        for c in dep["spec"]["template"]["spec"]["containers"]:
            c.pop("ports", None)
    for secret in by_kind.get("Secret", []):  # the caller token the chart generates, as a podman secret
        folder = cluster.tmp / "secrets" / secret["metadata"]["name"]
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        for key, value in secret["data"].items():
            (folder / key).write_bytes(base64.b64decode(value))
            files[key] = folder / key
        cluster.secret(secret["metadata"]["name"], files)
    if static_ips:
        # the services reach the mock (their judges) by a host alias, not podman's DNS: aardvark-dns reloads
        # on every pod start and stop on the network and can answer NXDOMAIN meanwhile, which a cluster's DNS
        # for a Service name does not do while pods churn (the chaos test kills and starts pods all along)
        mock_ip = cluster.static_ip(200 + len(played))
        for dep in played:
            dep["spec"]["template"]["spec"]["hostAliases"] = [{"ip": mock_ip, "hostnames": [mock_host(cluster)]}]
        for n, doc in enumerate([*played, mock]):
            cluster.play(f"services-{n}", [*by_kind["ConfigMap"], doc], "--ip", cluster.static_ip(200 + n))
    else:
        cluster.play("services", [*by_kind["ConfigMap"], *played, mock])
    pods = {}
    for dep in by_kind["Deployment"]:
        pod_name = f"{dep['metadata']['name']}-pod-0"
        pods[dep["metadata"]["name"]] = ip = cluster.pod_ip(pod_name)
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        for kind in probes:
            if kind in container:
                wait_for(lambda: _probe(container[kind], container, ip, f"{pod_name}-{container['name']}"),
                         f"{pod_name} {kind}", timeout_s=180,
                         every_s=2)
    return pods


def service_aliases(by_kind: dict[str, list[dict]], pods: dict[str, str]) -> list[dict]:
    """Each Service name mapped to the pod its selector selects (what cluster DNS + kube-proxy would do)."""
    aliases = []
    for svc in by_kind["Service"]:
        selected = [d["metadata"]["name"] for d in by_kind["Deployment"]
                    if _selects(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
        assert len(selected) == 1, (svc["metadata"]["name"], selected)
        aliases.append({"ip": pods[selected[0]], "hostnames": [svc["metadata"]["name"]]})
    return aliases


def indexed_pods(job: dict, name: str, aliases: list[dict], *, labels: dict | None = None,
                 env: dict | None = None) -> list[dict]:
    """An Indexed Job's pod template as one Pod per completion index, as the Job controller makes them:
    ``<name>-<index>``, the index in JOB_COMPLETION_INDEX and its label, Services as host aliases, no
    published ports (podman would publish the metrics port on the host); ``env`` replaces values."""
    pods = []
    for index in range(job["spec"]["completions"]):
        template = copy.deepcopy(job["spec"]["template"])
        spec = template["spec"]
        spec["hostAliases"] = aliases
        (c,) = spec["containers"]
        c["env"] = [{**e, "value": env[e["name"]]} if env and e["name"] in env else e for e in c["env"]]
        c["env"].append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        c.pop("ports", None)
        pods.append({"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
            "name": f"{name}-{index}", "labels": {**template["metadata"]["labels"], **(labels or {}),
                                                  "batch.kubernetes.io/job-completion-index": str(index)}}})
    return pods


@pytest.mark.parametrize("mode", ["default-tls", "plaintext", "mutual-tls"])
def test_chart_workloads_come_up_and_a_job_shard_writes_records(mode, image, cluster, helm_bin, repo_root, tmp_path):
    release = cluster.release
    full = f"{release}-medhelm"
    bench = tmp_path / "bench"
    cfg = write_configurable_benchmark(bench, ROWS, name="KP", answers=("Yes", "No", "Maybe"),
                                       metrics=("exact_match", "rouge_l"), max_tokens=4)
    cfg.write_text(cfg.read_text() + JURY)
    values = {
        "image": {"repository": IMAGE.rsplit(":", 1)[0], "tag": IMAGE.rsplit(":", 1)[1], "pullPolicy": "Never"},
        "dashboard": {"image": {"repository": DASHBOARD_IMAGE.rsplit(":", 1)[0],
                                "tag": DASHBOARD_IMAGE.rsplit(":", 1)[1]}},
        "modelDeployments": deployments(cluster),
        "job": {"enabled": True, "suite": "kp", "completions": SHARDS, "parallelism": SHARDS, "maxConcurrency": 2,
                "runEntries": ["medhelm_configurable_benchmark:model=test/svc-model,config_path=/data/bench/bench.yaml"]},
    }
    tls = None
    if mode == "plaintext":
        values["tls"] = {"enabled": False}
    if mode == "mutual-tls":
        tls = make_tls(tmp_path / "pki", [f"{full}-scenarios", f"{full}-jury", f"{full}-metrics", "localhost"])
        cluster.secret(f"{release}-server-tls", {"tls.crt": tls["tls.crt"], "tls.key": tls["tls.key"],
                                                 "ca.crt": tls["ca.crt"]})
        cluster.secret(f"{release}-job-tls", {"tls.crt": tls["client.crt"], "tls.key": tls["client.key"],
                                              "ca.crt": tls["ca.crt"]})
        values["tls"] = {"enabled": True, "secretName": f"{release}-server-tls", "mutual": True,
                         "clientSecretName": f"{release}-job-tls"}
    by_kind = by_kind_of(_render(helm_bin, repo_root, release, values, tmp_path))
    if mode == "default-tls":  # the chart's own certificates (bootstrap Secrets), as the services and the Job get them
        secrets = {d["metadata"]["name"]: d for d in by_kind["Secret"]}
        assert {f"{full}-tls", f"{full}-job-tls"} <= set(secrets)
        tls = {}
        for name, prefix in ((f"{full}-tls", ""), (f"{full}-job-tls", "client.")):
            for key, value in secrets[name]["data"].items():
                path = tmp_path / "chart-pki" / f"{prefix}{key}"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(base64.b64decode(value))
                tls[f"{prefix}{key}".replace("client.tls.", "client.")] = path
    volume = seed_volume(cluster, by_kind, bench)
    pods = play_services(cluster, by_kind)  # the chart's probes, from the host, against each pod's IP

    for dep in by_kind["Deployment"]:
        pod_name = f"{dep['metadata']['name']}-pod-0"
        ip = pods[dep["metadata"]["name"]]
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        # the chart's security context and env, as podman applied them
        facts = run("podman", "inspect", "--format", "{{.Config.User}}|{{.HostConfig.ReadonlyRootfs}}|{{.Config.Env}}",
                    f"{pod_name}-{container['name']}").stdout.strip().split("|")
        assert facts[0].startswith("10001") and facts[1] == "true", facts
        assert "MEDHELM_OFFLINE=1" in facts[2]
        if tls is not None and container["name"] != "dashboard":  # the service port itself speaks TLS only
            grpc_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
            assert grpc_probe(grpc_port, host=ip, timeout_s=2) in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
            # ... and answers the Job's certificate, verified by the Service's name
            creds = grpc.ssl_channel_credentials(tls["ca.crt"].read_bytes(), tls["client.key"].read_bytes(),
                                                 tls["client.crt"].read_bytes())
            with grpc.secure_channel(f"{ip}:{grpc_port}", creds, options=[
                    ("grpc.ssl_target_name_override", dep["metadata"]["name"])]) as ch:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=30)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

    aliases = service_aliases(by_kind, pods)

    # `helm test`: the chart's test hook Pod checks every gRPC Service from inside the network (plaintext health
    # port, in TLS mode too); the dashboard without sign-in listens on its loopback only, so it is not among them
    (hook,) = [d for d in by_kind["Pod"] if d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    hook = copy.deepcopy(hook)
    hook["spec"]["hostAliases"] = aliases
    cluster.play("helm-test", [hook])
    hook_container = f"{hook['metadata']['name']}-{hook['spec']['containers'][0]['name']}"
    code = run("podman", "wait", hook_container, timeout=300).stdout.strip()
    logs = run("podman", "logs", hook_container).stdout
    assert code == "0" and logs.count("ok  ") == 3, logs

    # the Job: its pod template as one Pod per completion index
    (job,) = by_kind["Job"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == SHARDS
    shard_pods = indexed_pods(job, job["metadata"]["name"], aliases)
    cluster.play("job", [*by_kind["ConfigMap"], *shard_pods])
    for pod in shard_pods:
        cname = f"{pod['metadata']['name']}-shard"
        code = run("podman", "wait", cname, timeout=600).stdout.strip()
        logs = run("podman", "logs", cname)
        assert code == "0", logs.stdout[-2000:] + logs.stderr[-3000:]
        assert f"shard {pod['metadata']['name'][-1]}/{SHARDS}" in logs.stdout

    # the records are on the shared volume, one shard file per index; collect merges them
    (run_dir,) = [p for p in (volume / "benchmark_output" / "runs" / "kp").iterdir() if p.is_dir()]
    counts = [len((run_dir / "shards" / f"shard-{i:05d}-of-{SHARDS:05d}.jsonl").read_text().splitlines())
              for i in range(SHARDS)]
    assert sum(counts) >= ROWS and all(counts), counts
    collect = run("podman", "run", "--rm", "--read-only", "--network", cluster.network, "-v",
                  f"{by_kind['PersistentVolumeClaim'][0]['metadata']['name']}:/data", IMAGE, "collect", "--suite", "kp",
                  "--output-path", "/data/benchmark_output")
    assert "complete" in collect.stdout and f"{ROWS}/{ROWS}" in collect.stdout, collect.stdout
    records = [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines()]
    assert len({r["instance"]["id"] for r in records}) == ROWS and not any(r.get("error") for r in records)

    # the shards really went through the services (their own Prometheus counters say so)
    def served(deployment: str, method: str) -> float:
        with urllib.request.urlopen(f"http://{pods[deployment]}:9090/metrics", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith("medhelm_rpc_requests_total{") and f'method="{method}"' in line \
                        and 'code="OK"' in line:
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert served(f"{full}-scenarios", "StreamInstances") >= SHARDS
    assert served(f"{full}-metrics", "Score") >= ROWS and served(f"{full}-jury", "JudgeOne") >= ROWS
