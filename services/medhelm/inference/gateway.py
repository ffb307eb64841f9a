"""The API-gateway pattern and secrets from the environment, for every HTTP kind (openai and the native ones).

API gateways (Azure API Management, Apigee, Kong) in front of a provider:

* ``base_url`` may carry the gateway's own base path (``https://gw.hospital.org/llm/anthropic``);
* ``options.subscription_key_env`` — NAME of the variable holding the gateway's key, sent in the header
  ``options.subscription_key_header`` (default ``Ocp-Apim-Subscription-Key``) in addition to the provider's
  own credentials (which the gateway may check or replace);
* ``options.headers`` — other, non-secret headers;
* from a HELM prod_env (``helm_env.py``): ``options.credentials`` names the credentials.conf entry holding the
  gateway's key (``as: subscription_key``), read when the client is made.

Failure semantics: a variable that is not set is a ``ConfigError`` naming it, raised when the client is made
(at planning); a value is never part of a message.
"""

from __future__ import annotations

import os

from medhelm import credentials
from medhelm.errors import ConfigError
from medhelm.specs import Deployment

DEFAULT_SUBSCRIPTION_HEADER = "Ocp-Apim-Subscription-Key"


def env_secret(deployment: Deployment, variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(f"environment variable {variable} is not set ({what} of deployment '{deployment.name}')")
    return value


def gateway_headers(deployment: Deployment) -> dict[str, str]:
    """The gateway subscription key header (when ``options.subscription_key_env`` is set) plus the
    deployment's non-secret ``options.headers``."""
    headers = {str(k): str(v) for k, v in (deployment.options.get("headers") or {}).items()}
    name = str(deployment.options.get("subscription_key_header") or DEFAULT_SUBSCRIPTION_HEADER)
    variable = deployment.options.get("subscription_key_env")
    if variable:
        headers[name] = env_secret(deployment, str(variable), "options.subscription_key_env")
    else:  # a HELM prod_env entry: the gateway key named in credentials.conf (credentials.py), read now
        key = credentials.deployment_secret(deployment.options, "subscription_key", deployment=deployment.name)
        if key:
            headers[name] = key
    return headers
