"""Opening a results store: every check a store passes before it is read or written, and the two commands that
open one to migrate it or to report its version.

``open_store`` checks a store before it is read or written: a SQLite file's header and integrity
(``PRAGMA quick_check``, once per file version per process; ``medhelm serve dashboard`` hands the version it
checked to the Streamlit process in ``INTACT_ENV``), the schema version (newer: "upgrade medhelm"; an older
PostgreSQL store: "run medhelm store migrate", ``migrate.check_migrated``), every table, column and column type
this version reads, and nothing on our tables the schema does not define (``_check_objects``). A bad store is
one ``ConfigError`` line naming it (the file, or the URL without its password), never a traceback, and nothing
is written to it. ``create=True`` (a writer) checks with ``_check_ours`` and makes a new store's relations.
"""

from __future__ import annotations

import os
from pathlib import Path

from medhelm.errors import ConfigError, escape
from medhelm.store.backends import SqliteStore, Store, connect, named, sqlite_path
from medhelm.store.migrate import check_migrated, create_schema, migrate, newer, stored_version
from medhelm.store.schema import ADDED_COLUMNS, SCHEMA_VERSION, TABLES


def open_store(location: str | Path, *, create: bool = False, make_schema: bool = True) -> Store:
    """``sqlite:///path``, ``postgresql://...`` or a plain path (a SQLite file, or a folder holding one).
    ``make_schema=False``: a new store's relations are left to the caller's own transaction (summarize's
    ``migrate``), so a refused summarize leaves an empty database empty."""
    store = connect(location, create=create)
    try:
        if create:
            _check_ours(store)
            check_migrated(store)
            if make_schema:
                create_schema(store)
        else:
            _check_integrity(store)  # first: a damaged file is named as damaged, not as "not a store"
            _check_schema(store)
            _check_tables(store)
            _check_objects(store)
            check_migrated(store, has_meta=True)
    except BaseException:
        store.close()
        raise
    return store


def migrate_store(location: str | Path) -> tuple[int | None, int]:
    """``medhelm store migrate``: the store at ``location`` to the current schema version, in one exclusive
    transaction (PostgreSQL: DDL included; a failure leaves it as it was), or nothing when it is current.
    An empty PostgreSQL database gets a new store (the chart's pre-install hook); a SQLite file must exist
    (summarize makes a new one). Checked first as every writer checks a store (``_check_ours``); a newer
    store is refused. -> (version before, None for a new store; version after)."""
    path = sqlite_path(location)
    if path is not None and not path.exists():
        raise ConfigError("no results store here; nothing to migrate (`medhelm summarize` makes a new one at "
                          f"schema v{SCHEMA_VERSION})", path=path)
    with connect(location, create=True) as store:
        _check_ours(store)
        with store.transaction(exclusive=True):
            done = migrate(store)
        if getattr(store, "guard_made", False):
            return None if done[0] is None else -1, done[1]  # -1: current, its audit guard made again
        return done


def store_version(location: str | Path) -> int | None:
    """The schema version of the store at ``location`` (None: an empty database), checked as a writer checks
    it (``_check_ours``: a newer, foreign or damaged store, or one holding objects the schema does not define,
    is refused); nothing is written. A current store without the audit trail's guard reports -1 (migrate)."""
    with connect(location, create=False) as store:
        _check_ours(store)
        version = stored_version(store)
        return -1 if version == SCHEMA_VERSION and store.guard_missing() else version


