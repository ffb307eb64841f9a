"""HELM's prod_env carried over unchanged: model_deployments.yaml with client_spec entries, credentials.conf
(HOCON, read like HELM: <host>ApiKey / <host>Endpoint / deployments{...}, or HELM_CREDENTIALS),
model_metadata.yaml; the table of HELM client classes; `medhelm validate` of an upstream-shaped
run_entries_medhelm_public.conf against the paper's nine models behind a gateway, and a real request
through a translated entry that carries the key from credentials.conf (never printed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from medhelm import helm_env
from medhelm.cli import main
from medhelm.credentials import Credentials
from medhelm.deployments import DeploymentRegistry, check_usable
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.errors import ConfigError, InferenceError
from medhelm.specs import DeploymentKind
from tests.core.conftest import generate_once as generate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "helm_prod_env"
SECRET = "shc-subscription-4f9a1c77e2"  # a fake key: it must never appear in output, errors or specs

# HELM's client classes as their class_name appears in HELM's model_deployments.yaml (src/helm/clients/...)
# -> the kind of ours each must become.
HELM_CLASSES = {
    "helm.clients.openai_client.OpenAIClient": "openai",
    "helm.clients.openai_client.OpenAILegacyCompletionsClient": "openai",
    "helm.clients.openai_responses_client.OpenAIResponseClient": "openai",
    "helm.clients.vllm_client.VLLMClient": "openai",
    "helm.clients.vllm_client.VLLMChatClient": "openai",
    "helm.clients.together_client.TogetherClient": "openai",
    "helm.clients.together_client.TogetherChatClient": "openai",
    "helm.clients.openrouter_client.OpenRouterClient": "openai",
    "helm.clients.huggingface_inference_providers_client.HuggingFaceInferenceProvidersClient": "openai",
    "helm.clients.azure_openai_client.AzureOpenAIClient": "azure_openai",
    "helm.clients.stanfordhealthcare_openai_client.StanfordHealthCareOpenAIClient": "openai",
    "helm.clients.stanfordhealthcare_azure_openai_client.StanfordHealthCareAzureOpenAIClient": "azure_openai",
    "helm.clients.stanfordhealthcare_shc_openai_client.StanfordHealthCareSHCOpenAIClient": "azure_openai",
    "helm.clients.stanfordhealthcare_claude_client.StanfordHealthCareClaudeClient": "anthropic",
    "helm.clients.stanfordhealthcare_google_client.StanfordHealthCareGoogleClient": "gemini",
    "helm.clients.anthropic_client.AnthropicMessagesClient": "anthropic",
    "helm.clients.anthropic_client.AnthropicClient": "anthropic",
    "helm.clients.google_genai_client.GoogleGenAIClient": "gemini",
    "helm.clients.vertexai_client.VertexAIChatClient": "gemini",
    "helm.clients.bedrock_client.BedrockClient": "bedrock",
    "helm.clients.bedrock_client.BedrockNovaClient": "bedrock",
    "helm.clients.bedrock_client.BedrockLlamaClient": "bedrock",
}

NINE_MODELS = {  # the paper's nine models (model name -> deployment in the example prod_env)
    "deepseek-ai/deepseek-r1": "stanfordhealthcare/deepseek-r1",
    "openai/o3-mini-2025-01-31": "stanfordhealthcare/o3-mini-2025-01-31",
    "anthropic/claude-3-7-sonnet-20250219": "stanfordhealthcare/claude-3-7-sonnet-20250219",
    "anthropic/claude-3-5-sonnet-20241022": "stanfordhealthcare/claude-3-5-sonnet-20241022",
    "openai/gpt-4o-2024-05-13": "stanfordhealthcare/gpt-4o-2024-05-13",
    "openai/gpt-4o-mini-2024-07-18": "stanfordhealthcare/gpt-4o-mini-2024-07-18",
    "google/gemini-2.0-flash-001": "stanfordhealthcare/gemini-2.0-flash-001",
    "google/gemini-1.5-pro-001": "stanfordhealthcare/gemini-1.5-pro-001",
    "meta/llama-3.3-70b-instruct": "stanfordhealthcare/llama-3.3-70b-instruct",
}


def prod_env(folder: Path, endpoint: str = "https://gateway.hospital.example") -> Path:
    """The example prod_env copied as a user would (model_deployments.yaml, model_metadata.yaml) plus a
    credentials.conf whose only edits are the endpoint and the key."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "model_deployments.example.yaml", folder / "model_deployments.yaml")
    shutil.copy(EXAMPLE / "model_metadata.example.yaml", folder / "model_metadata.yaml")
    text = (EXAMPLE / "credentials.example.conf").read_text()
    text = text.replace("https://your-gateway.hospital.org", endpoint).replace("${SHC_SUBSCRIPTION_KEY}",
                                                                                 f'"{SECRET}"')
    (folder / "credentials.conf").write_text(text)
    return folder


