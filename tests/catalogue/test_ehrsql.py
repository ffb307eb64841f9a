"""EHRSQL execution accuracy on a small SQLite database built here: read-only, time-limited."""

from __future__ import annotations

import sqlite3

import pytest

from medhelm.scoring.ehrsql import QueryFailed, extract_sql, run_query, score_sql
from medhelm.specs import FrozenMap, Instance, Reference


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "eicu.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE patient (uniquepid TEXT, age INTEGER, hospitaldischargestatus TEXT);
        INSERT INTO patient VALUES ('p1', 70, 'alive'), ('p2', 55, 'expired'), ('p3', 81, 'alive');
    """)
    conn.commit()
    conn.close()
    return path


def _inst(db, gold, impossible=False):
    return Instance(id="q", input="q", references=(Reference(gold),),
                    extra=FrozenMap({"db_path": str(db), "is_impossible": impossible}))


def test_equivalent_queries_match_and_different_results_do_not(db):
    inst = _inst(db, "select uniquepid from patient where hospitaldischargestatus = 'alive'")
    same = "```sql\nSELECT p.uniquepid FROM patient p WHERE p.age > 60 ORDER BY age DESC;\n```\nThis lists them."
    assert score_sql(inst, same, 5)["ehr_sql_execution_accuracy"] == 1.0
    assert score_sql(inst, "select uniquepid from patient;", 5) == {
        "ehr_sql_execution_accuracy": 0.0, "ehr_sql_query_validity": 1.0, "ehr_sql_unanswerable_accuracy": None}
    assert score_sql(inst, "select nope from patient;", 5)["ehr_sql_query_validity"] == 0.0


def test_writes_and_attach_are_refused_and_the_database_is_unchanged(db, tmp_path):
    inst = _inst(db, "select count(*) from patient")
    for attack in ("delete from patient;", "drop table patient;", f"attach database '{tmp_path}/x.db' as x;",
                   "pragma writable_schema = 1;"):
        assert score_sql(inst, attack, 5)["ehr_sql_query_validity"] == 0.0
    assert sqlite3.connect(db).execute("select count(*) from patient").fetchone() == (3,)
    assert not (tmp_path / "x.db").exists()


def test_a_runaway_query_is_stopped_by_the_time_limit(db):
    inst = _inst(db, "select count(*) from patient")
    # 3^24 rows to count: hours of work for a read-only query the authorizer allows (the recursive CTE this
    # test used before was refused outright, "not authorized", so it never reached the time limit)
    runaway = "select count(*) from " + ", ".join(f"patient p{i}" for i in range(24)) + ";"
    # it ends at all because of the time limit, which run_query names; no wall-clock bound is asserted (a
    # loaded machine may take longer than 0.5 s to notice the deadline)
    assert score_sql(inst, runaway, 0.5)["ehr_sql_execution_accuracy"] == 0.0
    with pytest.raises(QueryFailed, match="time limit exceeded"):
        run_query(str(db), runaway, 0.5)
    forever = "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c;"
    with pytest.raises(QueryFailed, match="DatabaseError"):  # a recursive CTE is not a plain read: refused
        run_query(str(db), forever, 0.5)


def test_unanswerable_questions_want_no_sql(db):
    inst = _inst(db, "", impossible=True)
    assert score_sql(inst, "", 5)["ehr_sql_execution_accuracy"] == 1.0
    assert score_sql(inst, "select * from patient;", 5)["ehr_sql_unanswerable_accuracy"] == 0.0


def test_a_failing_gold_query_is_unscored_not_zero(db):
    inst = _inst(db, "select missing_column from patient")
    assert score_sql(inst, "select 1;", 5)["ehr_sql_execution_accuracy"] is None


def test_sql_extraction():
    assert extract_sql("SQL Query: select 1; -- done") == "select 1;"
    assert extract_sql("<think>hmm</think>```sqlite\nselect 2\n```") == "select 2"


def test_prose_without_sql_abstains_like_an_empty_answer(db):
    unanswerable = _inst(db, "", impossible=True)
    answerable = _inst(db, "select count(*) from patient")
    for prose in ("I cannot answer this question.", "I'm sorry, the schema has no column with that, "
                  "so the values cannot be found."):
        assert score_sql(unanswerable, prose, 5)["ehr_sql_unanswerable_accuracy"] == 1.0
        assert score_sql(answerable, prose, 5) == {
            "ehr_sql_execution_accuracy": 0.0, "ehr_sql_query_validity": 0.0, "ehr_sql_unanswerable_accuracy": None}
    for sql in ("select 1;", "DELETE FROM patient;", "with c as (select 1) select * from c;", "pragma foo;"):
        assert score_sql(unanswerable, sql, 5)["ehr_sql_unanswerable_accuracy"] == 0.0


_RSS_PROBE = r"""
import sys, sqlite3
from medhelm.scoring.ehrsql import score_sql
from medhelm.specs import FrozenMap, Instance, Reference

