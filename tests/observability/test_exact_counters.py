"""Every counter equals the truth: real `medhelm run` and `medhelm job` processes evaluate through a
fault-injecting proxy (HTTP 500, 429 with Retry-After, fixed 400s, a server that stays down, unparseable
judge answers) in front of the mock OpenAI server; the proxy logs what it answered, and after the run the
scraped counters equal that log. A fully cached re-run adds no token and reaches no model. Every scrape
passes `promtool check metrics`."""

from __future__ import annotations

import csv
import hashlib
import json
import time
from pathlib import Path

import pytest

from medhelm.devtools.fault_proxy import FaultProxy
from medhelm.devtools.mock_openai import MockOpenAIServer

from tests.services.conftest import start_service  # noqa: F401 - the fixture, reused

from .conftest import MedhelmProcess, check_metrics, fetch, samples, value

ROWS = 24
CRITERIA = ("accuracy", "completeness", "clarity")  # the aci_bench rubric's
PRICES = {"mock/cand": (1.0, 2.0), "mock/judge": (3.0, 4.0)}  # USD per million prompt / completion tokens
PHI_MARKER = "ZEBRA-PATIENT-7731"  # planted in every note: must never reach a scrape


def _marker(i: int) -> str:
    if i == 4:
        return "JUDGE503"  # one instance whose judge stays down (the service retries with its own back-off)
    return {2: "FAULT400", 5: "FAULT503", 6: "FAULTJUDGE"}.get(i % 8, "")


def responder(body: dict) -> str:
    text = body["messages"][-1]["content"]
    n = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)
    if body.get("model") == "judge":
        scores = {c: {"score": 1 + (n >> k) % 5, "explanation": "ok"} for k, c in enumerate(CRITERIA)}
        return f"<rubric_criteria>{json.dumps(scores)}</rubric_criteria>"
    return ("Yes", "No", "Maybe")[n % 3]


@pytest.fixture(scope="module")
def servers():
    with MockOpenAIServer(responder=responder, latency_s=0.01) as mock:
        with FaultProxy(mock.base_url, error_rate=0.1, rate_limit_rate=0.1, retry_after_s=0.02, seed=7,
                        bad_request_marker="FAULT400", unavailable_marker="FAULT503",
                        unparseable_marker="FAULTJUDGE", unparseable_models={"judge"}) as proxy:
            yield proxy