def entry(class_name: str, args: dict | None = None, name: str = "acme/model") -> dict:
    return {"name": name, "model_name": "acme/model", "tokenizer_name": "acme/tok", "max_sequence_length": 4096,
            "client_spec": {"class_name": class_name, "args": args or {}}}


def write_yaml(folder: Path, items: list[dict], credentials: str | None = None) -> Path:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": items}))
    if credentials is not None:
        (folder / "credentials.conf").write_text(credentials)
    return folder


# ------------------------------------------------------------------------------------------------
# the table


@pytest.mark.parametrize("class_name,kind", sorted(HELM_CLASSES.items()))
def test_every_helm_client_class_a_medhelm_user_has_maps_to_one_of_our_kinds(class_name, kind):
    row = helm_env.CLIENT_CLASSES[class_name.rsplit(".", 1)[-1]]
    assert row.kind == kind
    assert DeploymentKind(row.kind).value == kind  # a kind this installation knows


def test_the_table_only_names_kinds_that_exist():
    assert {row.kind for row in helm_env.CLIENT_CLASSES.values()} <= {k.value for k in DeploymentKind}


def test_an_unsupported_class_is_kept_and_refused_when_used_with_one_line_naming_it_and_what_instead(tmp_path):
    env = write_yaml(tmp_path / "env", [entry("helm.clients.huggingface_client.HuggingFaceClient",
                                              {"pretrained_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"})])
    registry = DeploymentRegistry.load(env)  # the file loads whole
    assert "acme/model" not in registry and registry.unrunnable["acme/model"].class_name == "HuggingFaceClient"
    with pytest.raises(ConfigError) as err:
        registry.resolve("acme/model", None)
    message = str(err.value)
    assert "\n" not in message
    assert "'acme/model' uses HELM client class HuggingFaceClient, which medhelm does not run" in message
    assert "vLLM" in message and "VLLMChatClient" in message  # what to use instead


def test_an_unknown_argument_names_the_field_and_the_known_ones(tmp_path):
    env = write_yaml(tmp_path / "env", [entry("helm.clients.vllm_client.VLLMChatClient",
                                              {"base_url": "http://h/v1", "vllm_modle_name": "x"})])
    with pytest.raises(ConfigError, match=r"client_spec\.args\.vllm_modle_name.*known: .*vllm_model_name"):
        DeploymentRegistry.load(env)


# ------------------------------------------------------------------------------------------------
# the realistic prod_env: the paper's nine models behind a gateway + a VLLMChatClient entry


