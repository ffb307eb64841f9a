"""The upgrade in real containers, in sequence and back: chart 0.1.0 (tests/previous_release.py) played with the
previous image over a PostgreSQL store it summarizes into (schema v1); then chart 0.2.0's pre-upgrade hook
(the store-migrate Job's pod) with this image, and 0.2.0's workloads on the same volume and store; then the
rollback: 0.1.0's workloads again, whose image refuses the migrated store in one line until the backup taken
before the upgrade is restored, as docs/kubernetes.md "Upgrades" says.

The two images are the repository's image (tests/services/podman.py) with each release's code in place of
the installed package (their dependencies are the same); the PostgreSQL server is Debian's, on the host,
reached from the pods on the podman network's gateway (pg_hba admits that subnet only). Pods are played as in
test_kube_play.py (probes from the host against the pod IPs; the podman 4.3 quirks noted there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from medhelm.store.schema import SCHEMA_VERSION
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.conftest import pg_binary, start_postgres
from tests.services.podman import run, wait_for
from tests.previous_release import REPO, previous_tree
from tests.services.test_chart_upgrade import hooks
from tests.services.test_kube_play import Cluster, _probe, by_kind_of, play_services, seed_volume

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(2400)]

SITE = "/opt/medhelm/lib/python3.11/site-packages"


def _layer(base: str, tag: str, services: Path, dashboard: Path, work: Path) -> str:
    """``base`` with one release's code in place of its installed medhelm (and dashboard) package."""
    ctx = work / tag.rsplit(":", 1)[1]
    shutil.copytree(services / "medhelm", ctx / "medhelm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(dashboard, ctx / "medhelm_dashboard", ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "Containerfile").write_text(
        f"FROM {base}\nUSER root\nRUN rm -rf {SITE}/medhelm {SITE}/medhelm_dashboard\n"
        f"COPY medhelm {SITE}/medhelm\nCOPY medhelm_dashboard {SITE}/medhelm_dashboard\n"
        f"RUN /opt/medhelm/bin/python -m compileall -q {SITE}/medhelm {SITE}/medhelm_dashboard\nUSER 10001:10001\n")
    run("podman", "build", "--quiet", "-t", tag, str(ctx), timeout=900)
    return tag


@pytest.fixture(scope="module")
def releases(dashboard_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One image per release, each serving every workload of its chart: the dashboard image (the service's venv
    plus the dashboard's stack, built by the session's ``images`` fixture) with that release's code in place."""
    work = tmp_path_factory.mktemp("images")
    previous = previous_tree(work, "services", "dashboard")
    base_id = run("podman", "image", "inspect", "--format", "{{.Id}}", dashboard_image).stdout.strip()
    suffix = os.getpid()
    tags = {"previous": _layer(base_id, f"localhost/medhelm-k8s:upgrade-prev-{suffix}", previous / "services",
                               previous / "dashboard", work),
            "current": _layer(base_id, f"localhost/medhelm-k8s:upgrade-new-{suffix}", REPO / "services",
                              REPO / "dashboard", work)}
    yield tags
    for tag in tags.values():
        run("podman", "rmi", "--force", tag, check=False)


class Postgres:
    """Debian's PostgreSQL on the host, listening for the podman network (``subnet`` only) and 127.0.0.1."""

    def __init__(self, subnet: str) -> None:
        # the server's own bin folder (pg_dump and pg_restore beside initdb; a wrapper on PATH may hold initdb alone)
        initdb = pg_binary("initdb")
        if initdb is None:
            pytest.skip("PostgreSQL server binaries not installed (Debian package `postgresql`)")
        self.bin = Path(initdb).parent
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.base = Path(tempfile.mkdtemp(prefix="medhelm-pg-up-"))
        os.chmod(self.base, 0o777)
        self.data = self.base / "data"
        subprocess.run([*self.as_user, str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                        "postgres", "--no-sync"], check=True, capture_output=True, timeout=600)
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {subnet} trust\n")
        self.port = start_postgres(self.as_user, self.bin, self.data, self.base, "-c listen_addresses='*'")

    def tool(self, name: str, *args: str) -> subprocess.CompletedProcess:
        return run(str(self.bin / name), *args, timeout=300)

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)


def _played(docs: list[dict]) -> list[dict]:
    """podman 4.3 dereferences a secret volume's ``optional``: the previous chart's store-url volume leaves it
    out (the default, false), so the played copy says it."""
    docs = json.loads(json.dumps(docs))
    for d in docs:
        spec = d.get("spec", {}).get("template", {}).get("spec", {})
        for v in spec.get("volumes", []):
            if "secret" in v:
                v["secret"].setdefault("optional", False)
    return docs


