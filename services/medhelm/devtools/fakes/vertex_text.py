"""A fake of Vertex AI's ``:predict`` method for Google's text models (PaLM 2 ``text-bison``, MedLM), as the
Vertex AI REST reference and the text-model reference (request ``instances[].content``, ``parameters``;
response ``predictions[].content``, ``safetyAttributes``, ``metadata.tokenMetadata``) specify it.

``GET /v1/publishers/google/models/<m>``: the model's ``PublisherModel`` (what ``TextGenerationModel.from_pretrained``
reads: ``publisherModelTemplate``, ``predictSchemata.instanceSchemaUri`` = the text-generation schema).
``POST /v1[beta1]/projects/<p>/locations/<r>/publishers/google/models/<m>:predict`` with ``Authorization:
Bearer <bearer>`` (401 ``UNAUTHENTICATED`` otherwise); an unknown field in an instance or in ``parameters``
is a 400 ``INVALID_ARGUMENT`` in Google's words; ``temperature`` in [0, 1], ``maxDecodeSteps``/
``maxOutputTokens`` in [1, 2048]. ``block_marker``: a prompt holding it is answered blocked (``safetyAttributes.
blocked``, empty content). Faults on demand: ``throttle`` (429 ``RESOURCE_EXHAUSTED``), ``server_error`` (503).
"""

from __future__ import annotations

import re
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, count_tokens, json_reply, parse_body

PARAMETERS = frozenset({"temperature", "maxDecodeSteps", "maxOutputTokens", "topP", "topK", "stopSequences",
                        "candidateCount", "logprobs", "presencePenalty", "frequencyPenalty", "logitBias", "seed",
                        "groundingConfig", "echo"})
TEXT_SCHEMA = "gs://google-cloud-aiplatform/schema/predict/instance/text_generation_1.0.0.yaml"
_MODEL = re.compile(r"/v1(?:beta1)?/publishers/google/models/([^/:]+)")
_PATH = re.compile(r"/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/google/models/([^/:]+):predict")


class FakeVertexText(FakeServer):
    name = "vertex_text"

    def __init__(self, *args: Any, block_marker: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.block_marker = block_marker

    @staticmethod
    def _error(code: int, status: str, message: str) -> Reply:
        return json_reply(code, {"error": {"code": code, "message": message, "status": status}})

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if headers.get("authorization") != f"Bearer {self.bearer}":
            return self._error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected "
                               "OAuth 2 access token, login cookie or other valid authentication credential.")
        model = _MODEL.fullmatch(path)
        if model and method == "GET":
            name = f"publishers/google/models/{model.group(1)}"
            return json_reply(200, {"name": name, "versionId": "001", "openSourceCategory": "PROPRIETARY",
                                    "launchStage": "GA", "publisherModelTemplate": "projects/{user-project}/locations/"
                                    "{location}/" + name, "predictSchemata": {"instanceSchemaUri": TEXT_SCHEMA}})
        m = _PATH.fullmatch(path)
        if not m or method != "POST":
            return self._error(404, "NOT_FOUND", "Not found")
        data = parse_body(body)
        if not isinstance(data, dict):
            return self._error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        for key in data:
            if key not in ("instances", "parameters"):
                return self._error(400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{key}": '
                                   "Cannot find field.")
        instances = data.get("instances")
        if not isinstance(instances, list) or not instances:
            return self._error(400, "INVALID_ARGUMENT", "instances must not be empty")
        for instance in instances:
            if not isinstance(instance, dict) or not isinstance(instance.get("content"), str) or \
                    set(instance) - {"content"}:
                return self._error(400, "INVALID_ARGUMENT", "Invalid instance: a text model instance has one "
                                   "field, content (a string)")
        parameters = data.get("parameters") or {}
        for key in parameters:
            if key not in PARAMETERS:
                return self._error(400, "INVALID_ARGUMENT", f"Unknown parameter {key}")
        temperature = parameters.get("temperature", 0.0)
        if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 1:
            return self._error(400, "INVALID_ARGUMENT", "temperature must be in [0, 1]")
        limit = parameters.get("maxDecodeSteps", parameters.get("maxOutputTokens", 128))
        if not isinstance(limit, (int, float)) or limit != int(limit) or not 1 <= limit <= 2048:  # a JSON number
            return self._error(400, "INVALID_ARGUMENT", "max_output_tokens must be in [1, 2048]")
        limit = int(limit)
        fault = self._take_fault()
        if fault == "throttle":
            return self._error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/"
                               "online_prediction_requests_per_base_model.")
        if fault in ("server_error", "overloaded"):
            return self._error(503, "UNAVAILABLE", "The service is currently unavailable.")
        self._accepted(path, headers, data)
        predictions, out_tokens = [], 0
        prompt_tokens = sum(count_tokens(i["content"]) for i in instances)
        for instance in instances:
            if self.block_marker and self.block_marker in instance["content"]:
                predictions.append({"content": "", "safetyAttributes": {"blocked": True, "categories": ["Health"],
                                                                        "scores": [0.9], "errors": [250]}})
                continue
            text = self.answer("", [("user", instance["content"])])
            if count_tokens(text) > limit:
                text = " ".join(text.split()[:limit])
            for stop in parameters.get("stopSequences") or []:
                text = text.split(stop, 1)[0]
            out_tokens += count_tokens(text)
            predictions.append({"content": text, "citationMetadata": {"citations": []},
                                "safetyAttributes": {"blocked": False, "categories": [], "scores": []}})
        return json_reply(200, {"predictions": predictions, "metadata": {"tokenMetadata": {
            "inputTokenCount": {"totalTokens": prompt_tokens, "totalBillableCharacters": 4 * prompt_tokens},
            "outputTokenCount": {"totalTokens": out_tokens, "totalBillableCharacters": 4 * out_tokens}}}})
