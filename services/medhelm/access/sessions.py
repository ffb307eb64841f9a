"""Sign-out that ends the session on the server, not only in the browser.

Streamlit's ``st.logout`` deletes the identity cookie in the browser that clicked; a copy of that cookie
(another tab kept open, a stolen cookie, a proxy log) would stay valid until the ID token expires, since
the cookie is only HMAC-signed and carries no server state. So sign-out also records the session as ended:
``end(folder, claims)`` writes one empty file named by the session's fingerprint (SHA-256 of the ID token's
issuer, subject, issue time, nonce and expiry: never the token, never a name) into ``folder``, which lives
on the shared volume (``<output-path>/.sessions-ended`` by default), so every dashboard replica refuses
that session from then on (``ended``). Files of sessions whose ID token has expired anyway are removed on
the next sign-out.

Failure semantics: a sign-out that cannot be recorded raises ``ConfigError`` (one line naming the folder)
and the dashboard does not pretend it succeeded; reading treats an unreadable folder as "not ended" only
for sessions it cannot find, never the other way round (a present file always ends the session)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from medhelm.errors import ConfigError

_CLAIMS = ("iss", "sub", "iat", "nonce", "exp")


def fingerprint(claims: Mapping[str, Any]) -> str:
    """One session: the ID token claims that together never repeat (a new sign-in has a new iat and nonce)."""
    canonical = json.dumps([claims.get(k) for k in _CLAIMS], sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def end(folder: Path, claims: Mapping[str, Any], *, now: float | None = None) -> None:
    """Record the session of ``claims`` as ended (every replica reading ``folder`` refuses it from now on)."""
    now = time.time() if now is None else now
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker = folder / fingerprint(claims)
        marker.touch()
        exp = claims.get("exp")
        if isinstance(exp, (int, float)):
            os.utime(marker, (exp, exp))  # the marker's mtime: when the session would have expired anyway
        for old in folder.iterdir():  # sessions past their expiry need no marker any more
            try:
                if old.stat().st_mtime < now - 60:
                    old.unlink()
            except OSError:
                pass
    except OSError as err:
        raise ConfigError(f"cannot record the sign-out ({err.strerror})", path=folder) from None


def ended(folder: Path, claims: Mapping[str, Any]) -> bool:
    """Whether the session of ``claims`` was signed out (on any replica sharing ``folder``)."""
    return (folder / fingerprint(claims)).exists()
