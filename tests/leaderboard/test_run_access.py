"""Runs record where and when they asked each endpoint (issue 51, item 5), and the committee's page shows it
beside what the hospital's report.yaml states.

Real runs: `medhelm run` against the project's mock OpenAI server (a deployment URL with a user and password in
it; the server answers with a dated model name, as OpenAI does), stopped and resumed, and killed outright
(SIGKILL) mid-run; and the embedded model (SmolLM2 in llama.cpp, in this process). Then `summarize` into
SQLite and PostgreSQL (the runs' columns equal run.json's record), a store of schema v2 written by the previous
code (its commit, from git) read as it is and migrated, and `medhelm report` with a report.yaml that agrees and
one that disagrees. Times are only compared with each other and with the test's own clock readings, never
with a duration."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from medhelm.devtools.fixtures import write_configurable_benchmark
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.rundir import RunDir
from medhelm.store import open_store
from tests.previous_release import PREVIOUS_V2, REPO, previous_tree

ANSWERED = "acme-chat-2026-11-01"  # what the server says answered (asked for "acme-chat")
SECRET = "s3cret-pw"
ACCESS_COLUMNS = ("endpoint", "served_model", "answered_models", "model_file", "engine", "first_request",
                  "last_request", "access_requests", "access_interrupted")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _utc(text: str) -> datetime:
    assert text.endswith("+00:00"), text  # UTC, with its zone
    return datetime.fromisoformat(text)


def _deployment(local: Path, base_url: str) -> None:
    local.mkdir(parents=True, exist_ok=True)
    with_password = base_url.replace("http://", f"http://analyst:{SECRET}@")
    (local / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: mock/acme\n    model_name: test/acme-chat\n    kind: openai\n"
        f"    base_url: {with_password}\n    served_model_name: acme-chat\n    max_sequence_length: 4096\n")


def _text(html: str) -> str:
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'")


def _flags(text: str) -> bool:
    """Whether the page flags a disagreement anywhere (the summary, the table, the list under it)."""
    return any(words in text for words in ("disagrees with report.yaml",
                                           "The runs' record and report.yaml disagree"))


def _section(text: str, head: str, nxt: str) -> str:
    return text[text.index(head):text.index(nxt, text.index(head))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """One run evaluated in two invocations (10 instances, then 20), clock readings around each."""
    tmp = tmp_path_factory.mktemp("run_access")
    cfg = write_configurable_benchmark(tmp / "bench", 30)
    out, local = tmp / "out", tmp / "prod_env"
    clock = [_now()]
    with MockOpenAIServer(responder=lambda body: "Yes", answered_model=ANSWERED) as srv:
        _deployment(local, srv.base_url)
        for n in ("10", "20"):
            assert cli(["run", "--run-entries", f"medhelm_configurable_benchmark:model=mock/acme,config_path={cfg}",
                        "--suite", "s", "-o", str(out), "--local-path", str(local), "--max-eval-instances", n,
                        "--disable-cache", "-q"]) == 0
            clock.append(_now())
        requests, port = srv.request_count, srv.port
    [run] = [RunDir(p) for p in (out / "runs" / "s").iterdir()]
    return {"tmp": tmp, "out": out, "local": local, "cfg": cfg, "run": run, "clock": clock, "requests": requests,
            "endpoint": f"http://127.0.0.1:{port}/v1"}


def test_a_resumed_run_records_one_widened_window(runs: dict) -> None:
    run: RunDir = runs["run"]
    lines = [json.loads(line) for line in (run.path / "access.jsonl").read_text().splitlines()]
    # each invocation: a line when its first request was sent, one when it ended, with one id
    assert [bool(d.get("open")) for d in lines] == [True, False, True, False]
    ids = [d["invocation"] for d in lines]
    assert ids[0] == ids[1] != ids[2] == ids[3]
    t0, t1, t2 = runs["clock"]
    first_1, last_1 = _utc(lines[1]["first_request"]), _utc(lines[1]["last_request"])
    first_2, last_2 = _utc(lines[3]["first_request"]), _utc(lines[3]["last_request"])
    assert lines[0]["first_request"] == lines[1]["first_request"]
    assert t0 <= first_1 <= last_1 <= t1 <= first_2 <= last_2 <= t2
    assert [d["requests"] for d in lines[1::2]] == [10, 10]

    access = run.status()["access"]
    assert access["endpoint"] == runs["endpoint"]  # no user, no password
    assert access["served_model"] == "acme-chat" and access["answered_models"] == [ANSWERED]
    assert access["kind"] == "openai" and access["invocations"] == 2 and "interrupted" not in access
    assert access["requests"] == 20 == runs["requests"]
    assert _utc(access["first_request"]) == first_1 and _utc(access["last_request"]) == last_2  # widened
    for path in run.path.glob("access*.jsonl"):
        assert SECRET not in path.read_text() and "analyst" not in path.read_text()
    assert SECRET not in json.dumps(access)


def _summarize(runs: dict, store: str, release: str = "r1") -> None:
    assert cli(["summarize", "--suite", "s", "--release", release, "-o", str(runs["out"]), "--local-path",
                str(runs["local"]), "--store", store, "--bootstrap", "50"]) == 0


def _stored(store: str, release: str = "r1") -> dict:
    with open_store(store) as s:
        [row] = s.query_dicts(f"SELECT {', '.join(ACCESS_COLUMNS)} FROM runs WHERE release = ?", (release,))
        created = s.query("SELECT value FROM meta WHERE release = ? AND key = 'created_at'", (release,))[0][0]
    return {**row, "created_at": created}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_store_keeps_what_the_run_recorded(backend: str, runs: dict, request, tmp_path: Path) -> None:
    store = request.getfixturevalue("postgres_url") if backend == "postgres" else str(tmp_path / "s.sqlite")
    before = _now()
    _summarize(runs, store, f"r-{backend}")
    row = _stored(store, f"r-{backend}")
    access = runs["run"].status()["access"]
    assert row["endpoint"] == access["endpoint"] and row["served_model"] == "acme-chat"
    assert json.loads(row["answered_models"]) == [ANSWERED]
    assert row["first_request"] == access["first_request"] and row["last_request"] == access["last_request"]
    assert row["access_requests"] == 20 and row["access_interrupted"] == 0
    assert row["model_file"] is None and row["engine"] is None
    created = datetime.fromisoformat(row["created_at"])  # the release's summary time: UTC, with its zone
    assert created.utcoffset() == timedelta(0) and before <= created <= _now()


AGREES = """intended_use: Triage of discharge notes.
limitations: [Synthetic notes.]
risks: [A missed call.]
data: {{source: synthetic}}
models:
  - model: test/acme-chat
    endpoint: {endpoint}
    version: "{version}"
    access_window: {{from: {start}, to: {end}}}
