"""Frozen, typed, JSON-serialisable values shared by every layer.

Of ours it imports only two base modules below it: ``json_text`` (the JSON spellings: canonical JSON and its
digest; their owner, which other modules import them from, never through here) and ``backend_kinds`` (the table
of deployment kinds, pure data). Every value round-trips through ``to_json()`` / ``from_json()`` so that run
specs, records and gRPC messages carry the same content. Hashable specs (``RunSpec``, ``Deployment``,
``GenerationRequest``) have a stable ``digest()`` computed from canonical JSON; that digest names runs and keys
the request cache. The per-instance record and the stats a run writes
are ``records.py``'s.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from medhelm import backend_kinds as _backend_kinds
from medhelm.json_text import JSON, canonical_json, digest, scalar_json, strings_canonical_json

# ---------------------------------------------------------------------------------------------
# frozen JSON values


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _freeze(value: Any) -> Any:
    if type(value) in _SCALARS:  # the common case first: cheaper than an ABC isinstance check
        return value
    if isinstance(value, FrozenMap):
        return value
    if isinstance(value, Mapping):
        return FrozenMap(value)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> JSON:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, FrozenMap):
        return value.to_json()
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable str-keyed mapping of JSON values (nested maps/lists frozen too)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(data or {}, **kwargs)
        self._data = {str(k): _freeze(v) for k, v in sorted(merged.items())}
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(canonical_json(self.to_json()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self.to_json() == {k: _thaw(_freeze(v)) for k, v in other.items()}
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self.to_json()!r})"

    def to_json(self) -> dict[str, JSON]:
        return {k: _thaw(v) for k, v in self._data.items()}

    def set(self, **kwargs: Any) -> FrozenMap:
        return FrozenMap({**self._data, **kwargs})


EMPTY_MAP = FrozenMap()  # one empty frozen map for every value that has none (it is immutable)


# --------------------------------------------------------------------------------------------
# taxonomy-level enums


class Access(str, enum.Enum):
    PUBLIC = "public"
    GATED = "gated"
    PRIVATE = "private"


class TaskType(str, enum.Enum):
    MULTIPLE_CHOICE = "multiple_choice"  # lettered options, scored by mapping the answer to a choice
    CLASSIFICATION = "classification"  # short label output (yes/no, 0/1, CORRECT/...) scored exactly
    GENERATION = "generation"  # free text, scored by overlap metrics and/or the jury
    CALCULATION = "calculation"  # numeric/date answers (MedCalc-Bench)
    CODE = "code"  # text-to-SQL (EHRSQL)


# One member per row of ``backend_kinds.KINDS`` (the one table of backends): ``DeploymentKind.OPENAI`` is
# "openai", ``DeploymentKind.KSERVE_V2`` is "kserve_v2". A new backend is a row there, never a member here.
DeploymentKind = enum.Enum("DeploymentKind", [(name.upper(), name) for name in _backend_kinds.KIND_NAMES],
                           type=str, module=__name__, qualname="DeploymentKind")


# --------------------------------------------------------------------------------------------
# models and requests


# Deployment options that change what a model answers (part of the cache key when set): each kind declares
# its own on its ``backend_kinds.KINDS`` row (``answer_options``); the union applies to every deployment.
ANSWER_OPTIONS = tuple(dict.fromkeys(name for row in _backend_kinds.KINDS for name in row.answer_options))


@dataclass(frozen=True)
class Deployment:
    """A named way to reach a model (HELM's model_deployments.yaml entry)."""

    name: str  # e.g. "vllm/qwen2.5-7b-instruct", "local/smollm2-135m-instruct"
    model_name: str  # e.g. "qwen/qwen2.5-7b-instruct"
    kind: DeploymentKind
    base_url: str | None = None  # openai: ".../v1" or KServe ".../openai/v1"; kserve_v2: predictor URL
    served_model_name: str | None = None  # the "model" field sent to the server
    api_key_env: str | None = None  # NAME of the env var holding the key (never the key itself)
    max_sequence_length: int | None = None  # context window in tokens
    gguf_path: str | None = None  # llamacpp: path, or "package:<module>/<file>" for packaged weights
    max_concurrency: int | None = None  # per-deployment cap on requests in flight
    timeout_s: float = 300.0
    redacted: bool = False  # dashboard/export: never show this deployment's instance text
    options: FrozenMap = field(default_factory=FrozenMap)  # kind-specific extras (n_threads, headers, ...)
    # the provider's budgets: requests_per_minute, tokens_per_minute (inference/pacing/); not part of identity
    rate_limits: FrozenMap = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", DeploymentKind(self.kind))
        if not isinstance(self.options, FrozenMap):
            object.__setattr__(self, "options", FrozenMap(self.options))
        if not isinstance(self.rate_limits, FrozenMap):
            object.__setattr__(self, "rate_limits", FrozenMap(self.rate_limits))

    def identity(self) -> dict[str, JSON]:
        """What makes two deployments answer identically; part of every cache key. The options that change an
        answer (``ANSWER_OPTIONS``: the route, a reasoning model's effort and thinking budget) join it only when
        set, so the keys of every other deployment stay as they were."""
        identity: dict[str, JSON] = {
            "name": self.name,
            "model_name": self.model_name,
            "kind": self.kind.value,
            "base_url": self.base_url,
            "served_model_name": self.served_model_name,
            "gguf_path": self.gguf_path,
        }
        answer = {k: _thaw(self.options[k]) for k in ANSWER_OPTIONS if k in self.options}
        if answer:
            identity["options"] = answer
        return identity

    def to_json(self) -> dict[str, JSON]:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        d["options"] = self.options.to_json()
        if self.rate_limits:
            d["rate_limits"] = self.rate_limits.to_json()
        else:
            del d["rate_limits"]  # absent when unset: run_spec.json of a deployment without budgets is unchanged
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Deployment:
        return cls(**{**d, "options": FrozenMap(d.get("options") or {}),
                      "rate_limits": FrozenMap(d.get("rate_limits") or {})})


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}

    @classmethod
    def from_json(cls, d: Mapping[str, str]) -> Message:
        return cls(role=d["role"], content=d["content"])


