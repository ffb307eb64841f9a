"""medhelm.scrub: a registered secret is removed by value in every encoding an echo gives it, from error
texts, log records (formatted exceptions included) and warnings; short values are left alone."""

from __future__ import annotations

import base64
import json
import logging
import re
import secrets
import string
import urllib.parse
import warnings

import pytest

from medhelm import scrub
from medhelm.errors import ConfigError, InferenceError, escape, one_line


def _key(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits + "/+=-_") for _ in range(n))


@pytest.mark.parametrize("length", [8, 9, 10, 11, 31, 32, 33, 108, 200])
def test_every_encoding_at_every_alignment(length):
    key = _key(length)
    scrub.register(key)
    raw = key.encode()
    forms = [key, urllib.parse.quote(key, safe=""), re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), urllib.parse.quote(key, safe="")),
             urllib.parse.quote_plus(key), json.dumps(key)[1:-1], f"Bearer {key}", f"?key={key}&alt=json",
             f"x-api-key: {key}"]
    for prefix in (b"", b"u", b"us", b"user:", b"ab:c"):  # base64 of the key inside a longer value
        for suffix in (b"", b"!", b"!?"):
            encoded = base64.b64encode(prefix + raw + suffix).decode()
            forms += [encoded, encoded.replace("+", "-").replace("/", "_")]
    for form in forms:
        text = f"HTTP 401: invalid credentials {form} (end)"
        out = scrub.scrub(text)
        assert key not in out and form not in out, (form, out)
        assert out.startswith("HTTP 401: invalid credentials ") and out.endswith(" (end)")


def test_short_values_are_not_held_and_ordinary_text_is_kept():
    scrub.register("1234567")  # 7 characters: below MIN_CHARS, would rewrite ordinary words and numbers
    assert scrub.scrub("patient 1234567 seen") == "patient 1234567 seen"
    assert scrub.scrub("HTTP 401: Unauthorized. Access token is missing") == \
        "HTTP 401: Unauthorized. Access token is missing"


def test_credential_shapes_are_masked_whoever_issued_them():
    text = ("Authorization: Bearer eyJ0eXAiOiJKV1QiLCJhbGciOi.abc and "
            "https://host/x?key=AIzaSyUNKNOWN0123456789&alt=1 api-key: 0123456789abcdef0123")
    out = scrub.scrub(text)
    assert "eyJ0eXAi" not in out and "AIzaSyUNKNOWN" not in out and "0123456789abcdef0123" not in out
    assert "Bearer ***" in out and "key=***&alt=1" in out


def test_the_error_doors_log_records_and_warnings(caplog):
    key = _key(17)
    err = InferenceError(f"deployment 'x': HTTP 401: invalid x-api-key: {key}")
    scrub.register(key)  # registered after the error was made: str() scrubs when the text is read
    for text in (str(err), repr(err), f"{err}", one_line(str(err)), str(err.with_context("run r: "))):
        assert key not in text and "***" in text
    long = ConfigError("bad value " + escape("x" * 280 + key, 300))  # the cut would leave half the key
    assert key[:8] not in str(long)
    with caplog.at_level(logging.WARNING):
        logging.getLogger("medhelm.test").warning("server said %s", key)
        try:
            raise RuntimeError(f"boom {key}")
        except RuntimeError:
            logging.getLogger("medhelm.test").exception("failed")
    assert key not in caplog.text and "***" in caplog.text
    shown = warnings.formatwarning(f"deprecated {key}", UserWarning, "lib.py", 1)  # what showwarning prints
    assert key not in shown and "deprecated ***" in shown


def test_rotating_values_keep_a_bounded_list():
    old = [_key(40) for _ in range(scrub.SLOT_KEEP + 3)]
    for value in old:
        scrub.register(value, slot="test:rotating")
    assert all(v not in scrub.scrub(v) for v in old[-scrub.SLOT_KEEP:])
    assert old[0] in scrub.scrub(old[0])  # rotated out long ago


def test_a_store_url_is_held_by_its_password_only():
    scrub.register_value("postgresql://medhelm:pw-Secret-99%2Fx@db.internal:5432/results?sslpassword=abcdefgh12")
    out = scrub.scrub("cannot connect postgresql://medhelm:pw-Secret-99/x@db.internal:5432/results")
    assert "pw-Secret-99/x" not in out and "db.internal:5432/results" in out
    assert "abcdefgh12" not in scrub.scrub("sslpassword abcdefgh12")
