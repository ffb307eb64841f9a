"""Chaos in kube play: the chart's services played with `podman kube play` from the slim image (referenced
by digest, as `image.digest` renders it), its Job's shards played as one Pod per completion index, and ten
rounds that each kill (SIGKILL: calls in flight are cut) one service pod - jury, metrics, scenarios in turn -
and one running shard pod. Every index must succeed within the Job's own backoff limit, and the merged
run must hold every record once: 0 lost, 0 duplicated.

podman 4.3 runs no Job controller (it ignores `kind: Job`), so this test plays the controller honestly from
the rendered Job: a shard pod that ends is judged by the Job's own ``podFailurePolicy`` rules in order (exit
codes per container, pod conditions), then by ``backoffLimitPerIndex``: Ignore re-creates the index's pod
without counting, FailIndex fails the index at once, no match (or Count) counts one failure and re-creates
the pod while the index's count is within the limit. A shard the test evicts carries the DisruptionTarget
condition (what a drain or a preemption sets); a shard the test crashes carries none and counts. The test
never crashes an index past its limit itself, so any index that fails was failed by the shard (e.g. exit 2
after a service stayed away longer than the client's retry budget) and fails the test. A killed service
pod (`podman pod kill`: its container and its network) is started again at once (`podman pod start`, as the
kubelet restarts a Deployment's container), at the same address: a Service's address outlives its pods.
Rounds are triggered by progress (records on the volume), never by time."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.services.podman import IMAGE, run
from tests.services.test_kube_play import (JURY, Cluster, _probe, _render, by_kind_of, deployments,
                                           indexed_pods, mock_host, play_services, seed_volume,
                                           service_aliases)

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(3000)]

ROWS, SHARDS, ROUNDS = 60, 3, 10
MOCK_LATENCY_MS = 3000
SUITE = "chaos"
DISRUPTED = [{"type": "DisruptionTarget", "status": "True"}]


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(f"kc{os.getpid() % 100000}", tmp_path)
    yield c
    c.close()


def policy_action(job: dict, container: str, exit_code: int, conditions: list[dict]) -> str:
    """What the Job controller does with a failed pod: the first matching podFailurePolicy rule's action
    (Ignore, FailIndex, FailJob, Count), or Count when none matches (Kubernetes' semantics)."""
    for rule in job["spec"].get("podFailurePolicy", {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if codes is not None:
            if codes.get("containerName", container) != container:
                continue
            inside = exit_code in codes["values"]
            if inside == (codes["operator"] == "In"):
                return rule["action"]
        for want in rule.get("onPodConditions", []):
            if any(c["type"] == want["type"] and c["status"] == want.get("status", "True") for c in conditions):
                return rule["action"]
    return "Count"


@dataclass
class Index:
    attempt: int = 0
    container: str = ""
    state: str = "running"  # running, succeeded, failed
    counted: int = 0  # failures counted against backoffLimitPerIndex
    ignored: int = 0  # failed pods the policy ignored (disruptions)
    killed: bool = False  # the test killed this pod
    evict_next: bool = False  # ... as an eviction: it ends with the DisruptionTarget condition
    history: list[str] = field(default_factory=list)


class IndexedJobController:
    """The Job controller's part for one Indexed Job, played over podman (see the module docstring)."""

    def __init__(self, cluster: Cluster, job: dict, configmaps: list[dict], aliases: list[dict]) -> None:
        self.cluster, self.job, self.configmaps, self.aliases = cluster, job, configmaps, aliases
        self.limit = job["spec"]["backoffLimitPerIndex"]
        (self.shard,) = job["spec"]["template"]["spec"]["containers"]
        self.indexes = {i: Index() for i in range(job["spec"]["completions"])}
        self.unprovoked: list[str] = []  # pods that ended non-zero without the test killing them
        for i in self.indexes:
            self._create(i)

    def _create(self, index: int) -> None:
        ix = self.indexes[index]
        ix.attempt += 1
        pod = indexed_pods(self.job, self.job["metadata"]["name"], self.aliases)[index]
        pod["metadata"]["name"] = f"{self.job['metadata']['name']}-{index}-{ix.attempt}"
        self.cluster.play(pod["metadata"]["name"], [*self.configmaps, pod])
        ix.container = f"{pod['metadata']['name']}-{self.shard['name']}"

    def running(self) -> list[int]:
        return [i for i, ix in self.indexes.items() if ix.state == "running"]

    def kill(self, index: int, *, evict: bool) -> None:
        self.indexes[index].killed, self.indexes[index].evict_next = True, evict
        run("podman", "kill", "--signal", "KILL", self.indexes[index].container, check=False)

    def step(self) -> None:
        """Judge every shard pod that has ended; re-create the index's pod where the Job would."""
        for index in self.running():
            ix = self.indexes[index]
            status, code = run("podman", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                               ix.container).stdout.split()
            if status != "exited":
                continue
            code = int(code)
            if code == 0:
                ix.state = "succeeded"
                ix.history.append("succeeded")
                continue
            conditions = DISRUPTED if ix.evict_next else []
            if not ix.killed:
                logs = run("podman", "logs", ix.container, check=False)
                self.unprovoked.append(f"index {index} exit {code}: {logs.stderr.strip()[-500:]}")
            action = policy_action(self.job, self.shard["name"], code, conditions)
            ix.history.append(f"exit {code} -> {action}")
            ix.killed = ix.evict_next = False
            if action == "Ignore":
                ix.ignored += 1
            elif action in ("FailIndex", "FailJob"):
                ix.state = "failed"
                continue
            else:
                ix.counted += 1
                if ix.counted > self.limit:
                    ix.state = "failed"
                    continue
            self._create(index)


def _written(volume) -> int:
    return sum(len(p.read_text().splitlines()) for p in
               (volume / "benchmark_output" / "runs" / SUITE).glob(f"*/shards/shard-*-of-{SHARDS:05d}.jsonl"))


def test_ten_rounds_of_service_and_shard_kills_in_kube_play(images, cluster, helm_bin, repo_root, tmp_path):
    service = images["images"]["service"]
    bench = tmp_path / "bench"
    cfg = write_configurable_benchmark(bench, ROWS, name="KC", answers=("Yes", "No", "Maybe"),
                                       metrics=("exact_match", "rouge_l"), max_tokens=4)
    cfg.write_text(cfg.read_text() + JURY)
    values = {  # the slim image by digest: what image.digest renders (repository@sha256:...)
        "image": {"repository": IMAGE.rsplit(":", 1)[0], "digest": service["digest"], "pullPolicy": "Never"},
        "dashboard": {"enabled": False},
        "modelDeployments": deployments(cluster),
        "job": {"enabled": True, "suite": SUITE, "completions": SHARDS, "parallelism": SHARDS, "maxConcurrency": 2,
                "runEntries": ["medhelm_configurable_benchmark:model=test/svc-model,config_path=/data/bench/bench.yaml"]},
    }
    by_kind = by_kind_of(_render(helm_bin, repo_root, cluster.release, values, tmp_path))
    (job,) = by_kind["Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == f"{values['image']['repository']}@{service['digest']}"
    # the rendered policy, as the controller below applies it
    assert policy_action(job, "shard", 2, []) == "FailIndex"
    assert policy_action(job, "shard", 137, DISRUPTED) == "Ignore"
    assert policy_action(job, "shard", 137, []) == "Count" and policy_action(job, "shard", 1, []) == "Count"
    volume = seed_volume(cluster, by_kind, bench)
    # the model answers in MOCK_LATENCY_MS: the run outlasts ten rounds of service restarts
    pods = play_services(cluster, by_kind, probes=("readinessProbe",), static_ips=True,
                         mock_latency_ms=MOCK_LATENCY_MS)
    # the shards reach the mock model by a host alias too (not podman's DNS, which reloads as pods churn)
    aliases = [*service_aliases(by_kind, pods),
               {"ip": cluster.pod_ip(mock_host(cluster)), "hostnames": [mock_host(cluster)]}]
    services = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in by_kind["Deployment"]}
    assert set(services) == {"scenarios", "jury", "metrics"}

    controller = IndexedJobController(cluster, job, by_kind["ConfigMap"], aliases)
    deadline = time.monotonic() + 2400  # a safety net only: rounds are triggered by progress and states

    def wait_until(check, what: str) -> None:
        """The controller keeps judging shard pods while the test waits for ``check``."""
        while not check():
            assert time.monotonic() < deadline, f"safety net: still waiting for {what}"
            controller.step()
            time.sleep(0.5)

    def pod_state(pod: str) -> str:
        return run("podman", "pod", "inspect", "--format", "{{.State}}", pod).stdout.strip()

    service_kills, evictions, crashes, during_run = {name: 0 for name in services}, 0, 0, 0
    for round_ in range(ROUNDS):
        wait_until(lambda: _written(volume) >= (round_ + 1) * ROWS // (ROUNDS + 2) or not controller.running(),
                   f"round {round_}'s progress")
        name = ("jury", "metrics", "scenarios")[round_ % 3]
        dep = services[name]
        pod = f"{dep['metadata']['name']}-pod-0"
        run("podman", "pod", "kill", "--signal", "KILL", pod)  # the service and its network, calls in flight cut
        service_kills[name] += 1
        controller.step()
        running = controller.running()
        if running:  # and a running shard
            during_run += 1
            index = running[round_ % len(running)]
            # every other shard kill is an eviction (ignored by the policy), the rest crashes (counted), never
            # past the index's backoff limit by the test's own hand
            evict = round_ % 2 == 0 or controller.indexes[index].counted >= controller.limit
            controller.kill(index, evict=evict)
            evictions, crashes = evictions + evict, crashes + (not evict)
        wait_until(lambda: pod_state(pod) == "Exited", f"{pod} to stop")
        run("podman", "pod", "start", pod)  # started again, at the same address
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        wait_until(lambda: _probe(container["readinessProbe"], container, pods[dep["metadata"]["name"]]),
                   f"{pod} ready again")
    wait_until(lambda: not controller.running(), "every index to finish")

    summary = {i: (ix.state, ix.attempt, ix.counted, ix.ignored, ix.history) for i, ix in controller.indexes.items()}
    print(f"\nchaos: {ROUNDS} rounds ({during_run} while shards ran), service kills {service_kills}, shard "
          f"evictions {evictions}, shard crashes {crashes}; per index (state, pods, counted, ignored, history): {json.dumps(summary)}")
    assert not controller.unprovoked, controller.unprovoked  # no shard failed on its own
    for index, ix in controller.indexes.items():
        assert ix.state == "succeeded" and ix.counted <= controller.limit, (index, summary)
    assert sum(service_kills.values()) == ROUNDS and during_run == ROUNDS, (service_kills, during_run)
    assert evictions >= 3 and crashes >= 2, (evictions, crashes)

    shard_lines = _written(volume)  # before collect merges (and removes) the shard files
    collect = run("podman", "run", "--rm", "--read-only", "--network", cluster.network, "-v",
                  f"{by_kind['PersistentVolumeClaim'][0]['metadata']['name']}:/data", IMAGE, "collect", "--suite",
                  SUITE, "--output-path", "/data/benchmark_output")
    assert "complete" in collect.stdout and f"{ROWS}/{ROWS}" in collect.stdout, collect.stdout
    (run_dir,) = [p for p in (volume / "benchmark_output" / "runs" / SUITE).iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines()]
    ids = [r["instance"]["id"] for r in records]
    print(f"chaos: {len(records)} records merged, {len(set(ids))} distinct, {shard_lines} lines in the shard files")
    assert len(records) == ROWS and len(set(ids)) == ROWS  # 0 lost, 0 duplicated
    assert not any(r.get("error") for r in records)
    stats = {s["name"]["name"]: s for s in json.loads((run_dir / "stats.json").read_text())}
    # every record scored through the metrics service and judged through the jury service, once (the mock
    # judge's reply is no rubric score: judged, unscored)
    assert stats["exact_match"]["count"] == ROWS, stats["exact_match"]
    assert stats["jury_score"]["count"] + stats["jury_score"]["unscored"] == ROWS, stats["jury_score"]
