"""A short shard pushes its final values to a real Prometheus Pushgateway (Debian's binary, unpacked by
scripts/_env.sh): grouped by job, suite and shard, equal to what the shard did; a re-run of the same shard
replaces its group instead of adding to it."""

from __future__ import annotations

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer

from .conftest import MedhelmProcess, check_metrics, fetch, prometheus_tool, samples, start_tool, value
from .test_exact_counters import ROWS, _setup, responder


@pytest.fixture
def pushgateway(tmp_path):
    exe = prometheus_tool("prometheus-pushgateway")
    if exe is None:
        pytest.skip("prometheus-pushgateway missing: scripts/_env.sh unpacks it from Debian's package (needs apt-get)")
    proc, url = start_tool(exe, lambda port: [], tmp_path / "pushgateway.log")
    yield url
    proc.terminate()
    proc.wait(timeout=60)


@pytest.mark.slow
def test_a_shard_pushes_its_final_values(tmp_path, pushgateway, promtool):
    with MockOpenAIServer(responder=responder) as mock:
        entry, local, out = _setup(tmp_path, mock)
        args = ("job", "-r", entry, "-o", str(out), "--local-path", str(local), "-q", "--suite", "nightly",
                "--shard-index", "1", "--shard-count", "3", "--pushgateway", pushgateway)
        first = MedhelmProcess(*args)
        assert first.stop(wait=120) == 0, first.stderr
        pushed = samples(fetch(pushgateway + "/metrics"))
        again = MedhelmProcess(*args)  # everything resumed: the group is replaced, not added to
        assert again.stop(wait=120) == 0, again.stderr
    group = {"job": "medhelm-job", "suite": "nightly", "shard": "1"}
    owned = len(range(1, ROWS, 3))
    assert value(pushed, "medhelm_instances_done_total", **group) == owned
    assert value(pushed, "medhelm_model_requests_total", outcome="ok", role="candidate", **group) == owned
    assert value(pushed, "medhelm_tokens_total", **group) > 0
    text = fetch(pushgateway + "/metrics")
    check_metrics(promtool, text)
    got = samples(text)
    assert value(got, "medhelm_instances_planned_total", **group) == owned
    assert value(got, "medhelm_instances_resumed_total", **group) == owned  # the second push
    assert value(got, "medhelm_instances_done_total", **group) == 0
    assert value(got, "medhelm_model_requests_total", outcome="ok", **group) == 0
    assert value(got, "medhelm_build_info", service="job", **group) == 1
