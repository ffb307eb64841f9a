"""Microsoft Entra ID access tokens for Azure OpenAI, refreshed before they expire.

Three ways to get a token, chosen from the standard Azure environment variables in the order of
azure-identity's ``EnvironmentCredential`` -> ``WorkloadIdentityCredential`` -> ``ManagedIdentityCredential``:

* client credentials: ``AZURE_TENANT_ID``, ``AZURE_CLIENT_ID``, ``AZURE_CLIENT_SECRET`` -> a form POST
  ``grant_type=client_credentials`` to ``<AZURE_AUTHORITY_HOST>/<tenant>/oauth2/v2.0/token``;
* workload identity (AKS): ``AZURE_TENANT_ID``, ``AZURE_CLIENT_ID``, ``AZURE_FEDERATED_TOKEN_FILE`` -> the
  same POST with the projected service-account token as ``client_assertion`` (the file is read again at
  every refresh: the kubelet rotates it);
* managed identity: ``IDENTITY_ENDPOINT`` + ``IDENTITY_HEADER`` (App Service, Arc, Container Apps), else
  the VM/AKS node's IMDS at 169.254.169.254 (``Metadata: true``; ``AZURE_POD_IDENTITY_AUTHORITY_HOST``
  moves it, as in azure-identity); ``AZURE_CLIENT_ID`` picks a user-assigned identity.

Why our own and not azure-identity: the three flows are one HTTP request each (an OAuth2 form POST or a
GET); azure-identity would bring msal, requests and cryptography, and their import time, into every run that
uses an Azure deployment (docs/benchmarks.md, "Native provider clients"). The test suite drives our fake token
endpoint with azure-identity itself (``tests/providers``), so both speak the same protocol.

Refresh: a token is reused until ``refresh_margin_s`` (5 min) before it expires, then fetched again under a
lock (one fetch for all requests waiting). A 401 from Azure OpenAI drops the token (``invalidate``) so the
retry fetches a fresh one. Token requests are rare (about hourly): they run in a worker thread with urllib,
off the event loop (``oauth_token.TokenCache`` and ``request_token``, shared with Google ADC). Failure semantics: a missing variable is a ``ConfigError`` naming it; a refused or
unreachable token endpoint is an ``InferenceError`` (retryable for 429/5xx/unreachable) naming the
endpoint and Entra's error code (``invalid_client``, ``AADSTS...``), never a secret or a token. The client
secret, the identity header, the federated assertion and every token fetched are registered with
``scrub`` as they are read.
"""

from __future__ import annotations

import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference.oauth_token import TokenCache, request_token
from medhelm.scrub import register

