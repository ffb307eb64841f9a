"""Azure OpenAI chat completions (kind ``azure_openai``): the OpenAI client with Azure's URL layout and
either an ``api-key`` or a Microsoft Entra ID token.

``base_url`` is the resource endpoint (``https://<resource>.openai.azure.com``, or a gateway's base path);
requests go to ``<base_url>/openai/deployments/<served_model_name>/chat/completions?api-version=<v>``
(``options.api_version``, default ``2024-10-21``). Authentication (``options.auth``):

* ``api_key`` (the default when ``api_key_env`` is set, or a HELM entry names the key in credentials.conf):
  the key in the ``api-key`` header;
* ``none``: no provider credential (an API gateway in front authenticates: its subscription key, ``gateway.py``);
* ``entra``: a bearer token from ``entra.py`` (client secret, AKS workload identity or managed identity,
  from the standard ``AZURE_*`` variables), refreshed 5 minutes before it expires; ``options.entra_scope``
  (default ``https://cognitiveservices.azure.com/.default``).

Plus the gateway options (``native.py``). Failure semantics: ``openai.py``'s (429 and 5xx retried, honouring
``retry-after-ms`` then ``Retry-After``); a 401 with an Entra token drops the token and is retried once
more with a fresh one; Azure's content filter (``finish_reason: content_filter``) is a completion, and its
400 ``content_filter`` refusal of a prompt an error of that instance only.
"""

from __future__ import annotations

import dataclasses
import urllib.parse

from medhelm.errors import ConfigError
from medhelm.inference.entra import DEFAULT_SCOPE, EntraToken
from medhelm.inference.openai import OpenAIClient
from medhelm.specs import Deployment, FrozenMap

DEFAULT_API_VERSION = "2024-10-21"


class AzureOpenAIClient(OpenAIClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        # a key from api_key_env, or (a HELM prod_env entry) the credentials.conf entry options.credentials names
        keyed = bool(deployment.api_key_env) or _credential_key(deployment)
        auth = str(deployment.options.get("auth") or ("api_key" if keyed else "entra"))
        if auth not in ("api_key", "entra", "none"):
            raise ConfigError(f"deployment '{deployment.name}': options.auth must be api_key, entra or none")
        if auth == "api_key" and not keyed:
            raise ConfigError(f"deployment '{deployment.name}': options.auth api_key needs api_key_env")
        name = deployment.served_model_name or deployment.model_name
        options = dict(deployment.options)
        options.setdefault("api_version", DEFAULT_API_VERSION)
        if auth == "api_key":
            options.setdefault("auth_header", "api-key")
        base = f"{str(deployment.base_url).rstrip('/')}/openai/deployments/{urllib.parse.quote(name, safe='')}"
        inner = dataclasses.replace(deployment, base_url=base, api_key_env=deployment.api_key_env if auth == "api_key"
                                    else None, options=FrozenMap(options))
        super().__init__(inner, connections=connections)
        self._deployment = deployment  # the user's, for names in errors and the pool's identity
        if auth == "entra":
            self._auth = EntraToken(deployment.name, str(deployment.options.get("entra_scope") or DEFAULT_SCOPE),
                                    ca_bundle=deployment.options.get("ca_bundle"))


def _credential_key(deployment: Deployment) -> bool:
    reference = deployment.options.get("credentials")
    return bool(reference) and str(reference.get("as") or "api_key") == "api_key"
