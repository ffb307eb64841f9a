"""The report's manifest and signature, inside the report itself, and their verification.

After the report's own bytes (the *body*) come, each on its own line:

* the manifest, ``<!-- medhelm-manifest {...} -->`` in HTML, ``%medhelm-manifest {...}`` (a PDF comment) in a
  PDF: JSON with the inputs' digests (``content.inputs``), the release, the code version, the time,
  ``report_sha256`` (SHA-256 of the body) and, when signed, ``signature``: the algorithm and ``key_id``;
* when signed, the signature, ``<!-- medhelm-signature BASE64 -->`` / ``%medhelm-signature BASE64``, over every
  byte before that line (the body and the manifest line): so ``head -c`` and ``openssl`` alone can check it;
* in a PDF, ``startxref N`` and ``%%EOF`` again (the body's own), so a PDF reader still finds the document's
  cross-reference table within the file's last bytes.

The key (``keys.py``) is an HMAC-SHA256 secret or a PEM key pair (Ed25519, ECDSA, RSA-PSS): an HMAC proves that
whoever holds the secret made these bytes; a public-key signature lets anyone holding the public key check it.
Reports of the first format (``medhelm-report-manifest/1``: HTML, HMAC over the manifest's canonical JSON inside
the manifest) still verify.

Failure semantics: ``verify`` raises ``VerificationError`` (exit 3) with one line saying what no longer
matches: the content (a changed byte of the body), the signature (a changed manifest or signature line), the
key (signed with another key, or not signed), an input (``--store``: the store's aggregates changed since); a
file that is not a report is a ``ConfigError`` (exit 2). Key bytes are never printed or logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError, MedhelmError
from medhelm.report.keys import HMAC, SigningKey

FORMAT = "medhelm-report-manifest/2"
FORMAT_V1 = "medhelm-report-manifest/1"
REPORT_LIMIT = 512 * 1024 * 1024
# kind -> (manifest line's start, signature line's start, a line's end)
_LINES = {"html": (b"<!-- medhelm-manifest ", b"<!-- medhelm-signature ", b" -->\n"),
          "pdf": (b"%medhelm-manifest ", b"%medhelm-signature ", b"\n")}
_PDF_TAIL = re.compile(rb"startxref\s+(\d+)\s+%%EOF\s*\Z")


class VerificationError(MedhelmError):
    """The report does not match its manifest, its signature or the store."""

    exit_code = 3


def kind_of(data: bytes) -> str:
    return "pdf" if data.startswith(b"%PDF-") else "html"


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _line_json(doc: dict[str, Any]) -> bytes:
    # inside an HTML comment no "--" and no "<"/">" may appear, so they are written as JSON escapes (the same in
    # a PDF, where the line is a comment up to its end: canonical ASCII JSON has no line break)
    return _canonical(doc).replace(b"-", b"\\u002d").replace(b"<", b"\\u003c").replace(b">", b"\\u003e")


def seal(body: bytes, manifest: dict[str, Any], key: SigningKey | None) -> bytes:
    """``body`` (an HTML page or a PDF) with its manifest appended, and its signature when ``key``."""
    kind = kind_of(body)
    start, sig_start, end = _LINES[kind]
    doc = {**manifest, "format": FORMAT, "report_sha256": hashlib.sha256(body).hexdigest()}
    if key is not None:
        doc["signature"] = {"algorithm": key.algorithm, "key_id": key.key_id}
    signed = body + b"\n" + start + _line_json(doc) + end
    out = signed
    if key is not None:
        out += sig_start + base64.b64encode(key.sign(signed)) + end
    if kind == "pdf":
        tail = _PDF_TAIL.search(body[-1024:])
        if tail is None:
            raise ConfigError("the PDF writer left no startxref at the end of the PDF (not sealed)")
        out += b"startxref\n" + tail.group(1) + b"\n%%EOF\n"
    return out


@dataclass(frozen=True)
class Sealed:
    body: bytes
    manifest: dict[str, Any]
    signed: bytes  # the bytes the signature covers (format 2)
    signature: bytes | None  # the signature line's value, decoded


def split(data: bytes, path: Path) -> Sealed:
    """The report's body, manifest, signed bytes and signature."""
    kind = kind_of(data)
    start, sig_start, end = _LINES[kind]
    rest = data
    if kind == "pdf":  # the PDF's startxref / %%EOF repeated after the manifest
        region = max(0, len(data) - 64)
        tail = _PDF_TAIL.search(data, region)
        rest = data[:tail.start()] if tail else b""
    lines = rest.rsplit(b"\n", 3)  # [..., last line of the body, manifest line, signature line?, ""]
    signature_b64 = None
    if len(lines) == 4 and lines[-2].startswith(sig_start):
        signature_b64, manifest_line = lines[-2], lines[-3]
    else:
        manifest_line = lines[-2] if len(lines) >= 3 else b""
    if lines[-1] != b"" or not manifest_line.startswith(start) or not (manifest_line + b"\n").endswith(end):
        if b"\n" + start in data[-256 * 1024:]:
            raise VerificationError(f"{path}: the end of the report was changed (cut, or bytes added after its "
                                    "manifest or signature)")
        raise ConfigError("no medhelm manifest at the end (not a medhelm report)", path=path)
    at = rest.rfind(b"\n" + manifest_line + b"\n")
    try:
        manifest = json.loads(manifest_line[len(start):len(manifest_line) + 1 - len(end)])
    except ValueError:
        raise VerificationError(f"{path}: the manifest is not valid JSON (it was changed)") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, FORMAT_V1):
        raise VerificationError(f"{path}: the manifest is not a {FORMAT} (it was changed)")
    signature = None
    if signature_b64 is not None:
        try:
            signature = base64.b64decode(signature_b64[len(sig_start):len(signature_b64) + 1 - len(end)],
                                         validate=True)
        except (binascii.Error, ValueError):
            raise VerificationError(f"{path}: the signature line is not base64 (it was changed)") from None
    signed = rest[:at + len(manifest_line) + 2]
    return Sealed(rest[:at], manifest, signed, signature)


