"""Schema versions and the steps between them (``schema.SCHEMA_VERSION``, recorded in the store's ``meta``).

A store is created at the current version with every relation (``create_schema``); an older one is brought
forward by ``migrate`` inside the caller's exclusive transaction (all steps or none, the version re-read under
the lock, so two pods migrating at once do it once). A store newer than this code is refused by every reader
and writer before anything is written, in one line naming both versions (``newer``). An older store: SQLite
(one file, the embedded store) is read as it is and migrated by its next summarize, inside that summarize's
transaction (a refused summarize leaves it byte for byte as it was); PostgreSQL (shared by many pods, whose
role should not own the schema) is refused until ``medhelm store migrate`` (``opening.migrate_store``, the
chart's hook Job) has run (``check_migrated``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from medhelm.errors import ConfigError, escape
from medhelm.store.backends import SqliteStore, Store, named
from medhelm.store.schema import ADDED_COLUMNS, SCHEMA_VERSION
from medhelm.version import __version__


def create_schema(store: Store) -> None:
    """A new store at the current version, every relation made (a no-op on an existing store: nothing is
    written to it here). One exclusive writer at a time: two processes creating the same table at once
    would fail on PostgreSQL (``CREATE TABLE IF NOT EXISTS`` is not safe against a concurrent creation)."""
    if "meta" in store.schema_columns():
        return  # an existing store: what it lacks is made by ``migrate`` inside the writer's transaction,
        # so a summarize refused later leaves an older store exactly as it was (no table added)
    with store.transaction(exclusive=True):
        migrate(store)
    store.review_ready = True


def migrate(store: Store) -> tuple[int | None, int]:
    """Inside the caller's exclusive transaction: the store to the current schema version, from the
    version it records, read here under the writer's lock (another process may have migrated it since
    it was opened). Nothing is written when it is current. -> (version before, None for a new store;
    version after). A newer store is refused."""
    before = stored_version(store)
    if before is not None and before > SCHEMA_VERSION:
        raise ConfigError(newer(store, before))
    if before == SCHEMA_VERSION:
        if store.guard_missing():  # made before the trail's guard existed, or stripped of it: made again
            for stmt in store.audit_guard:
                store.execute(stmt)
            store.guard_made = True
        return before, before
    # v1 -> v2: every relation made where missing; v2 -> v3 (and v1 -> v3): the columns added since
    # (ADDED_COLUMNS: the models' jury cost, the runs' access record), each where missing
    for stmt in store.relations():
        store.execute(stmt)
    for table, column, kind in ADDED_COLUMNS:
        if column not in store.columns(table):
            store.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    store.execute("DELETE FROM meta WHERE release = '' AND key = 'schema_version'")
    store.execute("INSERT INTO meta (release, key, value) VALUES ('', 'schema_version', ?)", (str(SCHEMA_VERSION),))
    if before is not None:
        at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        store.execute("DELETE FROM meta WHERE release = '' AND key = ?", (f"migrated_to_v{SCHEMA_VERSION}",))
        store.execute("INSERT INTO meta (release, key, value) VALUES ('', ?, ?)",
                      (f"migrated_to_v{SCHEMA_VERSION}", f"{at} from v{before} by medhelm {__version__}"))
    store.review_ready = True
    return before, SCHEMA_VERSION


def stored_version(store: Store, *, has_meta: bool | None = None) -> int | None:
    """The schema version a store records (None: no store in this database yet). A store made before
    versions were recorded at creation (v1 recorded it at its first summarize) is v1. ``has_meta``: already
    known (spares a catalogue query on every open of a PostgreSQL store)."""
    if not (has_meta if has_meta is not None else "meta" in store.schema_columns()):
        return None
    rows = store.query("SELECT value FROM meta WHERE release = '' AND key = 'schema_version'")
    if not rows:
        return 1
    text = str(rows[0][0])
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{named(store)} records schema version '{escape(text, 20)}', which is no version; is it "
                          "damaged? Restore it from a backup, or summarize into a new --store")
    return int(text)


def newer(store: Store, version: int) -> str:
    return (f"{named(store)} is at store schema v{version}, written by a newer medhelm; this medhelm {__version__} "
            f"reads schema v{SCHEMA_VERSION} at most: upgrade medhelm (nothing was written)")


def check_migrated(store: Store, *, has_meta: bool | None = None) -> None:
    """An older PostgreSQL store is refused until ``medhelm store migrate`` ran (a SQLite one is read as it is and
    migrated by its next summarize): its pods may not own the schema, and an implicit migration by whichever
    pod came first would cut off the older pods of a rolling upgrade without a decision or a backup."""
    if isinstance(store, SqliteStore):
        return
    version = stored_version(store, has_meta=has_meta)
    if version is not None and version < SCHEMA_VERSION:
        raise ConfigError(f"{named(store)} is at store schema v{version}; this medhelm {__version__} needs "
                          f"v{SCHEMA_VERSION}: run `medhelm store migrate` first (the chart's migration hook Job "
                          "does at helm upgrade); nothing was written")
    if version is not None and store.guard_missing():
        raise ConfigError(f"{named(store)} lacks the audit trail's append-only guard: run `medhelm store migrate` "
                          "first (the chart's migration hook Job does at helm upgrade); nothing was written")
