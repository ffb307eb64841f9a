"""The project's mock OpenAI-compatible server: endpoints, keep-alive, deterministic faults, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import httpx
import pytest

from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer, default_responder


def chat(client: httpx.Client, srv: MockOpenAIServer, text: str, **extra) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 4, **extra}
    return client.post(srv.base_url + "/chat/completions", json=body)


def test_endpoints_answer_like_openai():
    with MockOpenAIServer() as srv, httpx.Client(timeout=60) as client:
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.base_url.endswith("/v1")
        assert client.get(srv.base_url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
        assert client.get(srv.base_url + "/models").json()["data"][0]["id"] == "mock-model"
        r = chat(client, srv, "Is aspirin safe in chickenpox? Answer yes or no.")
        data = r.json()
        assert r.status_code == 200 and data["object"] == "chat.completion" and data["model"] == "m"
        assert data["choices"][0]["message"]["content"] in ("Yes", "No")
        assert data["choices"][0]["finish_reason"] == "stop"
        assert data["usage"] == {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
        assert client.get(srv.base_url + "/nowhere").status_code == 404
        assert client.post(srv.base_url + "/chat/completions", content=b"not json").status_code == 400
        assert srv.request_count == 1 and srv.requests[0]["max_tokens"] == 4  # only valid chat bodies are logged
        srv.reset()
        assert srv.request_count == 0 and srv.requests == []


def test_keep_alive_reuses_one_connection():
    # httpx's own defaults (5 s timeout, 5 s idle expiry) could open a second connection on a starved machine
    with MockOpenAIServer() as srv, httpx.Client(timeout=60, limits=httpx.Limits(max_connections=1, keepalive_expiry=600)) as client:
        for i in range(20):
            assert chat(client, srv, f"question {i}").status_code == 200
        assert srv.request_count == 20 and srv.connection_count == 1


def test_default_responder_is_deterministic_and_non_trivial():
    mcq = "Which vitamin prevents scurvy?\nA. Vitamin A\nB. Vitamin B12\nC. Vitamin C\nD. Vitamin D\nAnswer:"
    answers = {default_responder({"messages": [{"role": "user", "content": mcq.replace("scurvy", f"scurvy {i}")}]})
               for i in range(40)}
    assert answers == {"A", "B", "C", "D"}
    yes_no = [default_responder({"messages": [{"role": "user", "content": f"Case {i}: flagged? yes or no"}]})
              for i in range(40)]
    assert set(yes_no) == {"Yes", "No"}
    again = [default_responder({"messages": [{"role": "user", "content": f"Case {i}: flagged? yes or no"}]})
             for i in range(40)]
    assert again == yes_no
    free = default_responder({"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Summarise the discharge note please"}]})
    assert free == "Summarise the discharge note please"


def test_custom_responder_and_http_errors_from_it():
    def responder(body):
        text = body["messages"][-1]["content"]
        if text == "bad":
            raise MockHTTPError(400, "max_tokens is too large")
        if text == "slow down":
            raise MockHTTPError(429, "busy", retry_after=2)
        return text.upper()

    with MockOpenAIServer(responder=responder) as srv, httpx.Client(timeout=60) as client:
        assert chat(client, srv, "shout").json()["choices"][0]["message"]["content"] == "SHOUT"
        bad = chat(client, srv, "bad")
        assert bad.status_code == 400 and bad.json()["error"]["message"] == "max_tokens is too large"
        busy = chat(client, srv, "slow down")
        assert busy.status_code == 429 and busy.headers["retry-after"] == "2"


def fault_profile(seed: int, n: int = 200) -> list[int]:
    with MockOpenAIServer(error_rate=0.2, rate_limit_rate=0.2, malformed_rate=0.2, seed=seed) as srv, \
            httpx.Client(timeout=60) as client:
        codes = []
        for i in range(n):
            r = chat(client, srv, f"q{i % 50}")  # repeated bodies: the occurrence count is part of the draw
            try:
                r.json()
                codes.append(r.status_code)
            except json.JSONDecodeError:
                codes.append(-1)  # malformed
        return codes


def test_faults_are_reproducible_by_seed_and_follow_the_rates():
    first = fault_profile(seed=7)
    assert fault_profile(seed=7) == first
    assert fault_profile(seed=8) != first
    counts = Counter(first)
    for code in (500, 429, -1):  # 20% each of 200 requests: 40 expected
        assert 15 <= counts[code] <= 70, counts
    assert 50 <= counts[200] <= 110, counts


def test_rate_limit_carries_retry_after():
    with MockOpenAIServer(rate_limit_rate=1.0, retry_after_s=0.25) as srv, httpx.Client(timeout=60) as client:
        r = chat(client, srv, "anything")
        assert r.status_code == 429 and float(r.headers["retry-after"]) == 0.25


def test_in_flight_is_measured():
    import asyncio

    async def burst(url: str) -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
            await asyncio.gather(*(client.post(url + "/chat/completions", json=body) for _ in range(5)))

    with MockOpenAIServer(hold_until_in_flight=5) as srv:  # answers once all five are in
        asyncio.run(burst(srv.base_url))
        assert srv.max_in_flight == 5 and srv.request_count == 5


def test_cli_process_serves_with_faults(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "medhelm.devtools.mock_openai", "--port", "0",
                             "--rate-limit-rate", "1.0", "--retry-after", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, proc.stderr.read() if proc.poll() is not None else line
        base_url = line.split("listening on ")[1].strip()
        with httpx.Client(timeout=60) as client:
            r = client.post(base_url + "/chat/completions",
                            json={"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 1})
        assert r.status_code == 429 and r.headers["retry-after"] == "3"
    finally:
        proc.terminate()
        proc.wait(10)


def test_bad_responder_spec_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "medhelm.devtools.mock_openai", "--responder", "nocolon"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "module:function" in r.stderr and "Traceback" not in r.stderr


def test_port_in_use_raises():
    with MockOpenAIServer() as first:
        with pytest.raises(OSError):
            MockOpenAIServer(port=first.port).start()
