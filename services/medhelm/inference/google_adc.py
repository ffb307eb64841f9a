"""Google Application Default Credentials for Vertex AI: a service-account key file -> an OAuth access token;
``bearer_source``: the token a Vertex deployment sends (a token file, ``api_key_env``, else these credentials).

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
requests; a 401 from the model drops it (``invalidate``). Failure semantics: an unreadable or malformed file
is a ``ConfigError`` naming the file and the field (never a value); a refused or unreachable token endpoint is
an ``InferenceError`` naming the endpoint, the HTTP status and OAuth's ``error`` code, never the key, the
assertion or a token (retryable for 429/5xx/unreachable).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference.gateway import env_secret
from medhelm.scrub import register
from medhelm.specs import Deployment

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


class GoogleToken:
    """Access tokens for one key file; ``headers()`` gives ``Authorization: Bearer <token>``."""

    def __init__(self, name: str, path: str, *, scope: str = SCOPE, refresh_margin_s: float = 300.0,
                 clock: Callable[[], float] = time.time, timeout_s: float = 30.0) -> None:
        self._name, self._path, self._scope = name, path, scope
        self._margin, self._clock, self._timeout = refresh_margin_s, clock, timeout_s
        info = self._read()
        self.kind: str = info["type"]
        self._info = info
        self.token_uri = str(info.get("token_uri") or TOKEN_URI)
        self._key = self._private_key() if self.kind == "service_account" else None
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock: asyncio.Lock | None = None
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

    def invalidate(self) -> None:
        self._token, self._expires_at = None, 0.0

    async def headers(self) -> dict[str, str]:
        if self._token is None or self._clock() >= self._expires_at - self._margin:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._token is None or self._clock() >= self._expires_at - self._margin:
                    token, lifetime = await asyncio.to_thread(self.fetch)
                    self._token, self._expires_at = token, self._clock() + lifetime
        return {"Authorization": f"Bearer {self._token}"}

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
        what = f"deployment '{self._name}': Google token request to {self.token_uri}"
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as reply:
                data = json.loads(reply.read())
        except urllib.error.HTTPError as err:
            try:
                body = json.loads(err.read() or b"{}")
            except ValueError:
                body = {}
            code = body.get("error") if isinstance(body, dict) else None
            raise InferenceError(f"{what}: HTTP {err.code}" + (f": {str(code)[:80]}" if isinstance(code, str) else ""),
                                 retryable=err.code == 429 or err.code >= 500, status=err.code) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", None) or type(err).__name__
            raise InferenceError(f"{what}: failed ({reason})", retryable=True) from None
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise InferenceError(f"{what}: the reply has no access_token", retryable=True)
        register(token, slot=f"google:token:{self._name}")
        try:
            lifetime = max(float(data.get("expires_in", LIFETIME_S)), 0.0)
        except (TypeError, ValueError):
            lifetime = 300.0
        return token, lifetime


class _Static:
    """A bearer token that does not change (``api_key_env``) or is re-read from a file when it changes."""

    def __init__(self, read: Callable[[], str]) -> None:
        self._read = read

    async def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._read()}"}

    def invalidate(self) -> None:
        pass


def bearer_source(deployment: Deployment) -> Any:
    """An OAuth access token for Google/Vertex (``.headers()``, ``.invalidate()``): ``options.access_token_file``
    (read again when it changes: a sidecar or ``gcloud auth print-access-token`` in a CronJob refreshes it),
    ``api_key_env``, else Application Default Credentials: the key file in ``options.service_account_file`` or
    ``GOOGLE_APPLICATION_CREDENTIALS``, exchanged for tokens by ``GoogleToken``."""
    path = deployment.options.get("access_token_file")
    if path:
        state: dict[str, Any] = {"mtime": None, "token": ""}

        def from_file() -> str:
            try:
                mtime = os.stat(path).st_mtime_ns
                if mtime != state["mtime"]:
                    with open(path, encoding="utf-8") as f:
                        state["token"], state["mtime"] = f.read().strip(), mtime
                    register(state["token"], slot=f"token-file:{path}")  # scrubbed from every text
            except OSError as err:
                raise ConfigError(f"deployment '{deployment.name}': cannot read options.access_token_file "
                                  f"({err.strerror})", path=str(path)) from None
            return state["token"]

        from_file()  # a missing file fails at planning
        return _Static(from_file)
    if deployment.api_key_env:
        token = env_secret(deployment, deployment.api_key_env, "api_key_env")
        return _Static(lambda: token)
    adc = key_file(deployment.options)
    if not adc:
        raise ConfigError(f"deployment '{deployment.name}': Vertex AI needs a Google credential: set "
                          f"{VARIABLE} (a service-account key file), options.service_account_file, "
                          "options.access_token_file or api_key_env (an access token)")
    return GoogleToken(deployment.name, adc)