def test_the_example_prod_env_loads_unchanged_with_keys_from_credentials_conf(tmp_path):
    env = prod_env(tmp_path / "prod_env")
    registry = DeploymentRegistry.load(env)
    for model, name in NINE_MODELS.items():
        dep = registry.resolve(model, None)
        assert dep.name == name and dep.model_name == model
        check_usable(dep, source=registry.sources[name])  # endpoint and key found
        assert SECRET not in repr(dep.to_json())  # a reference to the entry, never the key
        assert dep.options["credentials"]["name"] == "stanfordhealthcareApiKey"
    llama = registry.get("stanfordhealthcare/llama-3.3-70b-instruct")
    assert (llama.kind, llama.base_url, llama.served_model_name) == (
        DeploymentKind.OPENAI, "https://gateway.hospital.example/llama3370b/v1", "Llama-3.3-70B-Instruct")
    assert llama.options["auth_header"] == "Ocp-Apim-Subscription-Key"
    assert llama.max_sequence_length == 128000 and llama.options["tokenizer_name"] == "meta/llama-3.3-70b-instruct"
    gpt = registry.get("stanfordhealthcare/gpt-4o-2024-05-13")  # SHC's Azure path spelled out
    assert gpt.base_url == "https://gateway.hospital.example/openai-eastus2/deployments/gpt-4o"
    assert gpt.options["api_version"] == "2024-05-01-preview"
    claude = registry.get("stanfordhealthcare/claude-3-7-sonnet-20250219")
    assert claude.kind is DeploymentKind.ANTHROPIC and claude.served_model_name == "claude-3-7-sonnet-20250219"
    assert claude.base_url == "https://gateway.hospital.example/Claude37Sonnet/claude-3-7-sonnet"
    assert claude.options["credentials"]["as"] == "subscription_key"
    assert claude.options["subscription_key_header"] == "Ocp-Apim-Subscription-Key"
    # the route is the whole URL and the body SHC's own, as HELM's StanfordHealthCareClaudeClient posts it
    assert claude.options["platform"] == "shc"
    gemini = registry.get("stanfordhealthcare/gemini-2.0-flash-001")
    assert gemini.kind is DeploymentKind.GEMINI and gemini.served_model_name == "gemini-2.0-flash-001"
    assert gemini.options["platform"] == "shc"
    vllm = registry.get("vllm/qwen3-8b")  # no gateway, no key needed
    assert (vllm.kind, vllm.base_url, vllm.served_model_name) == (
        DeploymentKind.OPENAI, "http://qwen3-8b-predictor.llm.svc.cluster.local/v1", "Qwen/Qwen3-8B")
    assert "credentials" not in vllm.options and vllm.options["thinking_budget"] == 2048
    check_usable(vllm)


def test_helm_credentials_variable_replaces_the_file(tmp_path, monkeypatch):
    env = prod_env(tmp_path / "prod_env")
    (env / "credentials.conf").write_text("this file is not read when HELM_CREDENTIALS is set {{{")
    monkeypatch.setenv("HELM_CREDENTIALS", f'stanfordhealthcareEndpoint: "https://other.example"\n'
                                           f'stanfordhealthcareApiKey: "{SECRET}"\n')
    dep = DeploymentRegistry.load(env).get("stanfordhealthcare/deepseek-r1")
    assert dep.base_url == "https://other.example/deepseekr1/v1"
    assert dep.options["credentials"] == {"source": "HELM_CREDENTIALS", "name": "stanfordhealthcareApiKey"}
    check_usable(dep)