def _replay_services(cluster: Cluster, by_kind: dict[str, list[dict]], **how: object) -> dict[str, str]:
    """play_services again on the same network: the chart's generated Secrets (each render makes its own caller
    token, where a cluster keeps the first with `lookup`) replace the podman secrets of the last play."""
    for secret in by_kind.get("Secret", []):
        run("podman", "secret", "rm", secret["metadata"]["name"], check=False)
    return play_services(cluster, by_kind, **how)


def _render(helm: Path, chart: Path, release: str, values: dict, tmp: Path, name: str) -> list[dict]:
    vf = tmp / f"{name}-values.yaml"
    vf.write_text(yaml.safe_dump(values))
    done = subprocess.run([str(helm), "template", release, str(chart), "--namespace", "clinical-ai", "-f", str(vf)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_upgrade_to_this_chart_and_back_in_kube_play(releases, helm_bin, tmp_path):
    images = releases
    import psycopg

    cluster = Cluster(f"up{os.getpid() % 100000}", tmp_path)
    pg = None
    try:
        subnet = run("podman", "network", "inspect", "--format", "{{range .Subnets}}{{.Subnet}}{{end}}",
                     cluster.network).stdout.strip()
        gateway = run("podman", "network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}",
                      cluster.network).stdout.strip()
        pg = Postgres(subnet)
        host_url = f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"
        with psycopg.connect(host_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE medhelm")
        host_url = host_url.rsplit("/", 1)[0] + "/medhelm"
        pod_url = f"postgresql://postgres@{gateway}:{pg.port}/medhelm"
        url_file = tmp_path / "url"
        url_file.write_text(pod_url)
        store_secret = f"{cluster.release}-store"
        cluster.secret(store_secret, {"url": url_file})

        previous_chart = previous_tree(tmp_path, "helm-charts/medhelm") / "helm-charts" / "medhelm"
        current_chart = REPO / "helm-charts" / "medhelm"
        values = {"resultsStore": {"kind": "postgres", "postgres": {"secretName": store_secret}},
                  "image": {"pullPolicy": "Never"}}

        def chart_values(image: str, dashboard_key: bool) -> dict:
            ref = {"repository": image.rsplit(":", 1)[0], "tag": image.rsplit(":", 1)[1]}
            out = {**values, "image": {**ref, "pullPolicy": "Never"}}
            if dashboard_key:  # 0.2.0 runs the dashboard from an image of its own (0.1.0's schema refuses the key)
                out["dashboard"] = {"image": ref}
            return out

        before = _render(helm_bin, previous_chart, cluster.release, chart_values(images["previous"], False), tmp_path,
                         "prev")
        after = _render(helm_bin, current_chart, cluster.release, chart_values(images["current"], True), tmp_path,
                        "new")
        old_kind, new_kind = by_kind_of(_played(before)), by_kind_of(_played(after))
        bench = tmp_path / "bench"
        bench.mkdir()
        volume = seed_volume(cluster, old_kind, bench)
        claim = old_kind["PersistentVolumeClaim"][0]["metadata"]["name"]
        write_suite(volume / "benchmark_output", "local", default_models(3), catalogue(2), 10)
        subprocess.run(["chown", "-R", "10001:10001", str(volume)], check=True)

        def medhelm(image: str, *args: str) -> subprocess.CompletedProcess:
            return run("podman", "run", "--rm", "--read-only", "--network", cluster.network, "-v", f"{claim}:/data",
                       "-e", "MEDHELM_STORE_URL_FILE=/data/.store-url", image, *args, check=False, timeout=600)

        (volume / ".store-url").write_text(pod_url)
        os.chown(volume / ".store-url", 10001, 10001)

        def leaderboard() -> list[tuple]:
            with psycopg.connect(host_url) as conn:
                return conn.execute("SELECT model, win_rate, rank FROM leaderboard WHERE release = 'local' "
                                    "ORDER BY rank, model").fetchall()

        # 1. chart 0.1.0 with the previous image: its workloads come up, and it summarizes (a schema v1 store)
        play_services(cluster, old_kind)
        done = medhelm(images["previous"], "summarize", "--suites", "local", "-o", "/data/benchmark_output",
                       "--bootstrap", "50")
        assert done.returncode == 0, done.stderr[-2000:]
        board = leaderboard()
        assert len(board) == 3
        status = medhelm(images["current"], "store", "status")
        assert status.returncode == 3 and f"schema v1; this medhelm: v{SCHEMA_VERSION}" in status.stdout, status
        backup = tmp_path / "store.dump"  # what the upgrade procedure takes first
        pg.tool("pg_dump", "--format=custom", f"--file={backup}", host_url)

        # 2. helm upgrade: the pre-upgrade hook (the store-migrate Job's pod, this image), then 0.2.0's workloads
        (job,) = [h for h in hooks(after) if h["kind"] == "Job"]
        assert job["metadata"]["name"] == f"{cluster.release}-medhelm-store-migrate"

        def play_hook(name: str) -> str:
            spec = json.loads(json.dumps(job["spec"]["template"]["spec"]))
            spec.pop("serviceAccountName")  # (no ServiceAccounts in podman: it holds no token anyway)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels":
                                                                    job["spec"]["template"]["metadata"]["labels"]},
                   "spec": spec}
            cluster.play(name, [pod])
            container = f"{name}-migrate"
            code = run("podman", "wait", container, timeout=600).stdout.strip()
            logs = run("podman", "logs", container)
            assert code == "0", logs.stdout + logs.stderr
            return logs.stdout

        assert f"migrated from schema v1 to v{SCHEMA_VERSION}" in play_hook("hook-1")
        run("podman", "kube", "down", str(cluster.played[0]), timeout=120)  # the old pods replaced
        _replay_services(cluster, new_kind)
        assert leaderboard() == board  # the data as the previous release wrote it
        assert f"already at schema v{SCHEMA_VERSION}; nothing to do" in play_hook("hook-2")  # an upgrade to the same version
        done = medhelm(images["current"], "summarize", "--suites", "local", "--release", "after",
                       "-o", "/data/benchmark_output", "--bootstrap", "50")
        assert done.returncode == 0, done.stderr[-2000:]
        # the previous image refuses the migrated store in one line, and writes nothing
        with psycopg.connect(host_url) as conn:
            rows = conn.execute("SELECT COUNT(*) FROM runs").fetchone()
        for args in (("summarize", "--suites", "local", "-o", "/data/benchmark_output"),
                     ("export", "--release", "local", "-o", "/data/benchmark_output", "/tmp/b.tgz")):
            refused = medhelm(images["previous"], *args)
            err = refused.stderr.strip()
            assert refused.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert "newer medhelm" in err and f"store schema v{SCHEMA_VERSION}" in err and "reads v1" in err, err
        with psycopg.connect(host_url) as conn:
            assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == rows

        # 3. helm rollback: 0.1.0's workloads again (valid: test_chart_upgrade.py). The services come up; the
        #    dashboard, which checks its store before it serves, stops with the one-line refusal (and is restarted)
        #    until the backup taken before the upgrade is restored; then it serves and the previous image writes
        services_new = next(p for p in cluster.played if p.name == "services.yaml")
        run("podman", "kube", "down", str(services_new), timeout=120)
        dashboard = next(d for d in old_kind["Deployment"] if d["metadata"]["name"].endswith("-dashboard"))
        others = {**old_kind, "Deployment": [d for d in old_kind["Deployment"] if d is not dashboard]}
        pods = _replay_services(cluster, old_kind, probes=())  # all of 0.1.0, probes waited for below
        for dep in others["Deployment"]:
            (c,) = dep["spec"]["template"]["spec"]["containers"]
            name = dep["metadata"]["name"]
            wait_for(lambda: _probe(c["readinessProbe"], c, pods[name], f"{name}-pod-0-{c['name']}"),
                     f"{name} ready after the rollback", timeout_s=180, every_s=2)
        dash = f"{dashboard['metadata']['name']}-pod-0-dashboard"

        def refused() -> str:
            lines = [ln for ln in run("podman", "logs", dash, check=False).stderr.splitlines() if ln.strip()]
            return next((ln for ln in lines if "newer medhelm" in ln), "")

        line = wait_for(refused, "the previous dashboard's refusal", timeout_s=180, every_s=2)
        assert f"store schema v{SCHEMA_VERSION}" in line and "reads v1" in line and "Traceback" not in run(
            "podman", "logs", dash, check=False).stderr
        assert medhelm(images["previous"], "summarize", "--suites", "local", "-o", "/data/benchmark_output"
                       ).returncode == 2
        # in one transaction: the previous dashboard, restarting meanwhile, would otherwise create its tables in the
        # emptied store between the restore's drops and its creates (a duplicate "runs", seen in CI)
        pg.tool("pg_restore", "--clean", "--if-exists", "--single-transaction", f"--dbname={host_url}", str(backup))
        (c,) = dashboard["spec"]["template"]["spec"]["containers"]
        wait_for(lambda: _probe(c["readinessProbe"], c, pods[dashboard["metadata"]["name"]], dash),
                 "the previous dashboard serving the restored store", timeout_s=300, every_s=3)
        done = medhelm(images["previous"], "summarize", "--suites", "local", "-o", "/data/benchmark_output",
                       "--bootstrap", "50")
        assert done.returncode == 0, done.stderr[-2000:]
        assert leaderboard() == board
    finally:
        cluster.close()
        if pg is not None:
            pg.stop()
