"""The table of deployment kinds (inference backends): the ONE place a backend is registered.

Read by ``specs.DeploymentKind`` (the enum is built from it), the deployment schema in ``deployments.py``
(the ``kind:`` values it accepts and the fields each kind requires) and ``inference.make_client`` (which
imports a kind's client module by path, only when a client is made, so this table stays at base level and
an optional engine's module is never imported by reading a config). Shaped like lm-eval's ``MODEL_MAPPING``:
a name to a lazily imported class.

A row (``BackendKind``):
    kind      the ``kind:`` value in model_deployments.yaml; lower case, ``[a-z][a-z0-9_]*`` (it also names
              the enum member: ``kserve_v2`` -> ``DeploymentKind.KSERVE_V2``)
    client    ``"module.path:ClassName"``, the client class; it is called as ``ClassName(deployment,
              connections=n)`` (``connections``: requests the caller may have in flight, None when unknown;
              a client that pools no connections ignores it) and follows ``inference.base.ModelClient``
    required  the ``Deployment`` fields a deployment of this kind must set (checked when the file is read)
    summary   one line for docs and errors
    option, variants  (optional) ``options.<option>`` picks the client among ``variants`` (value ->
              ``"module:Class"``); the first variant is the default and ``client`` must equal it
    in_process  (optional) the model runs inside this process with a tokenizer of its own, so its prompts
              are cut to fit here, never by a scenario service (``medhelm job`` refuses the combination)
    local     (optional) answers come from this process, not a server: nothing to pace (``inference/pacing/``
              adapts concurrency and rate budgets only for servers); true for every in_process kind
    native    (optional) a cloud provider's own API: mirrored by name as ``inference/<kind>.py``,
              ``devtools/fakes/<kind>.py`` and ``tests/providers/test_<kind>.py`` (checked by
              tests/providers/test_providers_mirrored.py)
    answer_options  (optional) the kind's ``options.<name>`` that change what the model answers: set on a
              deployment, they join its cache key (``specs.ANSWER_OPTIONS`` is their union over the rows,
              read for every kind, so a key never depends on which row declared a name)
    option_rules  (optional) ``options.<name>`` -> ``OptionRule``: what a value of that option must be,
              checked when the file is read (``deployments.py``, over the union of the rows: a name two rows
              read has one rule, shared here as a constant)
    secrets   (optional) ``Secret``s: environment variables the kind's client reads besides ``api_key_env``
              (credentials of a platform), checked set at planning (``deployments.check_usable``)

Adding a backend: write its client module under ``medhelm/inference/`` and add one row here (a provider:
docs/architecture.md, "Where to add"). Failure
semantics: the table is data and imports nothing of ours (``specs.py`` builds its enum from it); a bad
option value or a module that cannot be imported is a one-line ConfigError from the factory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class OptionRule:
    """What a value of one ``options.<name>`` must be: ``want`` (said as "must be <want>") and its test."""

    want: str
    test: Callable[[Any], bool]


@dataclass(frozen=True)
class Secret:
    """An environment variable a kind's client reads (its value a secret, never shown): ``variable`` by default,
    the one ``options.<option>`` names when set; ``what`` says what it is in the error. Only on ``platform``
    (``options.platform``) when given; not needed when any of ``unless`` (an option or a deployment field) is set."""

    variable: str
    what: str
    option: str | None = None
    platform: str | None = None
    unless: tuple[str, ...] = ()

    def on(self, platform: str) -> Secret:
        return replace(self, platform=platform)


@dataclass(frozen=True)
class BackendKind:
    kind: str
    client: str
    required: tuple[str, ...] = ()
    summary: str = ""
    option: str | None = None
    variants: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    in_process: bool = False
    local: bool = False
    native: bool = False
    answer_options: tuple[str, ...] = ()
    option_rules: Mapping[str, OptionRule] = field(default_factory=lambda: MappingProxyType({}))
    secrets: tuple[Secret, ...] = ()

    @property
    def paced(self) -> bool:
        """A server answers: its concurrency and rate budget are paced."""
        return not (self.local or self.in_process)

    def client_path(self, options: Mapping[str, object]) -> str | None:
        """``"module:Class"`` for a deployment with these ``options``; None when ``options.<option>`` names
        no variant (the caller says which values are allowed: ``variants``)."""
        if self.option is None:
            return self.client
        value = options.get(self.option, next(iter(self.variants)))
        return self.variants.get(value) if isinstance(value, str) else None


def _rules(**rules: OptionRule) -> Mapping[str, OptionRule]:
    return MappingProxyType(rules)


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# option rules that more than one row reads
_FLAG = OptionRule("true or false", lambda v: isinstance(v, bool))
_THINKING_BUDGET = OptionRule("a whole number of tokens from 0 to 1,000,000",
                              lambda v: _whole(v) and 0 <= v <= 1_000_000)
_REQUEST_SHAPE = OptionRule("'medhelm', 'helm', 'helm_vertex', 'helm_together' or 'helm_hf'",
                            lambda v: v in ("medhelm", "helm", "helm_vertex", "helm_together", "helm_hf"))
# credentials that more than one row reads: AWS's for SigV4 (sigv4.py), Google's key file (google_adc.py)
_AWS_KEYS = (Secret("AWS_ACCESS_KEY_ID", "AWS access key", option="aws_access_key_env"),
             Secret("AWS_SECRET_ACCESS_KEY", "AWS secret key", option="aws_secret_key_env"))
_GOOGLE_KEY_FILE = Secret("GOOGLE_APPLICATION_CREDENTIALS",
                          "a Google key file for Vertex AI, read by inference/google_adc.py",
                          unless=("access_token_file", "api_key_env", "service_account_file"))

KINDS: tuple[BackendKind, ...] = (
    BackendKind("openai", "medhelm.inference.openai:OpenAIClient", ("base_url",),
                "any OpenAI-compatible server: vLLM, KServe HF runtime, llama.cpp server, Azure",
                answer_options=("api", "reasoning_effort", "thinking_budget", "max_tokens_param", "sampling",
                                "extra_body", "request_shape"),
                option_rules=_rules(
                    api=OptionRule("'chat', 'completions', 'responses' or 'together'",
                                   lambda v: v in ("chat", "completions", "responses", "together")),
                    reasoning_effort=OptionRule("one of minimal, low, medium, high",
                                                lambda v: v in ("minimal", "low", "medium", "high")),
                    thinking_budget=_THINKING_BUDGET,
                    max_tokens_param=OptionRule("'max_tokens' or 'max_completion_tokens'",
                                                lambda v: v in ("max_tokens", "max_completion_tokens")),
                    sampling=_FLAG, request_shape=_REQUEST_SHAPE,
                    together_logprobs=OptionRule("0 or 1", lambda v: v in (0, 1) and not isinstance(v, bool)),
                    extra_body=OptionRule("a mapping of request body fields", lambda v: isinstance(v, Mapping)),
                    vision_language=_FLAG, stream=_FLAG)),
    BackendKind("llamacpp", "medhelm.inference.llamacpp:LlamaCppClient", ("gguf_path",),
                "an in-process GGUF model (llama-cpp-python, the embedded extra)", in_process=True),
    BackendKind("kserve_v2", "medhelm.inference.kserve_v2:KServeV2Client", ("base_url",),
                "KServe Open Inference Protocol v2 (text in, text out), REST or gRPC",
                option="protocol",
                variants=MappingProxyType({"rest": "medhelm.inference.kserve_v2:KServeV2Client",
                                           "grpc": "medhelm.inference.kserve_v2_grpc:KServeV2GrpcClient"})),
    # The provider-native kinds (docs/providers-native.md): our own HTTP transport, no SDK in the base install.
    BackendKind("anthropic", "medhelm.inference.anthropic:AnthropicClient", (),
                "Anthropic Messages API: direct, on Bedrock (invoke, SigV4) or on Vertex AI (rawPredict)",
                native=True, answer_options=("platform", "region", "project", "anthropic_version", "thinking_budget",
                                             "request_shape"),
                option_rules=_rules(thinking_budget=_THINKING_BUDGET, request_shape=_REQUEST_SHAPE, stream=_FLAG),
                secrets=(*(s.on("bedrock") for s in _AWS_KEYS), _GOOGLE_KEY_FILE.on("vertex"))),
    BackendKind("gemini", "medhelm.inference.gemini:GeminiClient", (),
                "Gemini generateContent: the public Gemini API or Vertex AI",
                native=True, answer_options=("platform", "region", "project", "thinking_budget", "thinking_config",
                                             "safety_settings", "request_shape"),
                option_rules=_rules(
                    thinking_budget=_THINKING_BUDGET, request_shape=_REQUEST_SHAPE,
                    safety_settings=OptionRule("a list of {category, threshold}", lambda v: isinstance(v, (list, tuple))
                                               and all(isinstance(s, Mapping) for s in v)),
                    thinking_config=OptionRule("a mapping (HELM's google-genai ThinkingConfig)",
                                               lambda v: isinstance(v, Mapping))),
                secrets=(_GOOGLE_KEY_FILE.on("vertex"),)),
    BackendKind("vertex_text", "medhelm.inference.vertex_text:VertexTextClient", (),
                "Vertex AI text models (MedLM, PaLM 2) through :predict, OAuth from Google credentials",
                native=True, answer_options=("region", "project"), secrets=(_GOOGLE_KEY_FILE,)),
    BackendKind("bedrock", "medhelm.inference.bedrock:BedrockClient", (),
                "Amazon Bedrock Converse, SigV4-signed",
                native=True, answer_options=("region", "additional_model_request_fields", "bedrock_invoke",
                                             "request_shape"),
                option_rules=_rules(request_shape=_REQUEST_SHAPE,
                                    bedrock_invoke=OptionRule("llama, mistral or titan",
                                                              lambda v: v in ("llama", "mistral", "titan"))),
                secrets=_AWS_KEYS),
    BackendKind("mistral", "medhelm.inference.mistral:MistralClient", (),
                "Mistral AI chat completions (api.mistral.ai, or a gateway in front of it)",
                native=True, answer_options=("request_shape",),
                option_rules=_rules(request_shape=_REQUEST_SHAPE, stream=_FLAG)),
    BackendKind("azure_openai", "medhelm.inference.azure_openai:AzureOpenAIClient", ("base_url",),
                "Azure OpenAI chat completions with an api-key or a Microsoft Entra ID token", native=True),
    BackendKind("baseline", "medhelm.inference.baseline:BaselineClient", (),
                "a zero-cost reference answer, no model: random, majority, empty, copy of the input "
                "(medhelm/baselines.py)", local=True),
)

BY_KIND: Mapping[str, BackendKind] = MappingProxyType({row.kind: row for row in KINDS})
KIND_NAMES: tuple[str, ...] = tuple(BY_KIND)
