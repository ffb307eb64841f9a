"""Kind ``bedrock`` (inference/bedrock.py) and its fake (devtools/fakes/bedrock.py): the fake driven by boto3's
``bedrock-runtime`` Converse client, which signs with botocore's SigV4 (the fake recomputes it) and gets the
reply shape it parses; what the fake refuses, as Bedrock does. Our client against the fake: the cross-kind
tests (test_native_contract.py, test_native_runs.py) and Claude's thinking on Converse (test_anthropic.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.providers.conftest import KEYS, make_fake, post_json

AWS_KEY, AWS_SECRET = KEYS["AWS_ACCESS_KEY_ID"], KEYS["AWS_SECRET_ACCESS_KEY"]  # what FakeBedrock.accepting accepts


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
        status, body = post_json(srv.base_url + "/model/m/converse", {"messages": [], "seed": 1}, {})
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