def test_per_deployment_keys_and_environment_substitution(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_VLLM_KEY", SECRET)
    env = write_yaml(tmp_path / "env", [entry("helm.clients.vllm_client.VLLMChatClient",
                                              {"base_url": "http://vllm.internal/v1"}, name="vllm/a")],
                     credentials='deployments {\n  "vllm/a": ${MY_VLLM_KEY}\n}\n')
    dep = DeploymentRegistry.load(env).get("vllm/a")
    assert dep.options["credentials"]["name"] == "deployments.vllm/a"
    check_usable(dep)


def test_a_missing_endpoint_or_key_fails_at_planning_naming_the_entry_never_a_value(tmp_path):
    env = prod_env(tmp_path / "prod_env")
    (env / "credentials.conf").write_text(f'stanfordhealthcareApiKey: "{SECRET}"\n')  # no endpoint
    registry = DeploymentRegistry.load(env)  # loading is fine: only a used deployment must resolve
    with pytest.raises(ConfigError, match="stanfordhealthcareEndpoint") as err:
        check_usable(registry.get("stanfordhealthcare/llama-3.3-70b-instruct"))
    assert SECRET not in str(err.value)
    (env / "credentials.conf").write_text('stanfordhealthcareEndpoint: "https://gw.example"\n')  # no key
    with pytest.raises(ConfigError, match="stanfordhealthcareApiKey"):
        check_usable(DeploymentRegistry.load(env).get("stanfordhealthcare/gpt-4o-2024-05-13"))


def test_an_unquoted_endpoint_url_as_helms_docstrings_write_it(tmp_path):
    env = prod_env(tmp_path / "prod_env")
    (env / "credentials.conf").write_text("# HELM's docstring form\nstanfordhealthcareEndpoint: https://gw.example/\n"
                                          f"stanfordhealthcareApiKey: {SECRET}\n")
    dep = DeploymentRegistry.load(env).get("stanfordhealthcare/llama-3.3-70b-instruct")
    assert dep.base_url == "https://gw.example/llama3370b/v1"
    check_usable(dep)


def test_a_bad_credentials_file_names_the_line_and_never_echoes_a_value(tmp_path):
    env = prod_env(tmp_path / "prod_env")
    (env / "credentials.conf").write_text(f'stanfordhealthcareEndpoint: "https://gw.example"\n'
                                          f'stanfordhealthcareApiKey: {SECRET} : oops\n')
    with pytest.raises(ConfigError) as err:
        DeploymentRegistry.load(env)
    assert "credentials.conf:2" in str(err.value) and SECRET not in str(err.value)


def test_a_key_written_into_model_deployments_yaml_is_refused(tmp_path):
    env = write_yaml(tmp_path / "env", [entry("helm.clients.openai_client.OpenAIClient", {"api_key": SECRET})])
    with pytest.raises(ConfigError, match="credentials.conf") as err:
        DeploymentRegistry.load(env)
    assert SECRET not in str(err.value)


def test_credentials_repr_never_shows_values():
    creds = Credentials("x", {"acmeApiKey": SECRET})
    assert SECRET not in repr(creds) and "acmeApiKey" in repr(creds)


# ------------------------------------------------------------------------------------------------
# a request through a translated entry: the gateway header carries the key from credentials.conf


def test_a_gateway_entry_sends_the_key_in_the_subscription_header(tmp_path):
    with MockOpenAIServer() as srv:
        env = prod_env(tmp_path / "prod_env", endpoint=srv.base_url[: -len("/v1")])
        (env / "model_deployments.yaml").write_text(
            (env / "model_deployments.yaml").read_text().replace("{endpoint}/llama3370b/v1", "{endpoint}/v1"))
        completion = generate(DeploymentRegistry.load(env).get("stanfordhealthcare/llama-3.3-70b-instruct"))
        [meta] = srv.request_meta
        [body] = srv.requests
    assert meta["headers"]["ocp-apim-subscription-key"] == SECRET
    # HELM's StanfordHealthCareOpenAIClient builds its OpenAI client with the key "dummy": the key is never a bearer
    assert meta["headers"]["authorization"] == "Bearer dummy"
    assert body["model"] == "Llama-3.3-70B-Instruct" and completion.text


def test_vllm_legacy_completions_client_uses_the_completions_route(tmp_path):
    with MockOpenAIServer() as srv:
        env = write_yaml(tmp_path / "env", [entry("helm.clients.vllm_client.VLLMClient", {"base_url": srv.base_url},
                                                  name="vllm/legacy")])
        completion = generate(DeploymentRegistry.load(env).get("vllm/legacy"), "alpha beta gamma")
        [meta] = srv.request_meta
        [body] = srv.requests
    assert meta["target"] == "/v1/completions" and body["prompt"] == "alpha beta gamma"
    assert body["model"] == "model"  # HELM's VLLMClient: vllm_model_name or request.model_engine
    assert completion.text == "alpha beta gamma"


# ------------------------------------------------------------------------------------------------
# upstream's run entries, validated against the prod_env with no edit but the endpoints


def upstream_conf(path: Path) -> Path:
    """Lines in the form of upstream's run_entries_medhelm_public.conf: the paper's models through the
    gateway's deployments, num_output_tokens=4000 for the reasoning models (benchmarks this test's mirror
    holds: pubmed_qa, medcalc_bench, medec)."""
    reasoning = {"deepseek-ai/deepseek-r1", "openai/o3-mini-2025-01-31"}
    lines = ["entries: ["]
    for bench in ("medcalc_bench", "medec", "pubmed_qa"):
        lines.append(f"  ##### {bench} #####")
        for model, dep in NINE_MODELS.items():
            extra = "num_output_tokens=4000," if model in reasoning else ""
            lines.append(f'  {{description: "{bench}:{extra}model={model},model_deployment={dep}", priority: 1}}')
    lines.append("]")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_validate_of_upstream_shaped_entries_against_the_helm_prod_env(tmp_path, shared_data, capsys):
    env = prod_env(tmp_path / "prod_env")
    conf = upstream_conf(tmp_path / "run_entries_medhelm_public.conf")
    mirror = tmp_path / "mirror"
    for link, target in {"pubmed_qa/ori_pqal.json": "pubmedqa/ori_pqal_sample.json",
                         "medcalc_bench/test_data.csv": "medcalc_bench/one_shot_data.csv",
                         "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv":
                             "medec/MEDEC-MS-TestSet-sample.csv"}.items():
        (mirror / link).parent.mkdir(parents=True, exist_ok=True)
        (mirror / link).symlink_to(shared_data / target)
    code = main(["validate", "--conf-paths", str(conf), "--suite", "s", "--local-path", str(env),
                 "--data-dir", str(mirror), "--offline", "--output-path", str(tmp_path / "out"),
                 "--max-eval-instances", "5"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "27 run(s) valid" in out.out
    assert "model_deployment=stanfordhealthcare_deepseek-r1" in out.out
    assert SECRET not in out.out + out.err


# ------------------------------------------------------------------------------------------------
# model_metadata.yaml


def test_model_metadata_reads_helms_shape(tmp_path):
    env = prod_env(tmp_path / "prod_env")
    meta = {m.name: m for m in helm_env.read_metadata(env / "model_metadata.yaml")}
    r1 = meta["deepseek-ai/deepseek-r1"]
    assert (r1.display_name, r1.creator_organization_name, r1.access, r1.release_date) == (
        "DeepSeek R1", "DeepSeek", "open", "2025-01-20")
    (env / "model_metadata.yaml").write_text("models:\n  - name: a/b\n    access: public\n")
    with pytest.raises(ConfigError, match=r"model_metadata.yaml:3: field 'models\[0\]\.access'"):
        helm_env.read_metadata(env / "model_metadata.yaml")


# ------------------------------------------------------------------------------------------------
# all nine paper models through a gateway, each provider a strict local fake


class Gateway:
    """Azure API Management as a hospital runs it in front of its providers (Stanford Health Care's shape):
    every request must carry the subscription key in ``Ocp-Apim-Subscription-Key`` (401 otherwise, APIM's
    body); a route prefix selects the backend; the key and the client's own auth headers are removed and the
    backend's own credential added (APIM's set-header policies), then the request is forwarded as it came."""

    def __init__(self, key: str, routes: dict[str, tuple[str, dict[str, str]]]) -> None:
        import http.server
        import threading
        import urllib.request

        self.key, self.routes, self.seen, self.auth = key, routes, [], []
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                gateway.seen.append((self.path, self.headers.get("Ocp-Apim-Subscription-Key")))
                gateway.auth.append((self.path, self.headers.get("api-key"), self.headers.get("Authorization")))
                if self.headers.get("Ocp-Apim-Subscription-Key") != gateway.key:
                    return self._reply(401, b'{"statusCode": 401, "message": "Access denied due to invalid '
                                            b'subscription key. Make sure to provide a valid key for an active '
                                            b'subscription."}')
                prefix = next((p for p in gateway.routes if self.path == p or self.path.startswith(p + "/")), None)
                if prefix is None:
                    return self._reply(404, b'{"statusCode": 404, "message": "Resource not found"}')
                backend, credential = gateway.routes[prefix]
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "ocp-apim-subscription-key", "connection",
                                                "api-key", "authorization")}
                request = urllib.request.Request(backend + self.path[len(prefix):], data=body, method="POST",
                                                 headers={**headers, **credential})
                try:
                    with opener.open(request, timeout=30) as reply:
                        self._reply(reply.status, reply.read())
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read())

            def _reply(self, status, payload):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


