"""A fake of Google's OAuth 2.0 token endpoint (``POST https://oauth2.googleapis.com/token``), as Google's
"Using OAuth 2.0 for server to server applications" and RFC 7523 specify it, for service-account keys and
``authorized_user`` refresh tokens.

* ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` + ``assertion``: a JWT signed RS256 by a key this
  fake issued (``service_account_file``), ``iss`` its client email, ``aud`` Google's token endpoint
  ``https://oauth2.googleapis.com/token`` (the audience google-auth signs, whatever URL it posts to), ``scope``
  set, ``exp`` at most 3600 s after ``iat``, not expired, ``iat`` not in the future (a minute's skew);
  refused as Google refuses: HTTP 400 ``invalid_grant`` / ``invalid_scope`` / ``unsupported_grant_type``,
  ``error_description`` saying why;
* ``grant_type=refresh_token`` + ``client_id``, ``client_secret``, ``refresh_token``: the ones the fake issued
  (``authorized_user_file``).

The reply is ``{"access_token", "expires_in", "token_type": "Bearer"}``; ``access_token`` is fixed when given
(so a model fake can require exactly that token), else random. ``issued`` lists the tokens given out."""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.parse
from pathlib import Path
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, json_reply

JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
AUDIENCE = "https://oauth2.googleapis.com/token"


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FakeGoogleOAuth(FakeServer):
    name = "google_oauth"

    def __init__(self, *args: Any, access_token: str | None = None, lifetime_s: int = 3599, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_token, self.lifetime_s = access_token, lifetime_s
        self.accounts: dict[str, Any] = {}  # client email -> public key
        self.users: dict[str, tuple[str, str]] = {}  # refresh token -> (client id, client secret)
        self.issued: list[str] = []

    @property
    def token_uri(self) -> str:
        return f"{self.base_url}/token"

    def service_account_file(self, path: Path, email: str = "medhelm-eval@hospital-proj.iam.gserviceaccount.com") -> Path:
        """A service-account key file (Google's JSON layout) whose key this fake trusts."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.accounts[email] = key.public_key()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        info = {"type": "service_account", "project_id": "hospital-proj", "private_key_id": secrets.token_hex(20),
                "private_key": pem, "client_email": email, "client_id": "1" * 21,
                "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": self.token_uri,
                "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
                "universe_domain": "googleapis.com"}
        path.write_text(json.dumps(info))
        return path

    def public_pem(self, email: str) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.accounts[email].public_bytes(serialization.Encoding.PEM,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)

    def authorized_user_file(self, path: Path) -> Path:
        client_id, client_secret, refresh = "764086051850-x.apps.googleusercontent.com", secrets.token_hex(12), \
            "1//" + secrets.token_urlsafe(24)
        self.users[refresh] = (client_id, client_secret)
        path.write_text(json.dumps({"type": "authorized_user", "client_id": client_id, "client_secret": client_secret,
                                    "refresh_token": refresh, "token_uri": self.token_uri}))
        return path

    @staticmethod
    def _error(code: str, description: str, status: int = 400) -> Reply:
        return json_reply(status, {"error": code, "error_description": description})

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if method != "POST" or path != "/token":
            return json_reply(404, {"error": "not_found"})
        if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return self._error("invalid_request", "Invalid Content-Type; expected application/x-www-form-urlencoded")
        form = dict(urllib.parse.parse_qsl(body.decode("ascii", "replace")))
        grant = form.get("grant_type")
        if grant == JWT_GRANT:
            problem = self._check_jwt(form.get("assertion", ""))
        elif grant == "refresh_token":
            user = self.users.get(form.get("refresh_token", ""))
            problem = None if user and user == (form.get("client_id"), form.get("client_secret")) else \
                ("invalid_grant", "Bad Request")
        else:
            problem = ("unsupported_grant_type", "Invalid grant_type: " + str(grant)[:40])
        if problem:
            return self._error(*problem)
        self._accepted(path, headers, {"grant_type": grant})
        token = self.access_token or "ya29." + secrets.token_urlsafe(32)
        self.issued.append(token)
        return json_reply(200, {"access_token": token, "expires_in": self.lifetime_s, "token_type": "Bearer"})

    def _check_jwt(self, assertion: str) -> tuple[str, str] | None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        parts = assertion.split(".")
        if len(parts) != 3:
            return "invalid_grant", "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe"
        try:
            header, claims = json.loads(_unb64(parts[0])), json.loads(_unb64(parts[1]))
            signature = _unb64(parts[2])
        except ValueError:
            return "invalid_grant", "Invalid JWT: malformed"
        if not isinstance(header, dict) or header.get("alg") != "RS256" or not isinstance(claims, dict):
            return "invalid_grant", "Invalid JWT Signature."
        key = self.accounts.get(claims.get("iss"))
        if key is None:
            return "invalid_grant", "Invalid grant: account not found"
        try:
            key.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "invalid_grant", "Invalid JWT Signature."
        if claims.get("aud") != AUDIENCE:
            return "invalid_grant", "Invalid JWT: Failed audience check."
        now = time.time()
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int) or not isinstance(exp, int) or exp - iat > 3600 or exp <= now or iat > now + 60:
            return "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
        if not claims.get("scope") and not claims.get("target_audience"):
            return "invalid_scope", "Invalid OAuth scope or ID token audience provided."
        return None
