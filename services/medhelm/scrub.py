"""Every secret this process holds, and the one scrubber every outgoing text passes.

A secret is registered where it is read (``register``): an API key from ``$NAME``/``$NAME_FILE``
(``files.env_secret``), a credentials.conf entry (``credentials.py``), an access token file or an Entra ID
token (``inference/native.py``, ``inference/entra.py``), SigV4 credentials (``inference/sigv4.py``), a
report's HMAC key (``report/keys.py``), the review key (``store/review.py``), a caller token
(``rpc/authz.py``), a store URL's password (``store/backends.py``). ``scrub(text)`` replaces each of them, by
value, wherever it stands, with ``***``: raw, URL-encoded (either hex case, ``+`` for space), JSON-escaped,
base64 (standard and URL-safe alphabets, at each of the three alignments, so the key is found inside a
longer encoded run such as ``Basic base64(user:key)``) and therefore inside ``Bearer``, ``key=`` or any
header echo. Credential-shaped runs of values this process never held (``Bearer <token>``, ``key=...``,
``api-key: ...``) are masked too: a gateway may add and echo a key of its own.

Where it is applied (one function, these doors): ``MedhelmError.__str__`` — every error text the CLI
prints, a record's ``error``, a jury explanation, a gRPC status and a remote error re-raised by the caller
are that string; the logging record factory (every logger, every handler, formatted exceptions included)
and ``warnings``' formatter, installed when the first secret is registered.

Length: a value shorter than ``MIN_CHARS`` (8) is not registered. Every credential the supported providers
issue is longer (Azure OpenAI keys 32, AWS access key ids 20, Entra secrets ~40, our caller tokens >= 16,
report HMAC keys >= 32 bytes); a shorter value is a human-chosen password such as a local PostgreSQL
one, which ``errors.without_password`` already masks in its URL. Scrubbing a 4-7 character string from
every message would rewrite ordinary words and numbers in error texts ("test", "1234") while hiding
nothing an attacker could not enumerate.

Values rotate (a token refreshed every hour): a ``slot`` keeps only its newest ``SLOT_KEEP`` values, so
a service that runs for months holds a bounded list. Pure Python, imports nothing of ours.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import urllib.parse
import warnings

MIN_CHARS = 8
SLOT_KEEP = 8
MARK = "***"

_lock = threading.Lock()
_fixed: dict[str, None] = {}  # insertion-ordered set of registered values
_slots: dict[str, list[str]] = {}
_needles: tuple[str, ...] = ()  # every variant of every value, longest first
_installed = False

# Credentials in their usual wrappers, whoever issued them (the value is the last group).
_SHAPED = re.compile(
    r"(?i)(\b(?:bearer|basic)\s+|"
    r"(?<![a-z0-9_-])(?:key|api[-_]?key|apikey|access[-_]?token|auth[-_]?token|token|client[-_]?secret|"
    r"password|secret|sig|signature|x-amz-security-token)=|"
    r"\b(?:x-api-key|api-key|x-goog-api-key|ocp-apim-subscription-key|x-identity-header)\s*[:=]\s*)"
    r"([A-Za-z0-9._~+/%=-]{16,})")


_CREDENTIAL_NAME = re.compile(r"(?i)key|token|secret|password|passwd|credential|signature|sig$|auth")


def register(value: str | bytes | None, *, slot: str | None = None) -> None:
    """Hold ``value`` as a secret of this process: from now on ``scrub`` removes it from every text.
    ``slot`` names a value that rotates (only its newest ``SLOT_KEEP`` are kept). Bytes that are not text
    (an HMAC key file) are held as their hex and base64 forms."""
    if value is None:
        return
    texts = _texts(value)
    if not texts:
        return
    global _needles
    with _lock:
        if slot is not None:
            kept = _slots.setdefault(slot, [])
            for text in texts:
                if text in kept:
                    kept.remove(text)
                kept.append(text)
            del kept[:-SLOT_KEEP]
        else:
            if all(t in _fixed for t in texts):
                return
            _fixed.update(dict.fromkeys(texts))
        values = list(_fixed) + [v for kept in _slots.values() for v in kept]
        _needles = tuple(sorted({n for v in values for n in _variants(v)}, key=len, reverse=True))
    _install()


def register_value(value: str, *, slot: str | None = None) -> None:
    """A value handed over as a secret: a key is held whole; a URL (a store's) only by its password and
    its credential-named query values, so the URL itself still names the store in messages."""
    if "://" not in value:
        register(value, slot=slot)
        return
    parts = urllib.parse.urlsplit(value)
    try:
        password = parts.password
    except ValueError:
        password = None
    register(urllib.parse.unquote(password) if password else None, slot=f"{slot}:password" if slot else None)
    for key, found in urllib.parse.parse_qsl(parts.query):
        if _CREDENTIAL_NAME.search(key):
            register(found, slot=f"{slot}:{key}" if slot else None)


def scrub(text: str) -> str:
    """``text`` without any registered secret (in any encoding ``_variants`` knows) and without
    credential-shaped runs (``Bearer ...``, ``key=...``)."""
    if not text:
        return text
    for needle in _needles:
        if needle in text:
            text = text.replace(needle, MARK)
    if _SHAPED.search(text):
        text = _SHAPED.sub(lambda m: m.group(1) + MARK, text)
    return text


def held() -> int:
    """How many values are held (tests, diagnostics)."""
    with _lock:
        return len(_fixed) + sum(len(v) for v in _slots.values())


def _texts(value: str | bytes) -> list[str]:
    if isinstance(value, bytes):
        out = [value.hex(), base64.b64encode(value).decode("ascii")]
        try:
            decoded = value.decode("utf-8").strip()
        except UnicodeDecodeError:
            decoded = ""
        if decoded.isprintable():
            out.append(decoded)
        return [t for t in out if len(t) >= MIN_CHARS]
    value = str(value).strip()
    return [value] if len(value) >= MIN_CHARS else []


def _variants(value: str) -> set[str]:
    """The forms ``value`` takes in a URL, a JSON string, a header or a base64 run."""
    out = {value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe=""),
           urllib.parse.quote(value, safe="/:"), json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    out |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), v) for v in list(out)}
    raw = value.encode("utf-8")
    for shift in range(3):  # the key's bytes at each alignment inside a longer base64 run
        encoded = base64.b64encode(b"\0" * shift + raw).decode("ascii").rstrip("=")
        start = -(-shift * 8 // 6)  # the first character made only of the key's bits
        end = (shift + len(raw)) * 8 // 6  # one past the last such character
        core = encoded[start:end]
        out |= {core, core.replace("+", "-").replace("/", "_")}
    return {v for v in out if len(v) >= MIN_CHARS}


def _install() -> None:
    """Every log record and warning of the process passes ``scrub`` (installed once, on the first secret)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    make = logging.getLogRecordFactory()

    def factory(*args, **kwargs):  # noqa: ANN002, ANN003 - logging's own signature
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: logging reports it itself later
            return record
        record.msg, record.args = scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)
    formatwarning = warnings.formatwarning

    def scrubbed_warning(message, category, filename, lineno, line=None):  # noqa: ANN001 - warnings' signature
        return scrub(formatwarning(message, category, filename, lineno, line))

    warnings.formatwarning = scrubbed_warning
