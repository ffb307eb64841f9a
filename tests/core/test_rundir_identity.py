"""The run folder and the store are byte for byte what they were before the run folder got its own package
(``medhelm/rundir``): a run, a resume after a kill (a torn last line, run.json gone), a sharded Job merged by
``collect``, and ``summarize`` into SQLite, all with fixed inputs against the mock OpenAI server, compared with
``tests/data/rundir_golden.json``. The golden was written by the code before the move
(``python tests/core/test_rundir_identity.py --write GOLDEN`` with that code first on PYTHONPATH). One change
since, on purpose: the store's bootstrap replicates (``cells.boot``) are float64 (issue 30: a one-benchmark
category's interval equals that benchmark's own exactly); and the release's ``meta`` gained ``rank_baselines``
(issue 27: whether reference baselines were ranked with the models); and the store's schema v2 (issue 29:
``schema_version`` '2', and the audit and subgroup tables made, empty, with the store). Those alone were
re-written, by the code after. And since, on purpose: each run's access record (issue 51: ``access*.jsonl``,
run.json's ``access``, the store's schema v3 with the runs' access columns); its request times, invocation ids
and endpoint (the mock server's port) are masked like the other measured values. And the cells' intervals (``ci_low``, ``ci_high``: Clopper-Pearson for 0/1 metrics, issue 51,
store/intervals.py) were re-written by the code after. And the custom benchmark's prompt is HELM's (issue 54: the
template file whole, its final newline kept, then one newline), so its inputs, prompts, the mock's answers (a
hash of the messages) and what follows from them were re-written by the code after.

Only what differs between two runs of the same code is masked: latencies and wall times (measured), the
store's creation times. Everything else — every file's name, every line, every stat, every store row — must
be equal."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer

SERVICES = Path(__file__).parents[2] / "services"
GOLDEN = Path(__file__).parents[1] / "data" / "rundir_golden.json"
N = 24
# measured, so never equal twice: masked wherever they appear (JSON keys, store columns, stat names)
_VOLATILE = re.compile(r"latency|wall_time|inference_runtime|inference_s|gpu_s|_at$|^at$|created|updated|time"
                       r"|_request$|^invocation$|^endpoint$")  # an access record's times and ids, the mock's port
# the run's spec names the benchmark's YAML by its path (in the temporary folder), and its digests hash it
_PATH_HASHED = re.compile(r"^(compat_)?digest$")
_TMP = [""]  # the temporary folder of the scenario being read, replaced by "<tmp>"


def _answer(body: dict) -> str:
    text = json.dumps(body.get("messages"), sort_keys=True)
    return "Yes" if int(hashlib.sha256(text.encode()).hexdigest(), 16) % 3 else "No"


def _cli(services: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(services), os.environ.get("PYTHONPATH", "")])}
    for name in ("JOB_COMPLETION_INDEX", "MEDHELM_SHARD_COUNT", "MEDHELM_JOB_NAME"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "medhelm", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, (args, done.stderr[-2000:])


def _mask(value: object, key: str = "") -> object:
    if isinstance(value, dict):
        name = value.get("name")
        name = name.get("name") if isinstance(name, dict) else name  # a stat's name is {name, split}
        if isinstance(name, str) and _VOLATILE.search(name):
            return {k: (v if k in ("name", "split", "count", "unscored") else "~") for k, v in value.items()}
        return {k: ("~" if (_VOLATILE.search(k) or _PATH_HASHED.match(k)) and not isinstance(v, (dict, list))
                    else _mask(v, k))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    return value


def _text(data: bytes) -> list:
    """A file as [masked content, whether the writer's exact spelling re-creates it]. JSON files (whole, as
    ``indent=1``, or per line, as ``json.dumps``) are masked; the flag keeps the bytes' layout in the test."""
    text = data.decode("utf-8").replace(_TMP[0], "<tmp>")
    try:
        doc = json.loads(text)
    except ValueError:
        pass
    else:
        return [_mask(doc), json.dumps(doc, ensure_ascii=False, indent=1) + "\n" == text]
    lines, exact = [], True
    for line in text.splitlines(keepends=True):
        try:
            doc = json.loads(line)
        except ValueError:
            lines.append(line)
            continue
        lines.append(_mask(doc))
        exact = exact and json.dumps(doc, ensure_ascii=False) + "\n" == line
    return [lines, exact]


def _folder(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            out[str(path.relative_to(root))] = _text(path.read_bytes())
    return out


def _cell(column: str, value: object) -> object:
    if _VOLATILE.search(column):
        return "~"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, str):
        return _text(value.encode()) if value[:1] in "{[" else value.replace(_TMP[0], "<tmp>")
    return value


