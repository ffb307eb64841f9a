"""What each accepted entry of upstream HELM's model_deployments.yaml asks for, as HELM's own clients ask
(read from helm/clients/*.py of the crfm-helm wheels): the model id HELM derives (org prefix stripped, Bedrock
ids as its Bedrock clients build them, the model arg when given), HELM's reasoning-model rules
(OpenAIClientUtils.is_reasoning_model: ^o\\d+ or ^gpt-5 -> max_completion_tokens, no temperature/top_p/
penalties/null stop), OpenAIResponseClient entries on the Responses API (a loopback server answering as the
API does), for every supported entry of every release."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import urllib.parse
from pathlib import Path

import pytest
import yaml

from medhelm.deployments import DeploymentRegistry
from medhelm.inference import make_client
from medhelm.specs import FrozenMap, GenerationRequest, Message

HOSTS = ("openai", "anthropic", "google", "together", "stanfordhealthcare", "stanfordhealthcare_shc", "maritaca-ai",
         "openrouter", "huggingface", "microsoft", "azure", "deepseek-ai", "qwen")
REQUEST = GenerationRequest((Message("user", "Is the patient febrile? Answer yes or no."),), max_tokens=5)


def load(release: Path, folder: Path, monkeypatch) -> DeploymentRegistry:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(release / "helm/config/model_deployments.yaml", folder / "model_deployments.yaml")
    creds = [f'{h}ApiKey: "k-{i}"' for i, h in enumerate(HOSTS)]
    creds += ['stanfordhealthcareEndpoint: "https://gw.example"', 'stanfordhealthcare_shcEndpoint: "https://shc.example"',
              'googleProjectId: "proj"', 'googleLocation: "us-central1"']
    (folder / "credentials.conf").write_text("\n".join(creds) + "\n")
    for name, value in (("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), ("AWS_SECRET_ACCESS_KEY", "secret"),
                        ("AWS_DEFAULT_REGION", "us-west-2")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_REGION", raising=False)
    return DeploymentRegistry.load(folder)


def engine(model_name: str) -> str:
    return model_name.split("/")[1]


def helm_model_id(entry: dict) -> str:
    """HELM's rule per class, written from its source (the test's oracle; helm_env has its own table)."""
    cls = entry["client_spec"]["class_name"].rsplit(".", 1)[-1]
    args = entry["client_spec"].get("args") or {}
    model = entry["model_name"]
    if cls.startswith("Together"):
        return args.get("together_model") or model
    if cls == "OpenRouterClient":
        return args.get("model_name") or model
    if cls == "HuggingFaceInferenceProvidersClient":
        return args.get("huggingface_model_name") or model
    if cls == "BedrockNovaClient":
        return args.get("bedrock_model_id") or model.replace("/", ".")
    if cls.startswith("Bedrock"):
        provider = {"BedrockTitanClient": "amazon", "BedrockMistralClient": "mistral", "BedrockLlamaClient": "meta"}[cls]
        name = model.split("/")[-1]
        return args.get("bedrock_model_id") or (f"amazon.{name}" if provider == "amazon"
                                                  else name.replace("amazon-", f"{provider}."))
    for arg in ("openai_model_name", "vllm_model_name", "azure_openai_deployment_name", "anthropic_model_name",
                "genai_model", "vertexai_model", "model"):
        if args.get(arg):
            return args[arg]
    return engine(model)


def test_every_supported_entry_asks_for_the_model_helm_asks_for(helm_release, tmp_path, monkeypatch):
    entries = {e["name"]: e for e in yaml.safe_load(
        (helm_release / "helm/config/model_deployments.yaml").read_text())["model_deployments"]}
    registry = load(helm_release, tmp_path / "env", monkeypatch)
    (token := tmp_path / "token").write_text("ya29.test")
    checked = 0
    for dep in registry:
        if not dep.options.get("helm_class") or dep.options.get("unresolved"):
            continue
        want = helm_model_id(entries[dep.name])
        if dep.options.get("platform") == "vertex" or dep.kind.value == "vertex_text":  # Vertex's OAuth token from a file
            dep = dataclasses.replace(dep, options=FrozenMap({**dep.options, "access_token_file": str(token)}))
        client = make_client(dep)
        body = client.payload(REQUEST)
        kind = dep.kind.value
        if kind == "bedrock":  # the model is in the path: /model/<id>/converse (InvokeModel: /invoke)
            action = "converse" if dep.options.get("helm_class") == "BedrockNovaClient" else "invoke"
            assert client._url.endswith(f"/model/{urllib.parse.quote(want, safe='')}/{action}"), dep.name
        elif kind == "gemini" and want.startswith("publishers/"):  # another publisher's model: its resource path
            assert client._url.endswith(f"/{want}:generateContent"), dep.name
        elif kind == "gemini" and dep.options.get("platform") != "shc":
            assert f"/models/{urllib.parse.quote(want, safe='@')}:generateContent" in client._url, dep.name
        elif kind == "vertex_text":
            assert f"/models/{urllib.parse.quote(want, safe='@')}:predict" in client._url, dep.name
        elif kind == "anthropic" and dep.options.get("platform") == "shc":
            assert body["model_id"] == want, dep.name
        elif kind == "anthropic":
            assert body["model"] == want, dep.name
        elif kind == "gemini":  # SHC's Gemini route names the model in its URL (the deployment route)
            continue
        else:  # openai, azure_openai: the body's model, and Azure's path from it
            assert body["model"] == want, dep.name
            if dep.options.get("api_version"):
                assert f"/deployments/{want}/" in client._url, dep.name
        checked += 1
        asyncio.run(client.aclose())
    assert checked > 150


def test_the_issues_examples(tmp_path, monkeypatch, helm_release):
    if helm_release.name != "0.5.16":
        pytest.skip("the examples name 0.5.16's entries")
    registry = load(helm_release, tmp_path / "env", monkeypatch)

    def client(name):
        return make_client(registry.get(name))

    assert client("openai/gpt-4o-2024-05-13").payload(REQUEST)["model"] == "gpt-4o-2024-05-13"
    assert client("anthropic/claude-3-7-sonnet-20250219").payload(REQUEST)["model"] == "claude-3-7-sonnet-20250219"
    assert client("amazon/nova-pro-v1:0")._url == \
        "https://bedrock-runtime.us-west-2.amazonaws.com/model/amazon.nova-pro-v1%3A0/converse"  # AWS_DEFAULT_REGION
    assert client("stanfordhealthcare/llama-3.3-70b-instruct").payload(REQUEST)["model"] == "llama-3.3-70b-instruct"
    o3 = client("openai/o3-mini-2025-01-31").payload(REQUEST)
    assert o3 == {"model": "o3-mini-2025-01-31", "messages": [{"role": "user", "content": REQUEST.messages[0].content}],
                  "n": 1, "max_completion_tokens": 5}
    gpt4o = client("openai/gpt-4o-2024-05-13").payload(REQUEST)
    assert gpt4o == {"model": "gpt-4o-2024-05-13", "messages": o3["messages"], "temperature": 0.0, "top_p": 1,
                     "n": 1, "stop": None, "max_tokens": 5, "presence_penalty": 0, "frequency_penalty": 0}
    effort = client("openai/o3-2025-04-16-high-reasoning-effort").payload(REQUEST)
    assert effort["reasoning_effort"] == "high" and "temperature" not in effort


@pytest.mark.parametrize("model,reasoning", [("o1-2024-12-17", True), ("o3-mini", True), ("o4-mini-2025-04-16", True),
                                             ("gpt-5-2025-08-07", True), ("gpt-5.1", True), ("gpt-4o", False),
                                             ("omni-x", False), ("gpt-4.1", False)])
def test_helms_reasoning_rule(model, reasoning):
    from medhelm.inference.openai import is_reasoning_model

    assert is_reasoning_model(f"openai/{model}") is reasoning
    assert bool(re.match(r"^o\d+", model) or re.match(r"^gpt-5", model)) is reasoning  # HELM's, verbatim


def test_openai_response_client_entries_use_the_responses_api(tmp_path, monkeypatch):
    """A gpt-5 OpenAIResponseClient entry: POST /responses with HELM's body; the answer is the output_text of
    the message item (the reasoning summary is not), usage as stated."""
    import http.server
    import threading

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append((self.path, dict(self.headers), body))
            reply = json.dumps({
                "id": "resp_1", "object": "response", "status": "completed", "model": body["model"],
                "output": [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hmm"}]},
                           {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "Yes", "annotations": []}]}],
                "usage": {"input_tokens": 12, "output_tokens": 70, "total_tokens": 82,
                          "output_tokens_details": {"reasoning_tokens": 64},
                          "input_tokens_details": {"cached_tokens": 0}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = tmp_path / "env"
        env.mkdir()
        (env / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [
            {"name": "openai/gpt-5-2025-08-07-low-reasoning-effort", "model_name": "openai/gpt-5-2025-08-07",
             "tokenizer_name": "openai/o200k_base", "max_sequence_length": 400000,
             "client_spec": {"class_name": "helm.clients.openai_responses_client.OpenAIResponseClient",
                             "args": {"reasoning_effort": "low"}}}]}))
        (env / "credentials.conf").write_text('openaiApiKey: "sk-test"\n')
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")  # the SDK's variable
        dep = DeploymentRegistry.load(env).get("openai/gpt-5-2025-08-07-low-reasoning-effort")
        from tests.core.conftest import generate_once

        completion = generate_once(dep, "Is the patient febrile? Answer yes or no.", 5)
    finally:
        server.shutdown()
        server.server_close()
    [(path, headers, body)] = seen
    assert path == "/v1/responses" and headers["Authorization"] == "Bearer sk-test"
    assert body == {"model": "gpt-5-2025-08-07", "input": "Is the patient febrile? Answer yes or no.",
                    "max_output_tokens": 16, "store": False, "reasoning": {"effort": "low", "summary": "detailed"}}
    assert completion.text == "Yes" and completion.finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens,
            completion.usage.reasoning_tokens) == (12, 70, 64)


def one_entry(folder: Path, name: str, model: str, class_name: str, args: dict | None = None,
              credentials: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [
        {"name": name, "model_name": model, "tokenizer_name": "x/y", "max_sequence_length": 100000,
         "client_spec": {"class_name": class_name, "args": args or {}}}]}))
    (folder / "credentials.conf").write_text(credentials)
    return folder


ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL",
                      "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")


@pytest.mark.parametrize("name,model,class_name,variable,url", [
    ("openai/gpt-4o", "openai/gpt-4o", "helm.clients.openai_client.OpenAIClient", "OPENAI_BASE_URL",
     "https://llm.hospital.example/openai/v1/chat/completions"),
    ("anthropic/claude-3-7-sonnet-20250219", "anthropic/claude-3-7-sonnet-20250219",
     "helm.clients.anthropic_client.AnthropicMessagesClient", "ANTHROPIC_BASE_URL",
     "https://llm.hospital.example/openai/v1/messages"),
    ("google/gemini-2.5-pro", "google/gemini-2.5-pro", "helm.clients.google_genai_client.GoogleGenAIClient",
     "GOOGLE_GEMINI_BASE_URL", "https://llm.hospital.example/openai/v1beta/models/gemini-2.5-pro:generateContent"),
    ("amazon/nova-pro-v1:0", "amazon/nova-pro-v1:0", "helm.clients.bedrock_client.BedrockNovaClient",
     "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "https://llm.hospital.example/openai/model/amazon.nova-pro-v1%3A0/converse"),
    ("amazon/nova-lite-v1:0", "amazon/nova-lite-v1:0", "helm.clients.bedrock_client.BedrockNovaClient",
     "AWS_ENDPOINT_URL", "https://llm.hospital.example/openai/model/amazon.nova-lite-v1%3A0/converse"),
])
def test_the_provider_sdks_endpoint_variables_point_an_entry_elsewhere(tmp_path, monkeypatch, name, model,
                                                                     class_name, variable, url):
    for v in ENDPOINT_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(variable, "https://llm.hospital.example/openai" + ("/v1" if variable == "OPENAI_BASE_URL"
                                                                          else ""))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # HELM's bedrock_utils: AWS_REGION, else this
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    host = name.split("/")[0]
    env = one_entry(tmp_path / "env", name, model, class_name, credentials=f'{host}ApiKey: "k"\n')
    dep = DeploymentRegistry.load(env).get(name)
    client = make_client(dep)
    assert client._url == url
    if dep.kind.value == "bedrock":
        assert client._signer[1] == "eu-west-1"
    asyncio.run(client.aclose())


def test_host_base_url_in_credentials_conf_as_helms_auto_client_injects_it(tmp_path, monkeypatch):
    """AutoClient fills a missing base_url with <host>BaseUrl; an explicit args.base_url wins; the SDK's
    variable comes after both."""
    monkeypatch.setenv("OPENAI_BASE_URL", "https://from-the-variable.example/v1")
    env = one_entry(tmp_path / "a", "acme/gpt-4o", "openai/gpt-4o", "helm.clients.openai_client.OpenAIClient",
                    credentials='acmeApiKey: "k"\nacmeBaseUrl: "https://gateway.hospital.example/v1"\n')
    assert DeploymentRegistry.load(env).get("acme/gpt-4o").base_url == "https://gateway.hospital.example/v1"
    env = one_entry(tmp_path / "b", "acme/gpt-4o", "openai/gpt-4o", "helm.clients.openai_client.OpenAIClient",
                    {"base_url": "https://explicit.example/v1"},
                    credentials='acmeApiKey: "k"\nacmeBaseUrl: "https://gateway.hospital.example/v1"\n')
    assert DeploymentRegistry.load(env).get("acme/gpt-4o").base_url == "https://explicit.example/v1"
    env = one_entry(tmp_path / "c", "acme/gpt-4o", "openai/gpt-4o", "helm.clients.openai_client.OpenAIClient",
                    credentials='acmeApiKey: "k"\n')
    assert DeploymentRegistry.load(env).get("acme/gpt-4o").base_url == "https://from-the-variable.example/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert DeploymentRegistry.load(env).get("acme/gpt-4o").base_url == "https://api.openai.com/v1"


def test_an_organization_from_credentials_is_sent_as_the_sdk_sends_it(tmp_path):
    env = one_entry(tmp_path / "a", "openai/gpt-4o", "openai/gpt-4o", "helm.clients.openai_client.OpenAIClient",
                    credentials='openaiApiKey: "k"\nopenaiOrgId: "org-hospital"\n')
    dep = DeploymentRegistry.load(env).get("openai/gpt-4o")
    assert dep.options["headers"]["OpenAI-Organization"] == "org-hospital"


def test_anthropic_messages_entries_send_helms_body(helm_release, tmp_path, monkeypatch):
    """AnthropicMessagesClient's raw request: one user message, stop_sequences (a list), the request's
    max_tokens (no budget added), temperature, top_p 1, top_k 1; thinking entries add `thinking` and drop
    top_k; Claude 4.5/4.6 drop top_p; an entry whose HELM client streams (args.stream) asks for the stream."""
    registry = load(helm_release, tmp_path / "env", monkeypatch)
    entries = yaml.safe_load((helm_release / "helm/config/model_deployments.yaml").read_text())["model_deployments"]
    prompt = REQUEST.messages[0].content
    checked = 0
    for entry in {e["name"]: e for e in entries}.values():
        if not entry["client_spec"]["class_name"].endswith(".AnthropicMessagesClient"):
            continue
        args = entry["client_spec"].get("args") or {}
        body = make_client(registry.get(entry["name"])).payload(REQUEST)
        model = args.get("anthropic_model_name") or engine(entry["model_name"])
        want = {"messages": [{"role": "user", "content": prompt}], "model": model, "stop_sequences": [],
                "max_tokens": 5, "temperature": 0.0, "top_p": 1, "top_k": 1}
        if args.get("thinking_budget_tokens"):
            want["thinking"] = {"type": "enabled", "budget_tokens": args["thinking_budget_tokens"]}
            del want["top_k"]
        if re.match(r"^claude-[^-]+-4-[56]", model):
            del want["top_p"]
        if args.get("stream"):
            want["stream"] = True
        assert body == want, entry["name"]
        checked += 1
    assert checked >= 12


def test_anthropics_stated_thinking_count_is_used_and_an_estimate_is_flagged():
    from medhelm.inference.anthropic import AnthropicClient
    from medhelm.specs import Deployment, DeploymentKind

    client = AnthropicClient(Deployment(name="a/c", model_name="anthropic/claude-sonnet-4-5",
                                        kind=DeploymentKind("anthropic"), options=FrozenMap({"auth": "none"})))
    reply = {"content": [{"type": "thinking", "thinking": "Let me think about the vitals.", "signature": "sig"},
                         {"type": "text", "text": "Yes"}], "stop_reason": "end_turn",
             "usage": {"input_tokens": 20, "output_tokens": 411, "output_tokens_details": {"thinking_tokens": 400}}}
    usage = client.parse(reply, 0.1).usage
    assert (usage.completion_tokens, usage.reasoning_tokens, usage.reasoning_estimated) == (411, 400, False)
    del reply["usage"]["output_tokens_details"]
    usage = client.parse(reply, 0.1).usage
    assert usage.reasoning_estimated and usage.reasoning_tokens is not None and usage.reasoning_tokens != 400
    reply["content"] = [reply["content"][1]]  # no thinking at all: no count
    assert client.parse(reply, 0.1).usage.reasoning_tokens is None


@pytest.mark.parametrize("family,reply,usage", [
    ("llama", {"generation": " Yes", "prompt_token_count": 12, "generation_token_count": 2, "stop_reason": "stop"},
     (12, 2)),
    ("mistral", {"outputs": [{"text": " Yes", "stop_reason": "stop"}]}, (None, None)),
    ("titan", {"inputTextTokenCount": 12, "results": [{"tokenCount": 2, "outputText": "\nYes",
                                                       "completionReason": "FINISH"}]}, (12, 2)),
])
def test_bedrock_invoke_model_replies_as_each_family_answers(family, reply, usage, monkeypatch):
    """The three InvokeModel reply shapes HELM's Bedrock clients read (bedrock_client.py): the text with its
    leading white space cut (HELM's lstrip), the stop reason, the token counts the family states."""
    from medhelm.inference.bedrock import BedrockClient
    from medhelm.specs import Deployment, DeploymentKind

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    client = BedrockClient(Deployment(name="amazon/x", model_name="amazon/x", kind=DeploymentKind("bedrock"),
                                      served_model_name="meta.x", options=FrozenMap({"region": "us-east-1",
                                                                                    "bedrock_invoke": family})))
    assert client._url.endswith("/model/meta.x/invoke")
    completion = client.parse(reply, 0.1)
    assert (completion.text, completion.finish_reason) == ("Yes", "stop")
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == usage
