"""EHRSQL scored by a real `medhelm serve metrics` against the database the *server* chose: the catalogue's
`ehr_sql` benchmark read from the server's own data mirror (an eICU-shaped SQLite database built here, with
EHRSQL's test.json/eicu.sql layout), never a file a caller names.

* real questions with correct, wrong and unanswerable answers score as the local scorer scores them against
  the same database (the server's answers are the pipeline's);
* a caller who rewrites an instance's `db_path` to another SQLite file on the server (a results store with a
  patient note) gets answers from the benchmark's database only: no yes/no oracle over the other file;
* a write or ATTACH in a "completion" leaves the server's database unchanged and creates no file.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import grpc
import pytest

from medhelm.benchmarks import resolve
from medhelm.benchmarks.base import LoadContext, PromptBudget
from medhelm.pipeline import RunOptions, plan_runs
from medhelm.rpc import codec
from medhelm.runentries import parse_run_entry
from medhelm.scoring.base import ScoringItem
from medhelm.scoring.ehrsql import score_sql
from medhelm.specs import Completion, FrozenMap, Instance, Reference
from medhelm.v1 import common_pb2, metrics_pb2_grpc

from .conftest import write_deployment

SECRET = "PATIENT-NOTE: John Doe, HIV positive"
SCHEMA = """
DROP TABLE IF EXISTS patient;
CREATE TABLE patient
(
    uniquepid VARCHAR(10) NOT NULL,
    patienthealthsystemstayid INT NOT NULL,
    patientunitstayid INT NOT NULL PRIMARY KEY,
    gender VARCHAR(25) NOT NULL,
    age VARCHAR(10) NOT NULL,
    hospitaladmittime TIMESTAMP NOT NULL,
    hospitaldischargestatus VARCHAR(10)
) ;

