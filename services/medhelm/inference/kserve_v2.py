"""Client for KServe's Open Inference Protocol v2 (REST) where a predictor speaks only that; with
``options.protocol: grpc`` the same requests go over gRPC (``kserve_v2_grpc.py``).

``POST <base_url>/v2/models/<served_model_name>/infer`` with one BYTES tensor holding the prompt text;
the answer is the first element of the named BYTES output. Generation settings travel as request
``parameters``. Deployment ``options`` understood here (besides the OpenAI client's ``headers``):

* ``input_name`` (default ``text_input``) / ``output_name`` (default ``text_output``): tensor names, as
  the vLLM/Triton text-generation models use;
* ``parameters``: extra request parameters merged into every call (e.g. ``{"top_p": 1.0}``);
* ``protocol``: ``rest`` (default) or ``grpc`` (``base_url`` then names the predictor's gRPC port,
  ``http://`` for plaintext, ``https://`` for TLS).

Parameters are scalars (the protocol's, and KServe validates it): several stop sequences travel as
their JSON array text. Chat messages are flattened to one text (system, then user turns, blank-line
separated): a v2 predictor applies its own template. Token counts are read from
``prompt_tokens``/``completion_tokens`` outputs or parameters when the predictor reports them; otherwise
they stay unknown (None), never 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from medhelm.errors import ConfigError
from medhelm.inference.http import HttpReply
from medhelm.inference.openai import OpenAIClient
from medhelm.inference.outcome import Reply
from medhelm.inference.wire import answered_model, malformed, strip_reasoning
from medhelm.inference.wire import joined_prompt as prompt_text  # the chat as one text (the predictor applies its template)
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage


class KServeV2Client(OpenAIClient):
    """Connection handling, headers, API key and HTTP error mapping are the OpenAI client's own."""

    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        super().__init__(deployment, connections=connections)
        model = deployment.served_model_name or deployment.model_name
        self._url = f"{str(deployment.base_url).rstrip('/')}/v2/models/{quote(model, safe='')}/infer"
        options = deployment.options
        self._input = str(options.get("input_name", "text_input"))
        self._output = str(options.get("output_name", "text_output"))
        self._extra = extra_parameters(deployment)

    async def context_window(self) -> int | None:
        """The Open Inference Protocol has no standard field for it: set ``max_sequence_length``."""
        return None

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        return {"inputs": [{"name": self._input, "shape": [1], "datatype": "BYTES", "data": [prompt_text(request)]}],
                "parameters": parameters(request, self._extra)}

    async def attempt(self, request: GenerationRequest) -> Reply:
        response, latency = await self.post(self._url, self.payload(request))  # the OpenAI client's transport
        if response.status_code >= 400:
            raise self._http_error(response, request)
        return Reply(self._parse_v2(response, latency), response.headers)

    def _parse_v2(self, response: HttpReply, latency: float) -> Completion:
        try:
            data = response.json()
            outputs = {o["name"]: o for o in data["outputs"]}
            text = outputs[self._output]["data"][0] if self._output in outputs else data["outputs"][0]["data"][0]
            if not isinstance(text, str):
                raise TypeError("output is not text")
        except (ValueError, KeyError, IndexError, TypeError):
            raise malformed(self._where(), response, "v2 response body") from None
        params = data.get("parameters") or {}
        return Completion(
            text=strip_reasoning(text),
            finish_reason=params.get("finish_reason"),
            usage=Usage(prompt_tokens=_count(outputs, params, "prompt_tokens"),
                        completion_tokens=_count(outputs, params, "completion_tokens"), latency_s=latency),
            model=answered_model(data.get("model_name"), data.get("model_version")),
        )


def parameters(request: GenerationRequest, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The generation settings as v2 request parameters, then the deployment's extra parameters."""
    params: dict[str, Any] = {"max_tokens": request.max_tokens, "temperature": request.temperature}
    if request.stop:
        # v2 parameters are scalars (KServe's REST schema answers a list with HTTP 422): one stop sequence
        # as itself, several as their JSON array text
        params["stop"] = request.stop[0] if len(request.stop) == 1 else json.dumps(list(request.stop))
    if request.seed is not None:
        params["seed"] = request.seed
    params.update(extra)
    return params


def extra_parameters(deployment: Deployment) -> dict[str, Any]:
    extra = deployment.options.get("parameters") or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(f"deployment '{deployment.name}': options.parameters must be a mapping")
    return dict(extra)


def _count(outputs: Mapping[str, Any], params: Mapping[str, Any], name: str) -> int | None:
    value = outputs[name]["data"][0] if name in outputs and outputs[name].get("data") else params.get(name)
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
