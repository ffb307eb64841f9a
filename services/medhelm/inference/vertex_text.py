"""Vertex AI text models (kind ``vertex_text``): Google's PaLM 2 and MedLM (``medlm-medium``, ``medlm-large``)
through the ``:predict`` REST method, as the ``vertexai`` SDK's ``TextGenerationModel.predict`` (HELM's
``VertexAITextClient``) calls it.

``POST <base_url>/v1/projects/<project>/locations/<region>/publishers/google/models/<model>:predict``
(``base_url`` default ``https://<region>-aiplatform.googleapis.com``), ``Authorization: Bearer`` from
``google_adc.bearer_source`` (Application Default Credentials, an access-token file or ``api_key_env``), body
``{"instances": [{"content": <the prompt as one text>}], "parameters": {...}}`` with the SDK's parameter
names: ``maxDecodeSteps`` (the max tokens), ``temperature`` (a float), ``topP`` 1.0 and ``topK`` 1 (HELM's
``top_p`` and ``top_k_per_token``), ``candidateCount`` 1, ``stopSequences`` when any.
``options``: ``project``, ``region`` (as for kind ``gemini`` on Vertex), the gateway options of ``native.py``.

Failure semantics: ``native.NativeClient`` (429 ``RESOURCE_EXHAUSTED`` and 503 retried). The reply's first
prediction is the answer (``content``); ``safetyAttributes.blocked`` makes it ``finish_reason:
content_filter`` with the text given (usually empty), an outcome of the instance, not an error of the run.
Usage from ``metadata.tokenMetadata`` (``inputTokenCount`` / ``outputTokenCount`` ``.totalTokens``).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from medhelm.inference.gateway import api_url
from medhelm.inference.google_adc import bearer_source
from medhelm.inference.native import NativeClient
from medhelm.inference.wire import int_or_none, joined_prompt, option
from medhelm.specs import Completion, Deployment, GenerationRequest, Usage


class VertexTextClient(NativeClient):
    def __init__(self, deployment: Deployment, connections: int | None = None) -> None:
        region, project = option(deployment, "region"), option(deployment, "project")
        model = urllib.parse.quote(deployment.served_model_name or deployment.model_name, safe="@")
        base = deployment.base_url or f"https://{region}-aiplatform.googleapis.com"
        url = api_url(deployment, base, f"/v1/projects/{project}/locations/{region}/publishers/google/models/"
                                        f"{model}:predict")
        self._bearer = bearer_source(deployment)
        super().__init__(deployment, url, {}, connections)

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        parameters: dict[str, Any] = {"maxDecodeSteps": request.max_tokens, "temperature": float(request.temperature),
                                      "topP": 1.0, "topK": 1}
        if request.stop:
            parameters["stopSequences"] = list(request.stop)
        parameters["candidateCount"] = 1
        return {"instances": [{"content": joined_prompt(request)}], "parameters": parameters}

    async def auth_headers(self, body: bytes) -> Mapping[str, str] | None:
        return await self._bearer.headers()

    def on_refused(self, status: int) -> None:
        self._bearer.invalidate()

    def parse(self, data: Any, latency: float) -> Completion:
        first = data["predictions"][0]
        tokens = (data.get("metadata") or {}).get("tokenMetadata") or {}
        usage = Usage(prompt_tokens=int_or_none((tokens.get("inputTokenCount") or {}).get("totalTokens")),
                      completion_tokens=int_or_none((tokens.get("outputTokenCount") or {}).get("totalTokens")),
                      latency_s=latency)
        blocked = bool((first.get("safetyAttributes") or {}).get("blocked"))
        return Completion(text=str(first.get("content") or ""), finish_reason="content_filter" if blocked else "stop",
                          usage=usage)