def test_the_nine_paper_models_answer_through_the_gateway_with_the_key_from_credentials_conf(tmp_path):
    from medhelm.devtools.fakes.azure_openai import FakeAzureOpenAI
    from medhelm.devtools.fakes.shc import FakeSHCGateway

    shc_routes = {"/Claude37Sonnet/claude-3-7-sonnet": "claude", "/Claude35Sonnetv2/claude-3-5-sonnet": "claude",
                  "/gcp-gem20flash-fa/apim-gcp-gem20flash-fa": "google",
                  "/gcp-gem15pro-fa/apim-gcp-gem15pro-fa": "google"}
    with FakeSHCGateway(routes=shc_routes, subscription_key="shc-backend") as shc, \
            FakeAzureOpenAI(api_key="azure-backend") as azure, MockOpenAIServer() as gpu:
        routes = {
            "/openai-eastus2": (azure.base_url + "/openai", {"api-key": "azure-backend"}),
            # SHC's Claude and Gemini routes are whole URLs (HELM posts to {endpoint}/{deployment}) taking SHC's
            # private text bodies, which the strict fake checks field for field
            **{route: (shc.base_url + route, {"Ocp-Apim-Subscription-Key": "shc-backend"}) for route in shc_routes},
            "/llama3370b": (gpu.base_url[: -len("/v1")], {}),
            "/deepseekr1": (gpu.base_url[: -len("/v1")], {}),
        }
        with Gateway(SECRET, routes) as gateway:
            registry = DeploymentRegistry.load(prod_env(tmp_path / "prod_env", endpoint=gateway.url))

            answers = {}
            for model, name in NINE_MODELS.items():
                check_usable(registry.get(name))
                answers[model] = generate(registry.get(name), "Is the patient febrile? Answer yes or no.", 8).text
            (prod := tmp_path / "prod_env" / "credentials.conf").write_text(
                prod.read_text().replace(SECRET, "not-the-key"))  # a wrong key: the gateway's 401, not retried
            with pytest.raises(InferenceError, match="HTTP 401") as err:
                generate(DeploymentRegistry.load(tmp_path / "prod_env").get("stanfordhealthcare/gpt-4o-2024-05-13"))
            assert not err.value.retryable and "not-the-key" not in str(err.value)
            gateway.seen.pop()
            gateway.auth.pop()
        seen_keys = {key for _, key in gateway.seen}
        paths = sorted(path.split("?")[0] for path, _ in gateway.seen)
    assert set(answers) == set(NINE_MODELS) and all(a in ("Yes", "No") for a in answers.values()), answers
    assert seen_keys == {SECRET}  # every request carried the subscription key, read from credentials.conf
    # HELM's StanfordHealthCareAzureOpenAIClient hands the key to the AzureOpenAI SDK too: `api-key` and bearer
    azure_auth = {(key, bearer) for path, key, bearer in gateway.auth if path.startswith("/openai-eastus2/")}
    assert azure_auth == {(SECRET, f"Bearer {SECRET}")}
    assert "/Claude37Sonnet/claude-3-7-sonnet" in paths  # HELM's URL: {endpoint}/{deployment}
    assert "/gcp-gem20flash-fa/apim-gcp-gem20flash-fa" in paths
    assert "/openai-eastus2/deployments/o3-mini/chat/completions" in paths
    assert "/deepseekr1/v1/chat/completions" in paths
    # the backends saw their own credential, never the hospital's subscription key
    for fake in (shc, azure):
        assert fake.requests and all(SECRET not in json.dumps(r, default=str) for r in fake.requests)
    assert len(shc.requests) == 4 and len(azure.requests) == 3
    claude = next(r["body"] for r in shc.requests if r["path"] == "/Claude37Sonnet/claude-3-7-sonnet")
    assert claude == {"model_id": "claude-3-7-sonnet-20250219", "prompt_text": claude["prompt_text"],
                      "max_tokens": 8, "temperature": 0.0}  # HELM's StanfordHealthCareClaudeClient body
    gemini = next(r["body"] for r in shc.requests if r["path"].startswith("/gcp-gem20flash"))
    assert gemini["generation_config"] == {"temperature": 0.0, "topP": 1, "topK": 1, "candidateCount": 1,
                                           "maxOutputTokens": 8, "stopSequences": []}
    # the OpenAI-shaped routes: HELM's OpenAIClient body for a text prompt, field for field
    prompt = claude["prompt_text"]
    gpt4o = next(r["body"] for r in azure.requests if r["path"] == "/openai/deployments/gpt-4o/chat/completions")
    assert gpt4o == {"model": "gpt-4o", "messages": [{"role": "user", "content": prompt}], "temperature": 0.0,
                     "top_p": 1, "n": 1, "stop": None, "max_tokens": 8, "presence_penalty": 0, "frequency_penalty": 0}
    o3 = next(r["body"] for r in azure.requests if r["path"] == "/openai/deployments/o3-mini/chat/completions")
    assert o3 == {"model": "o3-mini", "messages": [{"role": "user", "content": prompt}], "n": 1,
                  "max_completion_tokens": 8, "reasoning_effort": "medium"}  # HELM's o-series rules (+ our effort)
    llama = next(b for b in gpu.requests if b["model"] == "Llama-3.3-70B-Instruct")
    assert llama == {**gpt4o, "model": "Llama-3.3-70B-Instruct"}