DEFAULT_SCOPE = "https://cognitiveservices.azure.com/.default"
DEFAULT_AUTHORITY = "https://login.microsoftonline.com"
IMDS_HOST = "http://169.254.169.254"
IMDS_PATH = "/metadata/identity/oauth2/token"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class EntraToken(TokenCache):
    def __init__(self, name: str, scope: str = DEFAULT_SCOPE, *, env: Mapping[str, str] | None = None,
                 refresh_margin_s: float = 300.0, clock: Callable[[], float] = time.time,
                 timeout_s: float = 30.0, ca_bundle: str | None = None) -> None:
        self._name, self._scope, self._clock = name, scope, clock
        self._env = dict(os.environ if env is None else env)
        for secret in ("AZURE_CLIENT_SECRET", "IDENTITY_HEADER"):  # scrubbed from every text from now on
            register(self._env.get(secret), slot=f"entra:{secret}")
        self._timeout = timeout_s
        self._ca = ca_bundle
        self.method = self._method()  # checked now: a missing variable fails at planning, not mid-run
        super().__init__(self._fetch, refresh_margin_s=refresh_margin_s, clock=clock)
        self.fetches = 0  # token requests made (tests, telemetry)

    def _method(self) -> str:
        env = self._env
        if env.get("AZURE_CLIENT_SECRET"):
            self._require("AZURE_TENANT_ID", "AZURE_CLIENT_ID")
            return "client_secret"
        if env.get("AZURE_FEDERATED_TOKEN_FILE"):
            self._require("AZURE_TENANT_ID", "AZURE_CLIENT_ID")
            return "workload_identity"
        return "managed_identity"

    def _require(self, *names: str) -> None:
        for n in names:
            if not self._env.get(n):
                raise ConfigError(f"environment variable {n} is not set (Entra ID sign-in of deployment "
                                  f"'{self._name}')")

    # -- one token request -------------------------------------------------------------------------------
    def _fetch(self) -> tuple[str, float]:
        self.fetches += 1
        env = self._env
        if self.method == "managed_identity":
            resource = self._scope.removesuffix("/.default")
            endpoint, secret = env.get("IDENTITY_ENDPOINT"), env.get("IDENTITY_HEADER")
            if endpoint and secret:
                query = {"api-version": "2019-08-01", "resource": resource}
                headers = {"X-IDENTITY-HEADER": secret}
            else:
                host = (env.get("AZURE_POD_IDENTITY_AUTHORITY_HOST") or IMDS_HOST).rstrip("/")
                endpoint = host + IMDS_PATH
                query, headers = {"api-version": "2018-02-01", "resource": resource}, {"Metadata": "true"}
            if env.get("AZURE_CLIENT_ID"):
                query["client_id"] = env["AZURE_CLIENT_ID"]
            url = endpoint + ("&" if "?" in endpoint else "?") + urllib.parse.urlencode(query)
            return self._send(urllib.request.Request(url, headers=headers), endpoint, proxy=False)
        authority = (env.get("AZURE_AUTHORITY_HOST") or DEFAULT_AUTHORITY).rstrip("/")
        if not authority.startswith(("https://", "http://")):
            authority = "https://" + authority
        url = f"{authority}/{urllib.parse.quote(env['AZURE_TENANT_ID'], safe='')}/oauth2/v2.0/token"
        form = {"grant_type": "client_credentials", "client_id": env["AZURE_CLIENT_ID"], "scope": self._scope}
        if self.method == "client_secret":
            form["client_secret"] = env["AZURE_CLIENT_SECRET"]
        else:
            path = env["AZURE_FEDERATED_TOKEN_FILE"]
            try:
                with open(path, encoding="utf-8") as f:
                    assertion = f.read().strip()
                register(assertion, slot="entra:assertion")  # the kubelet rotates it
            except OSError as err:
                raise InferenceError(f"deployment '{self._name}': cannot read AZURE_FEDERATED_TOKEN_FILE "
                                     f"{path} ({err.strerror})", retryable=False) from None
            form.update(client_assertion_type=ASSERTION_TYPE, client_assertion=assertion)
        request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode("ascii"),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        return self._send(request, url, proxy=True)

    def _send(self, request: urllib.request.Request, where: str, *, proxy: bool) -> tuple[str, float]:
        import ssl

        handlers: list[urllib.request.BaseHandler] = []
        if not proxy:  # the identity endpoint is local (IMDS, a sidecar): never through a forward proxy
            handlers.append(urllib.request.ProxyHandler({}))
        if self._ca:
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=self._ca)))
        opener = urllib.request.build_opener(*handlers)
        token, data = request_token(request, f"deployment '{self._name}': Entra ID token request to {where}",
                                    slot=f"entra:token:{self._name}", timeout_s=self._timeout, opener=opener,
                                    describe=_entra_error)
        return token, _lifetime(data, self._clock())


def _entra_error(body: dict) -> str:
    """Entra's ``error`` and its first ``AADSTS`` code."""
    codes = body.get("error_codes")
    return f"{body['error']}" + (f" (AADSTS{codes[0]})" if isinstance(codes, list) and codes else "")


def _lifetime(data: dict, now: float) -> float:
    """Seconds the token stays valid: ``expires_in`` (Entra, IMDS; a number or a string), else
    ``expires_on`` (App Service: epoch seconds) minus now; 300 s when neither says (refetched soon)."""
    for key in ("expires_in",):
        try:
            return max(float(data[key]), 0.0)
        except (KeyError, TypeError, ValueError):
            pass
    try:
        return max(float(data["expires_on"]) - now, 0.0)
    except (KeyError, TypeError, ValueError):
        return 300.0
