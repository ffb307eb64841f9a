"""The API-gateway pattern and secrets from the environment, for every HTTP kind (openai and the native ones).

API gateways (Azure API Management, Apigee, Kong) in front of a provider:

* ``base_url`` may carry the gateway's own base path (``https://gw.hospital.org/llm/anthropic``);
* ``options.subscription_key_env`` — NAME of the variable holding the gateway's key, sent in the header
  ``options.subscription_key_header`` (default ``Ocp-Apim-Subscription-Key``) in addition to the provider's
  own credentials (which the gateway may check or replace);
* ``options.headers`` — other, non-secret headers;
* ``options.api_path`` — the path the native kinds append to ``base_url`` instead of their API's own
  (``""``: the gateway's route is the whole URL, as Stanford Health Care's routes are).

A HELM prod_env entry (``helm_env.py``) names its keys in ``credentials.conf`` instead of a variable
(``options.credentials``, ``as: api_key | subscription_key``); ``api_key`` and ``gateway_headers`` read
either.

Failure semantics: a variable that is not set is a ``ConfigError`` naming it, raised when the client is made
(at planning); a value is never part of a message.
"""

from __future__ import annotations


from medhelm import credentials, files
from medhelm.errors import ConfigError
from medhelm.specs import Deployment

DEFAULT_SUBSCRIPTION_HEADER = "Ocp-Apim-Subscription-Key"


def env_secret(deployment: Deployment, variable: str, what: str) -> str:
    """``$variable``, else the file ``$variable_FILE`` names (files.env_secret: the chart mounts keys as files)."""
    value = files.env_secret(variable)
    if not value:
        raise ConfigError(f"environment variable {variable} is not set, nor {variable}_FILE ({what} of deployment "
                          f"'{deployment.name}')")
    return value


def gateway_headers(deployment: Deployment) -> dict[str, str]:
    """The gateway subscription key header (when ``options.subscription_key_env`` is set) plus the
    deployment's non-secret ``options.headers``."""
    headers = {str(k): str(v) for k, v in (deployment.options.get("headers") or {}).items()}
    variable = deployment.options.get("subscription_key_env")
    key = credentials.deployment_secret(deployment.options, "subscription_key", deployment=deployment.name)
    if variable:
        key = env_secret(deployment, str(variable), "options.subscription_key_env")
    if key:
        headers[str(deployment.options.get("subscription_key_header") or DEFAULT_SUBSCRIPTION_HEADER)] = key
    return headers


def api_key(deployment: Deployment) -> str | None:
    """The provider key: from the variable ``api_key_env`` names, else from credentials.conf (a HELM entry),
    else None (the kind authenticates otherwise, or the gateway does)."""
    if deployment.api_key_env:
        return env_secret(deployment, deployment.api_key_env, "api_key_env")
    return credentials.deployment_secret(deployment.options, "api_key", deployment=deployment.name)


def api_url(deployment: Deployment, base: str, path: str) -> str:
    """``base`` + the API's ``path``, or + ``options.api_path`` when the deployment sets one (a gateway route)."""
    override = deployment.options.get("api_path")
    return base.rstrip("/") + (str(override) if override is not None else path)