def hwm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

inst = Instance(id="q", input="q", references=(Reference("select count(*) from patient"),),
                extra=FrozenMap({"db_path": sys.argv[1], "is_impossible": False}))
score_sql(inst, "select 1;", 5)  # warm up: imports, first connection
before = hwm_kib()
results = [score_sql(inst, attack, 5) for attack in (
    "SELECT length(randomblob(900000000));", "select length(zeroblob(900000000));",
    "with recursive c(x) as (select 1 union all select x + 1 from c where x < 100) "
    "select length(group_concat(hex(randomblob(100000)))) from c;")]
score_sql(inst, "select length(printf('%.*c', 900000000, 'x'));", 5)  # SQLite answers NULL past the cap
print(all(r["ehr_sql_query_validity"] == 0.0 for r in results), hwm_kib() - before)
"""


def test_a_huge_blob_fails_as_an_invalid_query_within_50_mb(db):
    """Peak RSS of a fresh scorer process grows < 50 MB while model SQL asks for ~900 MB strings/blobs."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(db)], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == "True"
    assert int(out[1]) < 50 * 1024, f"peak RSS grew by {int(out[1]) // 1024} MB"


def test_a_large_result_is_refused(db):
    inst = _inst(db, "select count(*) from patient")
    wide = ("with recursive c(x) as (select 1 union all select x + 1 from c where x < 20) "
            "select hex(randomblob(4000000)) from c;")  # 20 rows × 8 MB of text = over the result cap
    assert score_sql(inst, wide, 10)["ehr_sql_query_validity"] == 0.0


def test_helms_reading_where_ours_follows_it(db):
    """As HELM's EhrSqlAnnotator/EhrSqlMetric: <sql> tags are read, results compare as sets of rows, and an
    unanswerable question's (gold `null`) query validity is whether a query ran."""
    assert extract_sql("Here it is: <sql> select 3 </sql> done") == "select 3"
    inst = _inst(db, "select hospitaldischargestatus from patient")  # alive, expired, alive
    assert score_sql(inst, "<SQL>select distinct hospitaldischargestatus from patient</SQL>", 5)[
        "ehr_sql_execution_accuracy"] == 1.0
    unanswerable = _inst(db, "null", impossible=True)
    assert score_sql(unanswerable, "select 1;", 5) == {
        "ehr_sql_execution_accuracy": 0.0, "ehr_sql_query_validity": 1.0, "ehr_sql_unanswerable_accuracy": 0.0}
    assert score_sql(unanswerable, "select nope;", 5)["ehr_sql_query_validity"] == 0.0
    assert score_sql(_inst(db, "null"), "", 5) == {  # a `null` gold is unanswerable even without the flag
        "ehr_sql_execution_accuracy": 1.0, "ehr_sql_query_validity": 0.0, "ehr_sql_unanswerable_accuracy": 1.0}
