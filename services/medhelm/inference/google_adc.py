"""Google Application Default Credentials for Vertex AI: a service-account key file -> an OAuth access token.

The file is ``options.service_account_file``, else ``GOOGLE_APPLICATION_CREDENTIALS`` (what HELM's Vertex
clients read through google-auth's ``default()``). Two file types, as google-auth reads them:

* ``service_account``: a JWT (RS256, header ``kid`` = ``private_key_id``; claims ``iss`` = ``client_email``,
  ``scope``, ``aud`` = Google's token endpoint ``https://oauth2.googleapis.com/token`` whatever the file's
  ``token_uri`` (google-auth's claim), ``iat`` now, ``exp`` = iat + 3600) posted to the file's ``token_uri`` as
  ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` (RFC 7523; Google's "OAuth 2.0 for server to
  server applications");
* ``authorized_user`` (``gcloud auth application-default login``): ``grant_type=refresh_token`` with the
  file's ``client_id``, ``client_secret``, ``refresh_token``.

Why our own and not google-auth: each is one form POST; google-auth brings requests, pyasn1 and rsa/
cryptography to every Vertex run. Signing uses ``cryptography`` (imported only when a service-account key is
used; the ``google`` extra). The tests drive our fake token endpoint with google-auth itself and check our
JWT with google-auth's verifier, so both speak the same protocol.

A token is reused until ``refresh_margin_s`` before its ``expires_in`` ends, then fetched once for all waiting
requests; a 401 from the model drops it (``invalidate``): ``oauth_token.TokenCache``. Failure semantics: an unreadable or malformed file
is a ``ConfigError`` naming the file and the field (never a value); a refused or unreachable token endpoint is
an ``InferenceError`` naming the endpoint, the HTTP status and OAuth's ``error`` code, never the key, the
assertion or a token (retryable for 429/5xx/unreachable).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from medhelm.errors import ConfigError
from medhelm.inference.oauth_token import TokenCache, request_token
from medhelm.scrub import register

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TOKEN_URI = "https://oauth2.googleapis.com/token"  # also the JWT's audience, as google-auth sets it
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
LIFETIME_S = 3600  # the longest assertion Google accepts
VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
_FIELDS = {"service_account": ("client_email", "private_key", "token_uri"),
           "authorized_user": ("client_id", "client_secret", "refresh_token")}


def key_file(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str | None:
    """The key file a Vertex deployment uses: ``options.service_account_file``, else the variable."""
    environ = os.environ if environ is None else environ
    return str(options.get("service_account_file") or environ.get(VARIABLE) or "") or None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class GoogleToken(TokenCache):
    """Access tokens for one key file; ``headers()`` gives ``Authorization: Bearer <token>``."""

    def __init__(self, name: str, path: str, *, scope: str = SCOPE, refresh_margin_s: float = 300.0,
                 clock: Callable[[], float] = time.time, timeout_s: float = 30.0) -> None:
        self._name, self._path, self._scope, self._timeout = name, path, scope, timeout_s
        info = self._read()
        self.kind: str = info["type"]
        self._info = info
        self.token_uri = str(info.get("token_uri") or TOKEN_URI)
        self._key = self._private_key() if self.kind == "service_account" else None
        super().__init__(self.fetch, refresh_margin_s=refresh_margin_s, clock=clock)
        self.fetches = 0

    def __repr__(self) -> str:  # never the key or a token
        return f"GoogleToken({self._name!r}, {self._path!r}, {self.kind})"

    def _fail(self, what: str) -> ConfigError:
        return ConfigError(f"deployment '{self._name}': {what}", path=self._path)

    def _read(self) -> dict[str, Any]:
        try:
            with open(self._path, encoding="utf-8") as f:
                info = json.load(f)
        except OSError as err:
            raise self._fail(f"cannot read the Google credentials file ({err.strerror})") from None
        except ValueError:
            raise self._fail("the Google credentials file is not JSON") from None
        if not isinstance(info, dict) or info.get("type") not in _FIELDS:
            raise self._fail("field 'type' must be service_account or authorized_user (a Google key file)")
        for field in _FIELDS[info["type"]]:
            if field == "token_uri" and field not in info:
                continue
            if not isinstance(info.get(field), str) or not info[field]:
                raise self._fail(f"field '{field}' is missing from the Google credentials file")
        # held as secrets of this process: scrubbed from every text it emits (medhelm.scrub)
        for field in ("client_secret", "refresh_token"):
            register(info.get(field) if isinstance(info.get(field), str) else None)
        if isinstance(info.get("private_key"), str):
            for line in info["private_key"].splitlines():
                if line.strip() and not line.startswith("-----"):
                    register(line.strip())
        return info

    def _private_key(self) -> Any:
        try:
            from cryptography.hazmat.primitives.asymmetric import rsa
            from cryptography.hazmat.primitives.serialization import load_pem_private_key
        except ImportError:
            raise self._fail("signing a service-account key needs the cryptography package "
                             "(pip install 'medhelm[google]')") from None
        try:
            key = load_pem_private_key(self._info["private_key"].encode("ascii"), password=None)
        except (ValueError, TypeError, UnicodeEncodeError):
            raise self._fail("field 'private_key' is not a PEM private key") from None
        if not isinstance(key, rsa.RSAPrivateKey):
            raise self._fail("field 'private_key' is not an RSA key (RS256 needs one)")
        return key

    def assertion(self, now: float | None = None) -> str:
        """The signed JWT a service account posts to ``token_uri`` (google-auth's claims and header)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        issued = int(time.time() if now is None else now)  # the endpoint's clock, not the cache's
        header = {"alg": "RS256", "typ": "JWT"}
        if self._info.get("private_key_id"):
            header["kid"] = str(self._info["private_key_id"])
        claims = {"iat": issued, "exp": issued + LIFETIME_S, "iss": self._info["client_email"],
                  "aud": TOKEN_URI, "scope": self._scope}
        signing_input = ".".join(_b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))
        signature = self._key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def fetch(self) -> tuple[str, float]:
        """One token request: (access token, seconds it stays valid)."""
        self.fetches += 1
        if self.kind == "service_account":
            form = {"grant_type": JWT_GRANT, "assertion": self.assertion()}
            register(form["assertion"], slot=f"google:assertion:{self._name}")
        else:
            form = {"grant_type": "refresh_token", **{k: self._info[k] for k in _FIELDS["authorized_user"]}}
        request = urllib.request.Request(self.token_uri, data=urllib.parse.urlencode(form).encode("ascii"),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        token, data = request_token(request, f"deployment '{self._name}': Google token request to {self.token_uri}",
                                    slot=f"google:token:{self._name}", timeout_s=self._timeout)
        try:
            lifetime = max(float(data.get("expires_in", LIFETIME_S)), 0.0)
        except (TypeError, ValueError):
            lifetime = 300.0
        return token, lifetime
