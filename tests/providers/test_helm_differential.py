"""Differential test against HELM's OWN clients: crfm-helm 0.5.16 in its own venv (with the provider SDKs
its extras pin: openai, anthropic, google-genai, boto3), every supported entry of its packaged
model_deployments.yaml sent once through HELM's client and once through medhelm's, both at one loopback
capture server (endpoints set as a hospital sets them: <host>BaseUrl / <host>Endpoint in credentials.conf,
ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL, AWS_ENDPOINT_URL_BEDROCK_RUNTIME, TOGETHER_BASE_URL; the clients
with an address built in, TogetherClient's and OpenRouterClient's, pointed there by the harness, their paths kept). Compared per entry: the path
and query, the JSON body, and the auth headers (a SigV4 signature by its scope and signed headers: the
timestamps differ). Where medhelm is known to send another request than HELM, ``KNOWN`` says why, and the
test checks the difference is still there (fixing one fails the test until its line is removed).

The venv is built on first use under MEDHELM_ENGINES_DIR (~/.cache/medhelm-engines/helm-0.5.16, as
scripts/engines.sh keeps the engines); offline and not built, the test skips saying so."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from medhelm import helm_env
from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.fakes.anthropic import stream_of
from medhelm.inference import make_client
from medhelm.specs import GenerationRequest, Message

from tests.helm_venv import VERSION, installed_beside as _installed_beside

# SDKs of HELM's other extras, installed beside the venv (pip --target, appended to the harness's sys.path so the
# venv's own packages win): mistralai within HELM's `mistral` pin (~=1.1), google-cloud-aiplatform within its
# `google` pin (~=1.48: the vertexai SDK of HELM's VertexAIChatClient / VertexAITextClient)
EXTRA_PACKAGES = ("mistralai==1.12.4", "google-cloud-aiplatform==1.165.1")
HARNESS = Path(__file__).resolve().parents[2] / "scripts" / "helm_fixtures" / "helm_requests.py"
PROMPT = "Is the patient febrile? Answer yes or no."
TEXT_SCHEMA = "gs://google-cloud-aiplatform/schema/predict/instance/text_generation_1.0.0.yaml"
VERTEX_CLASSES = ("VertexAIChatClient", "VertexAITextClient")
# the together SDK within HELM's `together` pin (~=1.1), for HELM's TogetherChatClient: its own folder (pip --target,
# appended like the extras), so adding it leaves the extras' folder as it is
TOGETHER_PACKAGES = ("together==1.5.35",)
# HELM's clients for these speak another transport or need an SDK outside the extras above (huggingface_hub): not
# compared here (the Vertex bodies are compared through the vertexai SDK below)
NOT_COMPARED = {"HuggingFaceInferenceProvidersClient", "VertexAIChatClient", "VertexAITextClient"}
AUTH_HEADERS = ("authorization", "api-key", "x-api-key", "x-goog-api-key", "ocp-apim-subscription-key",
                "anthropic-version", "openai-organization")
KNOWN = {  # class -> why medhelm's request differs from HELM's (kept honest: the difference must still be there)
    "AnthropicClient": "HELM's legacy AnthropicClient uses the retired Text Completions API; medhelm sends Messages",
}


@pytest.fixture(scope="session")
def helm_extra_path(helm_python) -> Path:
    return _installed_beside(helm_python, "extras", EXTRA_PACKAGES)


@pytest.fixture(scope="session")
def helm_together_path(helm_python) -> Path:
    return _installed_beside(helm_python, "together", TOGETHER_PACKAGES)


def together_models(ids) -> list[dict]:
    """Together's GET /v1/models: every model with its config's default stop tokens (HELM's TogetherChatClient
    adds them to every request's stop), a different pair per model."""
    return [{"id": m, "object": "model", "type": "chat", "pricing": {"input": 0, "output": 0},
             "config": {"stop": [f"<|stop-{i}|>", "</s>"], "chat_template": None}} for i, m in enumerate(ids)]


def reply_for(path: str, body) -> object:
    """A minimal valid answer in each API's shape (so no SDK retries)."""
    chat = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "stop",
                         "logprobs": None}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    anthropic = {"id": "msg", "type": "message", "role": "assistant", "model": "m",
                 "content": [{"type": "text", "text": "Yes"}], "stop_reason": "end_turn", "stop_sequence": None,
                 "usage": {"input_tokens": 1, "output_tokens": 1}}
    gemini = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Yes"}]}, "finishReason": "STOP",
                              "index": 0}],
              "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}}
    path = path.split("?")[0]
    if path.endswith("/chat/completions"):
        return chat
    if path.endswith("/completions"):
        return {**chat, "object": "text_completion",
                "choices": [{"index": 0, "text": "Yes", "finish_reason": "stop", "logprobs": None}]}
    if path.endswith("/responses"):
        return {"id": "r", "object": "response", "created_at": 0, "status": "completed", "model": "m",
                "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "Yes", "annotations": []}]}],
                "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
    if path.endswith("/v1/messages"):
        return anthropic
    if path.endswith("/api/inference"):  # HELM's TogetherClient: Together's inference API
        return {"status": "finished", "output": {"choices": [{"text": "Yes", "finish_reason": "stop"}],
                                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                           "total_tokens": 2}}}
    if ":generateContent" in path:
        return gemini
    if path.endswith(":predict"):
        return {"predictions": [{"content": "Yes", "safetyAttributes": {"blocked": False}}]}
    if path.endswith("/converse"):
        return {"output": {"message": {"role": "assistant", "content": [{"text": "Yes"}]}}, "stopReason": "end_turn",
                "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}, "metrics": {"latencyMs": 1}}
    if path.endswith("/invoke"):
        return {"generation": "Yes", "prompt_token_count": 1, "generation_token_count": 1, "stop_reason": "stop",
                "outputs": [{"text": "Yes", "stop_reason": "stop"}],
                "results": [{"outputText": "Yes", "completionReason": "FINISH", "tokenCount": 1}],
                "inputTextTokenCount": 1}
    if isinstance(body, dict) and "prompt_text" in body:  # SHC's Claude route
        return anthropic
    return [gemini]  # SHC's Gemini route: the streamed chunks as one array


class Capture:
    """127.0.0.1, any free port: files each request under the deployment named last by POST /__next__."""

    def __init__(self) -> None:
        self.seen: dict[str, list[dict]] = {}
        self.current = ""
        self.models: list[dict] = []  # GET .../models: Together's model list
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # vertexai's from_pretrained reads the publisher model (a text model's schema)
                name = self.path.split("?")[0].split("/v1/", 1)[-1].split("/v1beta1/", 1)[-1]
                data = json.dumps(capture.models).encode() if self.path.endswith("/v1/models") else json.dumps({"name": name, "versionId": "001", "launchStage": "GA",
                                   "publisherModelTemplate": "projects/{user-project}/locations/{location}/" + name,
                                   "predictSchemata": {"instanceSchemaUri": TEXT_SCHEMA}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                if self.path == "/__next__":
                    capture.current = body["name"]
                    reply = {}
                else:
                    capture.seen.setdefault(capture.current, []).append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                         "body": body})
                    reply = reply_for(self.path, body)
                kind = "application/json"
                if isinstance(body, dict) and body.get("stream") is True and self.path.endswith("/v1/messages"):
                    data, kind = stream_of(reply), "text/event-stream"  # Anthropic's event stream
                else:
                    data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def auth_view(headers: dict) -> dict:
    """The auth headers; a SigV4 Authorization by its algorithm, scope (region/service) and signed headers."""
    out = {k: headers[k] for k in AUTH_HEADERS if k in headers}
    sig = out.get("authorization", "")
    if sig.startswith("AWS4-HMAC-SHA256"):
        parts = dict(p.strip().split("=", 1) for p in sig[len("AWS4-HMAC-SHA256 "):].split(","))
        out["authorization"] = ("AWS4-HMAC-SHA256", parts["Credential"].split("/", 2)[2], parts["SignedHeaders"])
    return out


def view(seen: list[dict]) -> list[dict]:
    return [{"path": s["path"], "body": s["body"], "auth": auth_view(s["headers"])} for s in seen]


def send_ours(capture: Capture, registry: DeploymentRegistry, names, skip=frozenset()) -> dict[str, list[dict]]:
    """medhelm's request for each named deployment (but ``skip``), as the capture server filed it."""
    request = GenerationRequest((Message("user", PROMPT),), max_tokens=5, temperature=0.0)

    async def ours(name):
        client = make_client(registry.get(name))
        try:
            await client.generate(request)
        finally:
            await client.aclose()

    for name in names:
        if name not in skip:
            capture.current = name
            asyncio.run(ours(name))
    return {n: view(capture.seen.pop(n, [])) for n in names}


def test_every_supported_upstream_entry_sends_what_helms_own_client_sends(helm_python, helm_extra_path,
                                                                        helm_together_path, tmp_path, monkeypatch):
    from tests.helm_releases import release

    config = release(VERSION) / "helm/config/model_deployments.yaml"
    entries = {e["name"]: e for e in yaml.safe_load(config.read_text())["model_deployments"]}
    classes = {n: e["client_spec"]["class_name"].rsplit(".", 1)[-1] for n, e in entries.items()}
    names = sorted(n for n, c in classes.items() if c in helm_env.CLIENT_CLASSES and c not in NOT_COMPARED)
    capture = Capture()
    capture.models = together_models(sorted({helm_env.served_model(classes[n], entries[n]["client_spec"].get("args")
                                                                   or {}, entries[n]["model_name"]) or ""
                                             for n in names if classes[n] == "TogetherChatClient"}))
    try:
        hosts = sorted({n.split("/")[0] for n in names})
        credentials = {f"{h}ApiKey": f"key-{h}" for h in hosts}
        for h in hosts:
            credentials[f"{h}BaseUrl"] = capture.url + "/v1"
            credentials[f"{h}Endpoint"] = capture.url
        credentials["openrouterBaseUrl"] = capture.url + "/api/v1"  # HELM's built-in address, its path kept
        env = {"ANTHROPIC_BASE_URL": capture.url, "GOOGLE_GEMINI_BASE_URL": capture.url,
               "MISTRAL_BASE_URL": capture.url + "/v1", "TOGETHER_BASE_URL": capture.url + "/v1",
               "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": capture.url, "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
               "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_DEFAULT_REGION": "us-east-1",
               "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        for k in ("AWS_REGION", "AWS_SESSION_TOKEN", "AWS_PROFILE", "OPENAI_BASE_URL", "HELM_CREDENTIALS"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)

        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"credentials": credentials, "deployments": names, "prompt": PROMPT,
                                    "max_tokens": 5, "capture": capture.url,
                                    "extra_path": [str(helm_extra_path), str(helm_together_path)]}))
        done = subprocess.run([str(helm_python), str(HARNESS), str(spec)], capture_output=True, text=True,
                              timeout=1800, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        helm_seen = {n: view(capture.seen.pop(n, [])) for n in names}

        prod = tmp_path / "prod_env"
        prod.mkdir()
        shutil.copy(config, prod / "model_deployments.yaml")
        shutil.copy(config.with_name("model_metadata.yaml"), prod / "model_metadata.yaml")  # HELM's is_vlm tags
        (prod / "credentials.conf").write_text("".join(f'{k}: "{v}"\n' for k, v in credentials.items()))
        registry = DeploymentRegistry.load(prod)
        unresolved = {n for n in names if registry.get(n).options.get("unresolved")}  # refused at planning
        our_seen = send_ours(capture, registry, names, skip=unresolved)
        if os.environ.get("MEDHELM_DIFF_DUMP"):  # for a maintainer reading the differences
            Path(os.environ["MEDHELM_DIFF_DUMP"]).write_text(json.dumps(
                {"helm": helm_seen, "ours": our_seen, "classes": classes, "helm_log": done.stdout}, default=str))
    finally:
        capture.close()

    same, differ, helm_silent = [], {}, []
    for name in names:
        if name in unresolved and not helm_seen[name]:
            continue  # neither sends: HELM's client fails without the setting, medhelm refuses at planning
        if not helm_seen[name]:
            helm_silent.append(name)  # HELM's client sent nothing (it failed before sending)
        elif helm_seen[name][:1] == our_seen[name][:1]:
            same.append(name)
        else:
            differ[name] = (helm_seen[name][:1], our_seen[name][:1])
    report = {n: classes[n] for n in differ}
    unexplained = {n: differ[n] for n in differ if classes[n] not in KNOWN}
    assert not unexplained, json.dumps(unexplained, indent=1, default=str)[:6000]
    assert not helm_silent, helm_silent
    for cls in KNOWN:  # a known difference that vanished: drop its line
        in_file = [n for n in names if classes[n] == cls]
        if in_file:
            assert any(n in differ for n in in_file), f"{cls} now matches HELM: remove it from KNOWN"
    assert len(same) >= 250, (len(same), report)  # 0.5.16: 254 of 261 identical (21 MistralAIClient, 54
    # TogetherClient, 48 TogetherChatClient, 1 OpenRouterClient, 3 streamed AnthropicMessagesClient), 5 known, 2
    # neither sends
    streamed = [n for n in names if (entries[n]["client_spec"].get("args") or {}).get("stream")]
    assert streamed and all(n in same and helm_seen[n][0]["body"]["stream"] is True for n in streamed)
    helm_ok = {r["name"]: r["ok"] for r in map(json.loads, (line for line in done.stdout.splitlines()
                                                          if line.startswith("{"))) if "name" in r}
    assert all(helm_ok[n] for n in streamed), {n: helm_ok[n] for n in streamed}  # HELM's SDK read the stream too


def vertex_view(seen: list[dict]) -> list[dict]:
    """HELM's vertexai requests as JSON names: the REST transport's ``?$alt=json;enum-encoding=int`` dropped, its
    path's twice-escaped ``@`` (``code-bison%2540001``; gRPC sends the resource name as is) read as ``@``, and
    its enum numbers read back as names (SafetySetting: category, HELM's threshold BLOCK_NONE = 4; a category 0,
    the proto default, is left out by the encoder)."""
    out = []
    for s in seen:
        body = dict(s["body"]) if isinstance(s["body"], dict) else s["body"]
        if isinstance(body, dict) and "safetySettings" in body:
            body["safetySettings"] = [{"category": helm_env.VERTEX_HARM_CATEGORIES[x.get("category", 0)],
                                       "threshold": {4: "BLOCK_NONE"}[x["threshold"]]} for x in body["safetySettings"]]
        out.append({**s, "path": urllib.parse.unquote(urllib.parse.unquote(s["path"].split("?")[0])), "body": body})
    return out


def test_vertex_entries_send_what_helms_vertexai_clients_send(helm_python, helm_extra_path, tmp_path, monkeypatch):
    """HELM's VertexAIChatClient (Gemini, its safety settings) and VertexAITextClient (MedLM, PaLM 2) through the
    vertexai SDK HELM pins, against medhelm with Google ADC (a service-account key, our token exchange with the
    fake token endpoint): path, body and the bearer token compared per entry."""
    from tests.helm_releases import release

    from medhelm.devtools.fakes.google_oauth import FakeGoogleOAuth

    pytest.importorskip("cryptography")
    config = release(VERSION) / "helm/config/model_deployments.yaml"
    entries = {e["name"]: e for e in yaml.safe_load(config.read_text())["model_deployments"]}
    classes = {n: e["client_spec"]["class_name"].rsplit(".", 1)[-1] for n, e in entries.items()}
    names = sorted(n for n, c in classes.items() if c in VERTEX_CLASSES)
    token = "ya29.differential"
    capture = Capture()
    try:
        with FakeGoogleOAuth(access_token=token) as oauth:
            credentials = {"googleProjectId": "hospital-proj", "googleLocation": "us-central1"}
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(oauth.service_account_file(tmp_path / "sa.json")))
            monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", capture.url)
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
            spec = tmp_path / "spec.json"
            spec.write_text(json.dumps({"credentials": credentials, "deployments": names, "prompt": PROMPT,
                                        "max_tokens": 5, "capture": capture.url, "vertex_token": token,
                                        "extra_path": [str(helm_extra_path)]}))
            done = subprocess.run([str(helm_python), str(HARNESS), str(spec)], capture_output=True, text=True,
                                  timeout=1800, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            assert done.returncode == 0, done.stderr[-3000:]
            helm_seen = {n: vertex_view(view(capture.seen.pop(n, []))) for n in names}

            prod = tmp_path / "prod_env"
            prod.mkdir()
            shutil.copy(config, prod / "model_deployments.yaml")
            (prod / "credentials.conf").write_text("".join(f'{k}: "{v}"\n' for k, v in credentials.items()))
            our_seen = send_ours(capture, DeploymentRegistry.load(prod), names)
    finally:
        capture.close()
    silent = [n for n in names if not helm_seen[n]]
    assert not silent, (silent, done.stdout[-2000:])
    for n in names:
        for seen in our_seen[n]:
            seen["path"] = urllib.parse.unquote(seen["path"])
    differ = {n: (helm_seen[n][:1], our_seen[n][:1]) for n in names if helm_seen[n][:1] != our_seen[n][:1]}
    assert not differ, json.dumps(differ, indent=1, default=str)[:6000]
    presets = {n: (entries[n]["client_spec"].get("args") or {}).get("safety_settings_preset") for n in names
               if classes[n] == "VertexAIChatClient"}
    blocked_none = [n for n, p in presets.items() if p != "default"]
    assert blocked_none and "default" in presets.values()
    assert all(len(helm_seen[n][0]["body"]["safetySettings"]) == len(helm_env.VERTEX_HARM_CATEGORIES)
               for n in blocked_none)  # HELM's BLOCK_NONE for every category, matched above
    assert all("safetySettings" not in helm_seen[n][0]["body"] for n, p in presets.items() if p == "default")
    assert len(names) >= 30  # 0.5.16: 26 VertexAIChatClient, 9 VertexAITextClient


# huggingface_hub within what HELM's core pins through transformers (<1.0): the InferenceClient of HELM's
# HuggingFaceInferenceProvidersClient
HF_PACKAGES = ("huggingface_hub==0.36.2",)


@pytest.fixture(scope="session")
def helm_hf_path(helm_python) -> Path:
    return _installed_beside(helm_python, "huggingface", HF_PACKAGES)


def test_hugging_face_router_entries_send_what_helms_client_sends(helm_python, helm_hf_path, tmp_path, monkeypatch):
    """HELM's HuggingFaceInferenceProvidersClient (no release's packaged file has an entry: a hospital writes its
    own) through the huggingface_hub InferenceClient, pointed at the capture server as HELM lets it be: the
    class's base_url from <host>BaseUrl (a .../v1 address) or args (a server's root: the SDK adds /v1)."""
    capture = Capture()
    try:
        entries = [
            {"name": "hfrouter/llama-3.1-8b-instruct", "model_name": "meta-llama/llama-3.1-8b-instruct",
             "tokenizer_name": "meta-llama/Llama-3.1-8B-Instruct", "max_sequence_length": 128000,
             "client_spec": {"class_name": "helm.clients.huggingface_inference_providers_client."
                                           "HuggingFaceInferenceProvidersClient",
                             "args": {"huggingface_model_name": "meta-llama/Llama-3.1-8B-Instruct:cerebras"}}},
            {"name": "hospital-tgi/qwen2.5-7b-instruct", "model_name": "qwen/qwen2.5-7b-instruct",
             "tokenizer_name": "qwen/qwen2.5-7b-instruct", "max_sequence_length": 32768,
             "client_spec": {"class_name": "helm.clients.huggingface_inference_providers_client."
                                           "HuggingFaceInferenceProvidersClient",
                             "args": {"base_url": capture.url}}},
        ]
        names = [e["name"] for e in entries]
        prod = tmp_path / "prod_env"
        prod.mkdir()
        (prod / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": entries}))
        credentials = {"hfrouterApiKey": "hf_router_key", "hfrouterBaseUrl": capture.url + "/v1",
                       "hospital-tgiApiKey": "hf_tgi_key"}
        (prod / "credentials.conf").write_text("".join(f'{k}: "{v}"\n' for k, v in credentials.items()))
        monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"credentials": credentials, "deployments": names, "prompt": PROMPT,
                                    "max_tokens": 5, "capture": capture.url, "prod_env": str(prod),
                                    "extra_path": [str(helm_hf_path)]}))
        # huggingface_hub's offline mode refuses every URL, the capture server's too: left unset here (the
        # base_url set, the client asks the Hub for nothing; no tokenizer is loaded)
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        done = subprocess.run([str(helm_python), str(HARNESS), str(spec)], capture_output=True, text=True,
                              timeout=1800, cwd=tmp_path, env={**env, "HF_HUB_DISABLE_TELEMETRY": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        helm_seen = {n: view(capture.seen.pop(n, [])) for n in names}

        our_seen = send_ours(capture, DeploymentRegistry.load(prod), names)
    finally:
        capture.close()
    assert all(helm_seen[n] for n in names), done.stdout[-2000:]
    differ = {n: (helm_seen[n][:1], our_seen[n][:1]) for n in names if helm_seen[n][:1] != our_seen[n][:1]}
    assert not differ, json.dumps(differ, indent=1, default=str)[:6000]
