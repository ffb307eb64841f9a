"""AWS Signature Version 4 for the Bedrock clients (``bedrock.py``, ``anthropic.py`` on Bedrock).

Kept here, a few dozen lines of stdlib ``hmac``/``hashlib``, rather than importing botocore (a large install
with boto3's data files, slow to import; docs/benchmarks.md, "Native provider clients"): we sign one kind of
request only — a POST of a JSON body with no query string other than what the URL carries — so the general
signer's canonicalisation of every AWS protocol is not needed. The test suite checks this signer against botocore's
(``tests/providers``): the same inputs give the same ``Authorization`` header byte for byte.

Credentials come from the standard environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN`` for temporary credentials, e.g. IRSA/EKS Pod Identity exported by a sidecar); the
names can be changed per deployment (``aws_credentials``). A missing variable is a ``ConfigError`` naming it; a secret never
appears in an error or a log (the credentials are registered with ``scrub`` when made). Failure semantics: signing is pure computation, nothing here fails on I/O.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from medhelm.inference.gateway import env_secret
from medhelm.scrub import register
from medhelm.specs import Deployment

if TYPE_CHECKING:
    from medhelm.inference.http import JsonTransport


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    session_token: str | None = None

    def __post_init__(self) -> None:  # held by the process: scrubbed from every text it emits
        register(self.access_key)
        register(self.secret_key, slot=f"sigv4:{self.access_key}:secret")  # temporary credentials rotate
        register(self.session_token, slot=f"sigv4:{self.access_key}:token")

    def __repr__(self) -> str:  # never the secret, even in a debugger's or a traceback's locals
        return f"Credentials(access_key={self.access_key[:4]}…)"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def canonical_uri(path: str) -> str:
    """The path as SigV4 canonicalises it for every service but S3: each segment URI-encoded again (a model
    id's ':' is sent as %3A and signed as %253A, as botocore does)."""
    return "/".join(urllib.parse.quote(segment, safe="-_.~") for segment in path.split("/"))


def canonical_query(query: str) -> str:
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                    for k, v in sorted(pairs))


def sign(credentials: Credentials, *, region: str, service: str, host: str, path_and_query: str, body: bytes,
         now: dt.datetime | None = None, content_type: str = "application/json",
         accept: str | None = None) -> dict[str, str]:
    """The headers that sign ``POST path_and_query`` to ``host`` (as sent in the Host header) with
    ``body``: ``X-Amz-Date``, ``X-Amz-Security-Token`` (temporary credentials), ``X-Amz-Content-Sha256``
    is not sent (Bedrock does not need it) and ``Authorization``. ``accept``: the Accept header sent, signed
    too (botocore signs it for InvokeModel, whose API takes it)."""
    when = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    amz_date, day = when.strftime("%Y%m%dT%H%M%SZ"), when.strftime("%Y%m%d")
    path, _, query = path_and_query.partition("?")
    headers = {"content-type": content_type, "host": host, "x-amz-date": amz_date}
    if accept is not None:
        headers["accept"] = accept
    if credentials.session_token:
        headers["x-amz-security-token"] = credentials.session_token
    names = sorted(headers)
    canonical = "\n".join(("POST", canonical_uri(path), canonical_query(query),
                           "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names), ";".join(names),
                           hashlib.sha256(body).hexdigest()))
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + credentials.secret_key).encode(), day), region), service),
                "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {"X-Amz-Date": amz_date,
           "Authorization": f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                            f"SignedHeaders={';'.join(names)}, Signature={signature}"}
    if credentials.session_token:
        out["X-Amz-Security-Token"] = credentials.session_token
    return out


# the region when a deployment names none, as boto3 (and HELM's bedrock_utils) read it
AWS_REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


def aws_credentials(deployment: Deployment) -> Credentials:
    """SigV4 credentials from the environment (names changeable by ``options.aws_access_key_env`` etc.)."""
    opts = deployment.options
    access = env_secret(deployment, str(opts.get("aws_access_key_env") or "AWS_ACCESS_KEY_ID"), "AWS access key")
    secret = env_secret(deployment, str(opts.get("aws_secret_key_env") or "AWS_SECRET_ACCESS_KEY"),
                        "AWS secret key")
    token = os.environ.get(str(opts.get("aws_session_token_env") or "AWS_SESSION_TOKEN")) or None
    return Credentials(access, secret, token)


def sign_for(transport: JsonTransport, url: str, signer: tuple[Credentials, str, str], body: bytes,
             accept: str | None = None) -> dict[str, str]:
    """The signature headers of a POST of ``body`` to ``url`` as ``transport`` sends it (its host and path)."""
    scheme, host, port, path = transport.request_target(url)
    default = 443 if scheme == "https" else 80
    host_header = (f"[{host}]" if ":" in host else host) + ("" if port == default else f":{port}")
    credentials, region, service = signer
    return sign(credentials, region=region, service=service, host=host_header, path_and_query=path,
                      body=body, accept=accept)
