"""AWS Signature Version 4 as AWS checks it (the Bedrock fakes' side of ``inference/sigv4.py``): the signature
recomputed from the request as received, per AWS's "Create a signed AWS API request" reference, and AWS's
JSON error shape (``{"message"}``, the type in ``x-amzn-ErrorType``).

Refusals as AWS words them: a malformed ``Authorization`` is ``IncompleteSignatureException`` (400), an
unknown access key ``UnrecognizedClientException``, a date beyond 5 minutes ``Signature expired``, another
region/service scope or a mismatching signature ``InvalidSignatureException`` (403).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import re
import secrets
import urllib.parse

from medhelm.devtools.fakes.server import Reply


class SigV4Verifier:
    """Recomputes an AWS Signature Version 4 from the request as received, as AWS does."""

    def __init__(self, keys: dict[str, str], region: str, service: str = "bedrock", max_skew_s: float = 300.0):
        self.keys, self.region, self.service, self.max_skew_s = keys, region, service, max_skew_s

    def problem(self, method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes) -> tuple[str, str] | None:
        """None when the signature is valid, else (error type, message) as AWS words them."""
        auth = headers.get("authorization", "")
        m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?"
                         r"SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})", auth)
        if not m:
            return "IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders'"
        access, day, region, service, signed, signature = m.groups()
        secret = self.keys.get(access)
        if secret is None:
            return "UnrecognizedClientException", "The security token included in the request is invalid."
        amz_date = headers.get("x-amz-date", "")
        try:
            when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        except ValueError:
            return "IncompleteSignatureException", "X-Amz-Date is missing or malformed"
        if abs((dt.datetime.now(dt.timezone.utc) - when).total_seconds()) > self.max_skew_s:
            return "InvalidSignatureException", "Signature expired"
        if region != self.region or service != self.service or day != amz_date[:8]:
            return "InvalidSignatureException", "Credential should be scoped to a valid region/service"
        names = signed.split(";")
        if "host" not in names:
            return "InvalidSignatureException", "'Host' must be a signed header"
        canonical_headers = "".join(f"{n}:{' '.join(headers.get(n, '').split())}\n" for n in names)
        uri = "/".join(urllib.parse.quote(seg, safe="-_.~") for seg in raw_path.split("/"))
        pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
        cq = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in pairs)
        canonical = "\n".join((method, uri, cq, canonical_headers, signed, hashlib.sha256(body).hexdigest()))
        scope = f"{day}/{region}/{service}/aws4_request"
        to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
        key = ("AWS4" + secret).encode()
        for part in (day, region, service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            return "InvalidSignatureException", ("The request signature we calculated does not match the signature "
                                                 "you provided. Check your AWS Secret Access Key and signing method.")
        return None


def amz_error(status: int, kind: str, message: str) -> Reply:
    amz_type = f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    return status, {"Content-Type": "application/json", "x-amzn-ErrorType": amz_type,
                    "x-amzn-RequestId": secrets.token_hex(8)}, json.dumps({"message": message}).encode()