def _store(path: Path) -> dict[str, list]:
    con = sqlite3.connect(path)
    try:
        out = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            cur = con.execute(f'SELECT * FROM "{table}"')
            names = [d[0] for d in cur.description]
            rows = [[_cell(n, v) for n, v in zip(names, row)] for row in cur.fetchall()]
            if names[-2:] == ["key", "value"]:  # a key-value table: a volatile key's value is masked
                rows = [[*row[:-1], "~" if _VOLATILE.search(row[-2]) else row[-1]] for row in rows]
            # a row of a measured stat (run_stats' inference_runtime): its numbers are masked
            rows = [[("~" if isinstance(v, float) else v) for v in row]
                    if any(isinstance(v, str) and re.fullmatch(r"[a-z_]+", v) and _VOLATILE.search(v) for v in row)
                    else row for row in rows]
            out[table] = [names, sorted(rows, key=json.dumps)]
        return out
    finally:
        con.close()


def produce(tmp: Path, services: Path) -> dict:
    """Every output of the four scenarios, masked, as one JSON-able document."""
    _TMP[0] = str(tmp)
    with open(tmp / "data.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "note", "question", "correct_answer", "incorrect_answers"])
        for i in range(N):
            w.writerow([f"p{i:03d}", f"Patient {i} with hypertension. " * (1 + i % 4), "Hypertension?",
                        "Yes" if i % 2 else "No", '["No"]' if i % 2 else '["Yes"]'])
    (tmp / "prompt.txt").write_text("Answer Yes or No.\n")
    cfg = tmp / "em.yaml"
    cfg.write_text("name: IDENTITY\ndescription: d\nprompt_file: prompt.txt\ndataset_file: data.csv\n"
                   "max_tokens: 1\nmetrics:\n  - name: exact_match\n")
    local, out = tmp / "prod", tmp / "out"
    local.mkdir()
    docs: dict = {}
    with MockOpenAIServer(responder=_answer) as srv:
        (local / "model_deployments.yaml").write_text(
            "model_deployments:\n  - name: mock/m\n    model_name: test/m\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: m\n    max_sequence_length: 4096\n")
        entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={cfg}"
        common = ["--run-entries", entry, "-o", str(out), "--local-path", str(local), "--disable-cache", "-q"]
        # 1. a run of 16 of the 24
        _cli(services, "run", "--suite", "run", "--max-eval-instances", "16", *common)
        docs["run"] = _folder(out / "runs" / "run")
        # 2. a resume after a kill: run.json gone, the last 5 records lost, a torn line; then all 24
        (run_dir,) = (out / "runs" / "run").iterdir()
        (run_dir / "run.json").unlink()
        lines = (run_dir / "instances.jsonl").read_bytes().splitlines(keepends=True)
        (run_dir / "instances.jsonl").write_bytes(b"".join(lines[:-5]) + lines[-5][:40])
        _cli(services, "run", "--suite", "run", "--max-eval-instances", "24", *common)
        docs["resume"] = _folder(out / "runs" / "run")
        # 3. a sharded Job: three shards, then collect
        for index in range(3):
            _cli(services, "job", "--suite", "job", "--shard-index", str(index), "--shard-count", "3", *common)
        docs["shards"] = _folder(out / "runs" / "job")
        _cli(services, "collect", "--suite", "job", "-o", str(out))
        docs["collect"] = _folder(out / "runs" / "job")
    # 4. summarize both suites into a SQLite store
    store = tmp / "store.sqlite"
    for suite in ("run", "job"):
        _cli(services, "summarize", "--suite", suite, "-o", str(out), "--local-path", str(local),
             "--store", f"sqlite:///{store}", "--bootstrap", "50")
    docs["store"] = _store(store)
    return docs


def test_run_resume_shards_and_summarize_write_what_they_wrote_before(tmp_path: Path) -> None:
    if not GOLDEN.is_file():
        pytest.fail(f"{GOLDEN} is missing")
    got = json.loads(json.dumps(produce(tmp_path, SERVICES)))
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(got) == sorted(want)
    for scenario in want:
        assert sorted(got[scenario]) == sorted(want[scenario]), scenario
        for name in want[scenario]:
            if "/shards/" in name and name.endswith(".jsonl"):
                # a shard's records are appended as its instances finish (pipeline/execute.py): their order is the
                # order of completion, which a loaded machine changes (a CI run finished position 13 before 4);
                # ``collect`` merges them in position order, compared as is in "collect"
                got[scenario][name][0].sort(key=lambda line: json.dumps(line, sort_keys=True))
                want[scenario][name][0].sort(key=lambda line: json.dumps(line, sort_keys=True))
            assert got[scenario][name] == want[scenario][name], (scenario, name)


if __name__ == "__main__":  # python tests/core/test_rundir_identity.py --write GOLDEN [SERVICES]
    import tempfile

    target = Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        doc = produce(Path(tmp), Path(sys.argv[3]) if len(sys.argv) > 3 else SERVICES)
    target.write_text(json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