@dataclass(frozen=True)
class Prompt:
    """What a benchmark asks the model: chat messages, plus whether the context was cut to fit.

    ``question`` is the instance's input as the benchmark's upstream scenario words it (HELM's
    ``instance.input.text``, never truncated): what a judge is asked about in its ``{QUESTION}``. Only a benchmark
    with HELM's layout sets it (None otherwise: the judge sees the instance's input). It crosses the services'
    wire (``to_json``) but is not kept in a run's record (``to_json(question=False)``): it would be one more copy
    of the patient text, which the recorded instance and the benchmark's layout already determine."""

    messages: tuple[Message, ...]
    truncated: bool = False
    question: str | None = None

    @classmethod
    def user(cls, text: str, *, system: str | None = None, truncated: bool = False,
             question: str | None = None) -> Prompt:
        msgs = ((Message("system", system),) if system else ()) + (Message("user", text),)
        return cls(messages=msgs, truncated=truncated, question=question)

    @property
    def text(self) -> str:
        return "\n\n".join(m.content for m in self.messages)

    def to_json(self, *, question: bool = True) -> dict[str, JSON]:
        out: dict[str, JSON] = {"messages": [m.to_json() for m in self.messages], "truncated": self.truncated}
        if question and self.question is not None:  # absent when unset: existing JSON byte-identical
            out["question"] = self.question
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Prompt:
        question = d.get("question")
        return cls(tuple(Message.from_json(m) for m in d["messages"]), bool(d.get("truncated", False)),
                   None if question is None else str(question))


