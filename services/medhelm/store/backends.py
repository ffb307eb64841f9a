"""The results store behind a small interface, with two backends: SQLite (default) and PostgreSQL.

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``. Both
backends create the same tables (``schema.py``) and answer the same queries, so every leaderboard
number is computed by the same code whichever backend holds the rows.

Concurrency: writers that replace a release or create tables (``transaction(exclusive=True)``) run one at a
time per store — SQLite by ``BEGIN IMMEDIATE`` with a long busy timeout (``BUSY_TIMEOUT_S``), PostgreSQL by
a transaction-scoped advisory lock — so a second ``summarize`` into the same store waits for the first and
then replaces the release itself; it never fails on a lock or a duplicate key, and readers see either
release whole (one transaction each). Past the timeout it is the one-line "locked" error.

Schema versions (``schema.SCHEMA_VERSION``): a store is created at the current version with every relation;
an older one is brought forward by ``Store.migrate`` inside an exclusive transaction (all steps or none, the
version re-read under the lock, so two pods migrating at once do it once). A store newer than this code is
refused by every reader and writer before anything is written, in one line naming both versions. An older
store: SQLite (one file, the embedded store) is read as it is and migrated by its next summarize, inside that
summarize's transaction (a refused summarize leaves it byte for byte as it was); PostgreSQL (shared by many
pods, whose role should not own the schema) is refused until ``medhelm store migrate`` (``migrate_store``,
the chart's hook Job) has run. Relations an older SQLite store lacks are made on first use
(``ensure_relations``), only when missing: a reader that finds them writes nothing and never waits.

A full disk or a read-only file/folder is ``OutputUnwritable`` (exit 74, "cannot write"), never
"damaged"; a store URL of another scheme (``mysql://``) is refused, never taken for a folder name.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.access import audit
from medhelm.access.audit import DDL as AUDIT_DDL
from medhelm.errors import ConfigError, OutputUnwritable, escape, without_password
from medhelm.scrub import register_value
from medhelm.store.schema import (ADDED_COLUMNS, INDEXES, REVIEW_DDL, REVIEW_INDEX, REVIEW_TABLE, SCHEMA_VERSION,
                                  SUBGROUP_DDL, TABLES, ddl)
from medhelm.version import __version__

DEFAULT_FILENAME = "results.sqlite"
BUSY_TIMEOUT_S = 1800.0  # a second summarize waits this long for the first (a nightly 50-benchmark load)
_PG_WRITE_LOCK = 0x6D6564686C6D  # advisory lock key ("medhlm"): one release writer at a time per database


class Store:
    """One connection to a results store. Use as a context manager; writes happen in ``transaction()``."""

    blob_type = "BLOB"
    url = ""
    audit_guard: tuple[str, ...] = ()  # the trail's append-only triggers, in this backend's SQL

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._in_transaction = False

    # --- the interface -----------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._damaged():
            cur = self._conn.cursor()
            cur.execute(self._sql(sql), tuple(params))
            rows = cur.fetchall()
            cur.close()
            self._end_read()
        return self._rows(rows)

    def query_dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._damaged():
            cur = self._conn.cursor()
            cur.execute(self._sql(sql), tuple(params))
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r)) for r in self._rows(cur.fetchall())]
            cur.close()
            self._end_read()
        return rows

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._damaged():
            cur = self._conn.cursor()
            cur.execute(self._sql(sql), tuple(params))
            cur.close()

    def insert_many(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown table {table}")
        marks = ", ".join("?" for _ in columns)
        sql = self._sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})")
        with self._damaged():
            cur = self._conn.cursor()
            cur.executemany(sql, [tuple(r) for r in rows])
            cur.close()

    @contextmanager
    def _damaged(self) -> Iterator[None]:
        """A corrupt, truncated or foreign database file is the user's input, not a bug: one line."""
        yield

    @contextmanager
    def transaction(self, *, exclusive: bool = False) -> Iterator[None]:
        """Commit on success, roll back on any error. ``exclusive``: wait until no other exclusive writer of
        this store is running (summarize, schema creation), then hold that right until the commit."""
        self._in_transaction = True
        try:
            if exclusive:
                with self._damaged():
                    self._begin_exclusive()
            yield
        except BaseException:
            self._conn.rollback()
            raise
        finally:
            self._in_transaction = False
        with self._damaged():
            self._conn.commit()
        self._after_commit()

    def _after_commit(self) -> None:
        return None

    def _begin_exclusive(self) -> None:
        return None

    def _end_read(self) -> None:
        # a long-lived reader (the dashboard) must not hold a PostgreSQL transaction open
        if not self._in_transaction:
            self._conn.commit()

    def create_schema(self) -> None:
        """A new store at the current version, every relation made (a no-op on an existing store: nothing is
        written to it here). One exclusive writer at a time: two processes creating the same table at once
        would fail on PostgreSQL (``CREATE TABLE IF NOT EXISTS`` is not safe against a concurrent creation)."""
        if "meta" in self.schema_columns():
            return  # an existing store: what it lacks is made by ``migrate`` inside the writer's transaction,
            # so a summarize refused later leaves an older store exactly as it was (no table added)
        with self.transaction(exclusive=True):
            self.migrate()
        self._review_ready = True

    def ensure_review_table(self) -> None:
        """The clinicians' ratings table (schema.REVIEW_DDL), once per connection."""
        if getattr(self, "_review_ready", False):
            return
        self.ensure_relations(REVIEW_DDL, last=REVIEW_INDEX)
        self._review_ready = True

    def ensure_relations(self, statements: Sequence[str], *, last: str) -> None:
        """Tables and indexes made on first use (the ratings, the audit trail): nothing is written when
        ``last``, the relation ``statements`` make last, exists, so a reader never waits for a running
        summarize; else they are made by an exclusive writer, one process at a time."""
        if not self._has_relation(last):
            with self.transaction(exclusive=True):
                for stmt in statements:
                    self.execute(stmt)

    def _has_relation(self, name: str) -> bool:
        raise NotImplementedError

    def relations(self) -> list[str]:
        """Every relation of the current schema, in order (a table before its index)."""
        return [*ddl(self.blob_type), *REVIEW_DDL, *AUDIT_DDL, *self.audit_guard, *SUBGROUP_DDL]

    def foreign_objects(self) -> list[str]:
        """Triggers, rules, views, policies and indexes on our tables that the schema does not define (each
        named for a message), and our own guard triggers where they differ from the schema's."""
        raise NotImplementedError

    def guard_missing(self) -> bool:
        """True when the audit table exists without the schema's append-only triggers (a store made before
        them, or one whose triggers were dropped): ``migrate`` makes them."""
        raise NotImplementedError

    def migrate(self) -> tuple[int | None, int]:
        """Inside the caller's exclusive transaction: the store to the current schema version, from the
        version it records, read here under the writer's lock (another process may have migrated it since
        it was opened). Nothing is written when it is current. -> (version before, None for a new store;
        version after). A newer store is refused."""
        before = stored_version(self)
        if before is not None and before > SCHEMA_VERSION:
            raise ConfigError(_newer(self, before))
        if before == SCHEMA_VERSION:
            if self.guard_missing():  # made before the trail's guard existed, or stripped of it: made again
                for stmt in self.audit_guard:
                    self.execute(stmt)
                self.guard_made = True
            return before, before
        # v1 -> v2: every relation made where missing; v2 -> v3 (and v1 -> v3): the columns added since
        # (ADDED_COLUMNS: the models' jury cost, the runs' access record), each where missing
        for stmt in self.relations():
            self.execute(stmt)
        for table, column, kind in ADDED_COLUMNS:
            if column not in self.columns(table):
                self.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        self.execute("DELETE FROM meta WHERE release = '' AND key = 'schema_version'")
        self.execute("INSERT INTO meta (release, key, value) VALUES ('', 'schema_version', ?)", (str(SCHEMA_VERSION),))
        if before is not None:
            from datetime import datetime, timezone

            at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.execute("DELETE FROM meta WHERE release = '' AND key = ?", (f"migrated_to_v{SCHEMA_VERSION}",))
            self.execute("INSERT INTO meta (release, key, value) VALUES ('', ?, ?)",
                         (f"migrated_to_v{SCHEMA_VERSION}", f"{at} from v{before} by medhelm {__version__}"))
        self._review_ready = True
        return before, SCHEMA_VERSION

    def columns(self, table: str) -> list[str]:
        with self._damaged():
            cur = self._conn.cursor()
            cur.execute(f"SELECT * FROM {table} WHERE 1 = 0")
            names = [d[0] for d in cur.description]
            cur.close()
        return names

    def schema_columns(self) -> dict[str, dict[str, str]]:
        """Every table of the store, its columns and their types as ``schema.py`` spells them (upper case;
        from the catalogue: never fails on a missing table)."""
        raise NotImplementedError

    def delete_release(self, release: str) -> None:
        self.execute("DELETE FROM instances WHERE run_id IN (SELECT run_id FROM runs WHERE release = ?)", (release,))
        for table in TABLES:
            if table != "instances":
                self.execute(f"DELETE FROM {table} WHERE release = ?", (release,))

    def releases(self) -> list[str]:
        """Releases, most recently summarised first."""
        rows = self.query("SELECT release, value FROM meta WHERE key = 'created_at' ORDER BY value DESC, release")
        return [r[0] for r in rows]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sql(self, sql: str) -> str:
        return sql

    def _rows(self, rows: list[tuple]) -> list[tuple]:
        return rows


