"""The report's manifest and signature, inside the report itself, and their verification.

The HTML file ends with one comment, ``<!-- medhelm-manifest {...} -->``: a JSON manifest of the inputs'
digests (``content.inputs``), the release, the code version, the time, ``report_sha256`` (SHA-256 of every
byte before the comment) and, when a key is given, ``signature``: HMAC-SHA256 over the manifest's canonical
JSON without the signature, with ``key_id`` (the first 16 hex digits of the key's SHA-256) naming the key.

Why HMAC-SHA256 and not Ed25519: ``cryptography`` (Ed25519) is not in the base install, and the standard
library's ``hmac`` is; the key is the hospital's, kept in a file only it holds. What this proves: whoever holds
the key made (or approved) exactly these bytes. What it does not: a third party without the key cannot check
it (a public-key signature would allow that: docs/report.md says how to add a detached Ed25519 signature).

Failure semantics: ``verify`` raises ``VerificationError`` (exit 3) with one line saying what no longer
matches: the content (a changed byte before the manifest), the signature (a changed manifest, or another
key), an input (``--store``: the store's aggregates changed since); a file that is not a report, or a key
file that cannot be used, is a ``ConfigError`` (exit 2). Key bytes are never printed or logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError, MedhelmError

MARKER = b"\n<!-- medhelm-manifest "
END = b" -->\n"
FORMAT = "medhelm-report-manifest/1"
ALGORITHM = "HMAC-SHA256"
MIN_KEY_BYTES = 32
REPORT_LIMIT = 512 * 1024 * 1024


class VerificationError(MedhelmError):
    """The report does not match its manifest, its signature or the store."""

    exit_code = 3


@dataclass(frozen=True)
class Key:
    secret: bytes

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.secret).hexdigest()[:16]

    @classmethod
    def load(cls, path: Path) -> Key:
        secret = files.read_bytes(path, what="signing key").strip()
        if len(secret) < MIN_KEY_BYTES:
            raise ConfigError(f"the signing key has {len(secret)} bytes; use at least {MIN_KEY_BYTES} random bytes "
                              "(e.g. `openssl rand -hex 32 > KEYFILE`)", path=path)
        return cls(secret)


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _sign(manifest: dict[str, Any], key: Key) -> str:
    unsigned = {k: v for k, v in manifest.items() if k != "signature"}
    return hmac.new(key.secret, _canonical(unsigned), hashlib.sha256).hexdigest()


def seal(body: bytes, manifest: dict[str, Any], key: Key | None) -> bytes:
    """``body`` with its manifest appended (signed when ``key``)."""
    doc = {**manifest, "format": FORMAT, "report_sha256": hashlib.sha256(body).hexdigest()}
    if key is not None:
        doc["signature"] = {"algorithm": ALGORITHM, "key_id": key.key_id, "value": _sign(doc, key)}
    # inside an HTML comment: no "--" and no "<"/">" may appear, so they are written as JSON escapes
    text = _canonical(doc).replace(b"-", b"\\u002d").replace(b"<", b"\\u003c").replace(b">", b"\\u003e")
    return body + MARKER + text + END


def split(data: bytes, path: Path) -> tuple[bytes, dict[str, Any]]:
    """(the report's content, its manifest)."""
    at = data.rfind(MARKER)
    if at < 0 or not data.endswith(END):
        raise ConfigError("no medhelm manifest at the end (not a medhelm report, or its end was cut)", path=path)
    try:
        manifest = json.loads(data[at + len(MARKER):-len(END)])
    except ValueError:
        raise VerificationError(f"{path}: the manifest is not valid JSON (it was changed)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise VerificationError(f"{path}: the manifest is not a {FORMAT} (it was changed)")
    return data[:at], manifest


def verify(path: Path, key: Key | None, inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """Check the content digest, the signature (when ``key``) and the inputs (when the store's are given)."""
    body, manifest = split(files.read_bytes(path, limit=REPORT_LIMIT, what="report"), path)
    recorded = str(manifest.get("report_sha256", ""))
    actual = hashlib.sha256(body).hexdigest()
    if not hmac.compare_digest(actual, recorded):
        raise VerificationError(f"{path}: the content no longer matches the manifest (sha256 {actual[:16]}..., "
                                f"recorded {recorded[:16]}...): the report was changed after it was made")
    signature = manifest.get("signature")
    if key is not None:
        if not isinstance(signature, dict):
            raise VerificationError(f"{path}: the report is not signed")
        if signature.get("key_id") != key.key_id:
            raise VerificationError(f"{path}: signed with key {str(signature.get('key_id'))[:16]}, not with this "
                                    f"key ({key.key_id})")
        if not hmac.compare_digest(str(signature.get("value", "")), _sign(manifest, key)):
            raise VerificationError(f"{path}: the signature does not match the manifest (the manifest was changed)")
    if inputs is not None:
        recorded_inputs = manifest.get("inputs") or {}
        for name in sorted(recorded_inputs):
            if inputs.get(name) != recorded_inputs[name]:
                raise VerificationError(f"{path}: the store's '{name}' of release '{manifest.get('release')}' no "
                                        "longer matches what the report was built from")
    return manifest
