"""The store's trust list: the public keys whose signature on a report counts, pinned in the results store
(``medhelm report trust add KEY.pub``), so that ``medhelm report verify FILE --store URL`` checks a report's
signature against them without a key file at hand.

Kept in ``meta`` under release '' and key ``report_trusted_keys`` (one JSON list: each key's algorithm, key id,
DER SubjectPublicKeyInfo in base64, when it was added and a label), beside the store's other release-independent
settings; re-summarising a release never touches it. Public keys only: an HMAC secret is never stored (it
would then be readable by everyone who can read the store). Adding or removing a key is an audited ``report``
action. Who may write the store may change its trust list: a trust list in a file the committee keeps
(``verify --trusted FILE``) does not depend on the store.

Failure semantics: an unreadable stored entry is a ``ConfigError`` of one line (never a silent skip: a trust
list that cannot be read trusts nobody); adding a key already there, or removing one that is not, says so.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

from medhelm.errors import ConfigError
from medhelm.report.keys import SigningKey, from_spki
from medhelm.store.backends import Store

META_KEY = "report_trusted_keys"


def _rows(store: Store) -> list[dict[str, Any]]:
    rows = store.query("SELECT value FROM meta WHERE release = '' AND key = ?", (META_KEY,))
    if not rows:
        return []
    try:
        doc = json.loads(rows[0][0] or "[]")
    except ValueError:
        raise ConfigError(f"the store's trust list (meta '{META_KEY}') is not valid JSON") from None
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise ConfigError(f"the store's trust list (meta '{META_KEY}') is not a list of keys")
    return doc


def trusted(store: Store) -> list[tuple[SigningKey, dict[str, Any]]]:
    """The store's trusted keys with their entries (label, when added)."""
    out = []
    for row in _rows(store):
        try:
            der = base64.b64decode(str(row.get("spki", "")), validate=True)
        except ValueError:
            raise ConfigError(f"the store's trust list holds an entry that is not base64 (key id "
                              f"{str(row.get('key_id'))[:16]})") from None
        key = from_spki(der, f"the store's trust list (key id {str(row.get('key_id'))[:16]})")
        if key.key_id != row.get("key_id") or key.algorithm != row.get("algorithm"):
            raise ConfigError(f"the store's trust list entry {str(row.get('key_id'))[:16]} does not match its key")
        out.append((key, row))
    return out


def _write(store: Store, rows: list[dict[str, Any]]) -> None:
    value = json.dumps(rows, sort_keys=True)
    store.execute("DELETE FROM meta WHERE release = '' AND key = ?", (META_KEY,))
    store.execute("INSERT INTO meta (release, key, value) VALUES ('', ?, ?)", (META_KEY, value))


def add(store: Store, key: SigningKey, label: str) -> None:
    if key.secret is not None or key.public is None:
        raise ConfigError("only a public key can be trusted (an HMAC secret is never stored)")
    with store.transaction():
        rows = _rows(store)
        if any(r.get("key_id") == key.key_id for r in rows):
            raise ConfigError(f"key {key.key_id} is in the store's trust list already")
        rows.append({"key_id": key.key_id, "algorithm": key.algorithm,
                     "spki": base64.b64encode(key.spki()).decode("ascii"), "label": label,
                     "added_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        _write(store, rows)


def remove(store: Store, key_id: str) -> None:
    with store.transaction():
        rows = _rows(store)
        kept = [r for r in rows if r.get("key_id") != key_id]
        if len(kept) == len(rows):
            raise ConfigError(f"key {key_id[:16]} is not in the store's trust list")
        _write(store, kept)
