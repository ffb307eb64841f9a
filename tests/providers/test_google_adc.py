"""Google ADC (inference/google_adc.py) against the fake token endpoint (devtools/fakes/google_oauth.py), the
fake proven by google-auth itself: its service_account.Credentials and user Credentials refresh against it,
and google-auth's JWT verifier accepts the assertion our client signs. Then a Vertex deployment with only
GOOGLE_APPLICATION_CREDENTIALS set reaches the Gemini fake with the token."""

from __future__ import annotations

import asyncio
import json

import pytest

from medhelm.devtools.fakes.gemini import FakeGemini
from medhelm.devtools.fakes.google_oauth import AUDIENCE, FakeGoogleOAuth
from medhelm.errors import ConfigError, InferenceError
from medhelm.inference import make_client
from medhelm.inference.google_adc import SCOPE, GoogleToken
from medhelm.specs import Deployment, GenerationRequest, Message

pytest.importorskip("cryptography")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_google_auth_refreshes_against_the_fake(tmp_path):
    service_account = pytest.importorskip("google.oauth2.service_account")
    user_credentials = pytest.importorskip("google.oauth2.credentials")
    from google.auth.transport.requests import Request

    with FakeGoogleOAuth() as fake:
        path = fake.service_account_file(tmp_path / "sa.json")
        creds = service_account.Credentials.from_service_account_file(str(path), scopes=[SCOPE])
        creds.refresh(Request())
        assert creds.token == fake.issued[-1] and creds.valid
        user = json.loads(fake.authorized_user_file(tmp_path / "adc.json").read_text())
        creds = user_credentials.Credentials(None, refresh_token=user["refresh_token"], client_id=user["client_id"],
                                             client_secret=user["client_secret"], token_uri=user["token_uri"])
        creds.refresh(Request())
        assert creds.token == fake.issued[-1]
        # a key the endpoint does not trust: google-auth sees Google's refusal
        other = FakeGoogleOAuth().service_account_file(tmp_path / "forged.json")
        info = json.loads(other.read_text())
        info["token_uri"] = fake.token_uri
        info["client_email"] = json.loads(path.read_text())["client_email"]  # the trusted account, another key
        other.write_text(json.dumps(info))
        import google.auth.exceptions

        with pytest.raises(google.auth.exceptions.RefreshError, match="invalid_grant"):
            service_account.Credentials.from_service_account_file(str(other), scopes=[SCOPE]).refresh(Request())


def test_google_auths_verifier_accepts_our_jwt(tmp_path):
    jwt = pytest.importorskip("google.auth.jwt")
    with FakeGoogleOAuth() as fake:
        path = fake.service_account_file(tmp_path / "sa.json")
        info = json.loads(path.read_text())
        token = GoogleToken("vertex/x", str(path))
        assertion = token.assertion()
        claims = jwt.decode(assertion, certs=fake.public_pem(info["client_email"]), audience=AUDIENCE)
        assert claims["iss"] == info["client_email"] and claims["scope"] == SCOPE
        assert claims["exp"] - claims["iat"] == 3600
        header = json.loads(__import__("base64").urlsafe_b64decode(assertion.split(".")[0] + "=="))
        assert header == {"alg": "RS256", "typ": "JWT", "kid": info["private_key_id"]}
        # and google-auth's own signer makes the same claims (apart from the times)
        from google.oauth2 import service_account

        theirs = service_account.Credentials.from_service_account_file(str(path), scopes=[SCOPE])
        their_claims = jwt.decode(theirs._make_authorization_grant_assertion(),
                                  certs=fake.public_pem(info["client_email"]), audience=AUDIENCE)
        assert set(their_claims) == set(claims)
        assert {k: their_claims[k] for k in ("iss", "aud", "scope")} == {k: claims[k] for k in ("iss", "aud", "scope")}


