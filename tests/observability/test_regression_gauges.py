"""Evaluation results as Prometheus gauges and the chart's optional regression alerts: `medhelm summarize`
and `medhelm compare --pushgateway` push to a real Pushgateway (scrape valid for `promtool check metrics`,
values equal to the store and the comparison), the rendered PrometheusRule passes `promtool check rules`,
fires on a pushed flag and not without one (`promtool test rules`), and is off by default."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from medhelm.store import open_store, read
from tests.leaderboard.compare_helpers import EXACT, JURY, table_pairs, write_run
from tests.leaderboard.helpers import run_cli
from tests.services.conftest import helm_bin, kubernetes_validate  # noqa: F401 - the fixtures, reused

from .conftest import check_metrics, fetch, samples, value
from .test_pushgateway import pushgateway  # noqa: F401 - the fixture, reused

ON = ["--set", "monitoring.regressionRule.enabled=true",
      "--set-json", 'monitoring.regressionRule.labels={"release":"prometheus"}']


def _render(repo_root: Path, helm: Path, *values: str) -> list[dict]:
    done = subprocess.run([str(helm), "template", "rel", ".", "--namespace", "clinical-ai", *values],
                          cwd=repo_root / "helm-charts" / "medhelm", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _rule(docs: list[dict]) -> dict | None:
    found = [d for d in docs if d["kind"] == "PrometheusRule" and d["metadata"]["name"].endswith("-regressions")]
    return found[0] if found else None


def test_rule_is_off_by_default_and_lints_strict_when_on(repo_root, helm_bin, kubernetes_validate,  # noqa: F811
                                                         tmp_path):
    assert _rule(_render(repo_root, helm_bin)) is None
    chart = repo_root / "helm-charts" / "medhelm"
    lint = subprocess.run([str(helm_bin), "lint", "--strict", ".", *ON], cwd=chart, capture_output=True, text=True,
                          timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = _render(repo_root, helm_bin, *ON)
    rule = _rule(docs)
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump_all(docs))
    check = subprocess.run([*kubernetes_validate, str(tmp_path / "rendered.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_regression_alerts_pass_promtool_and_fire_on_a_flag(repo_root, helm_bin, promtool, tmp_path):  # noqa: F811
    spec = _rule(_render(repo_root, helm_bin, *ON))["spec"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    done = subprocess.run([str(promtool), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "2 rules found" in done.stdout, done.stdout + done.stderr
    cell = 'model="org/a",deployment="local/a",benchmark="medcalc_bench",category="CDS"'
    ok = 'model="org/b",deployment="local/b",benchmark="medcalc_bench",category="CDS"'
    pushed = 'job="medhelm-compare",instance=""'  # what the Pushgateway adds
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": f"medhelm_eval_regression{{{cell},{pushed}}}", "values": "0x4 1x10"},
            {"series": f"medhelm_eval_regression{{{ok},{pushed}}}", "values": "0x14"},
            {"series": f"medhelm_eval_gate_failed{{{pushed}}}", "values": "0x9 1x5"},
        ],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "MedhelmScoreRegression", "exp_alerts": []},
            {"eval_time": "6m", "alertname": "MedhelmScoreRegression", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "model": "org/a", "deployment": "local/a",
                               "benchmark": "medcalc_bench", "category": "CDS"},
                "exp_annotations": {
                    "summary": "org/a [local/a] dropped significantly on medcalc_bench",
                    "description": spec["groups"][0]["rules"][0]["annotations"]["description"]}}]},
            {"eval_time": "6m", "alertname": "MedhelmReleaseGateFailed", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "MedhelmReleaseGateFailed", "exp_alerts": [{
                "exp_labels": {"severity": "critical"},
                "exp_annotations": spec["groups"][0]["rules"][1]["annotations"]}]},
        ]}]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run([str(promtool), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_summarize_and_compare_push_gauges(tmp_path, pushgateway, promtool, repo_root, helm_bin):  # noqa: F811
    out = tmp_path / "out"
    a, b = table_pairs(20, 12, 2, 16)  # a significant drop of 0.2 on medcalc_bench
    for suite, exact, jury in (("accepted", a, [0.5, 0.75, 0.5]), ("candidate", b, [0.5, 0.75, 0.5])):
        write_run(out, suite, EXACT, "org/a", "local/a", exact)
        write_run(out, suite, JURY, "org/a", "local/a", jury)
        code, _, err = run_cli("summarize", "--suites", suite, "-o", str(out), "--bootstrap", "50",
                               "--pushgateway", pushgateway)
        assert code == 0 and "could not push" not in err, err
    text = fetch(pushgateway + "/metrics")
    check_metrics(promtool, text)
    scrape = samples(text)
    with open_store(out / "results.sqlite") as store:
        cells = read.cells(store, "candidate")
    for c in cells:  # the latest summarize replaced the group: the candidate's scores
        labels = dict(job="medhelm-release", model=c["model"], benchmark=c["benchmark"])
        assert value(scrape, "medhelm_release_score", **labels) == pytest.approx(c["value"])
        assert value(scrape, "medhelm_release_score_ci_low", **labels) == pytest.approx(c["ci_low"])
        assert value(scrape, "medhelm_release_instances", **labels) == c["n_instances"]
    assert value(scrape, "medhelm_release_info", release="candidate") == 1
    assert value(scrape, "medhelm_release_info", release="accepted") == 0

    code, _, err = run_cli("compare", "--release", "accepted", "--release", "candidate", "-o", str(out),
                           "--pushgateway", pushgateway)
    assert code == 3 and "could not push" not in err, err
    text = fetch(pushgateway + "/metrics")
    check_metrics(promtool, text)
    scrape = samples(text)
    cell = dict(job="medhelm-compare", model="org/a", deployment="local/a", benchmark="medcalc_bench",
                category=EXACT.category)
    assert value(scrape, "medhelm_eval_regression", **cell) == 1
    assert value(scrape, "medhelm_eval_gate_failed_cell", **cell) == 1
    assert value(scrape, "medhelm_eval_score_change", **cell) == pytest.approx(-0.2)
    assert value(scrape, "medhelm_eval_score", **cell) == pytest.approx(22 / 50)
    assert value(scrape, "medhelm_eval_compared_instances", **cell) == 50
    assert value(scrape, "medhelm_eval_regression", job="medhelm-compare", benchmark="aci_bench") == 0
    assert value(scrape, "medhelm_eval_gate_failed", job="medhelm-compare") == 1
    # every metric the rules query is in the scrape
    spec = _rule(_render(repo_root, helm_bin, *ON))["spec"]
    names = {n for n, _ in scrape}
    for rule in spec["groups"][0]["rules"]:
        assert any(n in rule["expr"] for n in names if n.startswith("medhelm_eval_"))
    assert {"medhelm_eval_regression", "medhelm_eval_gate_failed"} <= names


def test_push_to_nowhere_is_a_note_not_a_failure(tmp_path, refused_url):
    out = tmp_path / "out"
    write_run(out, "s", EXACT, "org/a", "local/a", [1.0, 0.0])
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(out), "--pushgateway", refused_url)
    assert code == 0 and "could not push metrics to the Pushgateway" in err


@pytest.mark.slow
def test_the_clusters_collect_and_summarize_pushes_the_release(tmp_path, pushgateway):  # noqa: F811
    """As in the chart's Job pods (MEDHELM_PUSHGATEWAY from monitoring.pushgateway.url): a real shard, then
    `medhelm collect --summarize` pushes the new release's scores with no flag of its own."""
    from medhelm.devtools.mock_openai import MockOpenAIServer

    from .conftest import MedhelmProcess
    from .test_exact_counters import _setup, responder

    with MockOpenAIServer(responder=responder) as mock:
        entry, local, out = _setup(tmp_path, mock)
        shard = MedhelmProcess("job", "-r", entry, "-o", str(out), "--local-path", str(local), "-q", "--suite",
                               "nightly", "--shard-index", "0", "--shard-count", "1")
        assert shard.stop(wait=180) == 0, shard.stderr
    collect = MedhelmProcess("collect", "--suite", "nightly", "-o", str(out), "--summarize",
                             env={"MEDHELM_PUSHGATEWAY": pushgateway})
    assert collect.stop(wait=180) == 0, collect.stderr
    scrape = samples(fetch(pushgateway + "/metrics"))
    with open_store(out / "results.sqlite") as store:
        (cell,) = read.cells(store, "nightly")
    assert value(scrape, "medhelm_release_score", job="medhelm-release", benchmark=cell["benchmark"],
                 deployment="mock/cand") == pytest.approx(cell["value"])
    assert value(scrape, "medhelm_release_info", release="nightly") == 1
