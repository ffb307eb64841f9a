"""The report's manifest and signature, inside the report itself, and their verification.

After the report's own bytes (the *body*) come, each on its own line:

* the manifest, ``<!-- medhelm-manifest {...} -->`` in HTML, ``%medhelm-manifest {...}`` (a PDF comment) in a
  PDF: JSON with the inputs' digests (``content.inputs``), the release, the code version, the time,
  ``report_sha256`` (SHA-256 of the body) and, when signed, ``signature``: the algorithm and ``key_id``;
* when signed, the signature, ``<!-- medhelm-signature BASE64 -->`` / ``%medhelm-signature BASE64``, over every
  byte before that line (the body and the manifest line): so ``head -c`` and ``openssl`` alone can check it;
* in a PDF, ``startxref N`` and ``%%EOF`` again (the body's own), so a PDF reader still finds the document's
  cross-reference table within the file's last bytes.

Every byte is accounted for (``split``): the signature covers the body and the manifest line; the signature
line must hold the base64 of the signature exactly as written (no other encoding of the same bytes); the PDF's
repeated trailer must be exactly ``startxref\\nN\\n%%EOF\\n`` with the body's own N. So a byte changed, added or
cut anywhere fails.

Verification means a trusted key (``verify``): without one, only the content digest is checked, which anyone
who edits the body can recompute, so the result says the signature was NOT checked (``Verified.key`` None; the
CLI exits 4). With keys (the one ``--key``, a trust list, or the store's trust list), the algorithm is the
key's own (``keys.py``); the manifest's ``signature`` must name a key of that algorithm and id among them, and
that key's signature check decides. An HMAC secret is only ever given as one (``--hmac-key``).

Reports of the first format (``medhelm-report-manifest/1``: HTML, HMAC over the manifest's canonical JSON
inside the manifest) still verify with their HMAC secret.

Failure semantics: ``verify`` raises ``VerificationError`` (exit 3) with one line saying what no longer
matches: the content (a changed byte of the body), the signature (a changed manifest or signature line, or
another key), the key (signed with a key not given or not in the trust list, of another algorithm, or not
signed), the end (cut, or bytes added or changed after the manifest), an input (``--store``: the store's
aggregates changed since); a file that is not a report is a ``ConfigError`` (exit 2). Key bytes are never
printed or logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Sequence
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


def _changed_end(path: Path) -> VerificationError:
    return VerificationError(f"{path}: the end of the report was changed (cut, or bytes added or changed after its "
                             "manifest or signature)")


def split(data: bytes, path: Path) -> Sealed:
    """The report's body, manifest, signed bytes and signature. Every byte of the file is accounted for: the
    body, the manifest line, the signature line (its base64 as written, nothing else), and in a PDF the repeated
    ``startxref N`` / ``%%EOF``, which must be exactly the body's own; anything else is a changed end."""
    kind = kind_of(data)
    start, sig_start, end = _LINES[kind]
    line_end = end[:-1]  # what a line ends with before its newline ("" in a PDF)
    if b"\n" + start not in data[-256 * 1024:]:
        raise ConfigError("no medhelm manifest at the end (not a medhelm report)", path=path)
    rest, trailer = data, b""
    if kind == "pdf":
        at = data.rfind(b"\nstartxref\n")
        if at < 0:
            raise _changed_end(path)
        rest, trailer = data[:at + 1], data[at + 1:]
    if not rest.endswith(b"\n"):
        raise _changed_end(path)
    head, _, last = rest[:-1].rpartition(b"\n")
    signature_b64 = None
    if last.startswith(sig_start):
        signature_b64 = last
        head, _, last = head.rpartition(b"\n")
    manifest_line = last
    if not manifest_line.startswith(start) or not manifest_line.endswith(line_end) or not head:
        raise _changed_end(path)
    body = head
    signed = body + b"\n" + manifest_line + b"\n"
    try:
        manifest = json.loads(manifest_line[len(start):len(manifest_line) - len(line_end)])
    except ValueError:
        raise VerificationError(f"{path}: the manifest is not valid JSON (it was changed)") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, FORMAT_V1):
        raise VerificationError(f"{path}: the manifest is not a {FORMAT} (it was changed)")
    if manifest.get("format") == FORMAT_V1 and (kind != "html" or signature_b64 is not None or manifest_line not in (
            start + _line_json(manifest) + line_end, start + _v1_line(manifest) + line_end)):
        raise VerificationError(f"{path}: the manifest was changed (not as a {FORMAT_V1} report writes it)")
    signature = None
    if signature_b64 is not None:
        if not signature_b64.endswith(line_end):
            raise _changed_end(path)
        value = signature_b64[len(sig_start):len(signature_b64) - len(line_end)]
        try:
            signature = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise VerificationError(f"{path}: the signature line is not base64 (it was changed)") from None
        if base64.b64encode(signature) != value:
            raise VerificationError(f"{path}: the signature line was changed (not as the signer wrote it)")
    if kind == "pdf":
        tail = _PDF_TAIL.search(body[-1024:])
        if tail is None or trailer != b"startxref\n" + tail.group(1) + b"\n%%EOF\n":
            raise _changed_end(path)
    return Sealed(body, manifest, signed, signature)