def test_token_is_cached_until_it_nears_expiry_and_dropped_on_401(tmp_path):
    clock = Clock()
    with FakeGoogleOAuth(lifetime_s=3599) as fake:
        path = fake.service_account_file(tmp_path / "sa.json")
        token = GoogleToken("vertex/x", str(path), clock=clock)

        async def go():
            first = await token.headers()
            assert await token.headers() == first and token.fetches == 1
            clock.now += 3599 - 301
            assert await token.headers() == first and token.fetches == 1
            clock.now += 2  # inside the 5-minute margin
            second = await token.headers()
            assert token.fetches == 2 and second != first
            token.invalidate()
            await token.headers()
            assert token.fetches == 3
            # concurrent requests share one fetch
            token.invalidate()
            await asyncio.gather(*(token.headers() for _ in range(8)))
            assert token.fetches == 4

        asyncio.run(go())
        # an authorized_user file (gcloud auth application-default login) refreshes too
        user = GoogleToken("vertex/x", str(fake.authorized_user_file(tmp_path / "adc.json")))
        assert user.fetch()[0] == fake.issued[-1]


def test_a_refused_key_names_the_endpoint_and_status_never_a_secret(tmp_path):
    with FakeGoogleOAuth() as fake:
        forged = FakeGoogleOAuth().service_account_file(tmp_path / "forged.json")
        info = json.loads(forged.read_text())
        info["token_uri"] = fake.token_uri
        forged.write_text(json.dumps(info))
        token = GoogleToken("vertex/x", str(forged))
        with pytest.raises(InferenceError) as caught:
            token.fetch()
        message = str(caught.value)
        assert fake.token_uri in message and "HTTP 400" in message and "invalid_grant" in message
        assert "PRIVATE" not in message and token.assertion().split(".")[0] not in message
        assert not caught.value.retryable
        assert "PRIVATE" not in repr(token)


@pytest.mark.parametrize("content,field", [("{", "not JSON"), ('{"type": "impersonated_service_account"}', "'type'"),
                                           ('{"type": "external_account"}', "'audience'"),
                                           ('{"type": "service_account", "client_email": "a@b"}', "'private_key'"),
                                           ('{"type": "service_account", "client_email": "a@b", "private_key": "x"}',
                                            "not a PEM")])
def test_a_bad_key_file_is_one_line_naming_the_file_and_field(tmp_path, content, field):
    path = tmp_path / "sa.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        GoogleToken("vertex/x", str(path))
    assert field in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_vertex_deployment_uses_google_application_credentials(tmp_path, monkeypatch):
    with FakeGoogleOAuth(access_token="ya29.issued-by-fake") as oauth, \
            FakeGemini(platform="vertex", bearer="ya29.issued-by-fake") as gemini:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(oauth.service_account_file(tmp_path / "sa.json")))
        dep = Deployment(name="google/gemini-vertex", model_name="google/gemini-2.0-flash-001", kind="gemini",
                         base_url=gemini.base_url, served_model_name="gemini-2.0-flash-001",
                         options={"platform": "vertex", "project": "hospital-proj", "region": "us-central1"})

        async def go():
            client = make_client(dep)
            try:
                one = await client.generate(GenerationRequest((Message("user", "Is aspirin an NSAID?"),),
                                                              max_tokens=8))
                await client.generate(GenerationRequest((Message("user", "Again?"),), max_tokens=8))
            finally:
                await client.aclose()
            return one

        assert asyncio.run(go()).text
        assert len(oauth.issued) == 1 and len(gemini.requests) == 2
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
        with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS"):
            make_client(dep)


def test_planning_names_the_missing_google_credential(monkeypatch):
    from medhelm.deployments import check_usable

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    dep = Deployment(name="google/medlm-medium", model_name="google/medlm-medium", kind="vertex_text",
                     options={"project": "p", "region": "us-central1"})
    with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS"):
        check_usable(dep)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/var/run/secrets/gcp/key.json")
    check_usable(dep)
