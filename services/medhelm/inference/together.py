"""Together AI as HELM's own Together clients speak to it (crfm-helm's ``together_client.py``): the bodies the
OpenAI-compatible client (``openai.py``) sends for HELM's ``TogetherClient`` and ``TogetherChatClient``
entries, and the answer of Together's inference API.

* ``TogetherClient`` (``options.api: together``): ``POST <root>/api/inference``, where ``<root>`` is the base
  URL without its ``/v1`` (Together's own: ``https://api.together.xyz``), a body of Together's inference API
  (``request_type: language-model-inference``, the prompt as one text, ``best_of``, ``echo``, ``stop`` null
  when none) with HELM's per-model rewrites (an EOS stop for alpaca/vicuna, ``details`` for llama-65b and
  llama-2-70b); the answer is ``output.choices[].text`` (``output.error``: the server's refusal).
* ``TogetherChatClient`` (``options.request_shape: helm_together``): ``POST <base>/chat/completions`` with the
  body the together SDK sends for HELM's call (``top_k``, ``logprobs`` 1, or 0 with HELM's
  ``disable_logprobs``: ``options.together_logprobs``, ``echo``, ``n``, ``stream: false``) and ``stop``: the
  request's stops plus the model's default stop tokens from Together's model list (``GET <base>/models``,
  each model's ``config.stop``; HELM refuses a model the list does not name, and so do we). The answer is
  OpenAI's chat shape (``openai.py`` reads it).

Failure semantics: a model list that cannot be read is a retryable InferenceError (the next try reads it
again); a list that does not name the model is not retryable. An inference answer without ``output.choices``
is a malformed body (retryable); ``output.error`` is the server's refusal of the request (not retryable). No
message carries the prompt."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from medhelm.errors import InferenceError
from medhelm.inference.http import HttpReply
from medhelm.specs import Completion, GenerationRequest, Usage

INFERENCE_PATH = "/api/inference"
# HELM's _MODEL_TO_TAGS by the model's engine: an EOS token added as a stop, or `details: true` (logprobs)
_EOS_STOP = {"alpaca-7b": "</s>", "vicuna-7b-v1.3": "</s>", "vicuna-13b-v1.3": "</s>"}
_DETAILS = frozenset({"llama-65b", "llama-2-70b"})


def inference_url(base_url: str) -> str:
    """Together's inference API beside its OpenAI-compatible ``/v1``."""
    root = base_url.rstrip("/")
    return (root[:-3] if root.endswith("/v1") else root) + INFERENCE_PATH


def inference_body(model: str, model_name: str, prompt: str, request: GenerationRequest) -> dict[str, Any]:
    """HELM's ``TogetherClient.convert_to_raw_request`` for a text prompt, with its model tags applied."""
    body: dict[str, Any] = {"request_type": "language-model-inference", "model": model, "prompt": prompt,
                            "temperature": request.temperature, "n": 1, "max_tokens": request.max_tokens,
                            "best_of": 1, "stop": list(request.stop) or None, "echo": False, "top_p": 1}
    engine = model_name.split("/")[1] if "/" in model_name else ""
    if engine in _EOS_STOP:
        body["stop"] = [*(body["stop"] or ()), _EOS_STOP[engine]]
    if engine in _DETAILS:
        body["details"] = True
    return body


def chat_body(model: str, prompt: str, request: GenerationRequest, default_stops: Sequence[str],
              logprobs: int) -> dict[str, Any]:
    """HELM's ``TogetherChatClient.convert_to_raw_chat_request`` as the together SDK sends it (no None field,
    ``stream: false``)."""
    body = {"messages": [{"role": "user", "content": prompt}], "model": model, "max_tokens": request.max_tokens,
            "stop": [*request.stop, *default_stops], "temperature": request.temperature, "top_p": 1, "top_k": 1,
            "stream": False, "logprobs": logprobs, "echo": False, "n": 1}
    if request.json_schema is not None:  # HELM: Together's JSON mode with the schema
        body["response_format"] = {"type": "json_object", "schema": json.loads(request.json_schema)}
    return body


def default_stops(listing: Any, model: str, where: str) -> list[str]:
    """The model's ``config.stop`` in Together's model list (a JSON array of models), matched as HELM matches
    it (the id without case)."""
    if not isinstance(listing, list):
        raise InferenceError(f"{where}: cannot read Together's model list (GET .../models), which gives the "
                             "model's default stop tokens", retryable=True)
    for entry in listing:
        if isinstance(entry, Mapping) and str(entry.get("id", "")).lower() == model.lower():
            config = entry.get("config")
            stops = config.get("stop") if isinstance(config, Mapping) else None
            if isinstance(stops, list) and all(isinstance(s, str) for s in stops):
                return list(stops)
            break
    raise InferenceError(f"{where}: Together's model list states no default stop tokens for {model!r} "
                         "(HELM's TogetherChatClient refuses such a model too)", retryable=False)


def parse_inference(response: HttpReply, latency: float, where: str, message: Callable[[object], str]) -> Completion:
    """An answer of Together's inference API: ``output.choices[0].text``; ``output.error`` is a refusal, said
    through ``message`` (the server's text made safe for a record: ``openai.safe_server_message``)."""
    try:
        output = response.json()["output"]
        error = output.get("error")
        if error is None:
            choice = output["choices"][0]
            text = choice["text"]
            if not isinstance(text, str):
                raise TypeError
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise InferenceError(f"{where}: malformed response body (HTTP {response.status_code})",
                             retryable=True, status=response.status_code) from None
    if error is not None:
        raise InferenceError(f"{where}: Together refused the request: {message(error)}", retryable=False,
                             status=response.status_code)
    usage = output.get("usage") if isinstance(output.get("usage"), Mapping) else {}
    return Completion(text=text, finish_reason=choice.get("finish_reason"),
                      usage=Usage(prompt_tokens=usage.get("prompt_tokens"),
                                  completion_tokens=usage.get("completion_tokens"), latency_s=latency))
