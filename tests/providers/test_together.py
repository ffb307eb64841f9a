"""HELM's Together entries (inference/together.py) beyond what the differential test compares (the bodies,
tests/providers/test_helm_differential.py): the model list read once per client, a model the list does not
name refused before anything is sent (as HELM's TogetherChatClient refuses it), and Together's inference API
refusing a request (``output.error``) said without the prompt and not retried."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from medhelm.deployments import DeploymentRegistry
from medhelm.errors import InferenceError
from medhelm.inference import make_client
from medhelm.specs import GenerationRequest, Message

PROMPT = "Patient Jane Roe, 71, febrile after surgery: infection? yes or no"
CHAT = {"name": "together/llama-3-8b-chat", "model_name": "meta/llama-3-8b-chat",
        "client_spec": {"class_name": "helm.clients.together_client.TogetherChatClient",
                        "args": {"together_model": "meta-llama/Llama-3-8b-chat-hf", "disable_logprobs": True}}}
LEGACY = {"name": "together/alpaca-7b", "model_name": "stanford/alpaca-7b",
          "client_spec": {"class_name": "helm.clients.together_client.TogetherClient",
                          "args": {"together_model": "togethercomputer/alpaca-7b"}}}


class Together:
    """Loopback: GET /v1/models (Together's list), POST /v1/chat/completions, POST /api/inference."""

    def __init__(self, models: list, inference: dict) -> None:
        self.gets: list[str] = []
        self.posts: list[tuple[str, dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, reply):
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                server.gets.append(self.path)
                self._send(models)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.posts.append((self.path, body))
                self._send(inference if self.path == "/api/inference" else {
                    "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"},
                                 "finish_reason": "eos"}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _deployment(tmp_path, monkeypatch, url, entry):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    monkeypatch.setenv("TOGETHER_BASE_URL", url)  # the together SDK's own variable
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    (tmp_path / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [entry]}))
    (tmp_path / "credentials.conf").write_text('togetherApiKey: "tg-test-key"\n')
    return DeploymentRegistry.load(tmp_path).get(entry["name"])


async def _ask(dep, times=1):
    client = make_client(dep)
    try:
        return [await client.generate(GenerationRequest((Message("user", PROMPT),), max_tokens=3))
                for _ in range(times)]
    finally:
        await client.aclose()


def test_the_model_list_is_read_once_and_its_stops_are_sent(tmp_path, monkeypatch):
    with Together([{"id": "META-LLAMA/llama-3-8b-chat-hf", "object": "model",
                    "config": {"stop": ["<|eot_id|>"]}}], {}) as server:
        answers = asyncio.run(_ask(_deployment(tmp_path, monkeypatch, server.url, CHAT), times=2))
    assert [a.text for a in answers] == ["Yes", "Yes"]
    assert server.gets == ["/v1/models"]
    assert [p for p, _ in server.posts] == ["/v1/chat/completions"] * 2
    body = server.posts[0][1]
    assert body["stop"] == ["<|eot_id|>"] and body["logprobs"] == 0  # HELM's disable_logprobs


@pytest.mark.parametrize("models", [[{"id": "other/model", "object": "model", "config": {"stop": ["</s>"]}}],
                                    [{"id": "meta-llama/Llama-3-8b-chat-hf", "object": "model"}]])
def test_a_model_the_list_gives_no_stops_for_is_refused_before_sending(tmp_path, monkeypatch, models):
    with Together(models, {}) as server, pytest.raises(InferenceError) as err:
        asyncio.run(_ask(_deployment(tmp_path, monkeypatch, server.url, CHAT)))
    assert not err.value.retryable and "meta-llama/Llama-3-8b-chat-hf" in str(err.value)
    assert "together/llama-3-8b-chat" in str(err.value) and not server.posts


def test_the_inference_api_and_its_refusal(tmp_path, monkeypatch):
    answered = {"status": "finished", "output": {"choices": [{"text": " Yes", "finish_reason": "length"}],
                                                 "usage": {"prompt_tokens": 20, "completion_tokens": 1}}}
    with Together([], answered) as ok:
        [answer] = asyncio.run(_ask(_deployment(tmp_path, monkeypatch, ok.url, LEGACY)))
    assert (answer.text, answer.finish_reason, answer.usage.prompt_tokens) == (" Yes", "length", 20)
    assert ok.posts[0][0] == "/api/inference" and ok.posts[0][1]["stop"] == ["</s>"]  # HELM's EOS stop for alpaca
    with Together([], {"output": {"error": f"input too long: {PROMPT}"}}) as refused, \
            pytest.raises(InferenceError) as err:
        asyncio.run(_ask(_deployment(tmp_path, monkeypatch, refused.url, LEGACY)))
    assert not err.value.retryable and "Together refused the request" in str(err.value)
    assert "Jane Roe" not in str(err.value)
