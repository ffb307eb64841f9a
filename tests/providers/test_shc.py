"""Stanford Health Care's gateway routes (kinds ``anthropic``/``gemini`` with ``platform: shc``) against their fake
(devtools/fakes/shc.py): a HELM prod_env entry of a StanfordHealthCare HTTP class runs pubmed_qa through our
mapping, sending the body HELM's class sends."""

from __future__ import annotations

import json

import pytest

from tests.providers.conftest import MARKER, assert_no_marker, medhelm, only_run, records


@pytest.mark.parametrize("helm_class,route,reply", [
    ("helm.clients.stanfordhealthcare_claude_client.StanfordHealthCareClaudeClient", "Claude37Sonnet/claude-3-7-sonnet",
     "message"),
    ("helm.clients.stanfordhealthcare_claude_client.StanfordHealthCareClaudeClient", "Claude37Sonnet/claude-3-7-sonnet",
     "list"),
    ("helm.clients.stanfordhealthcare_google_client.StanfordHealthCareGoogleClient",
     "gcp-gem20flash-fa/apim-gcp-gem20flash-fa", "chunks")])
def test_pubmed_qa_through_stanford_health_cares_text_routes(helm_class, route, reply, marked_mirror, tmp_path):
    """A HELM prod_env entry of a StanfordHealthCare HTTP class runs through our gateway mapping, sending the
    body HELM's class sends (the fake refuses any other shape) to {endpoint}/{deployment}."""
    from medhelm.devtools.fakes.shc import FakeSHCGateway

    kind = "claude" if "Claude" in helm_class else "google"
    key = "shc-subscription-9e1f"
    with FakeSHCGateway(routes={"/" + route: kind}, subscription_key=key,
                        claude_reply="list" if reply == "list" else "message") as srv:
        env = tmp_path / "prod_env"
        env.mkdir()
        (env / "model_deployments.yaml").write_text(json.dumps({"model_deployments": [{
            "name": "stanfordhealthcare/model-x", "model_name": "vendor/model-x", "tokenizer_name": "vendor/model-x",
            "max_sequence_length": 4096,
            "client_spec": {"class_name": helm_class, "args": {"model": "model-x-001", "deployment": route}}}]}))
        (env / "credentials.conf").write_text(f'stanfordhealthcareEndpoint: "{srv.base_url}"\n'
                                              f'stanfordhealthcareApiKey: "{key}"\n')
        srv.fail_next(1, "throttle")  # APIM's 429 with Retry-After: retried inside the run
        run = ["run", "-r", "pubmed_qa:model=vendor/model-x", "--data-dir", str(marked_mirror), "--offline", "-m", "4",
               "--max-concurrency", "2", "--local-path", str(env), "-o", str(tmp_path / "out"), "-q"]
        done = medhelm(*run)
        assert done.returncode == 0, done.stderr
        status = json.loads((only_run(tmp_path / "out") / "run.json").read_text())
        assert (status["status"], status["instances_done"], status["errors"], status["retries"]) == ("complete", 4, 0, 1)
        recs = records(only_run(tmp_path / "out"))
        assert all(r["completion"]["text"] in ("A", "B", "C") for r in recs)
        assert len(srv.requests) == 4 and all(r["path"] == "/" + route for r in srv.requests)
        body = srv.requests[0]["body"]
        if kind == "claude":
            assert set(body) == {"model_id", "prompt_text", "max_tokens", "temperature"}
            assert body["model_id"] == "model-x-001" and MARKER in body["prompt_text"]
        else:
            assert body["contents"]["role"] == "user" and MARKER in body["contents"]["parts"]["text"]
            assert body["generation_config"]["candidateCount"] == 1
        usage = recs[0]["completion"]["usage"]
        if reply == "list":  # a bare content list states no usage
            assert usage["completion_tokens"] is None
        else:
            assert usage["prompt_tokens"] > 50 and usage["completion_tokens"] == 1
    assert_no_marker(done, folders=(tmp_path / "out",))
