"""Google Application Default Credentials for Vertex AI: a service-account key file -> an OAuth access token;
``bearer_source``: the token a Vertex deployment sends (a token file, ``api_key_env``, else these credentials).

The file is ``options.service_account_file``, else ``GOOGLE_APPLICATION_CREDENTIALS`` (what HELM's Vertex
clients read through google-auth's ``default()``). Three file types, as google-auth reads them:

* ``service_account``: a JWT (RS256, header ``kid`` = ``private_key_id``; claims ``iss`` = ``client_email``,
  ``scope``, ``aud`` = Google's token endpoint ``https://oauth2.googleapis.com/token`` whatever the file's
  ``token_uri`` (google-auth's claim), ``iat`` now, ``exp`` = iat + 3600) posted to the file's ``token_uri`` as
  ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` (RFC 7523; Google's "OAuth 2.0 for server to
  server applications");
* ``authorized_user`` (``gcloud auth application-default login``): ``grant_type=refresh_token`` with the
  file's ``client_id``, ``client_secret``, ``refresh_token``;
* ``external_account`` (workload identity federation, google-auth's ``identity_pool``): a subject token read
  from ``credential_source.file`` (read again at every refresh: the kubelet rotates it) or fetched with a GET
  of ``credential_source.url`` (its ``headers``; never through a forward proxy: it is a local identity
  endpoint), as text or, with ``format: {type: json, subject_token_field_name}``, that field of its JSON; then
  RFC 8693's token exchange at the file's ``token_url`` (Google's STS): ``grant_type=urn:ietf:params:oauth:
  grant-type:token-exchange``, ``audience``, ``scope`` (IAM's when impersonating), ``requested_token_type`` (an access token),
  ``subject_token``, ``subject_token_type``; ``options`` = ``{"userProject": workforce_pool_user_project}`` for
  a workforce pool without a client; ``Authorization: Basic`` with the file's ``client_id``/``client_secret``
  when it names a client. With ``service_account_impersonation_url`` that token then asks IAM Credentials'
  ``generateAccessToken`` for the service account's (JSON ``{"delegates": null, "scope": [...], "lifetime":
  "<service_account_impersonation.token_lifetime_seconds or 3600>s"}``; the reply's ``accessToken`` until
  ``expireTime``). AWS (``environment_id``), executable and X.509 sources are refused when the file is read,
  naming the field.

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
import datetime
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
from medhelm.inference.oauth_token import TokenCache, request_token
from medhelm.scrub import register
from medhelm.specs import Deployment

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
IAM_SCOPE = "https://www.googleapis.com/auth/iam"  # the federated token's scope when it impersonates
TOKEN_URI = "https://oauth2.googleapis.com/token"  # also the JWT's audience, as google-auth sets it
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
LIFETIME_S = 3600  # the longest assertion Google accepts
VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
_FIELDS = {"service_account": ("client_email", "private_key", "token_uri"),
           "authorized_user": ("client_id", "client_secret", "refresh_token"),
           "external_account": ("audience", "subject_token_type", "token_url")}
EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"  # RFC 8693
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# credential sources google-auth has and medhelm does not: the field, and what it is
_UNSUPPORTED_SOURCES = (("environment_id", "AWS credentials"), ("executable", "an executable's output"),
                        ("certificate", "an X.509 certificate (mTLS)"))


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
        self.token_uri = str(info.get("token_url") or info.get("token_uri") or TOKEN_URI)
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
            raise self._fail("field 'type' must be service_account, authorized_user or external_account (a Google "
                             "credentials file)")
        for field in _FIELDS[info["type"]]:
            if field == "token_uri" and field not in info:
                continue
            if not isinstance(info.get(field), str) or not info[field]:
                raise self._fail(f"field '{field}' is missing from the Google credentials file")
        if info["type"] == "external_account":
            self._check_source(info.get("credential_source"))
            for field in ("service_account_impersonation_url", "client_id", "client_secret",
                          "workforce_pool_user_project"):
                if info.get(field) is not None and not isinstance(info[field], str):
                    raise self._fail(f"field '{field}' must be a string")
            lifetime = (info.get("service_account_impersonation") or {}).get("token_lifetime_seconds")
            if lifetime is not None and not (isinstance(lifetime, int) and not isinstance(lifetime, bool)
                                             and 600 <= lifetime <= 43200):
                raise self._fail("field 'service_account_impersonation.token_lifetime_seconds' must be a whole "
                                 "number of seconds from 600 to 43200")
        # held as secrets of this process: scrubbed from every text it emits (medhelm.scrub)
        for field in ("client_secret", "refresh_token"):
            register(info.get(field) if isinstance(info.get(field), str) else None)
        if isinstance(info.get("private_key"), str):
            for line in info["private_key"].splitlines():
                if line.strip() and not line.startswith("-----"):
                    register(line.strip())
        return info

    def _check_source(self, source: Any) -> None:
        """An ``external_account`` file's ``credential_source``: a ``file`` or a ``url``, ``format`` text or json."""
        if not isinstance(source, dict):
            raise self._fail("field 'credential_source' is missing from the Google credentials file")
        for field, what in _UNSUPPORTED_SOURCES:
            if field in source:
                raise self._fail(f"field 'credential_source.{field}' ({what} as the subject token) is not supported "
                                 "by medhelm: use a credential_source with 'file' or 'url', a service-account key, "
                                 "or options.access_token_file")
        if not any(isinstance(source.get(k), str) and source[k] for k in ("file", "url")):
            raise self._fail("field 'credential_source' needs 'file' or 'url' (where the subject token is)")
        form = source.get("format") or {}
        kind = form.get("type", "text") if isinstance(form, dict) else None
        if kind not in ("text", "json"):
            raise self._fail("field 'credential_source.format.type' must be text or json")
        if kind == "json" and not (isinstance(form.get("subject_token_field_name"), str)
                                   and form["subject_token_field_name"]):
            raise self._fail("field 'credential_source.format.subject_token_field_name' is missing (format json)")
        headers = source.get("headers")
        if headers is not None and not (isinstance(headers, dict)
                                        and all(isinstance(v, str) for v in headers.values())):
            raise self._fail("field 'credential_source.headers' must map header names to strings")

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
        if self.kind == "external_account":
            return self._exchange()
        if self.kind == "service_account":
            form = {"grant_type": JWT_GRANT, "assertion": self.assertion()}
            register(form["assertion"], slot=f"google:assertion:{self._name}")
        else:
            form = {"grant_type": "refresh_token", **{k: self._info[k] for k in _FIELDS["authorized_user"]}}
        request = urllib.request.Request(self.token_uri, data=urllib.parse.urlencode(form).encode("ascii"),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        token, data = request_token(request, f"deployment '{self._name}': Google token request to {self.token_uri}",
                                    slot=f"google:token:{self._name}", timeout_s=self._timeout)
        return token, _seconds(data.get("expires_in"))

    # -- external_account: workload identity federation ------------------------------------------------------
    def _subject_token(self) -> str:
        """The subject token from the file's ``credential_source`` (google-auth's identity_pool suppliers)."""
        source = self._info["credential_source"]
        where = source.get("file") or source.get("url")
        try:
            if source.get("file"):
                with open(source["file"], encoding="utf-8") as f:
                    content = f.read()
            else:
                request = urllib.request.Request(source["url"], headers=dict(source.get("headers") or {}))
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # a local identity endpoint
                with opener.open(request, timeout=self._timeout) as reply:
                    content = reply.read().decode("utf-8")
        except urllib.error.HTTPError as err:
            raise InferenceError(f"deployment '{self._name}': the subject token source {where} answered HTTP "
                                 f"{err.code}", retryable=err.code == 429 or err.code >= 500, status=err.code) from None
        except (urllib.error.URLError, OSError, UnicodeDecodeError) as err:
            reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or type(err).__name__
            raise InferenceError(f"deployment '{self._name}': cannot read the subject token from {where} "
                                 f"({reason})", retryable=bool(source.get("url"))) from None
        form = source.get("format") or {}
        token: Any = content
        if form.get("type") == "json":
            try:
                token = json.loads(content)[form["subject_token_field_name"]]
            except (ValueError, KeyError, TypeError):
                token = None
        if not isinstance(token, str) or not token:
            raise InferenceError(f"deployment '{self._name}': no subject token in {where}", retryable=False)
        register(token, slot=f"google:subject:{self._name}")
        return token

    def _exchange(self) -> tuple[str, float]:
        """RFC 8693's token exchange at the STS, then the service account's token when impersonating."""
        info = self._info
        url = info.get("service_account_impersonation_url")
        # impersonating, the federated token is only for IAM Credentials: its scope is IAM's (google-auth's)
        form = {"grant_type": EXCHANGE_GRANT, "audience": info["audience"], "scope": IAM_SCOPE if url else self._scope,
                "requested_token_type": ACCESS_TOKEN_TYPE, "subject_token": self._subject_token(),
                "subject_token_type": info["subject_token_type"]}
        if info.get("workforce_pool_user_project") and not info.get("client_id"):
            form["options"] = urllib.parse.quote(json.dumps({"userProject": info["workforce_pool_user_project"]}))
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if info.get("client_id"):
            pair = f"{info['client_id']}:{info.get('client_secret') or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        request = urllib.request.Request(self.token_uri, data=urllib.parse.urlencode(form).encode("ascii"),
                                         headers=headers)
        token, data = request_token(request, f"deployment '{self._name}': Google STS token exchange at "
                                             f"{self.token_uri}", slot=f"google:sts:{self._name}",
                                    timeout_s=self._timeout)
        lifetime = _seconds(data.get("expires_in"))
        if not url:
            return token, lifetime
        seconds = (info.get("service_account_impersonation") or {}).get("token_lifetime_seconds") or LIFETIME_S
        body = json.dumps({"delegates": None, "scope": [self._scope], "lifetime": f"{seconds}s"}).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                                  "Authorization": f"Bearer {token}"})
        token, data = request_token(request, f"deployment '{self._name}': service account impersonation at {url}",
                                    slot=f"google:token:{self._name}", timeout_s=self._timeout,
                                    token_field="accessToken")
        try:
            expires = datetime.datetime.strptime(str(data.get("expireTime")), "%Y-%m-%dT%H:%M:%SZ")
            lifetime = expires.replace(tzinfo=datetime.timezone.utc).timestamp() - time.time()
        except ValueError:
            lifetime = 300.0
        return token, max(lifetime, 0.0)


def _seconds(value: Any) -> float:
    """``expires_in`` (a number, or a string as some endpoints send it); 300 s when absent or unreadable."""
    try:
        return max(float(value), 0.0) if value is not None else float(LIFETIME_S)
    except (TypeError, ValueError):
        return 300.0


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
