"""EHRSQL execution accuracy: run the gold and the generated query on the eICU SQLite database.

Safety: the database is opened read-only (``mode=ro`` + ``PRAGMA query_only``), an authorizer refuses
anything but reading (no ATTACH, no PRAGMA, no writes), and a progress handler aborts a query after the
time limit (``timeout_s``, default 10 s). Memory is bounded per connection: strings/blobs are capped at
``MAX_VALUE_BYTES`` (``SQLITE_LIMIT_LENGTH``, so ``randomblob(900000000)`` fails before allocating), the page
cache at ``CACHE_KIB``, the statement length and nesting by SQLite limits, and the fetched result at
``MAX_ROWS`` rows and ``MAX_RESULT_BYTES``; any cap hit makes the query invalid (``QueryFailed``), never an
exhausted pod. Results are compared as HELM's ``EhrSqlMetric`` compares them, as sets of rows (order and
repeats ignored; floats rounded to 6 digits). A question the gold marks unanswerable (``is_impossible``, or the
gold ``null``) is correct iff the model returns no SQL: an empty answer or one with no SQL statement at all
("I cannot answer this question.") abstains (``has_statement``); its query validity is HELM's (a query that runs
1, none or a failing one 0). The SQL is read from ``<sql>`` tags or a code fence, up to the first ``;``.
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
_TAGGED = re.compile(r"<\s*sql\s*>(.*?)<\/?\s*sql\s*>", re.S | re.I)  # HELM's EhrSqlAnnotator's pattern
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
MAX_ROWS = 100_000
MAX_VALUE_BYTES = 8 * 1024 * 1024     # longest string/blob a scorer query may build (SQLITE_LIMIT_LENGTH)
MAX_RESULT_BYTES = 32 * 1024 * 1024   # total text fetched from one query
CACHE_KIB = 8 * 1024                  # page cache per scorer connection
_LIMITS = ((sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES), (sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1_000_000),
           (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 200), (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 100),
           (sqlite3.SQLITE_LIMIT_ATTACHED, 0))
# A statement's opening words (SELECT, PRAGMA, VACUUM alone; the others with the word that must follow them,
# WITH only as a common-table expression). Text without any is prose, i.e. the model abstained. English
# "select" in prose is rare in answers and errs on the side of SQL (scored as an invalid query).
_STATEMENT = re.compile(
    r"\bselect\b|\bpragma\b|\bvacuum\b|\bdelete\s+from\b|\binsert\s+(?:or\s+\w+\s+)?into\b"
    r"|\breplace\s+into\b|\bupdate\s+\S+\s+set\b|\bvalues\s*\(|\balter\s+table\b"
    r"|\battach\s+(?:database\s+)?\S"
    r"|\bdetach\s+(?:database\s+)?\w|\b(?:create|drop)\s+(?:temp\w*\s+|unique\s+|virtual\s+)?(?:table|view|index|trigger)\b"
    r"|\bwith\s+(?:recursive\s+)?\w+\s*(?:\([^)]*\))?\s*as\s*(?:(?:not\s+)?materialized\s*)?\(",
    re.I)


class QueryFailed(Exception):
    pass


def extract_sql(text: str) -> str:
    """The SQL in a completion: inside ``<sql>`` tags or a code fence if there is one, up to the first ';'."""
    t = _THINK.sub("", text)
    fenced = _TAGGED.search(t) or _FENCE.search(t)
    sql = (fenced.group(1) if fenced else t).strip()
    sql = re.sub(r"^(?:sql\s*query\s*:|sql\s*:)\s*", "", sql, flags=re.I)
    if ";" in sql:
        sql = sql[: sql.index(";") + 1]
    return sql.strip()


def has_statement(sql: str) -> bool:
    """Whether extracted text contains an SQL statement at all (no statement = the model abstained)."""
    return bool(_STATEMENT.search(sql))


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
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute("PRAGMA temp_store = FILE")  # sorts/temp b-trees spill to disk, not to the heap
        for limit, value in _LIMITS:
            conn.setlimit(limit, value)
        conn.set_authorizer(_authorizer)
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        cursor = conn.execute(sql)
        result: Counter[tuple[str, ...]] = Counter()
        fetched = size = 0
        while batch := cursor.fetchmany(1000):
            fetched += len(batch)
            if fetched > MAX_ROWS:
                raise QueryFailed("result too large")
            for row in batch:
                key = tuple(_norm(v) for v in row)
                size += sum(len(v) for v in key)
                result[key] += 1
            if size > MAX_RESULT_BYTES:
                raise QueryFailed("result too large")
        return result
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
    if not has_statement(predicted):
        predicted = ""  # prose only ("I cannot answer this question."): abstains, like an empty answer
    gold = instance.correct_references[0].text.strip() if instance.correct_references else ""
    db = str(database) if database is not None else str(instance.extra.get("db_path", ""))
    if instance.extra.get("is_impossible") or gold.lower() in ("", "null", "none"):
        ok = float(not predicted)
        return {NAMES[0]: ok, NAMES[1]: float(bool(predicted) and _runs(db, predicted, timeout_s)), NAMES[2]: ok}
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
    return {NAMES[0]: float(set(got) == set(expected)), NAMES[1]: 1.0, NAMES[2]: None}


def _runs(db: str, sql: str, timeout_s: float) -> bool:
    try:
        run_query(db, sql, timeout_s)
    except QueryFailed:
        return False
    return True


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