sign_off:
  ran_by: {{name: Ada Analyst, date: 2026-11-22}}
"""


def _about(path: Path, *, endpoint: str, version: str, start: datetime, end: datetime) -> Path:
    berlin = timezone(timedelta(hours=1))
    path.write_text(AGREES.format(endpoint=endpoint, version=version,
                                  start=start.astimezone(berlin).isoformat(timespec="seconds"),
                                  end=end.astimezone(berlin).isoformat(timespec="seconds")))
    return path


def _report(store: str, release: str, about: Path | None, out: Path) -> str:
    args = ["report", "--release", release, "--out", str(out), "--store", store, "--force"]
    assert cli(args + (["--about", str(about)] if about else [])) == 0
    return _text(out.read_text())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_page_shows_the_record_beside_report_yaml_and_flags_disagreement(backend: str, runs: dict, request,
                                                                             tmp_path: Path) -> None:
    store = request.getfixturevalue("postgres_url") if backend == "postgres" else str(tmp_path / "s.sqlite")
    release = f"page-{backend}"
    _summarize(runs, store, release)
    t0, _, t2 = runs["clock"]
    hour = timedelta(hours=1)
    access = runs["run"].status()["access"]

    agrees = _about(tmp_path / "agrees.yaml", endpoint=runs["endpoint"] + "/", version="2026-11-01",
                    start=t0 - hour, end=t2 + hour)
    text = _report(store, release, agrees, tmp_path / "agrees.html")
    models = _section(text, "Models evaluated", "Cost, tokens and latency")
    first = _utc(access["first_request"]).strftime("%Y-%m-%d %H:%M:%S")
    last = _utc(access["last_request"]).strftime("%Y-%m-%d %H:%M:%S")
    assert f"recorded: {runs['endpoint']} report.yaml: {runs['endpoint']}/" in models
    assert f"recorded: asked for acme-chat; answered as {ANSWERED} report.yaml: 2026-11-01" in models
    assert f"recorded: {first} UTC to {last} UTC report.yaml: " in models
    assert re.search(r"report\.yaml: \d{4}-\d\d-\d\d \d\d:\d\d UTC\+01:00 to ", models)  # the stated zone kept
    assert not _flags(text)
    assert SECRET not in text

    other = _about(tmp_path / "other.yaml", endpoint="https://llm.internal.example/v1", version="acme-chat-2025-01-15",
                   start=t0 - 3 * hour, end=t0 - 2 * hour)
    text = _report(store, release, other, tmp_path / "other.html")
    summary = _section(text, "Executive summary", "Sign-off")
    assert ("What the runs recorded of their endpoint, version or access window disagrees with report.yaml for "
            "test/acme-chat [mock/acme]") in summary
    flagged = _section(text, "The runs' record and report.yaml disagree", "Cost, tokens and latency")
    assert f"report.yaml names the endpoint https://llm.internal.example/v1; the runs called {runs['endpoint']}" \
        in flagged
    assert "after the stated access window" in flagged and "before the stated access window" not in flagged
    assert f"report.yaml states version 'acme-chat-2025-01-15'; the server said it answered as {ANSWERED}" in flagged

    # without report.yaml: the record alone, said so
    text = _report(store, release, None, tmp_path / "alone.html")
    models = _section(text, "Models evaluated", "Cost, tokens and latency")
    assert f"recorded: {runs['endpoint']} report.yaml: not stated" in models
    assert not _flags(text)


def test_a_killed_invocation_keeps_the_windows_start_and_is_counted(tmp_path: Path) -> None:
    """SIGKILL mid-run: the line written at the first request stays; the resumed run's window starts there, and
    run.json says one invocation did not record its last request (the page: 'or later')."""
    cfg = write_configurable_benchmark(tmp_path / "bench", 12)
    gate, seen = threading.Event(), itertools.count(1)

    def gated(body: dict) -> str:
        if next(seen) > 4:
            gate.wait(300)  # holds the mock's loop until the kill
        return "Yes"

    out, local = tmp_path / "out", tmp_path / "prod_env"
    with MockOpenAIServer(responder=gated, answered_model=ANSWERED) as srv:
        _deployment(local, srv.base_url)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "services"), os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, "-m", "medhelm", "run", "--run-entries",
               f"medhelm_configurable_benchmark:model=mock/acme,config_path={cfg}", "--suite", "s", "-o", str(out),
               "--local-path", str(local), "-n", "2", "--disable-cache", "-q"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 300
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                files = list((out / "runs" / "s").glob("*/instances.jsonl"))
                if files and files[0].read_text().count("\n") >= 4:
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            gate.set()
        assert proc.returncode == -signal.SIGKILL
        [path] = list((out / "runs" / "s").iterdir())
        killed = [json.loads(line) for line in (path / "access.jsonl").read_text().splitlines()]
        assert len(killed) == 1 and killed[0]["open"] is True  # the start only: it never ended
        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert rerun.returncode == 0, rerun.stderr
    access = RunDir(path).status()["access"]
    assert access["interrupted"] == 1 and access["invocations"] == 2
    assert access["first_request"] == killed[0]["first_request"]  # the window starts with the killed invocation
    assert _utc(access["last_request"]) > _utc(killed[0]["first_request"])
    store = str(tmp_path / "s.sqlite")
    assert cli(["summarize", "--suite", "s", "-o", str(out), "--local-path", str(local), "--store", store,
                "--bootstrap", "50"]) == 0
    text = _report(store, "s", None, tmp_path / "r.html")
    assert "(or later: 1 invocation(s) stopped before recording their last request)" in text


@pytest.fixture(scope="module")
def v2_code(tmp_path_factory) -> Path:
    """The services folder of the last commit of store schema v2 (what its image runs)."""
    return previous_tree(tmp_path_factory.mktemp("v2"), "services", commit=PREVIOUS_V2) / "services"


def _medhelm(code: Path | None, *args: str) -> subprocess.CompletedProcess:
    services = code or REPO / "services"
    env = {**os.environ, "PYTHONPATH": str(services)}
    env.pop("MEDHELM_STORE_URL", None)
    return subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=services.parent)


def test_a_v2_sqlite_store_is_read_as_it_is_then_migrated(v2_code: Path, runs: dict, tmp_path: Path) -> None:
    store = tmp_path / "old.sqlite"
    done = _medhelm(v2_code, "summarize", "--suite", "s", "--release", "old", "-o", str(runs["out"]), "--store",
                    str(store), "--bootstrap", "50")
    assert done.returncode == 0, done.stderr[-1500:]
    con = sqlite3.connect(store)
    assert con.execute("SELECT value FROM meta WHERE release = '' AND key = 'schema_version'").fetchone() == ("2",)
    created = con.execute("SELECT value FROM meta WHERE release = 'old' AND key = 'created_at'").fetchone()[0]
    assert datetime.fromisoformat(created).tzinfo is None  # v2 wrote local time without a zone
    con.close()
    # read as it is (not migrated by a reader): the page says what is not recorded
    text = _report(str(store), "old", None, tmp_path / "old.html")
    models = _section(text, "Models evaluated", "Cost, tokens and latency")
    assert "recorded: not recorded" in models
    assert "(time zone not recorded)" in _section(text, "What this release holds", "Leaderboard")
    assert "Runs without a record of their endpoint and access window" in _section(text, "Executive summary",
                                                                                   "Sign-off")
    con = sqlite3.connect(store)
    assert "endpoint" not in [r[1] for r in con.execute("PRAGMA table_info(runs)")]  # not migrated by a reader
    con.close()
    # the next summarize migrates it: the old release's runs stay unrecorded, the new one's are recorded
    _summarize(runs, str(store), "new")
    con = sqlite3.connect(store)
    assert con.execute("SELECT value FROM meta WHERE release = '' AND key = 'schema_version'").fetchone() == ("3",)
    old = con.execute("SELECT endpoint, first_request FROM runs WHERE release = 'old'").fetchall()
    new = con.execute("SELECT endpoint, first_request FROM runs WHERE release = 'new'").fetchall()
    con.close()
    assert old == [(None, None)] and new == [(runs["endpoint"], runs["run"].status()["access"]["first_request"])]


def test_a_v2_postgres_store_is_refused_until_migrated(v2_code: Path, runs: dict, postgres_url: str,
                                                       tmp_path: Path) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS access_v2")
        conn.execute("CREATE DATABASE access_v2")
    url = postgres_url.rsplit("/", 1)[0] + "/access_v2"
    done = _medhelm(v2_code, "summarize", "--suite", "s", "--release", "old", "-o", str(runs["out"]), "--store", url,
                    "--bootstrap", "50")
    assert done.returncode == 0, done.stderr[-1500:]
    refused = _medhelm(None, "report", "--release", "old", "--out", str(tmp_path / "x.html"), "--store", url)
    assert refused.returncode == 2 and "store schema v2" in refused.stderr and "medhelm store migrate" in refused.stderr
    assert not (tmp_path / "x.html").exists()
    migrated = _medhelm(None, "store", "migrate", "--store", url)
    assert migrated.returncode == 0 and "migrated from schema v2 to v3" in migrated.stdout, migrated.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT endpoint, access_requests FROM runs").fetchall() == [(None, None)]
    text = _report(url, "old", None, tmp_path / "old.html")
    assert "recorded: not recorded" in _section(text, "Models evaluated", "Cost, tokens and latency")
    _summarize(runs, url, "new")
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT endpoint FROM runs WHERE release = 'new'").fetchall() == [(runs["endpoint"],)]


@pytest.mark.slow
@pytest.mark.embedded
def test_the_embedded_model_records_its_file_and_engine(postgres_url: str, tmp_path: Path) -> None:
    """The exact-match example on SmolLM2 in-process (2 instances) and its baselines: the endpoint is
    'in-process', the GGUF file's name (never its folder) and llama-cpp-python's installed version are recorded;
    a baseline asks no model. Summarised into SQLite and PostgreSQL: the same record, the same Models section."""
    from importlib import metadata

    out, local = tmp_path / "out", tmp_path / "prod_env"
    before = _now()
    assert cli(["run", "--conf-paths", str(REPO / "examples" / "exact_match_demo" / "exact_match_demo.conf"),
                "--suite", "E", "--max-eval-instances", "2", "--num-output-tokens", "4", "-o", str(out),
                "--local-path", str(local), "--disable-cache", "-q"]) == 0
    after = _now()
    runs = {RunDir(p).spec().deployment: RunDir(p) for p in (out / "runs" / "E").iterdir()}
    access = runs["local/smollm2-135m-instruct"].status()["access"]
    engine = f"llama-cpp-python {metadata.version('llama_cpp_python')}"
    assert access["endpoint"] == "in-process" and access["kind"] == "llamacpp"
    assert access["model_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and access["engine"] == engine
    assert access["requests"] == 2 and "answered_models" not in access  # llama.cpp names its file path: not kept
    assert before <= _utc(access["first_request"]) <= _utc(access["last_request"]) <= after
    baseline = runs["baseline/random"].status()["access"]
    assert baseline["endpoint"] == "none (no model)" and baseline["requests"] == 0
    assert baseline["first_request"] is None and baseline["last_request"] is None

    about = tmp_path / "about.yaml"
    sections = {}
    for name, store in (("sqlite", str(tmp_path / "e.sqlite")), ("pg", postgres_url)):
        assert cli(["summarize", "--suite", "E", "--release", "embedded", "-o", str(out), "--local-path", str(local),
                    "--store", store, "--bootstrap", "50"]) == 0
        with open_store(store) as s:
            [row] = s.query_dicts(f"SELECT model, {', '.join(ACCESS_COLUMNS)} FROM runs WHERE release = 'embedded' "
                                  "AND deployment = 'local/smollm2-135m-instruct'")
        about.write_text(AGREES.replace("test/acme-chat", row["model"]).format(
            endpoint="https://llm.internal.example/v1", version="Llama-3-8B", start="2026-01-01T00:00:00Z",
            end="2026-01-02T00:00:00Z").replace("    endpoint: https://llm.internal.example/v1\n", ""))
        assert (row["endpoint"], row["model_file"], row["engine"], row["first_request"], row["last_request"]) == (
            "in-process", access["model_file"], engine, access["first_request"], access["last_request"])
        text = _report(store, "embedded", about, tmp_path / f"{name}.html")
        models = _section(text, "Models evaluated", "Cost, tokens and latency")
        assert f"recorded: SmolLM2-135M-Instruct.Q4_1.gguf; {engine} report.yaml: Llama-3-8B" in models
        assert "recorded: in-process report.yaml: not stated" in models
        assert "disagrees with report.yaml: access window, version (listed below)" in models
        assert f"report.yaml states version 'Llama-3-8B'; the runs used SmolLM2-135M-Instruct.Q4_1.gguf, {engine}" \
            in models
        assert "before the stated access window" not in models and "after the stated access window" in models
        assert "recorded: none (no model) report.yaml: not stated recorded: a reference baseline" in models
        assert "No endpoint, version or access window stated" not in text  # a baseline has none to state
        sections[name] = models
    assert sections["sqlite"] == sections["pg"]


def test_a_run_with_other_settings_starts_a_new_record(tmp_path: Path) -> None:
    """Records superseded by other settings (here the output budget) take their access lines with them: the
    window is the new settings' alone."""
    cfg = write_configurable_benchmark(tmp_path / "bench", 5)
    out, local = tmp_path / "out", tmp_path / "prod_env"
    with MockOpenAIServer(responder=lambda body: "Yes", answered_model=ANSWERED) as srv:
        _deployment(local, srv.base_url)
        common = ["run", "--run-entries", f"medhelm_configurable_benchmark:model=mock/acme,config_path={cfg}",
                  "--suite", "s", "-o", str(out), "--local-path", str(local), "--disable-cache", "-q"]
        assert cli(common) == 0
        [path] = list((out / "runs" / "s").iterdir())
        first = RunDir(path).status()["access"]
        between = _now()
        assert cli([*common, "--num-output-tokens", "3"]) == 0
    access = RunDir(path).status()["access"]
    assert (path / "superseded.jsonl").is_file()
    assert first["invocations"] == 1 and access["invocations"] == 1 and access["requests"] == 5
    assert _utc(access["first_request"]) >= between > _utc(first["last_request"])