def test_helms_azure_openai_client_with_its_key_in_credentials_conf(tmp_path):
    from medhelm.devtools.fakes.azure_openai import FakeAzureOpenAI

    with FakeAzureOpenAI(api_key=SECRET) as azure:
        env = write_yaml(tmp_path / "env", [entry("helm.clients.azure_openai_client.AzureOpenAIClient",
                                                  {"azure_openai_deployment_name": "gpt-4o-prod",
                                                   "api_version": "2024-10-21"}, name="azureacme/gpt-4o")],
                         credentials=f'azureacmeEndpoint: "{azure.base_url}"\nazureacmeApiKey: "{SECRET}"\n')
        dep = DeploymentRegistry.load(env).get("azureacme/gpt-4o")
        assert (dep.kind, dep.base_url, dep.served_model_name) == (DeploymentKind.AZURE_OPENAI, azure.base_url,
                                                                   "gpt-4o-prod")
        check_usable(dep)
        completion = generate(dep, "Is it raining? Answer yes or no.")
        [seen] = azure.requests
    assert completion.text in ("Yes", "No")
    assert seen["path"] == "/openai/deployments/gpt-4o-prod/chat/completions" and seen["headers"]["api-key"] == SECRET


def test_shcs_own_azure_client_sends_the_key_as_azure_does_and_helms_body(tmp_path):
    """StanfordHealthCareSHCOpenAIClient hands the key to Azure's client itself (the `api-key` header, not a
    gateway key) at its fixed api-version; the body is HELM's."""
    from medhelm.devtools.fakes.azure_openai import FakeAzureOpenAI

    with FakeAzureOpenAI(api_key=SECRET) as azure:
        env = write_yaml(tmp_path / "env", [entry(
            "helm.clients.stanfordhealthcare_shc_openai_client.StanfordHealthCareSHCOpenAIClient",
            name="stanfordhealthcare_shc/gpt-4o")],  # HELM injects endpoint and key from credentials
            credentials=f'stanfordhealthcare_shcEndpoint: "{azure.base_url}"\n'
                        f'stanfordhealthcare_shcApiKey: "{SECRET}"\n')
        dep = DeploymentRegistry.load(env).get("stanfordhealthcare_shc/gpt-4o")
        check_usable(dep)
        completion = generate(dep, "Is it raining? Answer yes or no.", 4)
        [seen] = azure.requests
    assert completion.text in ("Yes", "No")
    # the AzureOpenAI SDK's path from the body's model: HELM's model_engine ("acme/model" -> "model")
    assert seen["path"] == "/openai/deployments/model/chat/completions"
    assert seen["headers"]["api-key"] == SECRET and "ocp-apim-subscription-key" not in seen["headers"]
    assert seen["headers"]["authorization"] == f"Bearer {SECRET}"  # HELM's pinned openai 2.x AzureOpenAI sends both
    assert dep.options["api_version"] == "2024-08-01-preview"
    assert seen["body"] == {"model": "model", "messages": [{"role": "user", "content": seen["body"]["messages"][0][
        "content"]}], "temperature": 0.0, "top_p": 1, "n": 1, "stop": None, "max_tokens": 4, "presence_penalty": 0,
        "frequency_penalty": 0}


def test_medhelms_own_jury_loads_against_the_example_prod_env(tmp_path):
    from medhelm.scoring.jury import config

    registry = DeploymentRegistry.load(prod_env(tmp_path / "prod_env"))
    jury = config.load(EXAMPLE / "jury_medhelm_paper.yaml", registry)
    assert [j.name for j in jury.judges] == ["stanfordhealthcare/gpt-4o-2024-05-13",
                                              "stanfordhealthcare/llama-3.3-70b-instruct",
                                              "stanfordhealthcare/claude-3-7-sonnet-20250219"]
