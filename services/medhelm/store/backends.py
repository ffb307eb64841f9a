"""The results store behind a small interface, with two backends: SQLite (default) and PostgreSQL.

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``. Both
backends create the same tables (``schema.py``) and answer the same queries, so every leaderboard
number is computed by the same code whichever backend holds the rows.

Concurrency: writers that replace a release or create tables (``transaction(exclusive=True)``) run one at a
time per store — SQLite by ``BEGIN IMMEDIATE`` with a long busy timeout (``BUSY_TIMEOUT_S``), PostgreSQL by
a transaction-scoped advisory lock — so a second ``summarize`` into the same store waits for the first and
then replaces the release itself; it never fails on a lock or a duplicate key, and readers see either
release whole (one transaction each). Past the timeout it is the one-line "locked" error.

Schema versions and the steps between them are ``migrate.py``'s; the checks a store passes before it is read
or written, ``opening.py``'s (``open_store``). Relations an older SQLite store lacks are made on first use
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
from medhelm.store.schema import INDEXES, REVIEW_DDL, REVIEW_INDEX, REVIEW_TABLE, SUBGROUP_DDL, TABLES, ddl

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

    def ensure_review_table(self) -> None:
        """The clinicians' ratings table (schema.REVIEW_DDL), once per connection."""
        if getattr(self, "review_ready", False):
            return
        self.ensure_relations(REVIEW_DDL, last=REVIEW_INDEX)
        self.review_ready = True

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
        # write the new pages twice as WAL does; then WAL, so the dashboard can
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


def connect(location: str | Path, *, create: bool) -> Store:
    """The store a location names, connected, not yet checked (``opening.open_store`` checks it)."""
    text = str(location)
    path = sqlite_path(location)
    if path is None:
        return PostgresStore(text)
    if not create and not path.exists():
        raise ConfigError("no results store here; run `medhelm summarize` first", path=path)
    if path.exists():
        files.check_regular(path, what="results store (SQLite)")
    return SqliteStore(path)


def named(store: Store) -> str:
    """How an error names a store: its file (SQLite; the dashboard hides URLs), else its URL without password."""
    return escape(store.path, 1000) if isinstance(store, SqliteStore) else without_password(store.url)