def _setup(tmp_path: Path, proxy: FaultProxy, *, judge_down_marker: bool = False) -> tuple[str, Path, Path]:
    """A jury benchmark (jury_score first: the main stat), the two deployments behind the proxy, prices."""
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "prompt.txt").write_text("Note: {note}\nQuestion: {question}\nAnswer briefly.")
    with open(bench / "dataset.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
        for i in range(ROWS):
            marker = _marker(i) if judge_down_marker or _marker(i) != "JUDGE503" else ""
            w.writerow([f"{i:04d}", f"{PHI_MARKER} note {i}: BP {110 + i} mmHg {marker}".strip(),
                        f"Is item {i} flagged?", ("Yes", "No", "Maybe")[i % 3], "[]"])
    (bench / "bench.yaml").write_text(
        "name: OBS\ndescription: observability\nprompt_file: prompt.txt\ndataset_file: dataset.csv\nmax_tokens: 4\n"
        "metrics:\n  - name: jury_score\n    rubric: aci_bench\n    judges:\n"
        "      - {name: mock/judge, model_name: test/judge}\n  - name: exact_match\n")
    local = tmp_path / "prod_env"
    local.mkdir()
    (local / "model_deployments.yaml").write_text("model_deployments:\n" + "".join(
        f"  - name: mock/{n}\n    model_name: test/{n}\n    kind: openai\n    base_url: {proxy.base_url}\n"
        f"    served_model_name: {n}\n    max_sequence_length: 4096\n" for n in ("cand", "judge")))
    (local / "prices.yaml").write_text("prices:\n" + "".join(
        f"  - deployment: {d}\n    input_per_million: {p}\n    output_per_million: {c}\n"
        for d, (p, c) in PRICES.items()))
    entry = f"medhelm_configurable_benchmark:model=test/cand,model_deployment=mock/cand,config_path={bench / 'bench.yaml'}"
    return entry, local, tmp_path / "out"


ATTEMPTS = 6
FAST = ("--max-attempts", str(ATTEMPTS), "--retry-base-delay", "0.01", "-n", "4", "-q")


def _watch(proc: MedhelmProcess, promtool: Path, done_text: str) -> tuple[dict, list[str]]:
    """Scrape until the process prints ``done_text``; promtool-check every scrape; the last one parsed."""
    url = proc.metrics_url()
    texts = []
    while done_text not in proc.stdout and proc.proc.poll() is None:
        texts.append(fetch(url))
        time.sleep(0.2)
    proc.wait_for(done_text)
    texts.append(fetch(url))  # lingering: the final values
    for text in texts:
        check_metrics(promtool, text)
    return samples(texts[-1]), texts


def _assert_model_counters(scrape: dict, truth: dict, deployment: str, role: str, max_attempts: int) -> None:
    lab = {"deployment": deployment, "role": role}
    for key, n in truth.items():  # every status the proxy answered, attempt by attempt
        if key.startswith("status_"):
            assert value(scrape, "medhelm_model_attempts_total", code=key[7:], **lab) == n, (deployment, key)
    assert value(scrape, "medhelm_model_attempts_total", **lab) == truth["answers"]
    assert value(scrape, "medhelm_model_attempt_duration_seconds_count", **lab) == truth["answers"]
    exhausted = truth.get("status_503", 0) // max_attempts
    errors = truth.get("status_400", 0) + exhausted
    assert value(scrape, "medhelm_model_requests_total", outcome="ok", **lab) == truth.get("status_200", 0)
    assert value(scrape, "medhelm_model_requests_total", outcome="error", **lab) == errors
    assert value(scrape, "medhelm_model_requests_total", outcome="cached", **lab) == 0
    assert value(scrape, "medhelm_model_request_duration_seconds_count", **lab) == truth.get("status_200", 0) + errors
    retried = truth.get("status_500", 0) + truth.get("status_429", 0) + truth.get("status_503", 0) - exhausted
    assert value(scrape, "medhelm_model_retries_total", **lab) == retried
    assert value(scrape, "medhelm_tokens_total", kind="prompt", **lab) == truth["prompt_tokens"] > 0
    assert value(scrape, "medhelm_tokens_total", kind="completion", **lab) == truth["completion_tokens"] > 0
    assert value(scrape, "medhelm_cached_tokens_total", **lab) == 0
    p, c = PRICES[deployment]
    expected = (truth["prompt_tokens"] * p + truth["completion_tokens"] * c) / 1e6
    assert value(scrape, "medhelm_cost_usd_total", **lab) == pytest.approx(expected, rel=1e-9)
    assert value(scrape, "medhelm_model_requests_in_flight", **lab) == 0


@pytest.mark.slow
def test_run_counters_equal_the_proxy_truth_and_a_cached_rerun_adds_nothing(servers, tmp_path, promtool):
    proxy = servers
    proxy.reset()
    proxy.enabled = True
    entry, local, out = _setup(tmp_path, proxy)
    common = ("-r", entry, "-o", str(out), "--local-path", str(local), *FAST)
    proc = MedhelmProcess("run", *common, "--suite", "a", "--metrics-port", "0", "--metrics-linger", "900")
    try:
        scrape, texts = _watch(proc, promtool, "Results:")
    finally:
        code = proc.finish()
    cand, judge = proxy.truth("cand"), proxy.truth("judge")
    assert cand["status_400"] == 3 and cand["status_503"] == 3 * ATTEMPTS and cand.get("status_500", 0) > 0
    assert cand.get("status_429", 0) + judge.get("status_429", 0) > 0 and judge["unparseable"] == 3 * 2

    _assert_model_counters(scrape, cand, "mock/cand", "candidate", ATTEMPTS)
    _assert_model_counters(scrape, judge, "mock/judge", "judge", ATTEMPTS)
    run = {"deployment": "mock/cand", "benchmark": "OBS"}
    assert value(scrape, "medhelm_instances_planned_total", **run) == ROWS
    assert value(scrape, "medhelm_instances_resumed_total", **run) == 0
    assert value(scrape, "medhelm_instances_failed_total", reason="error", **run) == cand["status_400"]
    assert value(scrape, "medhelm_instances_failed_total", reason="retries_exhausted", **run) == 3
    assert value(scrape, "medhelm_instances_done_total", **run) == ROWS - 6
    assert value(scrape, "medhelm_instances_unscored_total", **run) == judge["unparseable"] // 2
    assert value(scrape, "medhelm_runs_in_progress") == 0
    for criterion in CRITERIA:  # an unparseable answer and its re-ask: every criterion unscored
        assert value(scrape, "medhelm_judge_failures_total", judge="mock/judge", criterion=criterion,
                     status="unscored") == judge["unparseable"] // 2
    assert value(scrape, "medhelm_judgements_total", judge="mock/judge") == (ROWS - 6) * len(CRITERIA)
    assert value(scrape, "medhelm_build_info", service="run") == 1
    assert value(scrape, "process_resident_memory_bytes") > 0 and value(scrape, "python_info") == 1
    assert not any(PHI_MARKER in t or "FAULT" in t for t in texts)

    # the same summary as ever, plus the instances left for the next run; run.json counts every retry
    assert code == 2 and "3 instance(s) still failing after retries" in proc.stderr
    assert "Results:" in proc.stdout and "OBS" in proc.stdout
    (run_dir,) = (out / "runs" / "a").iterdir()
    status = json.loads((run_dir / "run.json").read_text())
    assert status["retries"] == value(scrape, "medhelm_model_retries_total", deployment="mock/cand")
    assert status["judge_retries"] == value(scrape, "medhelm_model_retries_total", deployment="mock/judge")
    assert status["retries"] > sum(max(json.loads(line)["completion"]["usage"]["attempts"] - 1, 0)
                                   for line in (run_dir / "instances.jsonl").read_text().splitlines()
                                   if json.loads(line)["completion"])  # the failed instances' retries too

    # fill the cache (no faults), then a fully cached re-run: no request reaches a model, no token is counted
    proxy.enabled = False
    proxy.reset()
    filled = MedhelmProcess("run", *common, "--suite", "b")
    assert filled.stop(wait=240) == 0, filled.stderr
    cand_b, judge_b = proxy.truth("cand"), proxy.truth("judge")
    proxy.reset()
    again = MedhelmProcess("run", *common, "--suite", "c", "--metrics-port", "0", "--metrics-linger", "900")
    try:
        cached, _ = _watch(again, promtool, "Results:")
    finally:
        assert again.finish() == 0, again.stderr
    assert proxy.log == []
    assert value(cached, "medhelm_tokens_total") == 0 and value(cached, "medhelm_model_attempts_total") == 0
    assert value(cached, "medhelm_model_requests_total", outcome="ok") == 0
    assert value(cached, "medhelm_cost_usd_total") == 0
    assert value(cached, "medhelm_model_requests_total", outcome="cached", role="candidate") == ROWS
    for dep, role, a, b in (("mock/cand", "candidate", cand, cand_b), ("mock/judge", "judge", judge, judge_b)):
        for kind in ("prompt", "completion"):
            assert value(cached, "medhelm_cached_tokens_total", deployment=dep, role=role, kind=kind) \
                == a[f"{kind}_tokens"] + b[f"{kind}_tokens"]
    assert value(cached, "medhelm_instances_done_total") == ROWS


@pytest.mark.slow
def test_job_shard_with_a_failing_judge_behind_the_jury_service(servers, tmp_path, promtool, start_service):
    """A judge that answers 503 until the service's retries run out: the service says UNAVAILABLE once (the
    gRPC client does not multiply the retries), the shard leaves that instance for the next run and prints
    the same summary as `medhelm run`; the shard's and the service's counters together equal the truth."""
    proxy = servers
    proxy.reset()
    proxy.enabled = True
    old = (proxy.unavailable_marker, proxy.unavailable_models)
    proxy.unavailable_marker, proxy.unavailable_models = "JUDGE503", frozenset({"judge"})
    try:
        entry, local, out = _setup(tmp_path, proxy, judge_down_marker=True)
        jury = start_service("jury", "--local-path", str(local), "--output-path", str(out),
                             "--benchmark-root", str(tmp_path))  # the service resolves the benchmark itself
        shard = MedhelmProcess("job", "-r", entry, "-o", str(out), "--local-path", str(local), *FAST,
                               "--suite", "j", "--shard-index", "0", "--shard-count", "2",
                               "--jury-service", jury.address, "--benchmark-root", str(tmp_path),
                               "--metrics-port", "0", "--metrics-linger", "900")
        try:
            job_scrape, _ = _watch(shard, promtool, "Results:")
        finally:
            code = shard.finish()
        service_text = fetch(jury.metrics_url)
    finally:
        proxy.unavailable_marker, proxy.unavailable_models = old
    check_metrics(promtool, service_text)
    service = samples(service_text)
    cand, judge = proxy.truth("cand"), proxy.truth("judge")
    down = judge["status_503"] // 6  # the service's own retry policy: 6 attempts
    assert down >= 1 and judge["status_503"] == down * 6

    _assert_model_counters(job_scrape, cand, "mock/cand", "candidate", ATTEMPTS)
    assert value(job_scrape, "medhelm_model_attempts_total", role="judge") == 0  # asked by the service
    _assert_model_counters(service, judge, "mock/judge", "judge", 6)
    assert value(service, "medhelm_rpc_requests_total", method="JudgeOne", code="UNAVAILABLE") == down
    run = {"deployment": "mock/cand", "benchmark": "OBS"}
    owned = len(range(0, ROWS, 2))
    assert value(job_scrape, "medhelm_instances_planned_total", **run) == owned
    failed_for_good = cand.get("status_400", 0)
    exhausted = cand.get("status_503", 0) // ATTEMPTS + down
    assert value(job_scrape, "medhelm_instances_failed_total", reason="retries_exhausted", **run) == exhausted
    assert value(job_scrape, "medhelm_instances_done_total", **run) == owned - failed_for_good - exhausted
    unparseable = judge["unparseable"] // 2
    for criterion in CRITERIA:
        assert value(service, "medhelm_judge_failures_total", criterion=criterion, status="unscored") == unparseable
    assert value(job_scrape, "medhelm_judge_failures_total") == 0  # counted once: where the judge was asked

    assert code == 2
    assert f"{exhausted} instance(s) still failing after retries" in shard.stderr
    assert "Results:" in shard.stdout and "shard 0/2" in shard.stdout
