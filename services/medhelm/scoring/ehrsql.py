"""EHRSQL execution accuracy: run the gold and the generated query on the eICU SQLite database.

Safety: the database is opened read-only (``mode=ro`` + ``PRAGMA query_only``), an authorizer refuses
anything but reading (no ATTACH, no PRAGMA, no writes), and a progress handler aborts a query after the
time limit (``timeout_s``, default 10 s). Results are compared as multisets of rows (order-insensitive;
floats rounded to 6 digits). A question the gold marks unanswerable is correct iff the model returns no SQL.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from medhelm.errors import DataUnavailable
from medhelm.scoring.base import ScoringContext
from medhelm.scoring.instance_scorer import InstanceMetric, arg_float, instance_metric_factory
from medhelm.specs import Instance, MetricSpec

NAMES = ("ehr_sql_execution_accuracy", "ehr_sql_query_validity", "ehr_sql_unanswerable_accuracy")
_FENCE = re.compile(r"```(?:sqlite|sql)?\s*(.*?)```", re.S | re.I)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
MAX_ROWS = 100_000


class QueryFailed(Exception):
    pass


def extract_sql(text: str) -> str:
    """The SQL in a completion: inside a code fence if there is one, up to the first ';'."""
    t = _THINK.sub("", text)
    fenced = _FENCE.search(t)
    sql = (fenced.group(1) if fenced else t).strip()
    sql = re.sub(r"^(?:sql\s*query\s*:|sql\s*:)\s*", "", sql, flags=re.I)
    if ";" in sql:
        sql = sql[: sql.index(";") + 1]
    return sql.strip()


def _authorizer(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def run_query(db_path: str, sql: str, timeout_s: float) -> Counter[tuple[str, ...]]:
    """Rows as a multiset of normalised tuples. Raises QueryFailed (error, timeout, non-read statement)."""
    uri = f"file:{quote(str(Path(db_path).resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as err:
        raise QueryFailed(f"cannot open database: {err}") from None
    deadline = time.monotonic() + timeout_s
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_authorizer)
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        cursor = conn.execute(sql)
        rows = cursor.fetchmany(MAX_ROWS + 1)
        if len(rows) > MAX_ROWS:
            raise QueryFailed("result too large")
        return Counter(tuple(_norm(v) for v in row) for row in rows)
    except sqlite3.Error as err:
        reason = "time limit exceeded" if time.monotonic() > deadline else type(err).__name__
        raise QueryFailed(reason) from None
    except (sqlite3.Warning, ValueError) as err:  # e.g. more than one statement
        raise QueryFailed(type(err).__name__) from None
    finally:
        conn.close()


def _norm(value: object) -> str:
    if isinstance(value, float):
        return repr(round(value, 6)) if not value.is_integer() else str(int(value))
    return str(value)


def score_sql(instance: Instance, answer: str, timeout_s: float,
              database: Path | None = None) -> dict[str, float | None]:
    predicted = extract_sql(answer)
    gold = instance.correct_references[0].text.strip() if instance.correct_references else ""
    if instance.extra.get("is_impossible") or not gold:
        ok = float(not predicted)
        return {NAMES[0]: ok, NAMES[1]: None, NAMES[2]: ok}
    db = str(database) if database is not None else str(instance.extra.get("db_path", ""))
    try:
        expected = run_query(db, gold, timeout_s)
    except QueryFailed:
        return {NAMES[0]: None, NAMES[1]: None, NAMES[2]: None}  # the gold itself fails: unscored, not 0
    if not predicted:
        return {NAMES[0]: 0.0, NAMES[1]: 0.0, NAMES[2]: None}
    try:
        got = run_query(db, predicted, timeout_s)
    except QueryFailed:
        return {NAMES[0]: 0.0, NAMES[1]: 0.0, NAMES[2]: None}
    return {NAMES[0]: float(got == expected), NAMES[1]: 1.0, NAMES[2]: None}


def _bind(spec: MetricSpec):
    timeout = arg_float(spec, "timeout_s", 10.0)
    return lambda instance, answer: score_sql(instance, answer, timeout)


def _build(spec: MetricSpec, ctx: ScoringContext) -> InstanceMetric:
    """In a service (``untrusted_items``) the database is the server's choice and the time limit is capped;
    an item's own ``db_path`` (sent by a caller) is never opened."""
    timeout = arg_float(spec, "timeout_s", 10.0)
    if ctx.max_query_s is not None:
        timeout = min(timeout, ctx.max_query_s)
    database = ctx.sql_database
    if ctx.untrusted_items and database is None:
        raise DataUnavailable("EHRSQL needs the server's own copy of the benchmark's database")
    return InstanceMetric(NAMES, lambda instance, answer: score_sql(instance, answer, timeout, database),
                          threaded=True)


_FACTORY = instance_metric_factory(
    NAMES, lambda i, a: score_sql(i, a, 10.0), arg_names=("timeout_s",), bind=_bind, threaded=True,
    description="EHRSQL: gold vs generated query results on a read-only SQLite database with a time limit")
FACTORIES = {"ehr_sql_execution_accuracy": dataclasses.replace(_FACTORY, build=_build)}
