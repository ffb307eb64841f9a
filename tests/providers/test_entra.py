"""Microsoft Entra ID tokens (inference/entra.py) against the Entra endpoints of the Azure fake
(devtools/fakes/azure_openai.py), which ``azure-identity`` itself is driven against first (client secret,
workload identity over https, managed identity, IMDS): refresh before expiry, one fetch for concurrent
requests, refusals named without the secret."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference.entra import EntraToken
from tests.providers.conftest import entra_env, make_fake


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


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_entra_token_is_refreshed_before_it_expires():
    with make_fake("azure_openai", api_key=None, token_lifetime_s=3600) as srv:
        clock = Clock()
        token = EntraToken("azure/x", env=entra_env(srv, AZURE_CLIENT_SECRET=srv.client_secret), clock=clock)

        async def run() -> list[str]:
            got = [(await token.headers())["Authorization"]]
            clock.now += 3600 - 301  # more than 5 minutes left: the same token
            got.append((await token.headers())["Authorization"])
            clock.now += 2  # within 5 minutes of expiry: a fresh one, before the old one expires
            got.append((await token.headers())["Authorization"])
            return got

        first, same, fresh = asyncio.run(run())
    assert first == same != fresh and token.fetches == 2 and token.method == "client_secret"


def test_entra_concurrent_requests_share_one_fetch():
    with make_fake("azure_openai", api_key=None) as srv:
        token = EntraToken("azure/x", env=entra_env(srv, AZURE_CLIENT_SECRET=srv.client_secret))

        async def run():
            return await asyncio.gather(*(token.headers() for _ in range(20)))

        assert len({h["Authorization"] for h in asyncio.run(run())}) == 1 and token.fetches == 1


def test_entra_managed_identity_and_a_wrong_secret():
    with make_fake("azure_openai", api_key=None, identity_header="hdr") as srv:
        token = EntraToken("azure/mi", env={"IDENTITY_ENDPOINT": srv.base_url + "/msi/token", "IDENTITY_HEADER": "hdr"})
        header = asyncio.run(token.headers())["Authorization"]
        assert token.method == "managed_identity" and header[7:] in srv.tokens
        bad = EntraToken("azure/x", env=entra_env(srv, AZURE_CLIENT_SECRET="wrong-secret"))
        with pytest.raises(InferenceError) as err:
            asyncio.run(bad.headers())
        assert "invalid_client" in str(err.value) and "AADSTS7000215" in str(err.value)
        assert "wrong-secret" not in str(err.value) and not err.value.retryable
    with pytest.raises(ConfigError, match="AZURE_TENANT_ID"):
        EntraToken("azure/x", env={"AZURE_CLIENT_SECRET": "s", "AZURE_CLIENT_ID": "c"})


def test_entra_managed_identity_through_imds():
    with make_fake("azure_openai", api_key=None) as srv:
        token = EntraToken("azure/imds", env={"AZURE_POD_IDENTITY_AUTHORITY_HOST": srv.base_url})
        header = asyncio.run(token.headers())["Authorization"]
    assert header[7:] in srv.tokens
    assert srv.token_requests[-1] == {"api-version": "2018-02-01", "resource": "https://cognitiveservices.azure.com"}