@dataclass(frozen=True)
class GenerationRequest:
    """One call to a model. Everything that changes the answer is in here (it keys the cache)."""

    messages: tuple[Message, ...]
    max_tokens: int
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = 0
    # JSON schema (as canonical JSON text, to stay hashable) for structured output / guided decoding.
    json_schema: str | None = None
    top_logprobs: int | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "messages": [m.to_json() for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stop": list(self.stop),
            "seed": self.seed,
            "json_schema": self.json_schema,
            "top_logprobs": self.top_logprobs,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> GenerationRequest:
        return cls(
            messages=tuple(Message.from_json(m) for m in d["messages"]),
            max_tokens=int(d["max_tokens"]),
            temperature=float(d.get("temperature", 0.0)),
            stop=tuple(d.get("stop") or ()),
            seed=d.get("seed"),
            json_schema=d.get("json_schema"),
            top_logprobs=d.get("top_logprobs"),
        )

    def messages_json(self) -> str:
        """``canonical_json`` of the messages, encoded once per request and reused by the cache key and the
        request body (the prompt is most of both)."""
        cached = self.__dict__.get("_messages_json")
        if cached is None:
            cached = strings_canonical_json([m.to_json() for m in self.messages])
            object.__setattr__(self, "_messages_json", cached)  # not a field: equality and hash ignore it
        return cached

    def cache_key(self, deployment: Deployment | str) -> str:
        """sha256 of the canonical JSON of {deployment identity, request}. ``deployment`` may be given as
        ``canonical_json(deployment.identity())``, computed once per deployment (the same key, cheaper)."""
        identity = deployment if isinstance(deployment, str) else canonical_json(deployment.identity())
        # canonical_json({"deployment": ..., "request": self.to_json()}) spelled out in sorted key order, with
        # the messages' JSON reused (tests compare it with the generic spelling). The text around the
        # messages is the same for every request of a run: it is kept per (identity, settings), the types
        # in the key because 1 == 1.0 == True would otherwise share a spelling.
        settings = (identity, self.json_schema, self.max_tokens, self.seed, self.stop, self.temperature,
                    self.top_logprobs)
        memo = (settings, tuple(map(type, settings)))
        around = _KEY_TEXT.get(memo)
        if around is None:
            around = _key_text(*settings)
            if len(_KEY_TEXT) >= 64:
                _KEY_TEXT.clear()
            _KEY_TEXT[memo] = around
        h = hashlib.sha256(around[0])
        h.update(self.messages_json().encode("utf-8"))
        h.update(around[1])
        return h.hexdigest()


_KEY_TEXT: dict[tuple, tuple[bytes, bytes]] = {}  # GenerationRequest.cache_key's text before and after the messages


def _key_text(identity: str, json_schema: str | None, max_tokens: int, seed: int | None, stop: tuple[str, ...],
              temperature: float, top_logprobs: int | None) -> tuple[bytes, bytes]:
    c = scalar_json
    head = ('{"deployment":' + identity + ',"request":{"json_schema":' + c(json_schema)
            + ',"max_tokens":' + c(max_tokens) + ',"messages":')
    tail = (',"seed":' + c(seed) + ',"stop":' + (canonical_json(list(stop)) if stop else "[]")
            + ',"temperature":' + c(temperature) + ',"top_logprobs":' + c(top_logprobs) + "}}")
    return head.encode("utf-8"), tail.encode("utf-8")


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0  # wall time of the successful attempt (0 for a cache hit)
    cached: bool = False
    attempts: int = 1  # 1 + number of retries
    # Of completion_tokens, those the model spent thinking (OpenAI's convention: completion_tokens counts
    # every generated token, reasoning included), when the provider states it (Gemini thoughtsTokenCount,
    # OpenAI completion_tokens_details.reasoning_tokens); None when it does not say.
    reasoning_tokens: int | None = None
    # True when reasoning_tokens is our estimate, not the provider's count (Anthropic and Bedrock Converse state
    # one output count, thinking included; vLLM's parser splits the text but may state 0): tokens.py's
    # split_reasoning; shown as "≈" wherever it is summed
    reasoning_estimated: bool = False

    def to_json(self) -> dict[str, JSON]:
        # by hand: dataclasses.asdict deep-copies, once per record
        d: dict[str, JSON] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                              "latency_s": self.latency_s, "cached": self.cached, "attempts": self.attempts}
        if self.reasoning_tokens is not None:  # absent otherwise: records of other kinds keep their bytes
            d["reasoning_tokens"] = self.reasoning_tokens
            if self.reasoning_estimated:
                d["reasoning_tokens_estimated"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Usage:
        if "reasoning_tokens_estimated" in d:
            d = dict(d)
            d["reasoning_estimated"] = bool(d.pop("reasoning_tokens_estimated"))
        return cls(**d)


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    # the model (and version) the server says answered (OpenAI-compatible ``model``, KServe v2 ``model_name`` and
    # ``model_version``, Gemini ``modelVersion``): kept per run in its access record (run.json ``access``), not in
    # the instance's record nor the request cache, and no part of a completion's equality
    model: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, JSON]:
        return {"text": self.text, "finish_reason": self.finish_reason, "usage": self.usage.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Completion:
        return cls(d["text"], d.get("finish_reason"), Usage.from_json(d.get("usage") or {}))


# --------------------------------------------------------------------------------------------
# benchmarks and instances


@dataclass(frozen=True)
class Reference:
    text: str
    correct: bool = True

    def to_json(self) -> dict[str, JSON]:
        return {"text": self.text, "correct": self.correct}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Reference:
        return cls(d["text"], bool(d.get("correct", True)))


# An instance's subgroup label when its cell is empty (the record's format); the analysis reports it, and an
# instance without the attribute, as the group "not recorded" (store/subgroups.py)
BLANK_SUBGROUP = "(blank)"


@dataclass(frozen=True)
class Instance:
    """One item of a benchmark, before prompting."""

    id: str
    input: str  # the instance's own text (what a judge sees as {QUESTION})
    references: tuple[Reference, ...] = ()
    split: str = "test"
    choices: tuple[str, ...] = ()  # multiple choice: option texts in display order (letters A, B, ...)
    extra: FrozenMap = field(default_factory=FrozenMap)  # loader-specific fields (columns, limits, ...)
    # the patient subgroup of the instance (attribute -> label, e.g. sex -> F) for the per-subgroup analysis
    # (store/subgroups.py); written to the record only when the benchmark names subgroups, so records of
    # benchmarks without them keep their bytes
    subgroups: FrozenMap = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        if not isinstance(self.extra, FrozenMap):
            object.__setattr__(self, "extra", FrozenMap(self.extra))
        if not isinstance(self.subgroups, FrozenMap):
            object.__setattr__(self, "subgroups", FrozenMap(self.subgroups))

    @property
    def correct_references(self) -> tuple[Reference, ...]:
        return tuple(r for r in self.references if r.correct)

    def to_json(self) -> dict[str, JSON]:
        out = {
            "id": self.id,
            "input": self.input,
            "references": [r.to_json() for r in self.references],
            "split": self.split,
            "choices": list(self.choices),
            "extra": self.extra.to_json(),
        }
        if self.subgroups:
            out["subgroups"] = self.subgroups.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> Instance:
        return cls(
            id=str(d["id"]),
            input=d["input"],
            references=tuple(Reference.from_json(r) for r in d.get("references") or ()),
            split=d.get("split", "test"),
            choices=tuple(d.get("choices") or ()),
            extra=FrozenMap(d.get("extra") or {}),
            subgroups=FrozenMap(d.get("subgroups") or {}),
        )


@dataclass(frozen=True)
class MetricSpec:
    """A metric by registry name with its arguments (e.g. jury_score's judge prompt and judges)."""

    name: str
    args: FrozenMap = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        if not isinstance(self.args, FrozenMap):
            object.__setattr__(self, "args", FrozenMap(self.args))

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "args": self.args.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> MetricSpec:
        return cls(d["name"], FrozenMap(d.get("args") or {}))


@dataclass(frozen=True)
class BenchmarkSpec:
    """Everything the leaderboard needs to know about a benchmark, without loading it."""

    name: str  # run-entry name, e.g. "pubmed_qa" or a configurable benchmark's YAML `name`
    display_name: str
    description: str
    category: str  # one of medhelm.taxonomy.CATEGORIES ("" for an unclassified custom benchmark)
    subcategory: str  # one of that category's subcategories ("" if unclassified)
    access: Access
    task_type: TaskType
    metrics: tuple[MetricSpec, ...]  # the first one's main stat is the leaderboard column
    main_metric: str  # the stat name of the leaderboard column (e.g. "exact_match", "jury_score")
    max_tokens: int
    source: str = ""  # where the data comes from, pinned (URL@revision) or "user data_path"
    main_split: str = "test"
    lower_is_better: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "access", Access(self.access))
        object.__setattr__(self, "task_type", TaskType(self.task_type))
        object.__setattr__(self, "metrics", tuple(self.metrics))

    def to_json(self) -> dict[str, JSON]:
        d = dataclasses.asdict(self)
        d["access"] = self.access.value
        d["task_type"] = self.task_type.value
        d["metrics"] = [m.to_json() for m in self.metrics]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> BenchmarkSpec:
        return cls(**{**d, "metrics": tuple(MetricSpec.from_json(m) for m in d["metrics"])})