DROP TABLE IF EXISTS diagnosis;
CREATE TABLE diagnosis
(
    diagnosisid INT NOT NULL PRIMARY KEY,
    patientunitstayid INT NOT NULL,
    diagnosisname VARCHAR(200) NOT NULL,
    diagnosistime TIMESTAMP NOT NULL,
    icd9code VARCHAR(100)
) ;
"""
PATIENTS = [("002-34851", 129062, 141340, "female", "77", "2104-09-25 07:34:00", "alive"),
            ("006-157753", 454390, 521123, "male", "56", "2105-01-02 11:00:00", "expired"),
            ("010-16572", 236771, 303014, "male", "84", "2104-12-30 23:51:00", "alive")]
DIAGNOSES = [(1, 141340, "acute respiratory failure", "2104-09-25 09:00:00", "518.81"),
             (2, 521123, "sepsis", "2105-01-02 12:10:00", "038.9"),
             (3, 521123, "acute renal failure", "2105-01-03 08:00:00", "584.9"),
             (4, 303014, "sepsis", "2104-12-31 02:00:00", "038.9")]
QUESTIONS = [
    {"id": "q-age", "question": "what is the age of patient 002-34851?",
     "query": "select distinct patient.age from patient where patient.uniquepid = '002-34851'", "is_impossible": False},
    {"id": "q-sepsis", "question": "how many patients were diagnosed with sepsis?",
     "query": "select count(distinct patient.uniquepid) from patient where patient.patientunitstayid in "
              "(select diagnosis.patientunitstayid from diagnosis where diagnosis.diagnosisname = 'sepsis')",
     "is_impossible": False},
    {"id": "q-weather", "question": "what was the weather when patient 010-16572 was admitted?",
     "query": "null", "is_impossible": True},
]


@pytest.fixture
def server_data(tmp_path: Path) -> dict:
    """The server's data mirror (ehr_sql/{test.json,eicu.sql,eicu.sqlite}) and a planted store elsewhere."""
    mirror = tmp_path / "server_mirror"
    d = mirror / "ehr_sql"
    d.mkdir(parents=True)
    (d / "test.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    (d / "eicu.sql").write_text(SCHEMA, encoding="utf-8")
    with sqlite3.connect(d / "eicu.sqlite") as conn:
        conn.executescript(SCHEMA)
        conn.executemany("INSERT INTO patient VALUES (?, ?, ?, ?, ?, ?, ?)", PATIENTS)
        conn.executemany("INSERT INTO diagnosis VALUES (?, ?, ?, ?, ?)", DIAGNOSES)
    conn.close()
    store = tmp_path / "other_workspace" / "results.sqlite"
    store.parent.mkdir()
    with sqlite3.connect(store) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES (?)", (SECRET,))
    conn.close()
    return {"mirror": mirror, "db": d / "eicu.sqlite", "store": store}


def _score(stub, spec, item: ScoringItem) -> dict[str, float | None]:
    reply = stub.Score(common_pb2.ScoreRequest(setup=codec.setup_message(spec), item=codec.item_message(item, 0)),
                       timeout=60)
    return codec.metric_result(reply).stats


def test_ehrsql_is_scored_against_the_servers_database_only(server_data, tmp_path, start_service, refused_url):
    local = tmp_path / "prod_env"
    write_deployment(local, f"{refused_url}/v1")
    # the caller plans the run with a copy of the benchmark of its own (same questions, its own database path)
    client_mirror = tmp_path / "client_mirror"
    (client_mirror / "ehr_sql").mkdir(parents=True)
    for name in ("test.json", "eicu.sql", "eicu.sqlite"):
        (client_mirror / "ehr_sql" / name).write_bytes((server_data["mirror"] / "ehr_sql" / name).read_bytes())
    plan = plan_runs([parse_run_entry("ehr_sql:model=mock/svc-model")],
                     RunOptions(local_path=local, output_path=tmp_path / "out", data_dir=client_mirror,
                                offline=True))[0]
    spec = plan.spec
    svc = start_service("metrics", "--offline", "--data-dir", str(server_data["mirror"]), "--local-path", str(local),
                        "--output-path", str(tmp_path / "out"))
    server_bench = resolve("ehr_sql", LoadContext(data_dir=server_data["mirror"], offline=True))
    by_id = {i.id: i for i in plan.benchmark.instances()}
    assert Path(str(by_id["q-age"].extra["db_path"])).is_relative_to(client_mirror)  # the caller's own path

    answers = {  # (instance, completion) -> the server's scores must equal local scoring on the server's copy
        ("q-age", "SELECT age FROM patient WHERE uniquepid = '002-34851';"): 1.0,
        ("q-age", "SELECT age FROM patient;"): 0.0,
        ("q-sepsis", "```sql\nselect count(distinct p.uniquepid) from patient p join diagnosis d on "
                     "p.patientunitstayid = d.patientunitstayid where d.diagnosisname = 'sepsis';\n```"): 1.0,
        ("q-sepsis", "select count(*) from diagnosis;"): 0.0,
        ("q-weather", ""): 1.0,
        ("q-weather", "select hospitaladmittime from patient where uniquepid = '010-16572';"): 0.0,
    }
    server_copy = {i.id: i for i in server_bench.instances()}
    with grpc.insecure_channel(svc.address) as ch:
        stub = metrics_pb2_grpc.MetricsServiceStub(ch)
        for (qid, text), expected in answers.items():
            inst = by_id[qid]
            stats = _score(stub, spec, ScoringItem(spec, inst, plan.benchmark.prompt(inst, PromptBudget()),
                                                   Completion(text)))
            assert stats["ehr_sql_execution_accuracy"] == expected, (qid, text, stats)
            assert stats == {**stats, **score_sql(server_copy[qid], text, 10.0)}  # the pipeline's own scorer

        # the oracle: the caller points db_path at the planted store and asks a yes/no question about the note
        probe = Instance(id="q-age", input="q", references=(
            Reference("SELECT count(*) FROM notes WHERE text LIKE 'P%'", correct=True),),
            extra=FrozenMap({**by_id["q-age"].extra, "db_path": str(server_data["store"])}))
        question = "SELECT count(*) FROM notes WHERE text LIKE 'P%';"
        assert score_sql(probe, question, 10.0)["ehr_sql_execution_accuracy"] == 1.0  # opened, it would answer
        stolen = _score(stub, spec, ScoringItem(spec, probe, plan.benchmark.prompt(by_id["q-age"], PromptBudget()),
                                                Completion(question)))
        # on the server's database there is no `notes`: the gold fails and the item is unscored, no yes/no
        assert stolen["ehr_sql_execution_accuracy"] is None and stolen.get("ehr_sql_query_validity") != 1.0
        on_server = dataclasses.replace(probe, extra=FrozenMap({**probe.extra, "db_path": str(server_data["db"])}))
        assert stolen == {**stolen, **score_sql(on_server, question, 10.0)}
        # a query over the benchmark's tables still runs: it is that database, not the caller's, that was opened
        count = dataclasses.replace(probe, references=(Reference("select count(*) from patient", correct=True),))
        assert _score(stub, spec, ScoringItem(spec, count, plan.benchmark.prompt(by_id["q-age"], PromptBudget()),
                                              Completion("SELECT count(*) FROM patient;")))[
            "ehr_sql_execution_accuracy"] == 1.0

        # writes and ATTACH in a completion: refused by the read-only connection, no file created
        for attack in ("DROP TABLE patient;", "DELETE FROM diagnosis;",
                       f"ATTACH DATABASE '{tmp_path / 'planted.db'}' AS x;"):
            stats = _score(stub, spec, ScoringItem(spec, by_id["q-sepsis"], plan.benchmark.prompt(
                by_id["q-sepsis"], PromptBudget()), Completion(attack)))
            assert stats["ehr_sql_query_validity"] == 0.0
    with sqlite3.connect(f"file:{server_data['db']}?mode=ro", uri=True) as conn:
        assert conn.execute("select count(*) from patient").fetchone() == (3,)
        assert conn.execute("select count(*) from diagnosis").fetchone() == (4,)
    conn.close()
    assert not (tmp_path / "planted.db").exists()