@dataclass(frozen=True)
class Verified:
    manifest: dict[str, Any]
    key: SigningKey | None  # the trusted key the signature was checked with; None: the signature was NOT checked


def verify(path: Path, keys: Sequence[SigningKey] | None, inputs: dict[str, str] | None = None, *,
           trust: str = "this key") -> Verified:
    """Check the content digest, the signature against ``keys`` (the one key given, or a trust list named
    ``trust``; None: not checked) and the inputs (when the store's are given). Only a key the caller trusts
    decides: the algorithm is the key's own, the manifest's claim must agree with it."""
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
    used = None
    if keys is not None:
        if not isinstance(signer, dict):
            raise VerificationError(f"{path}: the report is not signed")
        algorithm, key_id = signer.get("algorithm"), signer.get("key_id")
        claimed = f"{str(algorithm)[:20]} key {str(key_id)[:16]}"
        candidates = [k for k in keys if k.algorithm == algorithm and k.names(key_id)]
        if not candidates:
            if trust == "this key" and len(keys) == 1:
                raise VerificationError(f"{path}: signed with {claimed}, not with this key ({keys[0].algorithm} "
                                        f"{keys[0].key_id})")
            raise VerificationError(f"{path}: signed with {claimed}, which is not in the trust list ({trust})")
        for key in candidates:
            if manifest.get("format") == FORMAT_V1:
                good = _verify_v1(manifest, key)
            else:
                good = sealed.signature is not None and key.verify(sealed.signed, sealed.signature)
            if good:
                used = key
                break
        else:
            raise VerificationError(f"{path}: the signature does not match the signed bytes (the report, its "
                                    "manifest or its signature was changed after signing, or another key signed it)")
    if inputs is not None:
        recorded_inputs = manifest.get("inputs") or {}
        for name in sorted(recorded_inputs):
            if inputs.get(name) != recorded_inputs[name]:
                raise VerificationError(f"{path}: the store's '{name}' of release '{manifest.get('release')}' no "
                                        "longer matches what the report was built from")
    return Verified(manifest, used)


def _v1_line(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).replace("-", "\\u002d").encode("ascii")


def _verify_v1(manifest: dict[str, Any], key: SigningKey) -> bool:
    """Format 1 (HTML only, HMAC only): the hex HMAC-SHA256 of the manifest's canonical JSON without its
    ``signature``, kept inside the manifest."""
    if key.algorithm != HMAC or key.secret is None:
        return False
    unsigned = _canonical({k: v for k, v in manifest.items() if k != "signature"})
    value = str((manifest.get("signature") or {}).get("value", ""))
    return hmac.compare_digest(hmac.new(key.secret, unsigned, hashlib.sha256).hexdigest(), value)
