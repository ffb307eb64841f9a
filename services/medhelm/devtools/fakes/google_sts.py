"""A fake of Google's workload identity federation endpoints, for ``external_account`` credential files, as
their references specify them (field by field in each handler's comment):

* Security Token Service ``POST /v1/token`` (RFC 8693 token exchange): ``audience`` (the pool provider this
  fake was made for), ``subject_token`` (the one it trusts), the token types, ``scope``, ``options``
  (``userProject``, a workforce pool), ``Authorization: Basic`` with a ``client_id``. Refused as STS refuses
  (400 ``invalid_grant``/``invalid_request``/``unsupported_grant_type``, 401 ``invalid_client``); reply
  ``{"access_token", "issued_token_type", "token_type", "expires_in"}``.
* IAM Credentials ``...:generateAccessToken`` (service account impersonation) with an STS token this fake
  issued: reply ``{"accessToken", "expireTime"}``; 403 ``PERMISSION_DENIED`` for an unknown account.
* A subject token source ``GET /subject`` (text, or JSON with ``?format=json``; 401 without the
  ``Metadata: True`` header).

``exchanges`` and ``impersonations`` keep what was sent, so a test compares google-auth's requests with ours."""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.parse
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, json_reply as _json

EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
AUDIENCE = ("//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/hospital-pool/"
            "providers/hospital-oidc")
SUBJECT_TYPES = ("urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token",
                 "urn:ietf:params:oauth:token-type:saml2")


class FakeGoogleSTS(FakeServer):
    name = "google_sts"

    def __init__(self, *args: Any, subject_token: str = "eyJhbGciOiJSUzI1NiJ9.subject.signature",
                 audience: str = AUDIENCE, client: tuple[str, str] | None = None,
                 service_account: str = "medhelm-eval@hospital-proj.iam.gserviceaccount.com",
                 lifetime_s: int = 3600, access_token: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subject_token, self.audience, self.client = subject_token, audience, client
        self.service_account, self.lifetime_s = service_account, lifetime_s
        self.access_token = access_token  # the service account's token when given (a model fake requires it)
        self.sts_tokens: list[str] = []
        self.impersonated: list[str] = []
        self.exchanges: list[dict[str, Any]] = []  # {"form", "headers"}
        self.impersonations: list[dict[str, Any]] = []  # {"body", "headers", "path"}

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/v1/token"

    def impersonation_url(self, email: str | None = None) -> str:
        return f"{self.base_url}/v1/projects/-/serviceAccounts/{email or self.service_account}:generateAccessToken"

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if method == "GET" and path == "/subject":
            if headers.get("metadata", "").lower() != "true":
                return _json(401, {"error": "missing Metadata header"})
            if "format=json" in query:
                return _json(200, {"access_token": self.subject_token, "token_type": "Bearer"})
            return 200, {"Content-Type": "text/plain"}, self.subject_token.encode()
        if method != "POST":
            return _json(405, {"error": "method_not_allowed"})
        if path == "/v1/token":
            return self._exchange(headers, body)
        if path.startswith("/v1/projects/-/serviceAccounts/") and path.endswith(":generateAccessToken"):
            return self._impersonate(path, headers, body)
        return _json(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})

    def _exchange(self, headers: dict[str, str], body: bytes) -> Reply:
        if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return _json(400, {"error": "invalid_request", "error_description": "Content-Type must be a form"})
        form = dict(urllib.parse.parse_qsl(body.decode("ascii"), keep_blank_values=True))
        self.exchanges.append({"form": form, "headers": headers})
        if self.client is not None:
            want = "Basic " + base64.b64encode(f"{self.client[0]}:{self.client[1]}".encode()).decode()
            if headers.get("authorization") != want:
                return _json(401, {"error": "invalid_client", "error_description": "The client is unknown."})
        if form.get("grant_type") != EXCHANGE:
            return _json(400, {"error": "unsupported_grant_type",
                               "error_description": f"Unsupported grant type: {form.get('grant_type', '')[:80]}"})
        if form.get("requested_token_type") != ACCESS_TOKEN_TYPE:
            return _json(400, {"error": "invalid_request", "error_description": "Invalid requested_token_type."})
        if form.get("subject_token_type") not in SUBJECT_TYPES:
            return _json(400, {"error": "invalid_request", "error_description": "Invalid subject_token_type."})
        if form.get("audience") != self.audience:
            return _json(400, {"error": "invalid_target", "error_description": "The target service indicated "
                                                                               "by the audience is invalid."})
        if form.get("subject_token") != self.subject_token:
            return _json(400, {"error": "invalid_grant", "error_description": "The subject token is invalid."})
        if not form.get("scope"):
            return _json(400, {"error": "invalid_scope", "error_description": "A scope is required."})
        if "options" in form:
            try:
                json.loads(urllib.parse.unquote(form["options"]))
            except ValueError:
                return _json(400, {"error": "invalid_request", "error_description": "Invalid options."})
        token = "ya29.sts-" + secrets.token_urlsafe(12)
        self.sts_tokens.append(token)
        return _json(200, {"access_token": token, "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer",
                           "expires_in": self.lifetime_s})

    def _impersonate(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        self.impersonations.append({"path": path, "headers": headers, "body": data})
        auth = headers.get("authorization", "")
        if not auth.startswith("Bearer ") or auth[len("Bearer "):] not in self.sts_tokens:
            return _json(401, {"error": {"code": 401, "message": "Request had invalid authentication credentials.",
                                         "status": "UNAUTHENTICATED"}})
        email = urllib.parse.unquote(path.split("/serviceAccounts/", 1)[1].rsplit(":", 1)[0])
        if email != self.service_account:
            return _json(403, {"error": {"code": 403, "message": "Permission 'iam.serviceAccounts.getAccessToken' "
                                         "denied", "status": "PERMISSION_DENIED"}})
        scope = data.get("scope") if isinstance(data, dict) else None
        lifetime = data.get("lifetime", "3600s") if isinstance(data, dict) else None
        if not (isinstance(scope, list) and scope and isinstance(lifetime, str) and lifetime.endswith("s")):
            return _json(400, {"error": {"code": 400, "message": "Invalid scope or lifetime",
                                         "status": "INVALID_ARGUMENT"}})
        seconds = int(float(lifetime[:-1]))
        token = self.access_token or "ya29.impersonated-" + secrets.token_urlsafe(12)
        self.impersonated.append(token)
        expire = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
        return _json(200, {"accessToken": token, "expireTime": expire})
