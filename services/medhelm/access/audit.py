"""The audit trail: every view of instance text and every export, in the results store itself.

One row per event: when (UTC), who (subject, role, where they came from), what (action), which
release / run ids / instance ids, and a short detail (page, counts). Never the text itself. The table
lives beside the leaderboard tables in SQLite or PostgreSQL alike, but outside ``schema.TABLES``:
re-summarising a release replaces its tables and must not erase who looked at it.

Failure semantics: ``record`` commits the row before it returns; any failure raises ``AuditError``
(one line naming the exception type only) and the caller must not show or write the text. Each event
also counts in Prometheus (``medhelm_audit_events_total{action,role}``; failures in
``medhelm_audit_failures_total``) — labels never name a user, a run or an instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from prometheus_client import Counter

from medhelm.access.roles import Principal
from medhelm.errors import ConfigError, MedhelmError, without_password

TABLE = "audit"
INDEX = "audit_by_time"  # made after the table: when it exists, both do
DDL = (f"CREATE TABLE IF NOT EXISTS {TABLE} (at TEXT NOT NULL, actor TEXT NOT NULL, role TEXT NOT NULL, "
       "source TEXT NOT NULL, action TEXT NOT NULL, release TEXT, run_ids TEXT, instance_ids TEXT, detail TEXT)",
       f"CREATE INDEX IF NOT EXISTS {INDEX} ON {TABLE} (at)")
# Append-only by construction: every UPDATE, DELETE (and, on PostgreSQL, TRUNCATE) of the trail is refused
# by triggers of the schema's own, made with the table at creation or migration. On PostgreSQL only the
# schema's owner (the migration role) may drop or disable them: the pods' role, whatever row rights it is
# granted, can add rows and read them, never change or remove one. A store holding triggers, rules, views or
# indexes the schema does not define is refused (store/opening.py ``_check_objects``).
GUARD = "audit_append_only"
GUARD_MESSAGE = "the audit trail is append-only"
SQLITE_GUARD = tuple(f"CREATE TRIGGER IF NOT EXISTS {GUARD}_{op.lower()} BEFORE {op} ON {TABLE} "
                     f"BEGIN SELECT RAISE(ABORT, '{GUARD_MESSAGE}'); END" for op in ("UPDATE", "DELETE"))
GUARD_FUNCTION = "medhelm_audit_append_only"
GUARD_FUNCTION_BODY = f" BEGIN RAISE EXCEPTION '{GUARD_MESSAGE}'; END "
POSTGRES_GUARD = (
    f"CREATE OR REPLACE FUNCTION {GUARD_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS ${GUARD}${GUARD_FUNCTION_BODY}${GUARD}$",
    f"DROP TRIGGER IF EXISTS {GUARD} ON {TABLE}",
    f"CREATE TRIGGER {GUARD} BEFORE UPDATE OR DELETE OR TRUNCATE ON {TABLE} FOR EACH STATEMENT "
    f"EXECUTE FUNCTION {GUARD_FUNCTION}()")
COLUMNS = ("at", "actor", "role", "source", "action", "release", "run_ids", "instance_ids", "detail")

# What the trail records. view-*: instance text shown; export*: a bundle written; denied: a refused request.
# view-review: blinded answers shown on the Review page; rate: a clinician's ratings stored; report: an evaluation
# report written (`medhelm report`: aggregates only, audited as an export is).
ACTIONS = ("view-instances", "view-paired", "export", "export-redacted", "denied", "view-review", "rate", "report")

EVENTS = Counter("medhelm_audit_events", "audited accesses to instance text and exports", ["action", "role"])
FAILURES = Counter("medhelm_audit_failures", "audit records that could not be written (the text was withheld)")


class Store(Protocol):
    """What the trail needs of a results store (``medhelm.store.backends.Store`` is one; access sits below
    the store, which calls it, so it names the interface rather than importing the class)."""

    url: str

    def ensure_relations(self, statements: Sequence[str], *, last: str) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...


class AuditError(MedhelmError):
    """The audit record could not be written: the text it would have recorded is not shown."""


@dataclass(frozen=True)
class Event:
    at: str
    actor: str
    role: str
    source: str
    action: str
    release: str | None
    run_ids: tuple[int, ...]
    instance_ids: tuple[str, ...]
    detail: str


def ensure_table(store: Store) -> None:
    if getattr(store, "_audit_ready", False):
        return
    store.ensure_relations(DDL, last=INDEX)  # two sessions making it at once would fail on PostgreSQL
    store._audit_ready = True  # type: ignore[attr-defined]


def record(store: Store, principal: Principal, action: str, *, release: str | None, run_ids: Iterable[int] = (),
           instance_ids: Iterable[str] = (), detail: str = "") -> Event:
    """Write one audit row and commit it; ``AuditError`` when that is impossible."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action}")
    event = Event(datetime.now(timezone.utc).isoformat(timespec="microseconds"), principal.subject,
                  principal.label, principal.source, action, release, tuple(int(r) for r in run_ids),
                  tuple(str(i) for i in instance_ids), detail)
    try:
        ensure_table(store)
        with store.transaction():
            store.execute(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})",
                          (event.at, event.actor, event.role, event.source, event.action, event.release,
                           _join(event.run_ids), "\n".join(event.instance_ids), event.detail))
    except Exception as err:  # noqa: BLE001 - any driver error: withhold the text, say only the type
        FAILURES.inc()
        raise AuditError(f"cannot write the audit record ({type(err).__name__}); instance text withheld") from None
    EVENTS.labels(action, event.role).inc()
    return event


def events(store: Store, *, since: str | None = None, until: str | None = None, actor: str | None = None,
           release: str | None = None, action: str | None = None, run_id: int | None = None,
           limit: int = 1000) -> list[Event]:
    """Audit rows, newest first, filtered (``since``/``until``: ISO dates or times, UTC)."""
    try:
        ensure_table(store)
    except Exception as err:  # noqa: BLE001 - a read-only login on a store that never had the table
        raise ConfigError(f"cannot open the audit trail in {without_password(store.url)} "
                          f"({type(err).__name__})") from None
    where, params = [], []  # type: ignore[var-annotated]
    for column, op, value in (("at", ">=", since), ("at", "<", until), ("actor", "=", actor),
                              ("release", "=", release), ("action", "=", action)):
        if value is not None:
            where.append(f"{column} {op} ?")
            params.append(value)
    if run_id is not None:
        where.append("run_ids LIKE ?")
        params.append(f"%,{int(run_id)},%")
    sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}" + (f" WHERE {' AND '.join(where)}" if where else "")
    rows = store.query(sql + " ORDER BY at DESC LIMIT ?", (*params, int(limit)))
    return [_event(r) for r in rows]


def _join(run_ids: tuple[int, ...]) -> str:
    return f",{','.join(str(r) for r in run_ids)}," if run_ids else ""


def _event(r: tuple[Any, ...]) -> Event:
    at, actor, role, source, action, release, run_ids, instance_ids, detail = r
    return Event(at, actor, role, source, action, release,
                 tuple(int(x) for x in (run_ids or "").split(",") if x),
                 tuple(x for x in (instance_ids or "").split("\n") if x), detail or "")
