"""The Open Inference Protocol v2 client against a v2 endpoint on 127.0.0.1 (stdlib HTTP; KServe itself
cannot be installed beside this project's protobuf 7), through the real ClientPool (retries, cache)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from medhelm.errors import InferenceError, ServerUnreachable
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import Deployment, GenerationRequest, Message


class _V2(BaseHTTPRequestHandler):
    script: list = []  # (status, body) answers, then echo
    seen: list = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, body))
        status, reply = self.script.pop(0) if self.script else (200, None)
        if reply is None:
            text = body["inputs"][0]["data"][0]
            reply = {"model_name": "m", "outputs": [
                {"name": "text_output", "shape": [1], "datatype": "BYTES", "data": [f"echo:{text[-5:]}"]},
                {"name": "completion_tokens", "shape": [1], "datatype": "INT64", "data": [3]}]}
        data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def v2_server():
    _V2.script, _V2.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _V2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _deployment(url: str) -> Deployment:
    return Deployment(name="kserve/tiny", model_name="test/tiny", kind="kserve_v2", base_url=url,
                      served_model_name="tiny-llm", options={"parameters": {"top_p": 1.0}})


def _request(text: str = "Summarise the note.") -> GenerationRequest:
    return GenerationRequest(messages=(Message("system", "Be brief."), Message("user", text)), max_tokens=8, stop=("\n",))


def test_generate_through_the_pool_with_retries(v2_server):
    _V2.script = [(503, {"error": "warming up"}), (200, "{not json")]  # retried: 5xx, then a torn body

    async def go():
        pool = ClientPool(cache=None, retry=RetryPolicy(base_delay_s=0.01, jitter="none"))
        try:
            return await pool.get(_deployment(v2_server)).generate(_request()), pool.stats["kserve/tiny"]
        finally:
            await pool.aclose()

    completion, stats = asyncio.run(go())
    assert completion.text == "echo:note." and completion.usage.completion_tokens == 3
    assert completion.usage.prompt_tokens is None  # not reported: unknown, never 0
    assert stats.retries == 2
    path, body = _V2.seen[-1]
    assert path == "/v2/models/tiny-llm/infer"
    assert body["inputs"] == [{"name": "text_input", "shape": [1], "datatype": "BYTES",
                               "data": ["Be brief.\n\nSummarise the note."]}]
    # v2 parameters are scalars (KServe's REST schema answers a list with 422): one stop sequence as itself
    assert body["parameters"] == {"max_tokens": 8, "temperature": 0.0, "stop": "\n", "seed": 0, "top_p": 1.0}


def test_several_stop_sequences_travel_as_json_text(v2_server):
    from medhelm.inference.kserve_v2 import KServeV2Client

    request = GenerationRequest(messages=(Message("user", "Name a vital sign."),), max_tokens=4, stop=("\n", "."))
    asyncio.run(KServeV2Client(_deployment(v2_server)).generate(request))
    assert json.loads(_V2.seen[-1][1]["parameters"]["stop"]) == ["\n", "."]


def test_refusals_and_unreachable(v2_server, refused_url):
    from medhelm.inference.kserve_v2 import KServeV2Client

    _V2.script = [(400, {"error": "prompt too long"})]
    client = KServeV2Client(_deployment(v2_server))
    with pytest.raises(InferenceError) as err:
        asyncio.run(client.generate(_request()))
    assert not err.value.retryable and err.value.status == 400 and "prompt too long" in str(err.value)
    assert "Summarise" not in str(err.value)
    down = KServeV2Client(_deployment(refused_url))
    with pytest.raises(ServerUnreachable) as err:
        asyncio.run(down.generate(_request()))
    assert refused_url in str(err.value)