@dataclass(frozen=True)
class RunSpec:
    """One (benchmark, model) evaluation, fully resolved. Its digest names the run's identity."""

    entry: str  # the run entry as written by the user (for display and HELM-style run names)
    benchmark: BenchmarkSpec
    benchmark_args: FrozenMap  # e.g. subset=..., data_path=..., config_path=... (resolved)
    model: str
    deployment: str
    max_eval_instances: int | None = None
    max_tokens: int = 1024
    temperature: float = 0.0
    seed: int = 0  # instance sampling and request seed
    # "" = the benchmark's own prompt; "custom:<sha256 prefix>" = instructions from prompt_path= (the
    # leaderboard marks such results: they are not comparable with the default prompt's)
    prompt: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.benchmark_args, FrozenMap):
            object.__setattr__(self, "benchmark_args", FrozenMap(self.benchmark_args))

    @property
    def name(self) -> str:
        """HELM-compatible run directory name: ``<benchmark>[,k=v...]:model=<m>,model_deployment=<d>``."""
        args = "".join(f",{k}={_pathsafe(v)}" for k, v in self.benchmark_args.items() if k not in _HIDDEN_ARGS)
        if "jury_config_path" in self.benchmark_args:  # another jury = another run, kept side by side
            args += f",jury={_pathsafe(_stem(self.benchmark_args['jury_config_path']))}"
        if "prompt_path" in self.benchmark_args:  # another prompt = another run, kept side by side
            args += f",prompt={_pathsafe(_stem(self.benchmark_args['prompt_path']))}"
        return f"{self.benchmark.name}{args}:model={_pathsafe(self.model)},model_deployment={_pathsafe(self.deployment)}"

    def digest(self) -> str:
        return digest(self.to_json())

    def to_json(self) -> dict[str, JSON]:
        return {
            "entry": self.entry,
            "benchmark": self.benchmark.to_json(),
            "benchmark_args": self.benchmark_args.to_json(),
            "model": self.model,
            "deployment": self.deployment,
            "max_eval_instances": self.max_eval_instances,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            **({"prompt": self.prompt} if self.prompt else {}),  # absent for the default: digests unchanged
        }

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> RunSpec:
        return cls(
            entry=d["entry"],
            benchmark=BenchmarkSpec.from_json(d["benchmark"]),
            benchmark_args=FrozenMap(d.get("benchmark_args") or {}),
            model=d["model"],
            deployment=d["deployment"],
            max_eval_instances=d.get("max_eval_instances"),
            max_tokens=int(d.get("max_tokens", 1024)),
            temperature=float(d.get("temperature", 0.0)),
            seed=int(d.get("seed", 0)),
            prompt=str(d.get("prompt") or ""),
        )


# args that locate files on this machine do not belong in a portable run name
_HIDDEN_ARGS = frozenset({"data_path", "config_path", "jury_config_path", "prompt_path"})


def _stem(path: str) -> str:
    name = str(path).replace("\\", "/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name


def _pathsafe(value: Any) -> str:
    return str(value).replace("/", "_")
