"""Failures a user must see (the HELM prod_env issue, item 5): an instance the provider refuses for its
credential (401/403) stops the run with exit 2 and one line naming the deployment, the status and the
provider's message; a bad request (400) is recorded and also exits 2 naming the first; a content filter's
400 stays that instance's outcome; exhausted retries name the status, and a rate limit is waited out
(``--rate-limit-wait``) before they are; an unreachable endpoint that the deployment does not spell out (a
provider's default) is named by its URL. Never the key, never patient text."""

from __future__ import annotations

import asyncio
import json

from medhelm.cli import main
from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer
from medhelm.errors import ServerUnreachable
from tests.core.conftest import write_benchmark

KEY = "sk-visible-3f1e9a"  # never printed
MARKER = "Synthetic note 1:"  # instance 1's note text: never in a message


def prod_env(folder, base_url):
    """A HELM OpenAIClient entry with its key in credentials.conf, as a hospital's prod_env has it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: openai/gpt-4o-2024-05-13\n    model_name: openai/gpt-4o-2024-05-13\n"
        "    tokenizer_name: openai/o200k_base\n    max_sequence_length: 128000\n    client_spec:\n"
        "      class_name: helm.clients.openai_client.OpenAIClient\n"
        f"      args:\n        base_url: \"{base_url}\"\n")
    (folder / "credentials.conf").write_text(f'openaiApiKey: "{KEY}"\n')
    return folder


def run(tmp_path, responder, *extra):
    cfg = write_benchmark(tmp_path / "bench", 3)
    with MockOpenAIServer(responder=responder) as srv:
        env = prod_env(tmp_path / "env", srv.base_url)
        code = main(["run", "-r", f"medhelm_configurable_benchmark:config_path={cfg},model_deployment="
                     "openai/gpt-4o-2024-05-13", "--suite", "s", "-o", str(tmp_path / "out"), "--local-path",
                     str(env), "-q", "--max-concurrency", "1", *extra])
    return code


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("medhelm: error:")]


def test_a_refused_credential_stops_the_run_with_the_providers_line(tmp_path, capsys):
    def responder(body):
        if MARKER in json.dumps(body):
            raise MockHTTPError(401, "Incorrect API key provided.")
        return "Yes"

    assert run(tmp_path, responder) == 2
    out = capsys.readouterr()
    [line] = errors(out.err)
    assert "deployment 'openai/gpt-4o-2024-05-13'" in line and "HTTP 401: Incorrect API key provided." in line
    assert "credential was refused" in line
    assert KEY not in out.out + out.err and MARKER not in out.out + out.err and "Traceback" not in out.err
    status = json.loads(next((tmp_path / "out" / "runs" / "s").glob("*/run.json")).read_text())
    assert status["status"] != "complete"


def test_a_bad_request_is_recorded_and_exits_two_naming_it(tmp_path, capsys):
    def responder(body):
        if MARKER in json.dumps(body):
            raise MockHTTPError(400, "Unsupported parameter: 'max_tokens' is not supported with this model.")
        return "Yes"

    assert run(tmp_path, responder) == 2
    out = capsys.readouterr()
    [line] = errors(out.err)
    assert "1 instance(s) refused as a bad request" in line and "HTTP 400: Unsupported parameter" in line
    assert "deployment 'openai/gpt-4o-2024-05-13'" in line
    assert KEY not in out.out + out.err and MARKER not in out.out + out.err


def test_exhausted_retries_name_the_status(tmp_path, capsys):
    def responder(body):
        if MARKER in json.dumps(body):
            raise MockHTTPError(503, "The engine is currently overloaded.")
        return "Yes"

    assert run(tmp_path, responder, "--max-attempts", "2", "--retry-base-delay", "0") == 2
    [line] = errors(capsys.readouterr().err)
    assert "1 instance(s) still failing after retries" in line and "HTTP 503" in line


def _limited_thrice():
    refused = []

    def responder(body):
        if MARKER in json.dumps(body) and len(refused) < 3:
            refused.append(1)
            raise MockHTTPError(429, "Rate limit reached for requests.")
        return "Yes"

    return responder


def test_a_rate_limit_that_outlasts_max_attempts_is_waited_out_unless_told_not_to(tmp_path, capsys):
    """Issue 53: a 429 means "later": refused three times with --max-attempts 2, the instance is still answered
    (retried within --rate-limit-wait); with --rate-limit-wait 0 it fails after its two attempts, naming the 429."""
    assert run(tmp_path / "a", _limited_thrice(), "--max-attempts", "2", "--retry-base-delay", "0") == 0
    assert errors(capsys.readouterr().err) == []
    assert run(tmp_path / "b", _limited_thrice(), "--max-attempts", "2", "--retry-base-delay", "0",
               "--rate-limit-wait", "0") == 2
    [line] = errors(capsys.readouterr().err)
    assert "1 instance(s) still failing after retries" in line and "HTTP 429" in line and MARKER not in line


QUOTA = ("You exceeded your current quota, please check your plan and billing details. For more information on "
         "this error, read the docs.")  # OpenAI's text for the 429 "insufficient_quota"


def test_a_spent_quota_stops_the_run_at_once_instead_of_being_waited_out(tmp_path, capsys):
    """A 429 whose code says the account's quota is spent (OpenAI's and Azure's ``insufficient_quota``) is no rate
    limit: waited out for ten minutes (--rate-limit-wait) every instance would fail the same way. The run stops at
    its first such refusal with the provider's line, as for a refused credential, and asks no more."""
    asked = []

    def responder(body):
        asked.append(1)
        if MARKER in json.dumps(body):
            raise MockHTTPError(429, QUOTA, code="insufficient_quota")
        return "Yes"

    assert run(tmp_path, responder) == 2
    out = capsys.readouterr()
    [line] = errors(out.err)
    assert "HTTP 429: You exceeded your current quota" in line and "the account's quota is spent" in line
    assert "deployment 'openai/gpt-4o-2024-05-13'" in line and KEY not in out.err and MARKER not in out.err
    assert len(asked) <= 3  # the refused instance asked once; no retry


def test_azures_content_filter_is_that_instances_outcome_not_a_bad_request():
    from medhelm.inference.http import HttpReply
    from medhelm.inference.openai import _filtered

    azure = {"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                                  "management policy.", "type": None, "param": "prompt", "code": "content_filter",
                       "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation",
                                                     "content_filter_result": {}}}}
    assert _filtered(HttpReply(400, {}, json.dumps(azure).encode()))
    other = {"error": {"message": "Invalid 'max_tokens'", "type": "invalid_request_error", "code": None}}
    assert not _filtered(HttpReply(400, {}, json.dumps(other).encode()))


def test_an_unreachable_default_endpoint_is_named_by_its_url(refused_url):
    """A native kind with no base_url (its provider's default): the message names the URL it tried."""
    from medhelm.inference.http import JsonTransport
    from medhelm.specs import Deployment, DeploymentKind

    dep = Deployment(name="anthropic/claude-x", model_name="anthropic/claude-x", kind=DeploymentKind("anthropic"))
    transport = JsonTransport(dep, {})

    async def go():
        try:
            await transport.post_bytes(refused_url + "/v1/messages", b"{}", "here")
        finally:
            await transport.aclose()

    try:
        asyncio.run(go())
    except ServerUnreachable as err:
        assert f"cannot reach {refused_url}/v1/messages (deployment 'anthropic/claude-x')" in str(err)
    else:
        raise AssertionError("no ServerUnreachable")
