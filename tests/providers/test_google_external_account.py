"""Workload identity federation (``external_account`` credential files) in Google ADC (inference/google_adc.py):
google-auth's own ``identity_pool.Credentials`` is the oracle. The fake STS / IAM Credentials endpoints
(devtools/fakes/google_sts.py) are proven by google-auth refreshing against them, then what medhelm sends for
the same file is compared with what google-auth sent: the token exchange's form and client authentication, and
the impersonation's JSON body, for a subject token from a file (text) and from a URL (JSON), with and without
impersonation, a workforce pool's userProject. A source medhelm does not read is refused in one line naming the
file and the field."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.fakes.gemini import FakeGemini
from medhelm.devtools.fakes.google_sts import AUDIENCE, FakeGoogleSTS
from medhelm.errors import ConfigError, InferenceError
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.inference.google_adc import SCOPE, GoogleToken
from medhelm.scrub import scrub
from medhelm.specs import GenerationRequest, Message

JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
CLIENT = ("hospital-client-id", "hospital-client-secret")


def _file(tmp_path, sts, *, source, impersonate=False, client=False, workforce=False, name="wif.json"):
    info = {"type": "external_account", "audience": AUDIENCE, "subject_token_type": JWT_TYPE,
            "token_url": sts.token_url, "credential_source": source}
    if impersonate:
        info["service_account_impersonation_url"] = sts.impersonation_url()
        info["service_account_impersonation"] = {"token_lifetime_seconds": 1800}
    if client:
        info["client_id"], info["client_secret"] = CLIENT
    if workforce:
        info["audience"] = "//iam.googleapis.com/locations/global/workforcePools/hospital-staff/providers/oidc"
        info["workforce_pool_user_project"] = "hospital-proj"
    path = tmp_path / name
    path.write_text(json.dumps(info))
    return path


def _google_auth(path):
    identity_pool = pytest.importorskip("google.auth.identity_pool")
    from google.auth.transport.requests import Request

    creds = identity_pool.Credentials.from_file(str(path), scopes=[SCOPE])
    creds.refresh(Request())
    return creds.token


def _ours(path):
    token = GoogleToken("vertex/gemini", str(path))
    return asyncio.run(token.headers())["Authorization"].removeprefix("Bearer "), token


def _sent(sts, since_exchange, since_impersonation):
    exchanges = [{"form": e["form"], "auth": e["headers"].get("authorization"),
                  "type": e["headers"].get("content-type")} for e in sts.exchanges[since_exchange:]]
    impersonations = [{"body": i["body"], "path": i["path"], "type": i["headers"].get("content-type")}
                      for i in sts.impersonations[since_impersonation:]]
    return exchanges, impersonations


CASES = {
    "file-text": dict(source_kind="file"),
    "url-json-impersonated-client": dict(source_kind="url", impersonate=True, client=True),
    "file-impersonated": dict(source_kind="file", impersonate=True),
    "workforce": dict(source_kind="file", workforce=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_medhelm_sends_what_google_auth_sends(tmp_path, case):
    spec = dict(CASES[case])
    kind = spec.pop("source_kind")
    client = CLIENT if spec.get("client") else None
    with FakeGoogleSTS(client=client) as sts:
        if spec.get("workforce"):
            sts.audience = "//iam.googleapis.com/locations/global/workforcePools/hospital-staff/providers/oidc"
        if kind == "file":
            (tmp_path / "subject").write_text(sts.subject_token)  # as the kubelet projects it: no newline
            source = {"file": str(tmp_path / "subject")}
        else:
            source = {"url": sts.base_url + "/subject?format=json", "headers": {"Metadata": "True"},
                      "format": {"type": "json", "subject_token_field_name": "access_token"}}
        path = _file(tmp_path, sts, source=source, **spec)
        theirs = _google_auth(path)
        assert theirs in (sts.impersonated if spec.get("impersonate") else sts.sts_tokens)  # the fake, proven
        helm_sent = _sent(sts, 0, 0)
        ours, token = _ours(path)
        our_sent = _sent(sts, len(helm_sent[0]), len(helm_sent[1]))
    assert ours in (sts.impersonated if spec.get("impersonate") else sts.sts_tokens) and ours != theirs
    assert our_sent == helm_sent and len(our_sent[0]) == 1
    assert len(our_sent[1]) == (1 if spec.get("impersonate") else 0)
    assert token.fetches == 1
    assert ours not in scrub(f"token {ours}") and sts.subject_token not in scrub(f"subject {sts.subject_token}")


def test_a_refusal_names_the_endpoint_and_the_code_never_the_tokens(tmp_path):
    with FakeGoogleSTS() as sts:
        (tmp_path / "subject").write_text("a-token-the-pool-does-not-trust")
        path = _file(tmp_path, sts, source={"file": str(tmp_path / "subject")})
        with pytest.raises(InferenceError) as err:
            _ours(path)
        assert "HTTP 400: invalid_grant" in str(err.value) and not err.value.retryable
        assert "a-token-the-pool-does-not-trust" not in str(err.value)
        (tmp_path / "subject").write_text(sts.subject_token)
        other = _file(tmp_path, sts, source={"file": str(tmp_path / "subject")}, impersonate=True, name="o.json")
        info = json.loads(other.read_text())
        info["service_account_impersonation_url"] = sts.impersonation_url("someone-else@other.iam.gserviceaccount.com")
        other.write_text(json.dumps(info))
        with pytest.raises(InferenceError, match="HTTP 403: PERMISSION_DENIED"):
            _ours(other)


@pytest.mark.parametrize("source,field", [
    ({"environment_id": "aws1", "region_url": "http://169.254.169.254/region"}, "credential_source.environment_id"),
    ({"executable": {"command": "/usr/bin/get-token"}}, "credential_source.executable"),
    ({"format": {"type": "text"}}, "credential_source"),
    ({"file": "/var/run/token", "format": {"type": "json"}}, "credential_source.format.subject_token_field_name"),
])
def test_a_source_medhelm_does_not_read_is_one_line_naming_the_file_and_field(tmp_path, source, field):
    path = tmp_path / "wif.json"
    path.write_text(json.dumps({"type": "external_account", "audience": AUDIENCE, "subject_token_type": JWT_TYPE,
                                "token_url": "https://sts.googleapis.com/v1/token", "credential_source": source}))
    with pytest.raises(ConfigError) as err:
        GoogleToken("vertex/gemini", str(path))
    text = str(err.value)
    assert f"'{field}'" in text and "wif.json" in text and "\n" not in text


def test_a_helm_vertex_entry_runs_on_a_federated_identity(tmp_path, monkeypatch):
    """HELM's VertexAIChatClient entry with GOOGLE_APPLICATION_CREDENTIALS naming an external_account file (a
    Kubernetes service account's projected token, impersonating the evaluation's service account): the Gemini
    fake on Vertex gets that account's token, one exchange for every request of the run."""
    entry = {"name": "google/gemini-2.0-flash-001", "model_name": "google/gemini-2.0-flash-001",
             "client_spec": {"class_name": "helm.clients.vertexai_client.VertexAIChatClient"}}
    (tmp_path / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [entry]}))
    (tmp_path / "credentials.conf").write_text('googleProjectId: "hospital-proj"\ngoogleLocation: "us-central1"\n')
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    with FakeGoogleSTS(access_token="ya29.federated-eval") as sts, \
            FakeGemini(platform="vertex", bearer="ya29.federated-eval") as gemini:
        (tmp_path / "subject").write_text(sts.subject_token)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(
            _file(tmp_path, sts, source={"file": str(tmp_path / "subject")}, impersonate=True)))
        monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", gemini.base_url)
        pool = ClientPool(retry=RetryPolicy(max_attempts=1))
        client = pool.get(DeploymentRegistry.load(tmp_path).get(entry["name"]))
        questions = ("Is aspirin an NSAID? yes or no", "Is ibuprofen an NSAID? yes or no")

        async def run():
            try:
                return await asyncio.gather(*(client.generate(GenerationRequest((Message("user", q),), max_tokens=8))
                                              for q in questions))
            finally:
                await pool.aclose()

        answers = asyncio.run(run())
    assert all(a.text in ("Yes", "No") for a in answers)
    assert len(gemini.requests) == 2 and len(sts.exchanges) == 1 and len(sts.impersonations) == 1
