"""Kind ``gemini`` (inference/gemini.py) and its fake (devtools/fakes/gemini.py): the fake driven by the official
``google-genai`` SDK (the Gemini API and Vertex AI), then our client against it: Vertex with a token file,
thinking tokens apart (to the telemetry too), a safety block as one instance's outcome, not a failure."""

from __future__ import annotations

import asyncio
import json

import pytest

from medhelm.inference import ClientPool
from tests.providers.conftest import (
    FAST,
    KEYS,
    deployment_entry,
    generate,
    make_fake,
    medhelm,
    native_deployment,
    only_run,
    post_json,
    records,
    short_request,
    write_deployments,
)


def test_google_genai_sdk_against_the_fake():
    genai = pytest.importorskip("google.genai")
    from google.genai import errors, types

    with make_fake("gemini", block_marker="BLOCKME", thinking_tokens=7) as srv:
        client = genai.Client(api_key=KEYS["GEMINI_TEST_KEY"],
                              http_options=types.HttpOptions(base_url=srv.base_url, api_version="v1beta"))
        reply = client.models.generate_content(
            model="gemini-test", contents="Is it raining? yes or no",
            config=types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=16, temperature=0,
                                               seed=0, stop_sequences=["\n\n"],
                                               thinking_config=types.ThinkingConfig(thinking_budget=512)))
        assert reply.text in ("Yes", "No")
        assert reply.usage_metadata.thoughts_token_count == 7 and reply.usage_metadata.candidates_token_count == 1
        sent = srv.requests[-1]
        assert sent["path"] == "/v1beta/models/gemini-test:generateContent"
        assert sent["body"]["systemInstruction"]["parts"][0]["text"] == "Be brief."
        # a blocked prompt: no candidates, the block reason in promptFeedback (the SDK's text is None)
        blocked = client.models.generate_content(model="gemini-test", contents="please BLOCKME now")
        assert blocked.prompt_feedback.block_reason == types.BlockedReason.SAFETY and not blocked.candidates
        srv.fail_next(1, "throttle")
        with pytest.raises(errors.ClientError) as err:
            client.models.generate_content(model="gemini-test", contents="x")
        assert err.value.code == 429 and err.value.status == "RESOURCE_EXHAUSTED"
        wrong = genai.Client(api_key="wrong", http_options=types.HttpOptions(base_url=srv.base_url))
        with pytest.raises(errors.ClientError) as err:
            wrong.models.generate_content(model="gemini-test", contents="x")
        assert err.value.code == 400 and "API key not valid" in err.value.message
    # an unknown field is refused with Google's wording
    with make_fake("gemini") as srv:
        status, body = post_json(srv.base_url + "/v1beta/models/g:generateContent",
                             {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"maxTokens": 5}},
                             {"x-goog-api-key": KEYS["GEMINI_TEST_KEY"]})
        assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
        assert 'Unknown name "maxTokens"' in body["error"]["message"]


def test_google_genai_vertex_against_the_fake():
    genai = pytest.importorskip("google.genai")
    credentials = pytest.importorskip("google.oauth2.credentials")
    from google.genai import types

    with make_fake("gemini", platform="vertex", bearer="ya29.vertex") as srv:
        client = genai.Client(vertexai=True, project="hospital-proj", location="europe-west4",
                              credentials=credentials.Credentials(token="ya29.vertex"),
                              http_options=types.HttpOptions(base_url=srv.base_url, api_version="v1"))
        reply = client.models.generate_content(model="gemini-test", contents="alpha beta")
        assert reply.text == "alpha beta"
        assert srv.requests[-1]["path"] == ("/v1/projects/hospital-proj/locations/europe-west4/publishers/google/"
                                            "models/gemini-test:generateContent")


def test_gemini_vertex_and_thinking_tokens_apart(keys, tmp_path):
    token = tmp_path / "token"
    token.write_text("ya29.vertex")
    with make_fake("gemini", platform="vertex", bearer="ya29.vertex", thinking_tokens=40) as srv:
        dep = native_deployment("gemini", srv.base_url, platform="vertex", region="europe-west4", project="p1",
                          access_token_file=str(token), thinking_budget=256)
        completion, _ = asyncio.run(generate(dep, short_request("five six")))
    assert completion.text == "five six"
    assert completion.usage.reasoning_tokens == 40 and completion.usage.completion_tokens == 2 + 40
    assert srv.requests[-1]["body"]["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 256}


def test_gemini_safety_block_is_an_outcome_not_a_crash(keys):
    with make_fake("gemini", block_marker="FORBIDDEN-TOPIC") as srv:
        completion, stats = asyncio.run(generate(native_deployment("gemini", srv.base_url),
                                                  short_request("tell me about FORBIDDEN-TOPIC")))
    assert completion.text == "" and completion.finish_reason == "content_filter"
    assert completion.usage.prompt_tokens > 0 and stats.errors == 0 and stats.retries == 0


def test_reasoning_tokens_reach_the_telemetry_apart(keys):
    from medhelm.telemetry import Telemetry

    telemetry = Telemetry("run")
    with make_fake("gemini", thinking_tokens=30) as srv:
        dep = native_deployment("gemini", srv.base_url)

        async def run() -> None:
            pool = ClientPool(retry=FAST, observer=telemetry)
            try:
                for text in ("a b", "c d e"):
                    await pool.get(dep).generate(short_request(text))
            finally:
                await pool.aclose()

        asyncio.run(run())

    def tokens(kind: str) -> float | None:
        return telemetry.registry.get_sample_value("medhelm_tokens_total", {"deployment": dep.name,
                                                                            "role": "candidate", "kind": kind})

    assert tokens("reasoning") == 60 and tokens("completion") == 2 + 3 + 60


def test_a_gemini_safety_block_is_one_instance_s_outcome(marked_mirror, tmp_path):
    """One prompt blocked by Gemini's safety filter: that record says content_filter with no text, the others
    answer, the run completes without an error (a block is the model's answer, not a failure to get one)."""
    with make_fake("gemini") as srv:
        run = ["run", "-r", "pubmed_qa:model=gemini/fake-model", "--data-dir", str(marked_mirror), "--offline",
               "-m", "4", "--max-concurrency", "1", "-q"]
        first = medhelm(*run, "--local-path", str(write_deployments(tmp_path / "env1", [
            deployment_entry("gemini", srv.base_url)])), "-o", str(tmp_path / "a"))
        assert first.returncode == 0, first.stderr
        blocked_id, blocked = next((r["instance"]["id"], r) for r in records(only_run(tmp_path / "a"))[1:2])
        srv.block_marker = " ".join(blocked["instance"]["input"].split()[:8])  # only that instance's text
        second = medhelm(*run, "--local-path", str(write_deployments(tmp_path / "env2", [  # a fresh cache
            deployment_entry("gemini", srv.base_url)])), "-o", str(tmp_path / "b"))
        assert second.returncode == 0, second.stderr
    run_dir = only_run(tmp_path / "b")
    status = json.loads((run_dir / "run.json").read_text())
    assert status["status"] == "complete" and status["errors"] == 0 and status["instances_done"] == 4
    by_id = {r["instance"]["id"]: r for r in records(run_dir)}
    assert by_id[blocked_id]["error"] is None
    assert by_id[blocked_id]["completion"]["finish_reason"] == "content_filter"
    assert by_id[blocked_id]["completion"]["text"] == ""
    assert all(r["completion"]["finish_reason"] == "stop" and r["completion"]["text"] for i, r in by_id.items()
               if i != blocked_id)
