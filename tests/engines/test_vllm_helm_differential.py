"""The differential against crfm-helm's own ``helm-run`` (issue 54) on the real engine: 2 pubmed_qa instances
through HELM and through ``medhelm run``, both answered by the session's vLLM CPU server (SmolLM2-135M-Instruct
at temperature 0) through HELM's ``VLLMChatClient`` deployment, which both sides read from one prod_env. A
``FaultProxy`` in front of vLLM keeps every body as vLLM was sent it: the prompts must be byte-equal and every other
field equal, and on those equal requests the engine's completions, HELM's and our metrics and the run's means must
be equal too. The full run (more instances, medcalc_bench and aci_bench, vLLM without prefix caching) is
``bench/bench_helm_differential.py --engine vllm``; the mock's part is tests/providers/test_helm_run_differential.py."""

from __future__ import annotations

import pytest

from medhelm.devtools import helm_differential as diff
from tests.engines.conftest import SERVED
from tests.providers.test_helm_run_differential import helm_run  # noqa: F401 - crfm-helm's venv + its run deps

pytestmark = [pytest.mark.engines, pytest.mark.slow]

LIMIT = 2


def test_helm_run_and_medhelm_run_agree_on_the_real_vllm(vllm, helm_run, shared_data, tmp_path):  # noqa: F811
    engine = diff.Engine(vllm.root + "/v1", candidate=SERVED, judges=())
    row = diff.run_case(diff.select(["pubmed_qa"])[0], helm_run, shared_data, tmp_path, LIMIT, engine=engine)
    assert not row.skipped, row.skipped
    assert row.instances == LIMIT
    assert row.total["request"] == LIMIT  # each side's request of each instance reached vLLM and was paired
    for kind in ("prompt", "request", "references", "completion", "metrics", "aggregate", "main"):
        assert row.total.get(kind) and row.equal[kind] == row.total[kind], (kind, row.differences.get(kind))
    assert "exact_match" in row.metrics_compared
    prod_env = (tmp_path / "prod_env" / "model_deployments.yaml").read_text()
    assert "helm.clients.vllm_client.VLLMChatClient" in prod_env and f'vllm_model_name: "{SERVED}"' in prod_env
