"""In-process GGUF model through llama-cpp-python (the embedded default, SmolLM2-135M-Instruct).

The model loads once per client, lazily and in a worker thread, so the event loop keeps running.
llama.cpp's context is not safe to share between threads, so generations run one at a time behind an
``asyncio.Lock``, each in ``asyncio.to_thread``. Deployment ``options``: ``n_ctx`` (default
``max_sequence_length``, else 4096), ``n_threads`` (default ``$MEDHELM_LLAMA_THREADS``, else
``os.cpu_count()``), ``n_batch``. llama.cpp's threads wait for each other at every step by spinning, so on cores
shared with other work a thread that is descheduled stalls the others, and a generation slows many times over
(docs/design-notes.md). On a shared machine set ``MEDHELM_LLAMA_THREADS`` (or ``n_threads``) below the
number of cores the run can count on; the test suite runs with 1 (two pytest workers share 2 cores).
A value that is not a whole number >= 1 is a ``ConfigError`` naming the variable.

Determinism (the same request gives the same text, every time): llama-cpp-python keeps the previous
call's tokens in the KV cache and, when the next prompt shares a prefix, evaluates only the unmatched
suffix (for a repeated prompt, its last token alone). A prompt evaluated in a batch of 1 token and the same
prompt evaluated in one batch go through different matrix kernels, so their logits differ in the last bits
and a greedy pick between two near-equal tokens flips: the text then depended on which request ran before.
So every generation starts from an empty context: ``reset()`` and the KV memory cleared, the whole prompt
evaluated from position 0 in the same batches. The sampler is built anew per call with the request's seed
(``None`` counts as 0; llama.cpp's "random seed" value is never passed), so temperature > 0 is reproducible
with the same seed. Prompt (batch) and generation run on the same ``n_threads``. Hence: the same request on
the same deployment options (``n_ctx``, ``n_threads``, ``n_batch``), model file and llama.cpp build gives
the same text in one process or many, in any order, at any ``--max-concurrency``, cached or not; the cost
is re-evaluating a shared prompt prefix (milliseconds for the embedded 135M model). Different thread counts
or builds may differ in the last bits, and so in a near tie.

``context_window()`` reports ``n_ctx``, the window llama.cpp enforces (as the OpenAI client reports vLLM's
``max_model_len``), so candidate and judge prompts are budgeted against it; ``count_tokens`` counts with
the model's own tokenizer.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import time
from typing import Any

from medhelm.deployments import llama_threads, resolve_gguf
from medhelm.errors import ConfigError, InferenceError
from medhelm.inference.llamacpp_check import check_runtime
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage

DEFAULT_N_CTX = 4096
# llama.cpp reads the seed 0xFFFFFFFF (LLAMA_DEFAULT_SEED) as "pick one at random": seeds are taken modulo it.
_SEED_RANGE = 0xFFFFFFFF


class LlamaCppClient:
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:  # pools none
        if not deployment.gguf_path:
            raise ConfigError(f"deployment '{deployment.name}' has no gguf_path")
        self._deployment = deployment
        options = deployment.options
        self.n_ctx = int(options.get("n_ctx") or deployment.max_sequence_length or DEFAULT_N_CTX)
        self._n_threads = llama_threads(options)
        self._n_batch = int(options.get("n_batch") or 512)
        self._llm: Any = None
        self._load_lock = threading.Lock()  # the loader may be reached from the loop's thread or a worker
        self._generate_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def load(self) -> Any:
        """The ``llama_cpp.Llama`` (blocking on first use; call from a thread when on an event loop)."""
        with self._load_lock:
            if self._llm is None:
                path = resolve_gguf(self._deployment.gguf_path or "")
                check_runtime(path)  # a library this CPU cannot run is one clear error, not a SIGILL here
                try:
                    from llama_cpp import Llama
                except ImportError:
                    raise ConfigError(f"deployment '{self._deployment.name}' needs llama-cpp-python; install the "
                                      f"embedded extra: pip install 'medhelm-k8s[embedded]'") from None
                try:
                    # n_threads_batch pinned too: it would default to every core, whatever n_threads says
                    self._llm = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self._n_threads,
                                      n_threads_batch=self._n_threads, n_batch=self._n_batch, seed=0,
                                      verbose=False)
                except ValueError as err:  # llama.cpp could not read the file
                    raise ConfigError(f"cannot load GGUF model ({err})", path=path) from None
            return self._llm

    # The window is a setting of this process, not a server's answer: free to read, and the limit llama.cpp
    # enforces even when the deployment's max_sequence_length says more (ClientPool takes the smaller).
    context_window_is_local = True

    async def context_window(self) -> int:
        """The context length this client loads the model with (``n_ctx``): prompt + output must fit it."""
        return self.n_ctx

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in the model's own tokenizer (the pipeline's prompt budgets use it)."""
        return len(self.load().tokenize(text.encode("utf-8"), add_bos=False, special=False))

    async def generate(self, request: GenerationRequest) -> Completion:
        async with self._lock():
            if self._llm is None:
                await asyncio.to_thread(self.load)
            started = time.perf_counter()
            result = await asyncio.to_thread(self._complete, request)
            latency = time.perf_counter() - started
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        return Completion(
            text=choice["message"].get("content") or "",
            finish_reason=choice.get("finish_reason"),
            usage=Usage(prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                        latency_s=latency),
        )

    def _lock(self) -> asyncio.Lock:
        # An asyncio.Lock belongs to one event loop; a client reused by a later asyncio.run gets a new one.
        loop = asyncio.get_running_loop()
        if self._generate_lock is None or self._generate_lock[0] is not loop:
            self._generate_lock = (loop, asyncio.Lock())
        return self._generate_lock[1]

    def _complete(self, request: GenerationRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "messages": [m.to_json() for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stop": list(request.stop),
            "seed": (request.seed or 0) % _SEED_RANGE,
        }
        if request.json_schema is not None:  # grammar-constrained decoding: the output is the schema's JSON
            kwargs["grammar"] = schema_grammar(request.json_schema)
        try:
            self._forget_previous_call()
            return self._llm.create_chat_completion(**kwargs)
        except ValueError as err:
            if "exceed context window" in str(err):
                raise InferenceError(f"deployment '{self._deployment.name}': prompt longer than the context "
                                     f"window (n_ctx={self.n_ctx}): {err}", retryable=False) from None
            raise InferenceError(f"deployment '{self._deployment.name}': llama.cpp refused the request: {err}",
                                 retryable=False) from None

    def _forget_previous_call(self) -> None:
        """Start from an empty context, so no prompt prefix of an earlier call is reused (module docstring)."""
        llm = self._llm
        llm.reset()  # n_tokens = 0: generate() finds no cached prefix and evaluates the whole prompt
        import llama_cpp  # loaded already (load() imported it)

        memory = llama_cpp.llama_get_memory(llm.ctx)
        if memory is not None:  # every cell freed, the next prompt placed from cell 0 as in a new context
            llama_cpp.llama_memory_clear(memory, False)

    async def aclose(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            close = getattr(llm, "close", None)
            if close is not None:
                close()


@functools.lru_cache(maxsize=32)
def schema_grammar(schema_text: str) -> Any:
    """The llama.cpp grammar (``LlamaGrammar``) that holds the output to a JSON schema, built once per schema.

    Not ``response_format={"type": "json_object", "schema": ...}``: on a schema its converter cannot read,
    llama-cpp-python silently falls back to "any JSON", and its converter drops an integer's ``minimum``/
    ``maximum`` (a rubric's score range), so a judge could write a score of 7 on a 0-5 rubric and be
    unscored. Here a bounded integer becomes the enum of its values, and a schema that does not convert is
    an error (a looser grammar would go unnoticed)."""
    from llama_cpp import LlamaGrammar

    schema = _bounded_integers(json.loads(schema_text))
    try:
        return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    except Exception as err:  # the converter raises assertions and ValueErrors alike
        raise InferenceError(f"llama.cpp cannot hold the output to this JSON schema ({type(err).__name__}: "
                             f"{str(err)[:200]})", retryable=False) from None


_ENUM_LIMIT = 1000  # a wider integer range stays a plain integer (the parser still checks the range)


def _bounded_integers(node: Any) -> Any:
    """The schema with each ``{"type": "integer", "minimum": a, "maximum": b}`` (a small range) as an enum."""
    if isinstance(node, list):
        return [_bounded_integers(x) for x in node]
    if not isinstance(node, dict):
        return node
    lo, hi = node.get("minimum"), node.get("maximum")
    if node.get("type") == "integer" and isinstance(lo, int) and isinstance(hi, int) and 0 <= hi - lo <= _ENUM_LIMIT:
        return {k: v for k, v in node.items() if k not in ("type", "minimum", "maximum")} | {
            "enum": list(range(lo, hi + 1))}
    return {k: _bounded_integers(v) for k, v in node.items()}