def verify(path: Path, key: SigningKey | None, inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """Check the content digest, the signature (when ``key``) and the inputs (when the store's are given)."""
    sealed = split(files.read_bytes(path, limit=REPORT_LIMIT, what="report"), path)
    manifest = sealed.manifest
    recorded = str(manifest.get("report_sha256", ""))
    actual = hashlib.sha256(sealed.body).hexdigest()
    if not hmac.compare_digest(actual, recorded):
        raise VerificationError(f"{path}: the content no longer matches the manifest (sha256 {actual[:16]}..., "
                                f"recorded {recorded[:16]}...): the report was changed after it was made")
    signer = manifest.get("signature")
    if (signer is None) != (sealed.signature is None) and manifest.get("format") == FORMAT:
        raise VerificationError(f"{path}: the manifest and the signature line disagree on whether it is signed "
                                "(one was changed)")
    if key is not None:
        if not isinstance(signer, dict):
            raise VerificationError(f"{path}: the report is not signed")
        if signer.get("key_id") != key.key_id or signer.get("algorithm") != key.algorithm:
            raise VerificationError(f"{path}: signed with {str(signer.get('algorithm'))[:20]} key "
                                    f"{str(signer.get('key_id'))[:16]}, not with this key ({key.algorithm} "
                                    f"{key.key_id})")
        if manifest.get("format") == FORMAT_V1:
            good = _verify_v1(manifest, key)
        else:
            good = sealed.signature is not None and key.verify(sealed.signed, sealed.signature)
        if not good:
            raise VerificationError(f"{path}: the signature does not match the signed bytes (the manifest or the "
                                    "signature was changed after signing)")
    if inputs is not None:
        recorded_inputs = manifest.get("inputs") or {}
        for name in sorted(recorded_inputs):
            if inputs.get(name) != recorded_inputs[name]:
                raise VerificationError(f"{path}: the store's '{name}' of release '{manifest.get('release')}' no "
                                        "longer matches what the report was built from")
    return manifest


def _verify_v1(manifest: dict[str, Any], key: SigningKey) -> bool:
    """Format 1 (HTML only, HMAC only): the hex HMAC-SHA256 of the manifest's canonical JSON without its
    ``signature``, kept inside the manifest."""
    if key.algorithm != HMAC or key.secret is None:
        return False
    unsigned = _canonical({k: v for k, v in manifest.items() if k != "signature"})
    value = str((manifest.get("signature") or {}).get("value", ""))
    return hmac.compare_digest(hmac.new(key.secret, unsigned, hashlib.sha256).hexdigest(), value)
