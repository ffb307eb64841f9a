"""The API-gateway options (inference/gateway.py) on native and OpenAI-compatible kinds: a subscription key in its
own header, a base path, a route given as the whole URL with its key from HELM's credentials.conf."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.errors import ConfigError
from medhelm.inference import make_client
from medhelm.specs import Deployment
from tests.providers.conftest import KEYS, generate, make_fake, native_deployment, short_request


def test_gateway_subscription_key_and_base_path(keys):
    """An API gateway in front of Anthropic: its key in Ocp-Apim-Subscription-Key, its own base path."""
    with make_fake("anthropic") as srv:
        dep = native_deployment("anthropic", srv.base_url, subscription_key_env="GATEWAY_TEST_KEY")
        asyncio.run(generate(dep, short_request()))
        assert srv.requests[-1]["headers"]["ocp-apim-subscription-key"] == KEYS["GATEWAY_TEST_KEY"]
    with make_fake("azure_openai") as srv:  # and on the openai kind, with another header name
        dep = Deployment(name="gw/openai", model_name="m", kind="openai", base_url=srv.base_url +
                         "/openai/deployments/gpt-test", api_key_env="AZURE_TEST_KEY",
                         options={"api_version": "2024-10-21", "auth_header": "api-key",
                                  "subscription_key_env": "GATEWAY_TEST_KEY", "subscription_key_header": "x-gw-key"})
        completion, _ = asyncio.run(generate(dep, short_request("ten")))
        assert completion.text == "ten" and srv.requests[-1]["headers"]["x-gw-key"] == KEYS["GATEWAY_TEST_KEY"]
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        make_client(native_deployment("gemini", "http://127.0.0.1:9", subscription_key_env="NOT_SET_ANYWHERE"))


def test_a_gateway_route_as_the_whole_url_with_keys_from_credentials_conf(keys, tmp_path, monkeypatch):
    """A HELM prod_env entry behind a gateway (helm_env.py's translation): the subscription key from
    credentials.conf, the route as the whole URL (``api_path: ""``)."""
    (tmp_path / "credentials.conf").write_text('gatewayApiKey: "apim-from-credentials"\n')
    with make_fake("anthropic", api_key="sk-direct") as srv:
        monkeypatch.setenv("ANTHROPIC_TEST_KEY", "sk-direct")
        dep = native_deployment("anthropic", srv.base_url + "/v1/messages", api_path="",
                          credentials={"source": str(tmp_path / "credentials.conf"), "name": "gatewayApiKey",
                                       "as": "subscription_key"})
        completion, _ = asyncio.run(generate(dep, short_request("route ok")))
        assert completion.text == "route ok"
        assert srv.requests[-1]["headers"]["ocp-apim-subscription-key"] == "apim-from-credentials"
