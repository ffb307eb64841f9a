"""Our SigV4 signer (inference/sigv4.py) signs exactly as botocore does (the fakes' verifier, devtools/fakes/
sigv4.py, is checked by boto3's own requests in test_bedrock.py and test_anthropic.py)."""

from __future__ import annotations

import json

import pytest

from tests.providers.conftest import KEYS

AWS_KEY, AWS_SECRET = KEYS["AWS_ACCESS_KEY_ID"], KEYS["AWS_SECRET_ACCESS_KEY"]


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
