"""The fakes speak each provider's protocol: the providers' OFFICIAL clients (anthropic, google-genai, boto3,
azure-identity + openai) talk to them and get what they expect, and they refuse what the real services
refuse (an unknown field, a missing anthropic-version, a bad SigV4 signature, an expired Entra token).
What our own clients send is then checked against these same fakes (test_native_clients.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.providers.conftest import AWS_KEY, AWS_SECRET, KEYS, make_fake


def _post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json",
                                                                                   **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# -- Anthropic -----------------------------------------------------------------------------------------------


def test_anthropic_sdk_against_the_fake():
    anthropic = pytest.importorskip("anthropic")
    with make_fake("anthropic") as srv:
        client = anthropic.Anthropic(api_key=KEYS["ANTHROPIC_TEST_KEY"], base_url=srv.base_url, max_retries=0)
        msg = client.messages.create(model="claude-test", max_tokens=64, system="Answer yes or no.",
                                     messages=[{"role": "user", "content": "Is the sky blue? yes or no"}])
        assert msg.type == "message" and msg.stop_reason == "end_turn"
        assert msg.content[0].type == "text" and msg.content[0].text in ("Yes", "No")
        assert msg.usage.input_tokens > 0 and msg.usage.output_tokens == 1
        sent = srv.requests[-1]
        assert sent["headers"]["anthropic-version"] in ("2023-06-01", "2026-10-21")
        assert sent["body"]["system"] == "Answer yes or no."
        # extended thinking: the SDK reads our thinking block back as a ThinkingBlock
        msg = client.messages.create(model="claude-test", max_tokens=2048, thinking={"type": "enabled",
                                                                                     "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": "Why?"}])
        assert [b.type for b in msg.content] == ["thinking", "text"] and msg.content[0].signature
        assert msg.usage.output_tokens > len(msg.content[1].text.split())  # the thinking is billed in it
        srv.redact_thinking = True  # flagged thinking comes back encrypted: the SDK's RedactedThinkingBlock
        msg = client.messages.create(model="claude-test", max_tokens=2048, thinking={"type": "enabled",
                                                                                     "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": "Why?"}])
        assert isinstance(msg.content[0], anthropic.types.RedactedThinkingBlock) and msg.content[0].data
        assert msg.content[1].type == "text" and msg.usage.output_tokens > 1
        srv.redact_thinking = False
        # refused as the real API refuses: unknown field, thinking budget under 1024, wrong key
        with pytest.raises(anthropic.BadRequestError, match="Extra inputs are not permitted"):
            client.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}],
                                   extra_body={"seed": 1})
        with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
            client.messages.create(model="claude-test", max_tokens=2048, messages=[{"role": "user", "content": "x"}],
                                   thinking={"type": "enabled", "budget_tokens": 100})
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(api_key="wrong", base_url=srv.base_url, max_retries=0).messages.create(
                model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        # overload: HTTP 529 overloaded_error, which the SDK itself treats as a server error and retries
        srv.fail_next(1, "overloaded")
        with pytest.raises(anthropic.APIStatusError) as err:
            client.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        assert err.value.status_code == 529 and err.value.body["error"]["type"] == "overloaded_error"
        srv.fail_next(1, "overloaded")
        retrying = anthropic.Anthropic(api_key=KEYS["ANTHROPIC_TEST_KEY"], base_url=srv.base_url, max_retries=1)
        assert retrying.messages.create(model="claude-test", max_tokens=8,
                                        messages=[{"role": "user", "content": "x"}]).content[0].text == "x"
        # the header the SDK always sends is required: without it, a 400 naming it
        status, body = _post(srv.base_url + "/v1/messages", {"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "x"}]}, {"x-api-key": KEYS["ANTHROPIC_TEST_KEY"]})
        assert status == 400 and body["error"]["message"] == "anthropic-version: header is required"


def test_anthropic_bedrock_sdk_signs_what_the_fake_verifies():
    anthropic = pytest.importorskip("anthropic")
    pytest.importorskip("botocore")
    with make_fake("anthropic", platform="bedrock", aws_keys={AWS_KEY: AWS_SECRET}) as srv:
        client = anthropic.AnthropicBedrock(aws_access_key=AWS_KEY, aws_secret_key=AWS_SECRET, aws_region="us-east-1",
                                            base_url=srv.base_url, max_retries=0)
        msg = client.messages.create(model="anthropic.claude-test-v1:0", max_tokens=32,
                                     messages=[{"role": "user", "content": "Is it? yes or no"}])
        assert msg.content[0].text in ("Yes", "No")
        assert srv.requests[-1]["path"] == "/model/anthropic.claude-test-v1:0/invoke" or \
            srv.requests[-1]["path"].startswith("/model/anthropic.claude-test-v1")
        assert srv.requests[-1]["body"]["anthropic_version"] in ("bedrock-2023-05-31", "2026-10-21")
        bad = anthropic.AnthropicBedrock(aws_access_key=AWS_KEY, aws_secret_key="not-the-secret",
                                         aws_region="us-east-1", base_url=srv.base_url, max_retries=0)
        with pytest.raises(anthropic.PermissionDeniedError, match="signature"):
            bad.messages.create(model="anthropic.claude-test-v1:0", max_tokens=8,
                                messages=[{"role": "user", "content": "x"}])


def test_anthropic_vertex_sdk_against_the_fake():
    anthropic = pytest.importorskip("anthropic")
    with make_fake("anthropic", platform="vertex", bearer="ya29.vertex-token") as srv:
        client = anthropic.AnthropicVertex(region="europe-west1", project_id="hospital-proj",
                                           access_token="ya29.vertex-token", base_url=srv.base_url + "/v1",
                                           max_retries=0)
        msg = client.messages.create(model="claude-test@20250101", max_tokens=32,
                                     messages=[{"role": "user", "content": "one two three"}])
        assert msg.content[0].text == "one two three"
        assert srv.requests[-1]["path"] == ("/v1/projects/hospital-proj/locations/europe-west1/publishers/anthropic/"
                                            "models/claude-test@20250101:rawPredict")
        assert srv.requests[-1]["body"]["anthropic_version"] in ("vertex-2023-10-16", "2026-10-21")


# -- Gemini --------------------------------------------------------------------------------------------------


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
        status, body = _post(srv.base_url + "/v1beta/models/g:generateContent",
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


# -- Bedrock -------------------------------------------------------------------------------------------------


def _bedrock(srv, secret: str = AWS_SECRET):
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=srv.base_url,
                        aws_access_key_id=AWS_KEY, aws_secret_access_key=secret,
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def test_boto3_converse_against_the_fake():
    pytest.importorskip("boto3")
    from botocore.exceptions import ClientError, ParamValidationError

    with make_fake("bedrock") as srv:
        client = _bedrock(srv)
        reply = client.converse(modelId="anthropic.claude-test-v1:0",
                                messages=[{"role": "user", "content": [{"text": "Is it? yes or no"}]}],
                                system=[{"text": "Be brief."}],
                                inferenceConfig={"maxTokens": 16, "temperature": 0.0, "stopSequences": ["\n\n"]})
        assert reply["output"]["message"]["content"][0]["text"] in ("Yes", "No")
        assert reply["stopReason"] == "end_turn" and reply["usage"]["outputTokens"] == 1
        assert srv.requests[-1]["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY}/")
        with pytest.raises(ClientError) as err:
            _bedrock(srv, secret="wrong").converse(modelId="m", messages=[{"role": "user", "content": [{"text": "x"}]}])
        assert err.value.response["Error"]["Code"] == "InvalidSignatureException"
        srv.fail_next(1, "throttle")
        with pytest.raises(ClientError) as err:
            client.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "x"}]}])
        assert err.value.response["Error"]["Code"] == "ThrottlingException"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
        # Claude's extended thinking through Converse: a reasoningContent block (text + signature, or redacted
        # bytes) before the answer, billed in outputTokens; thinking's own rules refused as Bedrock does
        thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
        reply = client.converse(modelId="anthropic.claude-test-v1:0", additionalModelRequestFields=thinking,
                                messages=[{"role": "user", "content": [{"text": "Is it? yes or no"}]}],
                                inferenceConfig={"maxTokens": 1040})
        first, answer = reply["output"]["message"]["content"]
        assert first["reasoningContent"]["reasoningText"]["text"] and first["reasoningContent"]["reasoningText"]["signature"]
        assert answer["text"] in ("Yes", "No") and reply["usage"]["outputTokens"] > 1
        srv.redact_thinking = True
        reply = client.converse(modelId="anthropic.claude-test-v1:0", additionalModelRequestFields=thinking,
                                messages=[{"role": "user", "content": [{"text": "Is it? yes or no"}]}],
                                inferenceConfig={"maxTokens": 1040})
        redacted = reply["output"]["message"]["content"][0]["reasoningContent"]["redactedContent"]
        assert isinstance(redacted, bytes) and redacted  # boto3 decodes the blob as the real service's
        srv.redact_thinking = False
        for config, message in (({"maxTokens": 1040, "temperature": 0.0}, "temperature"),
                                ({"maxTokens": 512}, "max_tokens")):
            with pytest.raises(ClientError, match=message) as err:
                client.converse(modelId="m", additionalModelRequestFields=thinking, inferenceConfig=config,
                                messages=[{"role": "user", "content": [{"text": "x"}]}])
            assert err.value.response["Error"]["Code"] == "ValidationException"
        with pytest.raises(ParamValidationError):  # boto3 refuses an unknown field before sending; so do we:
            client.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "x"}]}], seed=1)
        status, body = _post(srv.base_url + "/model/m/converse", {"messages": [], "seed": 1}, {})
        assert status == 400 and body["message"].startswith("Authorization header requires")  # unsigned
        # signed (by our signer, equal to botocore's below) but with an unknown field, or signed too long ago
        import datetime as dt

        from medhelm.inference import sigv4

        def signed(body: dict, now=None) -> tuple[int, dict]:
            raw = json.dumps(body).encode()
            host = srv.base_url.split("//", 1)[1]
            headers = sigv4.sign(sigv4.Credentials(AWS_KEY, AWS_SECRET), region="us-east-1", service="bedrock",
                                 host=host, path_and_query="/model/m/converse", body=raw, now=now)
            request = urllib.request.Request(srv.base_url + "/model/m/converse", data=raw,
                                             headers={"Content-Type": "application/json", **headers})
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    return reply.status, json.loads(reply.read())
            except urllib.error.HTTPError as err:
                return err.code, {"type": err.headers["x-amzn-ErrorType"].split(":")[0], **json.loads(err.read())}

        ok = {"messages": [{"role": "user", "content": [{"text": "x"}]}]}
        assert signed(ok)[0] == 200
        status, body = signed({**ok, "seed": 1})
        assert (status, body["type"]) == (400, "ValidationException") and "[seed]" in body["message"]
        status, body = signed(ok, now=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1))
        assert (status, body["type"], body["message"]) == (403, "InvalidSignatureException", "Signature expired")


def test_our_sigv4_signer_equals_botocore():
    pytest.importorskip("botocore")
    import datetime as dt

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    from medhelm.inference import sigv4

    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "héllo"}]}]}).encode()
    for token in (None, "session/token+1"):
        url = "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
        request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/json"})
        SigV4Auth(BotoCredentials(AWS_KEY, AWS_SECRET, token), "bedrock", "eu-west-1").add_auth(request)
        when = dt.datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        ours = sigv4.sign(sigv4.Credentials(AWS_KEY, AWS_SECRET, token), region="eu-west-1", service="bedrock",
                          host="bedrock-runtime.eu-west-1.amazonaws.com",
                          path_and_query="/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse", body=body, now=when)
        assert ours["Authorization"] == request.headers["Authorization"]
        assert ours.get("X-Amz-Security-Token") == request.headers.get("X-Amz-Security-Token")


# -- Azure OpenAI + Entra ID ---------------------------------------------------------------------------------


def test_openai_sdk_against_the_azure_fake_with_an_api_key():
    openai = pytest.importorskip("openai")
    with make_fake("azure_openai", reasoning_tokens=5) as srv:
        client = openai.AzureOpenAI(azure_endpoint=srv.base_url, api_key=KEYS["AZURE_TEST_KEY"],
                                    api_version="2024-10-21", max_retries=0)
        reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "a b c"}],
                                               max_tokens=8, temperature=0, seed=0)
        assert reply.choices[0].message.content == "a b c"
        assert reply.usage.completion_tokens_details.reasoning_tokens == 5
        assert srv.requests[-1]["path"] == "/openai/deployments/gpt-test/chat/completions"
        with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: bogus"):
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}],
                                           extra_body={"bogus": 1})
        srv.fail_next(1, "throttle")
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        assert err.value.response.headers["retry-after-ms"] == "10"
        with pytest.raises(openai.AuthenticationError):
            openai.AzureOpenAI(azure_endpoint=srv.base_url, api_key="wrong", api_version="2024-10-21",
                               max_retries=0).chat.completions.create(model="gpt-test",
                                                                      messages=[{"role": "user", "content": "x"}])


def test_azure_identity_gets_entra_tokens_the_fake_accepts(tls, tmp_path, monkeypatch):
    """azure-identity (client secret, workload identity) against the fake's Entra endpoint over https, then
    the openai SDK with that token; an expired token is refused."""
    identity = pytest.importorskip("azure.identity")
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx2")  # the openai SDK's own HTTP client (3.x)
    import ssl

    ca = ssl.create_default_context(cafile=tls["ca"])
    token_file = tmp_path / "sa-token"
    token_file.write_text("eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", tls["ca"])
    with make_fake("azure_openai", api_key=None, certfile=tls["cert"], keyfile=tls["key"],
                   federated_token=token_file.read_text()) as srv:
        common = {"authority": srv.base_url, "disable_instance_discovery": True, "connection_verify": tls["ca"]}
        for credential in (identity.ClientSecretCredential(srv.tenant, srv.client_id, srv.client_secret, **common),
                           identity.WorkloadIdentityCredential(tenant_id=srv.tenant, client_id=srv.client_id,
                                                               token_file_path=str(token_file), **common)):
            scope = "https://cognitiveservices.azure.com/.default"
            provider = identity.get_bearer_token_provider(credential, scope)
            client = openai.AzureOpenAI(azure_endpoint=srv.base_url, azure_ad_token_provider=provider,
                                        api_version="2024-10-21", max_retries=0,
                                        http_client=httpx.Client(verify=ca))
            reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "ok then"}])
            assert reply.choices[0].message.content == "ok then"
        grants = [f for f in srv.token_requests if "grant_type" in f]
        assert {("client_secret" in f, "client_assertion" in f) for f in grants} == {(True, False), (False, True)}
        srv.expire_tokens()
        stale = openai.AzureOpenAI(azure_endpoint=srv.base_url, azure_ad_token=next(iter(srv.tokens)),
                                   api_version="2024-10-21", max_retries=0, http_client=httpx.Client(verify=ca))
        with pytest.raises(openai.AuthenticationError, match="expired"):
            stale.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        # a wrong secret: Entra's invalid_client, which azure-identity reports as an authentication failure
        from azure.core.exceptions import ClientAuthenticationError

        with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
            identity.ClientSecretCredential(srv.tenant, srv.client_id, "wrong", **common).get_token(scope)


def test_azure_identity_managed_identity_against_the_fake(monkeypatch):
    identity = pytest.importorskip("azure.identity")
    with make_fake("azure_openai", identity_header="msi-secret-header") as srv:
        monkeypatch.setenv("IDENTITY_ENDPOINT", srv.base_url + "/msi/token")
        monkeypatch.setenv("IDENTITY_HEADER", "msi-secret-header")
        token = identity.ManagedIdentityCredential().get_token("https://cognitiveservices.azure.com/.default")
        assert token.token in srv.tokens
        assert srv.token_requests[-1]["resource"] == "https://cognitiveservices.azure.com"


def test_azure_identity_imds_against_the_fake(monkeypatch):
    identity = pytest.importorskip("azure.identity")
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET", "AZURE_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)
    with make_fake("azure_openai") as srv:
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", srv.base_url)
        token = identity.ManagedIdentityCredential().get_token("https://cognitiveservices.azure.com/.default")
        assert token.token in srv.tokens and srv.token_requests[-1]["resource"] == "https://cognitiveservices.azure.com"