def _check_ours(store: Store) -> None:
    """Before creating tables: an existing database must be empty or a MedHELM store of a known version and
    shape (SQLite: also intact; a PostgreSQL database may hold other applications' tables beside ours)."""
    if not isinstance(store, SqliteStore):
        if "meta" in store.schema_columns():
            _check_version(store, has_meta=True)
            _check_tables(store)
            _check_objects(store)
        return
    if store._new_file:
        return
    if store.foreign_tables:
        raise ConfigError(f"this SQLite file holds other tables ({store.foreign_tables}) and is not a MedHELM results "
                          "store; give a new file with --store", path=store.path)
    if store.query("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'")[0][0]:
        _check_version(store, has_meta=True)
        _check_tables(store)  # a store of another shape is not written into (nor "repaired")
        _check_objects(store)
    # integrity before writing: a damaged file must not be made worse (quick_check reads each page once)
    problems = [r[0] for r in store.query("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise ConfigError(f"the results store is damaged (SQLite quick_check found {len(problems)}+ problem(s)); "
                          "restore it from a backup or give a new file with --store", path=store.path)


def _check_objects(store: Store) -> None:
    """Before reading or writing: nothing on our tables the schema does not define (a trigger or a rule can
    rewrite or erase rows as they are written — the audit trail's among them — a view or an index on the trail
    is not ours either). Refused in one line naming them; nothing is written."""
    found = store.foreign_objects()
    if found:
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise ConfigError(f"{named(store)} holds {', '.join(found[:5])}{more}, which the MedHELM schema does not "
                          "define (a trigger or rule can rewrite or erase rows, the audit trail's among them): "
                          "remove them or restore the store from a backup; nothing was written")


def _check_version(store: Store, *, has_meta: bool | None = None) -> None:
    version = stored_version(store, has_meta=has_meta)
    if version is not None and version > SCHEMA_VERSION:
        raise ConfigError(newer(store, version))


def _expected_columns(blob_type: str) -> dict[str, dict[str, str]]:
    """Each table's columns and types as ``schema.py`` declares them (the ones added later may be missing)."""
    added = {(t, c) for t, c, _ in ADDED_COLUMNS}
    out: dict[str, dict[str, str]] = {}
    for table, body in TABLES.items():
        columns: dict[str, str] = {}
        for part in body.format(blob=blob_type).replace("\n", " ").split("PRIMARY KEY")[0].split(","):
            words = part.split()
            if not words or words[0] == "PRIMARY" or not words[0].isidentifier() or (table, words[0]) in added:
                continue
            kind = []
            for w in words[1:]:
                if w in ("NOT", "UNIQUE", "DEFAULT", "PRIMARY"):
                    break
                kind.append(w)
            columns[words[0]] = " ".join(kind).upper()
        out[table] = columns
    return out


def _check_tables(store: Store) -> None:
    """Before reading: every table and column this version reads is there with its type (a store of another
    shape is named, not read into a traceback)."""
    have = store.schema_columns()
    for table, columns in _expected_columns(store.blob_type).items():
        if table not in have:
            raise ConfigError(f"{named(store)} is not a complete MedHELM results store (table "
                              f"'{table}' is missing); summarize into a new --store, or restore it from a backup")
        missing = sorted(set(columns) - set(have[table]))
        if missing:
            raise ConfigError(f"{named(store)} is not a MedHELM results store of this version "
                              f"(table '{table}' lacks column(s) {', '.join(missing)}); summarize into a new --store")
        for column, kind in columns.items():
            if have[table][column] != kind:
                raise ConfigError(f"{named(store)} is not a MedHELM results store of this version "
                                  f"(column '{table}.{escape(column)}' is {escape(have[table][column], 40)}, "
                                  f"not {kind}); summarize into a new --store")


# SQLite files found intact by this process: (device, inode, size, mtime) of the file and its WAL size. A
# long-lived reader (the dashboard opens the store per query) checks each version of the file once, not on every
# page; `medhelm serve dashboard` checks it before starting Streamlit and hands the version it checked over in
# INTACT_ENV, so the first page does not read the whole file again.
_INTACT: set[tuple[int, ...]] = set()
INTACT_ENV = "MEDHELM_STORE_INTACT"


def intact_token(location: str | Path) -> str:
    """The version of a SQLite store this process found intact, for INTACT_ENV ("" for PostgreSQL / unchecked)."""
    path = sqlite_path(location)
    key = _version_key(path) if path is not None else None
    return ":".join(map(str, key)) if key in _INTACT else ""


def _check_integrity(store: Store) -> None:
    """Before reading a SQLite store: ``PRAGMA quick_check`` (every page's structure, once per file version).
    PostgreSQL keeps its own pages consistent (checksums, WAL); its shape is checked by ``_check_tables``."""
    if not isinstance(store, SqliteStore):
        return
    key = _version_key(store.path)
    if key in _INTACT or (key != (0,) and os.environ.get(INTACT_ENV) == ":".join(map(str, key))):
        return
    problems = [r[0] for r in store.query("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise ConfigError(f"the results store is damaged (SQLite quick_check found {len(problems)}+ problem(s)); "
                          "restore it from a backup, or summarize into a new --store", path=store.path)
    _INTACT.add(key)


def _version_key(path: Path) -> tuple[int, ...]:
    """The file's identity and version: (device, inode, size, mtime) of the file, the size of its WAL (a reader
    creates an empty WAL and touches it; a writer grows it, and a checkpoint changes the file itself)."""
    try:
        st = path.stat()
    except OSError:
        return (0,)
    try:
        wal = path.with_name(path.name + "-wal").stat().st_size
    except OSError:
        wal = 0
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, wal)


def _check_schema(store: Store) -> None:
    if "meta" not in store.schema_columns():
        raise ConfigError(f"{named(store)} is not a MedHELM results store (schema v{SCHEMA_VERSION}); run "
                          "`medhelm summarize` first")
    _check_version(store, has_meta=True)
