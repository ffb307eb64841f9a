"""HELM's prod_env carried over unchanged: ``model_deployments.yaml`` entries with a ``client_spec``, the keys
and endpoints of ``credentials.conf`` (``credentials.py``), and ``model_metadata.yaml``.

A HELM entry looks like::

    - name: stanfordhealthcare/llama-3.3-70b-instruct      # <host organization>/<engine>
      model_name: meta/llama-3.3-70b-instruct
      tokenizer_name: meta/llama-3.3-70b-instruct         # accepted; we count tokens ourselves
      max_sequence_length: 128000
      max_request_length: 128001                          # optional; the smaller of the two is the window
      client_spec:
        class_name: "helm.clients.stanfordhealthcare_openai_client.StanfordHealthCareOpenAIClient"
        args: {base_url: "{endpoint}/llama3370b/v1", openai_model_name: Llama-3.3-70B-Instruct}
      window_service_spec: {class_name: ...}              # accepted, not used

``CLIENT_CLASSES`` is the one table from HELM's client class (the last part of ``class_name``) to a
deployment kind of ours (``specs.DeploymentKind``) and how the class's ``args`` and the credentials become
our fields. HELM's AutoClient fills a constructor's missing ``api_key``, ``endpoint``, ``base_url``,
``project_id``, ``location`` and ``org_id`` from credentials.conf by the deployment's host organization
(``<host>ApiKey``, ``<host>Endpoint``, ``<host>BaseUrl``, ...); so do we, for the classes whose constructor takes
them, then the provider SDK's endpoint variable (``OPENAI_BASE_URL`` ...), and ``{endpoint}`` in ``base_url``
is filled in the same way. The model asked for is HELM's (``served_model``), and the body HELM's client
builds is sent (``request_shape: helm``: openai.py, anthropic.py, gemini.py, bedrock.py). The key is never
copied: the deployment carries a reference to the credentials entry (``options.credentials``), read when the
client is built.

Gateways (Stanford Health Care's ``StanfordHealthCare*`` classes, any Azure API Management in front of a
provider): the host's key goes in ``Ocp-Apim-Subscription-Key``; HELM's Azure classes also hand it to the
AzureOpenAI SDK (``api-key`` and a bearer token, ``options.key_headers``). SHC's Claude and Gemini routes
receive SHC's private text bodies (``platform: shc``).

Failure semantics: upstream's own files load whole. An entry HELM runs and we do not (a class outside the
table, an argument that changes the request and that we cannot honour) is an ``Unrunnable``: kept, reported
by ``validate``, refused in one line (the class, what to use instead) only when a run names it. A ConfigError
naming the file, the YAML line and the field is what HELM itself would refuse: an argument no constructor of
the class takes, a key written into the file, an output processor we do not apply. What only matters when a
deployment is used (an endpoint or key missing from credentials.conf) is recorded in ``options.unresolved``
and raised by ``deployments.check_usable`` at planning, so one prod_env file can hold entries for hosts this
machine has no key for.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from medhelm.credentials import Credentials
from medhelm.errors import ConfigError, escape
from medhelm.files import YamlDoc, load_yaml_doc
from medhelm.schemas import Finite, LongText, Strict, Text, check

GATEWAY_HEADER = "Ocp-Apim-Subscription-Key"  # Azure API Management's subscription key (SHC's gateway)

# args HELM's client constructors take that change nothing on the wire here (caching, streaming but for
# AnthropicMessagesClient's, read in translate(); tokenizers,
# logprobs we never ask for, a thinking parser whose effect every kind applies: a leading <think> block is cut)
_IGNORED_ARGS = frozenset({"do_cache", "stream", "tokenizer", "tokenizer_name", "cache_config", "http_client",
                           "disable_logprobs", "parse_thinking"})
# args HELM takes that would change the request and that medhelm cannot honour: the entry is kept, and refused
# (naming the arg) only when a run uses it
_UNHONOURED_ARGS = {
    "assumed_role": "medhelm does not call STS AssumeRole: export the role's credentials (AWS_ACCESS_KEY_ID, "
                    "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) and drop assumed_role",
}
# output processors whose effect every client kind applies anyway (a leading <think>...</think> is cut)
_THINK_PROCESSORS = frozenset({"helm.benchmark.metrics.output_processors.remove_deepseek_r1_thinking"})


@dataclass(frozen=True)
class HelmClass:
    """How one HELM client class becomes a deployment of ours."""

    kind: str  # a DeploymentKind value
    args: frozenset[str]  # the class's own constructor args (every release's; beyond _IGNORED_ARGS)
    api: str = "chat"  # openai kind: chat | completions (the legacy route) | responses (OpenAI's Responses API)
    base_url: str | None = None  # the provider's default base URL; None: from args/credentials
    gateway: bool = False  # the host's key goes in GATEWAY_HEADER (an API gateway), not Authorization
    key_required: bool = True  # False: a key is sent when credentials.conf has one (a vLLM server may not)
    platform: str | None = None  # anthropic/gemini: the i28 kinds' options.platform
    api_version: str | None = None  # azure: the class's fixed api-version
    model: str = "engine"  # the model id HELM's client sends without a model arg: engine | full | bedrock:<org>
    shape: str = "medhelm"  # "helm": the body HELM's client sends, field for field (OpenAIClient subclasses...);
    # "helm_vertex": HELM's VertexAIChatClient through the vertexai SDK (gemini.py)
    base_url_env: str | None = None  # the SDK's variable for the default endpoint (OPENAI_BASE_URL ...; the
    # mistralai SDK reads none: MISTRAL_BASE_URL is medhelm's, for a gateway in front of Mistral)


# HELM's constructors (every release on PyPI from 0.5.4): the arg that names the served model is listed in
# _MODEL_ARGS; every other arg is honoured by translate() below
_OPENAI_ARGS = frozenset({"api_key", "org_id", "base_url", "openai_model_name", "output_processor",
                          "reasoning_effort", "endpoint"})
_SHC_HTTP_ARGS = frozenset({"api_key", "endpoint", "deployment", "model", "timeout"})
_BEDROCK_ARGS = frozenset({"bedrock_model_id", "assumed_role", "region"})
_OPENAI_URL = "https://api.openai.com/v1"

# HELM client class -> our kind. One table: the importer, `medhelm validate` and docs/providers.md read it.
CLIENT_CLASSES: Mapping[str, HelmClass] = {
    # OpenAI and OpenAI-compatible servers
    "OpenAIClient": HelmClass("openai", _OPENAI_ARGS, base_url=_OPENAI_URL, shape="helm",
                              base_url_env="OPENAI_BASE_URL"),
    "OpenAIResponseClient": HelmClass("openai", _OPENAI_ARGS, api="responses", base_url=_OPENAI_URL,
                                      base_url_env="OPENAI_BASE_URL"),
    "OpenAILegacyCompletionsClient": HelmClass("openai", _OPENAI_ARGS, api="completions", base_url=_OPENAI_URL,
                                               base_url_env="OPENAI_BASE_URL", shape="helm"),
    "VLLMClient": HelmClass("openai", frozenset({"base_url", "api_key", "vllm_model_name"}), api="completions",
                            key_required=False, shape="helm"),
    "VLLMChatClient": HelmClass("openai", frozenset({"base_url", "api_key", "vllm_model_name", "output_processor",
                                                     "reasoning_effort"}), key_required=False, shape="helm"),
    # Together (inference/together.py): the legacy inference API, and the chat route with the model's default stops
    "TogetherClient": HelmClass("openai", frozenset({"api_key", "together_model", "base_url"}), api="together",
                                base_url="https://api.together.xyz/v1", model="full", base_url_env="TOGETHER_BASE_URL"),
    "TogetherChatClient": HelmClass("openai", frozenset({"api_key", "together_model", "base_url",
                                                         "output_processor"}),
                                    base_url="https://api.together.xyz/v1", model="full", shape="helm_together",
                                    base_url_env="TOGETHER_BASE_URL"),
    "OpenRouterClient": HelmClass("openai", frozenset({"api_key", "base_url", "openrouter_model_name", "model_name",
                                                       "output_processor"}),
                                  base_url="https://openrouter.ai/api/v1", model="full", shape="helm"),
    "HuggingFaceInferenceProvidersClient": HelmClass("openai", frozenset({"api_key", "base_url",
                                                                          "huggingface_model_name"}),
                                                     base_url="https://router.huggingface.co/v1", model="full",
                                                     shape="helm_hf"),
    # Azure OpenAI
    "AzureOpenAIClient": HelmClass("azure_openai", frozenset({"api_key", "endpoint", "deployment", "api_version",
                                                              "base_url", "azure_openai_deployment_name",
                                                              "openai_model_name", "output_processor",
                                                              "default_headers", "org_id"}), shape="helm",
                                   api_version="2024-10-21"),
    # Stanford Health Care's gateway (Azure API Management): the key in Ocp-Apim-Subscription-Key
    "StanfordHealthCareOpenAIClient": HelmClass("openai", _OPENAI_ARGS | {"model_name"}, gateway=True,
                                                shape="helm"),
    "StanfordHealthCareAzureOpenAIClient": HelmClass("azure_openai", frozenset({"api_key", "endpoint", "base_url",
                                                                                "openai_model_name",
                                                                                "api_version"}), gateway=True,
                                                     shape="helm"),
    # SHC's own Azure OpenAI (HELM passes the key to AzureOpenAI as its api_key: the `api-key` header)
    "StanfordHealthCareSHCOpenAIClient": HelmClass("azure_openai", frozenset({"api_key", "endpoint", "base_url",
                                                                              "openai_model_name", "api_version",
                                                                              "default_headers"}),
                                                   api_version="2024-08-01-preview", shape="helm"),
    # SHC's private text routes (StanfordHealthCareHTTPModelClient: POST {endpoint}/{deployment}, SHC's body)
    "StanfordHealthCareClaudeClient": HelmClass("anthropic", _SHC_HTTP_ARGS, gateway=True, platform="shc"),
    "StanfordHealthCareGoogleClient": HelmClass("gemini", _SHC_HTTP_ARGS, gateway=True, platform="shc"),
    # Anthropic, Google, Amazon
    "AnthropicMessagesClient": HelmClass("anthropic", frozenset({"api_key", "anthropic_model_name",
                                                                 "thinking_budget_tokens", "base_url"}),
                                         platform="direct", base_url_env="ANTHROPIC_BASE_URL", shape="helm"),
    "AnthropicClient": HelmClass("anthropic", frozenset({"api_key", "anthropic_model_name", "base_url"}),
                                 platform="direct", base_url_env="ANTHROPIC_BASE_URL"),
    "GoogleGenAIClient": HelmClass("gemini", frozenset({"api_key", "genai_model", "genai_model_name",
                                                        "thinking_config", "thinking_budget", "project_id",
                                                        "location", "genai_use_vertexai"}),
                                   platform="public", base_url_env="GOOGLE_GEMINI_BASE_URL", shape="helm"),
    "GeminiClient": HelmClass("gemini", frozenset({"api_key", "gemini_model_name", "project_id", "location"}),
                              platform="public", base_url_env="GOOGLE_GEMINI_BASE_URL"),
    "VertexAIChatClient": HelmClass("gemini", frozenset({"project_id", "location", "vertexai_model",
                                                         "safety_settings_preset"}), platform="vertex",
                                    key_required=False, shape="helm_vertex"),
    "VertexAITextClient": HelmClass("vertex_text", frozenset({"project_id", "location", "vertexai_model",
                                                              "safety_settings_preset"}), key_required=False),
    "MistralAIClient": HelmClass("mistral", frozenset({"api_key", "mistral_model"}), shape="helm",
                                 base_url="https://api.mistral.ai/v1", base_url_env="MISTRAL_BASE_URL"),
    "BedrockClient": HelmClass("bedrock", _BEDROCK_ARGS, key_required=False, model="bedrock:",
                               base_url_env="AWS_ENDPOINT_URL_BEDROCK_RUNTIME"),
    "BedrockNovaClient": HelmClass("bedrock", _BEDROCK_ARGS, key_required=False, model="bedrock:.",
                                   base_url_env="AWS_ENDPOINT_URL_BEDROCK_RUNTIME", shape="helm"),
    "BedrockLlamaClient": HelmClass("bedrock", _BEDROCK_ARGS, key_required=False, model="bedrock:meta",
                                    base_url_env="AWS_ENDPOINT_URL_BEDROCK_RUNTIME"),
    "BedrockMistralClient": HelmClass("bedrock", _BEDROCK_ARGS, key_required=False, model="bedrock:mistral",
                                      base_url_env="AWS_ENDPOINT_URL_BEDROCK_RUNTIME"),
    "BedrockTitanClient": HelmClass("bedrock", _BEDROCK_ARGS, key_required=False, model="bedrock:amazon",
                                    base_url_env="AWS_ENDPOINT_URL_BEDROCK_RUNTIME"),
}

# HELM classes that load the model inside HELM's process, run here against the hospital's own server of that model
# (vLLM, KServe's Hugging Face runtime, llama.cpp's server: OpenAI-compatible) when one is named: credentials.conf's
# <host>BaseUrl, else the variable MEDHELM_HF_BASE_URL (the server's .../v1 address). The model asked for is HELM's
# (pretrained_model_name_or_path, else the model name: the Hugging Face repo id vLLM serves by default); the chat
# route unless the entry says apply_chat_template: false (HELM then sends the raw prompt: the completions route).
# The loading args (device_map, torch_dtype, ...) are the server's business and change nothing on the wire.
HF_BASE_URL_ENV = "MEDHELM_HF_BASE_URL"
SERVED_LOCALLY: Mapping[str, HelmClass] = {
    "HuggingFaceClient": HelmClass("openai", frozenset({"pretrained_model_name_or_path", "apply_chat_template",
                                                        "end_of_text_token", "device_map", "torch_dtype",
                                                        "trust_remote_code", "quantization_config",
                                                        "attn_implementation", "revision"}),
                                   key_required=False, model="full", base_url_env=HF_BASE_URL_ENV),
}
_HF_LOADING_ARGS = frozenset({"end_of_text_token", "device_map", "torch_dtype", "trust_remote_code",
                              "quantization_config", "attn_implementation", "revision", "apply_chat_template"})

# HELM's BedrockClient subclasses call InvokeModel with their model family's own body
_INVOKE_FAMILY = {"BedrockLlamaClient": "llama", "BedrockMistralClient": "mistral", "BedrockTitanClient": "titan"}
# HELM's VertexAIClient with no safety_settings_preset (or "block_none"): BLOCK_NONE for every HarmCategory of
# the aiplatform SDK HELM pins (google-cloud-aiplatform~=1.48; the enum's order), sent as Vertex's safetySettings
VERTEX_HARM_CATEGORIES = ("HARM_CATEGORY_UNSPECIFIED", "HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_DANGEROUS_CONTENT",
                          "HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_SEXUALLY_EXPLICIT",
                          "HARM_CATEGORY_CIVIC_INTEGRITY", "HARM_CATEGORY_JAILBREAK")
# classes whose HELM constructor has a base_url parameter: the ones AutoClient fills from <host>BaseUrl
_TAKES_BASE_URL = frozenset({"OpenAIClient", "OpenAIResponseClient", "OpenAILegacyCompletionsClient", "VLLMClient",
                             "VLLMChatClient", "AzureOpenAIClient", "StanfordHealthCareOpenAIClient",
                             "StanfordHealthCareAzureOpenAIClient", "HuggingFaceInferenceProvidersClient"})
# classes whose HELM client has its provider's address built in (HELM ignores <host>BaseUrl for them): medhelm
# reads <host>BaseUrl too, for a gateway in front of the provider
_BUILT_IN_URL = frozenset({"OpenRouterClient"})
# classes whose HELM client is the AzureOpenAI SDK given the key
_AZURE_SDK_CLASSES = frozenset({"AzureOpenAIClient", "StanfordHealthCareAzureOpenAIClient",
                                "StanfordHealthCareSHCOpenAIClient"})

# the served model's name, by the arg each class uses for it (the first one given wins)
_MODEL_ARGS = ("openai_model_name", "vllm_model_name", "azure_openai_deployment_name", "together_model",
               "anthropic_model_name", "genai_model", "genai_model_name", "gemini_model_name",
               "vertexai_model", "bedrock_model_id", "huggingface_model_name", "mistral_model",
               "pretrained_model_name_or_path", "model")
# classes whose own override of HELM's model lookup takes another arg (OpenRouterClient: `model_name or
# request.model`; the openrouter_model_name it passes on is never read)
_MODEL_ARG_OF = {"OpenRouterClient": ("model_name",), "StanfordHealthCareOpenAIClient": ("openai_model_name",)}


def served_model(class_name: str, args: Mapping[str, Any], model_name: str) -> str | None:
    """The model id HELM's client sends for an entry, as its source derives it: the class's model arg, else
    the model's engine (``openai/gpt-4o`` -> ``gpt-4o``: ``request.model_engine``), the whole model name
    (Together, OpenRouter, Hugging Face's router), or Bedrock's id (``BedrockNovaClient``: ``/`` -> ``.``;
    ``BedrockClient``'s subclasses: ``<provider>.<engine>``, an ``amazon-`` prefix replaced by the provider's)."""
    helm = CLIENT_CLASSES.get(class_name) or SERVED_LOCALLY.get(class_name)
    if helm is None:
        return None
    for arg in _MODEL_ARG_OF.get(class_name, _MODEL_ARGS):
        if args.get(arg) is not None:
            return str(args[arg])
    if helm.model == "full":
        return model_name
    if helm.model == "bedrock:.":
        return model_name.replace("/", ".")
    if helm.model.startswith("bedrock:"):
        provider, engine = helm.model.removeprefix("bedrock:"), model_name.split("/")[-1]
        if not provider:  # HELM's BedrockClient base class has no provider: only its subclasses run
            return None
        return f"{provider}.{engine}" if provider == "amazon" else engine.replace("amazon-", f"{provider}.")
    parts = model_name.split("/")
    return parts[1] if len(parts) > 1 else None  # HELM's model_engine (a name without '/' has none)


_WHY_NOT = {  # classes a MedHELM user may have that we deliberately do not run, and what to do instead
    "HuggingFaceClient": "it runs transformers inside HELM's process; serve the model with vLLM (KServe's Hugging "
                         "Face runtime, llama.cpp's server) and set <host>BaseUrl in credentials.conf or "
                         f"{HF_BASE_URL_ENV} to its OpenAI-compatible .../v1 address (or use VLLMChatClient with "
                         "its base_url)",
    "HuggingFacePipelineClient": "it runs transformers inside HELM's process; serve the model with vLLM and use "
                                 "VLLMChatClient with its base_url",
    "LocalVLLMClient": "it loads vLLM inside HELM's process; serve the model with `vllm serve` and use "
                       "VLLMChatClient with its base_url",
    "GrokChatClient": "xAI's API takes OpenAI's chat body: use OpenAIClient with base_url https://api.x.ai/v1",
    "NvidiaNimClient": "NIM serves OpenAI's chat body: use OpenAIClient with the NIM's base_url",
    "SimpleClient": "it is HELM's test stub",
    "DSPyClient": "DSPy prompting strategies are not part of this evaluation",
}
_DEFAULT_INSTEAD = ("serve the model behind an OpenAI-compatible endpoint (vLLM, KServe) and use VLLMChatClient "
                    "or OpenAIClient with its base_url")


@dataclass(frozen=True)
class Unrunnable:
    """A HELM entry kept as HELM has it but not run here: its class is one medhelm does not run, or it sets an
    argument medhelm cannot honour. ``validate`` reports it; a run that names it is refused with ``reason``."""

    name: str
    model_name: str
    class_name: str
    reason: str  # one line: what to use instead
    deprecated: bool = False

    def refusal(self) -> str:
        return (f"model deployment '{escape(self.name)}' uses HELM client class {self.class_name}, which "
                f"medhelm does not run: {self.reason}")


MAX_WINDOW = 10**12  # tokens; upstream states windows past 10^8 (huggingface/smollm2-135m-instruct: 328,192,768)


class _ClientSpec(Strict):
    class_name: Text
    args: dict[str, Any] = {}
    deployment: Any = None  # upstream's StanfordHealthCareSHCOpenAIClient entries set it; HELM ignores it


class _HelmItem(Strict):
    name: Text
    model_name: Text
    tokenizer_name: Text | None = None
    max_sequence_length: Annotated[int, Field(gt=0, le=MAX_WINDOW)] | None = None
    max_request_length: Annotated[int, Field(gt=0, le=MAX_WINDOW)] | None = None
    max_sequence_and_generated_tokens_length: Annotated[int, Field(gt=0, le=MAX_WINDOW)] | None = None
    client_spec: _ClientSpec
    window_service_spec: dict[str, Any] | None = None
    deprecated: bool = False
    args: Any = None  # beside client_spec in one upstream entry; HELM ignores it
    # ours, allowed beside HELM's keys
    max_concurrency: Annotated[int, Field(gt=0, le=100_000)] | None = None
    timeout_s: Annotated[Finite, Field(gt=0, le=86_400)] | None = None
    redacted: bool = False
    options: dict[str, Any] = {}
    description: LongText | None = None


def is_helm_item(raw: Any) -> bool:
    return isinstance(raw, Mapping) and "client_spec" in raw


def supported_classes() -> str:
    return ", ".join(sorted(CLIENT_CLASSES))


VLM_TAG = "VISION_LANGUAGE_MODEL_TAG"


def vision_language_models(folder: Path) -> frozenset[str]:
    """The models ``<folder>/model_metadata.yaml`` tags as vision-language (HELM's ``is_vlm``), if the file is
    there."""
    path = Path(folder) / METADATA_FILE
    if not path.is_file():
        return frozenset()
    return frozenset(m.name for m in read_metadata(path) if VLM_TAG in m.tags)


def translate(raw: Mapping[str, Any], *, path: Path, doc: YamlDoc, index: int,
              credentials: Credentials, environ: Mapping[str, str] | None = None,
              vision_language: frozenset[str] = frozenset()) -> dict[str, Any] | Unrunnable:
    """One HELM entry -> the fields of our deployment item (``deployments._DeploymentItem``); an ``Unrunnable``
    for an entry HELM runs and we do not (kept, refused when a run names it); a ConfigError naming the file,
    line and field for an entry HELM itself would refuse (an argument its class does not take)."""
    environ = os.environ if environ is None else environ
    where = ("model_deployments", index)
    item = check(_HelmItem, raw, path=path, doc=doc, prefix=where)
    class_name = item.client_spec.class_name.rsplit(".", 1)[-1]
    helm = CLIENT_CLASSES.get(class_name)

    def fail(message: str, *field: str) -> ConfigError:
        return ConfigError(message, path=path, line=doc.line(*where, *field),
                           field=".".join((f"model_deployments[{index}]", *field)))

    def unrunnable(reason: str) -> Unrunnable:
        return Unrunnable(item.name, item.model_name, class_name, reason, item.deprecated)

    host = item.name.split("/", 1)[0]
    if helm is None and class_name in SERVED_LOCALLY:
        served_at = credentials.get(host + "BaseUrl") or _endpoint_variable(HF_BASE_URL_ENV, environ)
        if served_at:
            helm = dataclasses.replace(SERVED_LOCALLY[class_name], base_url=str(served_at), base_url_env=None,
                                       api="completions" if (item.client_spec.args or {}).get("apply_chat_template")
                                       is False else "chat")
    if helm is None:
        return unrunnable(_WHY_NOT.get(class_name, _DEFAULT_INSTEAD))
    args = {k: v for k, v in item.client_spec.args.items()
            if not (class_name in SERVED_LOCALLY and k in _HF_LOADING_ARGS)}
    for key in args:
        if key not in helm.args and key not in _IGNORED_ARGS and key not in _UNHONOURED_ARGS:
            raise fail(f"is not an argument of {class_name} that medhelm understands (known: "
                       f"{', '.join(sorted(helm.args))})", "client_spec", "args", str(key))
    for key, why in _UNHONOURED_ARGS.items():
        if args.get(key) is not None:
            return unrunnable(f"its argument {key} changes the request and {why}")
    processor = args.get("output_processor")
    if processor is not None and processor not in _THINK_PROCESSORS:
        raise fail(f"output processor {escape(processor, 120)!r} is not applied by medhelm (only "
                   f"{', '.join(sorted(_THINK_PROCESSORS))}, which every kind applies)",
                   "client_spec", "args", "output_processor")
    served = served_model(class_name, args, item.model_name)
    if served is None:
        return unrunnable(f"HELM's {class_name} derives no model id for {item.model_name!r}; use a subclass "
                          "(BedrockNovaClient, BedrockLlamaClient, ...) or set bedrock_model_id")
    options: dict[str, Any] = dict(item.options)
    unresolved: list[str] = []

    def from_credentials(arg: str, suffix: str) -> str | None:
        """An arg as HELM injects it: given in args, else ``<host><Suffix>`` in credentials.conf."""
        value = args.get(arg)
        if value is None:
            value = credentials.get(host + suffix)
        return None if value is None else str(value)

    endpoint = from_credentials("endpoint", "Endpoint")
    # base_url as HELM's AutoClient fills it (args, else <host>BaseUrl for a class that takes one), else the
    # provider SDK's own variable (OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...), else the provider's address
    base_url = args.get("base_url")
    if base_url is None and (class_name in _TAKES_BASE_URL or class_name in _BUILT_IN_URL):
        base_url = credentials.get(host + "BaseUrl")
    if base_url is None and helm.base_url_env:
        base_url = _endpoint_variable(helm.base_url_env, environ)
    base_url = base_url or helm.base_url
    if base_url and "{endpoint}" in str(base_url):
        if endpoint is None:
            unresolved.append(f"{host}Endpoint (the {{endpoint}} of client_spec.args.base_url)")
            base_url = None
        else:
            base_url = str(base_url).replace("{endpoint}", endpoint.rstrip("/"))

    if helm.kind == "openai" and helm.api != "chat":
        options["api"] = helm.api
    if helm.shape == "helm_together" and args.get("disable_logprobs"):
        options.setdefault("together_logprobs", 0)  # HELM's TogetherChatClient then asks for no logprobs
    if helm.shape != "medhelm":
        options.setdefault("request_shape", helm.shape)  # HELM's client's body, field for field (openai.py ...)
        if item.model_name in vision_language:
            options.setdefault("vision_language", True)  # HELM sends no null stop to a vision-language model
    if class_name == "StanfordHealthCareOpenAIClient":
        # HELM builds its OpenAI SDK client with api_key "dummy": the SDK's bearer header carries that word
        options.setdefault("headers", {"Authorization": "Bearer dummy", **(options.get("headers") or {})})
    if class_name.startswith("StanfordHealthCare") and helm.kind in ("anthropic", "gemini"):
        # SHC's HTTP model clients POST to {endpoint}/{deployment}: the gateway's route for this model
        if endpoint is None:
            unresolved.append(f"{host}Endpoint (the gateway's address)")
        elif not args.get("deployment"):
            raise fail(f"{class_name} needs args.deployment (the gateway route)", "client_spec", "args")
        else:  # HELM's exact URL: f"{endpoint}/{deployment}" (platform shc appends no API path)
            base_url = f"{endpoint.rstrip('/')}/{str(args['deployment']).strip('/')}"  # a trailing '/' kept once
    elif helm.kind == "azure_openai":
        version = args.get("api_version") or helm.api_version
        if version:
            options["api_version"] = str(version)
        # the AzureOpenAI SDK's path: deployments/<azure_deployment or the body's model>
        served = str(args.get("azure_openai_deployment_name") or args.get("openai_model_name")
                     or args.get("deployment") or served)
        if base_url:
            # an explicit base path that stands for '<endpoint>/openai' (SHC: '{endpoint}/openai-eastus2'):
            # the OpenAI client with Azure's deployments path spelled out
            base_url = f"{str(base_url).rstrip('/')}/deployments/{served}"
            options.setdefault("api_version", "2024-10-21")
            if not helm.gateway:
                options.setdefault("auth_header", "api-key")  # Azure's key header, as the AzureOpenAI SDK sends it
            helm = _replace_kind(helm, "openai")
        elif endpoint is None:
            unresolved.append(f"{host}Endpoint (the Azure OpenAI resource)")
        else:
            base_url = endpoint
    elif helm.kind == "openai" and not base_url and not unresolved:
        raise fail(f"{class_name} needs args.base_url (the server's .../v1 address)", "client_spec", "args")
    headers = args.get("default_headers")
    if isinstance(headers, Mapping) and headers:
        options["headers"] = {**{str(k): str(v) for k, v in headers.items()}, **(options.get("headers") or {})}
    org = from_credentials("org_id", "OrgId") if "org_id" in helm.args else None
    if org:  # the OpenAI SDK's organization= : the OpenAI-Organization header
        options["headers"] = {"OpenAI-Organization": org, **(options.get("headers") or {})}
    if class_name in _INVOKE_FAMILY:
        options.setdefault("bedrock_invoke", _INVOKE_FAMILY[class_name])  # HELM's InvokeModel body (bedrock.py)
    if helm.kind == "bedrock":
        region = args.get("region") or credentials.get(host + "Region")
        if region:
            options.setdefault("region", str(region))
    if helm.kind in ("gemini", "vertex_text") and helm.platform != "shc":
        project, location = from_credentials("project_id", "ProjectId"), from_credentials("location", "Location")
        use_vertex = args.get("genai_use_vertexai")
        vertex = helm.platform == "vertex" or helm.kind == "vertex_text" or use_vertex is True or \
            (use_vertex is None and bool(project and location) and class_name == "GoogleGenAIClient")
        if vertex and helm.kind == "gemini":
            helm = dataclasses.replace(helm, platform="vertex", key_required=False)
        if vertex:
            base_url = args.get("base_url") or _endpoint_variable("GOOGLE_VERTEX_BASE_URL", environ)
            for key, value, suffix in (("project", project, "ProjectId"), ("region", location, "Location")):
                if value:
                    options.setdefault(key, value)
                elif key not in options:
                    unresolved.append(f"{host}{suffix} (Vertex AI's {key})")
        if class_name.startswith("VertexAI"):
            preset = args.get("safety_settings_preset")
            if preset not in (None, "block_none", "default"):
                raise fail(f"safety_settings_preset {escape(str(preset), 40)!r} is not one of HELM's presets "
                           "(block_none, default)", "client_spec", "args", "safety_settings_preset")
            if preset != "default" and helm.kind == "gemini":  # HELM's text client passes no safety settings
                options.setdefault("safety_settings", [{"category": c, "threshold": "BLOCK_NONE"}
                                                       for c in VERTEX_HARM_CATEGORIES])
        thinking = args.get("thinking_config")
        if isinstance(thinking, Mapping):  # sent as given (HELM hands it to google-genai's ThinkingConfig)
            options.setdefault("thinking_config", dict(thinking))
    if helm.platform:
        options.setdefault("platform", helm.platform)
    if args.get("stream") is True and helm.kind == "anthropic" and helm.platform == "direct":
        options.setdefault("stream", True)  # HELM's client calls messages.stream: Anthropic's event stream
    if args.get("reasoning_effort") is not None:
        options.setdefault("reasoning_effort", str(args["reasoning_effort"]))
    for arg in ("thinking_budget_tokens", "thinking_budget"):
        if isinstance(args.get(arg), int) and not isinstance(args.get(arg), bool):
            options.setdefault("thinking_budget", args[arg])

    if "api_key" in args:
        raise fail("a key does not belong in model_deployments.yaml: put it in credentials.conf as "
                   f"{host}ApiKey (HELM reads it from there too)", "client_spec", "args", "api_key")
    key_name = credentials.api_key_name(host, item.name)
    if key_name is None and helm.key_required:
        unresolved.append(f"{host}ApiKey (the key)")
    if key_name is not None:
        options["credentials"] = {"source": credentials.source, "name": key_name}
        if class_name in _AZURE_SDK_CLASSES:
            # HELM hands the key to the AzureOpenAI SDK (its pinned openai 2.x sends it as `api-key` and as
            # `Authorization: Bearer`), and SHC's gateway class adds it as the subscription key too
            options.setdefault("key_headers", ["api-key", "Authorization"] + ([GATEWAY_HEADER] if helm.gateway else []))
        elif helm.gateway:
            if helm.kind == "openai":
                options.setdefault("auth_header", GATEWAY_HEADER)  # the key itself goes in that header
            else:
                options["credentials"]["as"] = "subscription_key"
                options.setdefault("subscription_key_header", GATEWAY_HEADER)
    if unresolved:
        options["unresolved"] = [f"{u} is not in {credentials.source or 'credentials.conf'}" for u in unresolved]
    options.setdefault("helm_class", class_name)
    if item.deprecated:
        options.setdefault("deprecated", True)
    windows = [w for w in (item.max_sequence_length, item.max_request_length) if w]
    out: dict[str, Any] = {
        "name": item.name, "model_name": item.model_name, "kind": helm.kind, "base_url": base_url,
        "served_model_name": served, "max_sequence_length": min(windows) if windows else None, "options": options,
        "redacted": item.redacted,
    }
    if item.tokenizer_name:
        options.setdefault("tokenizer_name", item.tokenizer_name)
    if item.max_concurrency is not None:
        out["max_concurrency"] = item.max_concurrency
    if item.timeout_s is not None:
        out["timeout_s"] = item.timeout_s
    elif isinstance(args.get("timeout"), (int, float)) and not isinstance(args.get("timeout"), bool):
        out["timeout_s"] = float(min(max(args["timeout"], 1), 86_400))
    if item.description is not None:
        out["description"] = item.description
    return out


def _endpoint_variable(name: str, environ: Mapping[str, str]) -> str | None:
    """A provider SDK's endpoint variable (boto3 also reads the general ``AWS_ENDPOINT_URL``)."""
    value = environ.get(name) or (environ.get("AWS_ENDPOINT_URL") if name.startswith("AWS_ENDPOINT_URL_") else None)
    return value.strip() or None if value else None


def _replace_kind(helm: HelmClass, kind: str) -> HelmClass:
    return dataclasses.replace(helm, kind=kind)


# ------------------------------------------------------------------------------------------------
# model_metadata.yaml

METADATA_FILE = "model_metadata.yaml"


@dataclass(frozen=True)
class ModelMetadata:
    """What the leaderboard shows of a model besides its name (HELM's model_metadata.yaml entry)."""

    name: str
    display_name: str | None = None
    creator_organization_name: str | None = None
    access: str | None = None  # open | limited | closed
    release_date: str | None = None
    num_parameters: int | None = None
    description: str | None = None
    tags: tuple[str, ...] = ()  # HELM's tags (VISION_LANGUAGE_MODEL_TAG changes what HELM's OpenAIClient sends)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "tags"}


class _MetadataItem(Strict):
    name: Text
    display_name: Text | None = None
    description: LongText | None = None
    creator_organization_name: Text | None = None
    access: Text | None = None
    release_date: Any = None  # YAML may read 2025-02-19 as a date
    num_parameters: Annotated[int, Field(ge=0)] | None = None
    tags: list[Text] = []
    deployment_names: list[Text] | None = None  # HELM's field; the deployments are read from model_deployments
    release: Any = None  # in upstream's entries beside release_date; HELM ignores it


class _MetadataFile(Strict):
    models: list[Any]


def read_metadata(path: Path) -> list[ModelMetadata]:
    """HELM's ``model_metadata.yaml`` (``models: [{name, display_name, creator_organization_name, access,
    release_date, ...}]``), checked like every config: a ConfigError naming the file, line and field. A key
    repeated in an entry keeps its last value, as in HELM (upstream's own file has one)."""
    doc = load_yaml_doc(path, last_key_wins=True)
    if not isinstance(doc.data, Mapping):
        raise ConfigError("expected a list under the key 'models'", path=path)
    top = check(_MetadataFile, doc.data, path=path, doc=doc)
    out = []
    for i, raw in enumerate(top.models):
        item = check(_MetadataItem, raw, path=path, doc=doc, prefix=("models", i))
        if item.access is not None and item.access not in ("open", "limited", "closed"):
            raise ConfigError("must be open, limited or closed", path=path, line=doc.line("models", i, "access"),
                              field=f"models[{i}].access")
        out.append(ModelMetadata(item.name, item.display_name, item.creator_organization_name, item.access,
                                 None if item.release_date is None else str(item.release_date),
                                 item.num_parameters, item.description, tuple(item.tags)))
    return out
