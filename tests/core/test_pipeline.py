"""`medhelm run` end to end against the project's mock OpenAI server: results on disk, caching, retries,
resume after kill -9, and one-line errors that write nothing."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from medhelm.cli import main
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.rundir import RunDir

from .conftest import write_benchmark, write_deployment, yes_responder


def run_cli(ws, *extra: str, entry: str | None = None) -> int:
    return main(["run", "--run-entries", entry or ws["entry"], "--suite", "s", "--output-path", str(ws["out"]),
                 "--local-path", str(ws["local"]), "-q", *extra])


def only_run_dir(out: Path) -> RunDir:
    [path] = [p for p in (out / "runs" / "s").iterdir() if p.is_dir()]
    return RunDir(path)


def test_run_writes_spec_records_and_stats(workspace):
    assert run_cli(workspace, "--max-eval-instances", "12") == 0
    rd = only_run_dir(workspace["out"])
    assert rd.path.name == "YESNO:model=test_yes-model,model_deployment=mock_yes-model"
    spec = rd.spec()
    assert spec.benchmark.main_metric == "exact_match" and spec.max_eval_instances == 12
    records = list(rd.iter_records())
    assert len(records) == 12 == len({r.instance.id for r in records})
    assert [r.position for r in records] == sorted(r.position for r in records)  # canonical order once finished
    for r in records:
        expected = 1.0 if r.instance.correct_references[0].text == "Yes" else 0.0
        assert r.stats["exact_match"] == expected
        assert r.completion.text == "Yes" and r.completion.usage.prompt_tokens > 0
        assert r.completion.usage.latency_s >= 0
    [em] = [s for s in rd.stats() if s.name == "exact_match"]
    assert em.count == 12 and em.mean == sum(r.stats["exact_match"] for r in records) / 12
    status = rd.status()
    assert status["status"] == "complete" and status["instances_done"] == 12 and status["errors"] == 0
    assert status["requests"] == 12 == workspace["server"].request_count


def test_sampling_is_seeded_and_nested(workspace):
    assert run_cli(workspace, "--max-eval-instances", "5") == 0
    first = set(only_run_dir(workspace["out"]).selection())
    assert run_cli(workspace, "--max-eval-instances", "9") == 0
    second = only_run_dir(workspace["out"]).selection()
    assert first < set(second) and len(second) == 9
    # the 5 finished instances were not asked again: 5 + 4 requests in total
    assert workspace["server"].request_count == 9


def test_second_run_makes_zero_requests(workspace):
    assert run_cli(workspace, "--max-eval-instances", "10") == 0
    assert workspace["server"].request_count == 10
    # same output: the records are there, nothing to do
    assert run_cli(workspace, "--max-eval-instances", "10") == 0
    # a fresh output path: every answer comes from the request cache
    fresh = dict(workspace, out=workspace["out"].with_name("out2"))
    assert run_cli(fresh, "--max-eval-instances", "10") == 0
    assert workspace["server"].request_count == 10
    status = only_run_dir(fresh["out"]).status()
    assert status["cache_hits"] == 10 and status["requests"] == 0


def test_retries_recover_from_429_500_and_malformed(tmp_path):
    cfg = write_benchmark(tmp_path / "b", 25)
    with MockOpenAIServer(responder=yes_responder, error_rate=0.2, rate_limit_rate=0.15, malformed_rate=0.1,
                          seed=7) as srv:
        local = tmp_path / "prod_env"
        write_deployment(local, srv.base_url)
        ws = {"local": local, "out": tmp_path / "out",
              "entry": f"medhelm_configurable_benchmark:model=mock/yes-model,config_path={cfg}"}
        assert run_cli(ws) == 0
        status = only_run_dir(ws["out"]).status()
        assert status["status"] == "complete" and status["instances_done"] == 25 and status["errors"] == 0
        assert status["retries"] > 0
        assert srv.request_count == 25 + status["retries"]


@pytest.mark.slow
def test_resume_after_kill_9_loses_and_duplicates_nothing(tmp_path):
    n, concurrency, answered_before_kill = 60, 4, 20
    cfg = write_benchmark(tmp_path / "b", n)
    # The mock answers the first 20 requests, then holds the rest until released: the kill lands mid-run with
    # exactly 20 records written, however slowly this machine runs the poller below (no race with the run).
    gate, seen = threading.Event(), itertools.count(1)

    def gated(body: dict) -> str:
        if next(seen) > answered_before_kill:
            gate.wait(300)  # holds the mock's loop: nothing more is answered until the kill
        return "Yes"

    with MockOpenAIServer(responder=gated) as srv:
        local = tmp_path / "prod_env"
        write_deployment(local, srv.base_url)
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "medhelm", "run", "--run-entries",
               f"medhelm_configurable_benchmark:model=mock/yes-model,config_path={cfg}", "--suite", "s",
               "--output-path", str(out), "--local-path", str(local), "-n", str(concurrency), "-q"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        records = out / "runs" / "s"
        deadline = time.monotonic() + 300
        done_before = 0
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                files = list(records.glob("*/instances.jsonl"))
                if files and (done_before := files[0].read_text().count("\n")) >= answered_before_kill:
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            gate.set()
        assert done_before == answered_before_kill, "the run should be killed mid-way"
        assert proc.returncode == -signal.SIGKILL

        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        assert "resuming" not in rerun.stdout  # progress goes to stderr, results table to stdout
        rd = only_run_dir(out)
        lines = (rd.path / "instances.jsonl").read_text().splitlines()
        ids = [json.loads(line)["instance"]["id"] for line in lines]
        assert len(ids) == n and set(ids) == set(rd.selection())  # nothing lost, nothing duplicated
        assert rd.status()["status"] == "complete"
        # finished instances were not asked again: only those in flight at the kill may repeat
        assert srv.request_count <= n + concurrency


# ------------------------------------------------------------------------------------------------
# bad input: one line naming the file/field/URL, exit 2, nothing written


def _assert_one_line_error(capsys, rc: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("medhelm: error: ") and "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_missing_conf_file(capsys, tmp_path):
    rc = main(["run", "--conf-paths", str(tmp_path / "nope.conf"), "--suite", "s", "-o", str(tmp_path / "out")])
    _assert_one_line_error(capsys, rc, "nope.conf", "not found")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mutate,needles", [
    (lambda d: (d / "prompt.txt").unlink(), ("prompt.txt",)),
    (lambda d: (d / "prompt.txt").write_text("Q: {question} {no_such_column}"), ("prompt.txt", "no_such_column")),
    (lambda d: (d / "dataset.csv").write_text("patient_id,note,question\n1,a,b\n"), ("dataset.csv", "correct_answer")),
    (lambda d: (d / "bench.yaml").write_text((d / "bench.yaml").read_text().replace("exact_match", "bleu_9")),
     ("bench.yaml", "bleu_9")),
])
def test_bad_benchmark_files(capsys, workspace, mutate, needles):
    mutate(workspace["config"].parent)
    _assert_one_line_error(capsys, run_cli(workspace), *needles)
    assert not workspace["out"].exists()


def test_unknown_deployment(capsys, workspace):
    entry = workspace["entry"].replace("mock/yes-model", "nobody/none")
    _assert_one_line_error(capsys, run_cli(workspace, entry=entry), "nobody/none")
    assert not workspace["out"].exists()


def test_unreachable_server_names_url_and_keeps_nothing_half_written(capsys, tmp_path, refused_url):
    cfg = write_benchmark(tmp_path / "b", 5)
    url = f"{refused_url}/v1"
    write_deployment(tmp_path / "prod_env", url)
    ws = {"local": tmp_path / "prod_env", "out": tmp_path / "out",
          "entry": f"medhelm_configurable_benchmark:model=mock/yes-model,config_path={cfg}"}
    err = _assert_one_line_error(capsys, run_cli(ws), url)
    assert "resume" in err or "reach" in err
    for f in (tmp_path / "out").rglob("instances.jsonl"):
        assert f.read_text() == ""  # no partial record; the run resumes cleanly once the server is up


def test_dry_run_calls_no_model_and_writes_nothing(workspace, capsys):
    assert run_cli(workspace, "--dry-run", "--max-eval-instances", "7") == 0
    out = capsys.readouterr().out
    assert "YESNO" in out and " 7 " in out
    assert workspace["server"].request_count == 0 and not workspace["out"].exists()


def test_skip_completed_runs(workspace, capsys):
    assert run_cli(workspace, "--max-eval-instances", "4") == 0
    before = (only_run_dir(workspace["out"]).path / "run.json").stat().st_mtime_ns
    assert run_cli(workspace, "--max-eval-instances", "4", "--skip-completed-runs") == 0
    assert "skipped" in capsys.readouterr().out
    assert (only_run_dir(workspace["out"]).path / "run.json").stat().st_mtime_ns == before
    assert workspace["server"].request_count == 4


def test_validate_checks_without_calling_a_model(workspace, capsys):
    rc = main(["validate", "--run-entries", workspace["entry"], "--local-path", str(workspace["local"]),
               "-o", str(workspace["out"])])
    assert rc == 0 and "30 instances" in capsys.readouterr().out
    assert workspace["server"].request_count == 0 and not workspace["out"].exists()


def test_a_run_whose_every_instance_was_refused_is_failed_not_complete(tmp_path, capsys):
    from medhelm.devtools.mock_openai import MockHTTPError

    def refuse(body: dict) -> str:
        raise MockHTTPError(400, "This model's maximum context length is 1024 tokens.")

    cfg = write_benchmark(tmp_path / "b", 4)
    with MockOpenAIServer(responder=refuse) as srv:
        local = tmp_path / "prod_env"
        write_deployment(local, srv.base_url)
        ws = {"local": local, "out": tmp_path / "out",
              "entry": f"medhelm_configurable_benchmark:model=mock/yes-model,config_path={cfg}"}
        assert run_cli(ws) == 2
    err = capsys.readouterr().err
    assert "every instance failed" in err and "HTTP 400" in err and "Traceback" not in err
    status = only_run_dir(ws["out"]).status()
    assert status["status"] == "failed" and status["errors"] == 4 == status["instances_done"]


def test_the_path_to_the_first_request_imports_no_heavy_module():
    """Time to first request (docs/benchmarks.md, engines): what `medhelm run` imports before its first model
    request stays light. Metrics export, numeric and scoring libraries, gRPC and the engines are imported
    only when a run uses them (a fresh interpreter, so other tests' imports do not count)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import medhelm.cli.run, medhelm.pipeline, medhelm.inference.openai, medhelm.benchmarks.configurable\n"
            "from medhelm.scoring import registry\n"
            "registry.factories()\n"
            "heavy = ('prometheus_client', 'numpy', 'torch', 'rouge_score', 'nltk', 'bert_score', 'grpc', 'pandas',\n"
            "         'google.protobuf', 'scipy', 'llama_cpp', 'transformers', 'pyarrow', 'aiohttp')\n"
            "print(','.join(m for m in heavy if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "", f"imported on the way to the first request: {proc.stdout.strip()}"