class SqliteStore(Store):
    def __init__(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # /proc/..., a file on the way, a read-only or full file system
            reason = {errno.ENOENT: "a folder on the way cannot be created there", errno.EEXIST: "a file is in the way",
                      errno.ENOTDIR: "a part of the path is not a folder"}.get(err.errno, err.strerror or "")
            raise ConfigError(f"cannot create the results store's folder ({reason or type(err).__name__})",
                              path=path.parent) from None
        # A brand-new file has no reader yet: its first load goes through a rollback journal, which does not
        # write the new pages twice as WAL does (~25% of a large summarize); then WAL, so the dashboard can
        # read while a later summarize writes.
        self._new_file = not path.exists() or path.stat().st_size == 0
        self.url = f"sqlite:///{path}"
        self.path = path
        if not self._new_file and _head(path) != b"SQLite format 3\x00":
            if not os.path.exists(f"{path}-journal"):
                raise ConfigError("not a SQLite file (a results store is made by `medhelm summarize`)", path=path)
            # another summarize is making this store in its first transaction (its pages spilled before the
            # header): a new store for us too, and SQLite's lock makes us wait for that transaction to end
            self._new_file = True
        with self._damaged():
            conn = sqlite3.connect(str(path), check_same_thread=False, timeout=BUSY_TIMEOUT_S)
            tables = set() if self._new_file else \
                {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            self.foreign_tables = 0 if not tables or "meta" in tables else len(tables)
            if not self.foreign_tables:  # never touch someone else's database, not even its journal mode
                _journal_mode(conn, 'DELETE' if self._new_file else 'WAL')
                conn.execute("PRAGMA synchronous=NORMAL")
        super().__init__(conn)

    @contextmanager
    def _damaged(self) -> Iterator[None]:
        try:
            yield
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # our SQL or our data: a bug (exit 70), not the user's file
        except (UnicodeDecodeError, sqlite3.DatabaseError) as err:
            raise self._refused(err) from None

    def _refused(self, err: UnicodeDecodeError | sqlite3.DatabaseError) -> ConfigError | OutputUnwritable:
        """The one line for a store SQLite cannot read or write (never the cell text: it may be a patient's)."""
        # Overwritten pages can still parse as records; their TEXT cells are then not UTF-8 (we only ever write
        # UTF-8): damage, as much as a page that fails its checks. The sqlite3 module says so either as a
        # UnicodeDecodeError or as "Could not decode to UTF-8 column 'x' with text '...'", which quotes the cell.
        if isinstance(err, UnicodeDecodeError) or str(err).startswith("Could not decode to UTF-8"):
            first = "a text value is not UTF-8"
        else:
            unwritable = self._unwritable(err)
            if unwritable is not None:
                return unwritable
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        return ConfigError(f"the results store cannot be used ({first}); is it damaged, locked or not a MedHELM "
                           "store? Give another --store, or restore it from a backup", path=self.path)

    def _unwritable(self, err: sqlite3.DatabaseError) -> ConfigError | OutputUnwritable | None:
        """A full disk or a read-only file/folder is not damage: say what it is (exit 74), the store unchanged."""
        primary = getattr(err, "sqlite_errorcode", 0) & 0xFF
        reason = {sqlite3.SQLITE_FULL: "no space left on the device (or the file reached its size limit)",
                  sqlite3.SQLITE_READONLY: "the file or its folder is read-only"}.get(primary)
        if reason is None and primary in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN):
            try:
                fs = os.statvfs(self.path.parent)
            except OSError:
                return None
            if fs.f_blocks == 0:  # /proc, /sys: no file system that holds files
                return ConfigError("cannot be a results store (a virtual file system such as /proc); give a file on "
                                   "a real disk with --store or --output-path", path=self.path)
            if fs.f_flag & os.ST_RDONLY:
                reason = "read-only file system"
            elif fs.f_bavail * fs.f_frsize < 1024 * 1024:
                reason = "no space left on the device"
            elif not os.access(self.path.parent, os.W_OK):
                reason = "the folder is not writable (permission denied)"
        if reason is None:
            return None
        return OutputUnwritable(f"{escape(self.path, 1000)}: cannot write the results store ({reason}); nothing was "
                                "changed in it: free space or make it writable, then run the same command again")

    def schema_columns(self) -> dict[str, set[str]]:
        tables = [r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: {r[0]: str(r[1]).upper() for r in self.query("SELECT name, type FROM pragma_table_info(?)", (t,))}
                for t in tables}

    def _has_relation(self, name: str) -> bool:
        return bool(self.query("SELECT COUNT(*) FROM sqlite_master WHERE name = ?", (name,))[0][0])

    audit_guard = audit.SQLITE_GUARD

    def foreign_objects(self) -> list[str]:
        guards = {_trigger_name(s): _words(s.replace(" IF NOT EXISTS", "")) for s in self.audit_guard}
        found = []
        for kind, name, table, sql in self.query("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                                 "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"):
            if kind == "table":
                ok = name in OUR_TABLES
            elif kind == "index":
                ok = sql is None or OUR_INDEXES.get(name) == table  # sql None: a constraint's own index
            elif kind == "trigger":
                ok = guards.get(name) == _words(sql or "")
            else:  # a view
                ok = False
            if not ok:
                found.append(f"{kind} '{escape(name, 60)}'" + (f" on '{escape(table, 60)}'" if table != name else ""))
        return found

    def guard_missing(self) -> bool:
        have = {r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        return self._has_relation(audit.TABLE) and not {_trigger_name(s) for s in self.audit_guard} <= have

    def _begin_exclusive(self) -> None:
        # the write lock from the start: a deferred transaction that reads, then writes, can hit a stale
        # snapshot (SQLITE_BUSY at once, no waiting) when another summarize committed in between
        if not self._conn.in_transaction:
            self._conn.execute("BEGIN IMMEDIATE")

    def _after_commit(self) -> None:
        # the first real load is done (the store's own rows, release '', are there from its creation)
        if self._new_file and self.query("SELECT COUNT(*) FROM meta WHERE release <> ''")[0][0]:
            _journal_mode(self._conn, "WAL")
            self._new_file = False


class PostgresStore(Store):
    blob_type = "BYTEA"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise ConfigError("a postgresql:// store needs psycopg: pip install 'medhelm-k8s[postgres]'") from None
        register_value(url)  # its password: scrubbed from every text this process emits
        try:
            conn = psycopg.connect(url, autocommit=False, connect_timeout=10)
        except psycopg.OperationalError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"cannot connect to the results store {without_password(url)}: {first}") from None
        super().__init__(conn)
        self.url = url

    def _begin_exclusive(self) -> None:
        self.execute(f"SELECT pg_advisory_xact_lock({_PG_WRITE_LOCK})")  # released by commit/rollback

    def _has_relation(self, name: str) -> bool:
        return self.query("SELECT to_regclass(?)", (name,))[0][0] is not None

    audit_guard = audit.POSTGRES_GUARD

    def foreign_objects(self) -> list[str]:
        ours = sorted(OUR_TABLES)
        here = "current_schema()::regnamespace"
        found = []
        for table, name, function, enabled, kind, source in self.query(
                "SELECT c.relname, t.tgname, p.proname, t.tgenabled, t.tgtype, p.prosrc FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid "
                f"WHERE NOT t.tgisinternal AND c.relnamespace = {here} AND c.relname = ANY(?) ORDER BY 1, 2",
                (ours,)):
            if not (table == audit.TABLE and name == audit.GUARD and function == audit.GUARD_FUNCTION
                    and enabled == "O" and int(kind) == _PG_GUARD_TYPE and source == audit.GUARD_FUNCTION_BODY):
                found.append(f"trigger '{escape(name, 60)}' on '{table}'")
        for table, name in self.query("SELECT tablename, rulename FROM pg_rules WHERE schemaname = current_schema() "
                                      "AND tablename = ANY(?) ORDER BY 1, 2", (ours,)):
            found.append(f"rule '{escape(name, 60)}' on '{table}'")
        for (name,) in self.query(
                "SELECT DISTINCT v.relname FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid "
                "JOIN pg_class v ON v.oid = r.ev_class JOIN pg_class t ON t.oid = d.refobjid "
                "WHERE d.classid = 'pg_rewrite'::regclass AND v.oid <> t.oid "
                f"AND t.relnamespace = {here} AND t.relname = ANY(?) ORDER BY 1", (ours,)):
            found.append(f"view '{escape(name, 60)}'")
        for table, name in self.query(
                "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ANY(?) "
                "AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE connamespace = "
                f"{here} AND contype IN ('p', 'u')) ORDER BY 1, 2", (ours,)):
            if OUR_INDEXES.get(name) != table:
                found.append(f"index '{escape(name, 60)}' on '{table}'")
        for (table,) in self.query(
                f"SELECT c.relname FROM pg_class c WHERE c.relnamespace = {here} AND c.relname = ANY(?) AND "
                "(c.relrowsecurity OR EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid)) ORDER BY 1",
                (ours,)):
            found.append(f"row-level security on '{table}'")
        return found

    def guard_missing(self) -> bool:
        if not self._has_relation(audit.TABLE):
            return False
        return not self.query("SELECT COUNT(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE "
                              "c.relnamespace = current_schema()::regnamespace AND c.relname = ? AND t.tgname = ?",
                              (audit.TABLE, audit.GUARD))[0][0]

    def schema_columns(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for table, column, kind in self.query("SELECT table_name, column_name, data_type FROM "
                                              "information_schema.columns WHERE table_schema = current_schema()"):
            out.setdefault(table, {})[column] = str(kind).upper()
        return out

    @contextmanager
    def _damaged(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn, psycopg.errors.DataError,
                psycopg.errors.InvalidTextRepresentation) as err:
            # a table or column we expect is not there, or holds what we cannot read: not our store's shape
            try:
                self._conn.rollback()
            except psycopg.Error:
                pass
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise ConfigError(f"the results store {without_password(self.url)} cannot be used ({first}); is it a "
                              "MedHELM store of this version? Give another --store") from None

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _rows(self, rows: list[tuple]) -> list[tuple]:
        # bytea arrives as memoryview; callers get bytes from either backend
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]


# Every relation the schema defines (a store's other tables, and other objects on its tables, are not ours)
OUR_TABLES = frozenset({*TABLES, REVIEW_TABLE, audit.TABLE, *(re.search(r"EXISTS (\w+)", s).group(1)  # type: ignore[union-attr]
                                                            for s in SUBGROUP_DDL)})
OUR_INDEXES = {m.group(1): m.group(2) for s in (*INDEXES, *REVIEW_DDL, *audit.DDL)
               for m in [re.search(r"CREATE INDEX IF NOT EXISTS (\w+) ON (\w+)", s)] if m}
_PG_GUARD_TYPE = 2 | 8 | 16 | 32  # pg_trigger.tgtype: BEFORE, DELETE, UPDATE, TRUNCATE; for each statement


def _trigger_name(statement: str) -> str:
    return statement.replace(" IF NOT EXISTS", "").split()[2]


def _words(sql: str) -> str:
    return " ".join(sql.split())


def _journal_mode(conn: sqlite3.Connection, mode: str) -> None:
    """Switch the journal mode, waiting (as for any lock) while another summarize holds the file: SQLite
    answers "locked" at once here instead of calling the busy handler."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper() != mode:
                conn.execute(f"PRAGMA journal_mode={mode}")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(16)
    except OSError as err:
        raise ConfigError(f"cannot be read ({err.strerror})", path=path) from None


def sqlite_path(location: str | Path) -> Path | None:
    """The SQLite file a store location names (None for PostgreSQL)."""
    text = str(location)
    if text.startswith(("postgresql://", "postgres://")):
        return None
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if scheme and not text.startswith("sqlite:///"):
        raise ConfigError(f"--store: '{escape(scheme.group(1), 40)}://' is not a store this version reads; give "
                          "sqlite:///path, postgresql://user@host/db or a plain path")
    path = Path(text[len("sqlite:///"):] if text.startswith("sqlite:///") else text)
    if path.is_dir() or (not path.suffix and not path.exists()):
        path = path / DEFAULT_FILENAME
    return path


def open_store(location: str | Path, *, create: bool = False, make_schema: bool = True) -> Store:
    """``sqlite:///path``, ``postgresql://...`` or a plain path (a SQLite file, or a folder holding one).
    ``make_schema=False``: a new store's relations are left to the caller's own transaction (summarize's
    ``migrate``), so a refused summarize leaves an empty database empty."""
    store = _connect(location, create=create)
    try:
        if create:
            _check_ours(store)
            _check_migrated(store)
            if make_schema:
                store.create_schema()
        else:
            _check_integrity(store)  # first: a damaged file is named as damaged, not as "not a store"
            _check_schema(store)
            _check_tables(store)
            _check_objects(store)
            _check_migrated(store, has_meta=True)
    except BaseException:
        store.close()
        raise
    return store


def _connect(location: str | Path, *, create: bool) -> Store:
    text = str(location)
    path = sqlite_path(location)
    if path is None:
        return PostgresStore(text)
    if not create and not path.exists():
        raise ConfigError("no results store here; run `medhelm summarize` first", path=path)
    if path.exists():
        files.check_regular(path, what="results store (SQLite)")
    return SqliteStore(path)


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
    with _connect(location, create=True) as store:
        _check_ours(store)
        with store.transaction(exclusive=True):
            done = store.migrate()
        if getattr(store, "guard_made", False):
            return None if done[0] is None else -1, done[1]  # -1: current, its audit guard made again
        return done


def store_version(location: str | Path) -> int | None:
    """The schema version of the store at ``location`` (None: an empty database), checked as a writer checks
    it (``_check_ours``: a newer, foreign or damaged store, or one holding objects the schema does not define,
    is refused); nothing is written. A current store without the audit trail's guard reports -1 (migrate)."""
    with _connect(location, create=False) as store:
        _check_ours(store)
        version = stored_version(store)
        return -1 if version == SCHEMA_VERSION and store.guard_missing() else version


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
        raise ConfigError(f"{_named(store)} records schema version '{escape(text, 20)}', which is no version; is it "
                          "damaged? Restore it from a backup, or summarize into a new --store")
    return int(text)


def _newer(store: Store, version: int) -> str:
    return (f"{_named(store)} is at store schema v{version}, written by a newer medhelm; this medhelm {__version__} "
            f"reads schema v{SCHEMA_VERSION} at most: upgrade medhelm (nothing was written)")


def _check_migrated(store: Store, *, has_meta: bool | None = None) -> None:
    """An older PostgreSQL store is refused until ``medhelm store migrate`` ran (a SQLite one is read as it is and
    migrated by its next summarize): its pods may not own the schema, and an implicit migration by whichever
    pod came first would cut off the older pods of a rolling upgrade without a decision or a backup."""
    if isinstance(store, SqliteStore):
        return
    version = stored_version(store, has_meta=has_meta)
    if version is not None and version < SCHEMA_VERSION:
        raise ConfigError(f"{_named(store)} is at store schema v{version}; this medhelm {__version__} needs "
                          f"v{SCHEMA_VERSION}: run `medhelm store migrate` first (the chart's migration hook Job "
                          "does at helm upgrade); nothing was written")
    if version is not None and store.guard_missing():
        raise ConfigError(f"{_named(store)} lacks the audit trail's append-only guard: run `medhelm store migrate` "
                          "first (the chart's migration hook Job does at helm upgrade); nothing was written")


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
        raise ConfigError(f"{_named(store)} holds {', '.join(found[:5])}{more}, which the MedHELM schema does not "
                          "define (a trigger or rule can rewrite or erase rows, the audit trail's among them): "
                          "remove them or restore the store from a backup; nothing was written")


def _check_version(store: Store, *, has_meta: bool | None = None) -> None:
    version = stored_version(store, has_meta=has_meta)
    if version is not None and version > SCHEMA_VERSION:
        raise ConfigError(_newer(store, version))


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
            raise ConfigError(f"{_named(store)} is not a complete MedHELM results store (table "
                              f"'{table}' is missing); summarize into a new --store, or restore it from a backup")
        missing = sorted(set(columns) - set(have[table]))
        if missing:
            raise ConfigError(f"{_named(store)} is not a MedHELM results store of this version "
                              f"(table '{table}' lacks column(s) {', '.join(missing)}); summarize into a new --store")
        for column, kind in columns.items():
            if have[table][column] != kind:
                raise ConfigError(f"{_named(store)} is not a MedHELM results store of this version "
                                  f"(column '{table}.{escape(column)}' is {escape(have[table][column], 40)}, "
                                  f"not {kind}); summarize into a new --store")


# SQLite files found intact by this process: (device, inode, size, mtime) of the file and its WAL size. A
# long-lived reader (the dashboard opens the store per query) checks each version of the file once, not on every
# page; `medhelm serve dashboard` checks it before starting Streamlit and hands the version it checked over in
# INTACT_ENV, so the first page does not read the whole file again (about 2.5 ms per MB).
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
        raise ConfigError(f"{_named(store)} is not a MedHELM results store (schema v{SCHEMA_VERSION}); run "
                          "`medhelm summarize` first")
    _check_version(store, has_meta=True)


def _named(store: Store) -> str:
    """How an error names a store: its file (SQLite; the dashboard hides URLs), else its URL without password."""
    return escape(store.path, 1000) if isinstance(store, SqliteStore) else without_password(store.url)
