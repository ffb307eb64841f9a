"""A fake of Azure OpenAI chat completions (``POST /openai/deployments/<d>/chat/completions?api-version=``,
Microsoft's Azure OpenAI REST reference) and of the Microsoft Entra ID endpoints that issue its tokens, driven
by the ``openai`` SDK's ``AzureOpenAI`` (tests/providers/test_azure_openai.py) and ``azure-identity`` (test_entra.py).

No api-version is a 404; auth is ``api-key`` or an Entra bearer token this fake issued that has not expired
(``expire_tokens()`` expires them all); unknown arguments are refused ("Unrecognized request argument
supplied"). Entra: ``POST /<tenant>/oauth2/v2.0/token`` (client secret or federated ``client_assertion``;
``AADSTS`` errors), the OpenID metadata MSAL reads, the managed-identity endpoints (``GET /msi/token`` with
``X-IDENTITY-HEADER``; IMDS ``GET /metadata/identity/oauth2/token`` with ``Metadata: true``).
Faults: ``throttle``/``overloaded`` (429 with ``retry-after-ms`` and ``retry-after``), ``server_error`` (500),
``echo`` (400 ``context_length_exceeded`` quoting the prompt).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import time
import urllib.parse
from typing import Any

from medhelm.devtools.fakes.server import FakeServer, Reply, count_tokens, json_reply, parse_body


_CHAT_FIELDS = {"messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "n",
                "presence_penalty", "frequency_penalty", "logit_bias", "user", "response_format", "tools",
                "tool_choice", "logprobs", "top_logprobs", "stream", "stream_options", "parallel_tool_calls",
                "data_sources", "reasoning_effort", "store", "metadata", "prediction", "modalities", "audio",
                "functions", "function_call", "user_security_context"}
_OPENID = ("/v2.0/.well-known/openid-configuration", "/.well-known/openid-configuration")


class FakeAzureOpenAI(FakeServer):
    name = "azure_openai"
    test_environment = {"AZURE_TEST_KEY": "azure-test-key"}
    test_entry = {"served_model_name": "gpt-test", "api_key_env": "AZURE_TEST_KEY"}
    api_key = "azure-key"  # api_key=None: Entra tokens only

    def __init__(self, *args: Any, tenant: str = "hospital-tenant",
                 client_id: str = "medhelm-app", client_secret: str | None = "entra-secret",
                 federated_token: str | None = None, identity_header: str | None = None,
                 token_lifetime_s: int = 3599, reasoning_tokens: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant, self.client_id = tenant, client_id
        self.client_secret, self.federated_token, self.identity_header = client_secret, federated_token, identity_header
        self.token_lifetime_s, self.reasoning_tokens = token_lifetime_s, reasoning_tokens
        self.tokens: dict[str, float] = {}  # issued access token -> when it expires (server clock)
        self.token_requests: list[dict[str, str]] = []  # forms/queries received (secrets included: tests only)

    def expire_tokens(self) -> None:
        with self._lock:
            self.tokens = dict.fromkeys(self.tokens, 0.0)

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Reply:
        return json_reply(status, {"error": {"code": code, "message": message}},
                     {"apim-request-id": secrets.token_hex(8), **(headers or {})})

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if path.startswith(f"/{self.tenant}/") and path.endswith(_OPENID):
            return self._openid()
        if path == f"/{self.tenant}/oauth2/v2.0/token":
            return self._token(method, headers, body)
        if path == "/msi/token":
            return self._managed_identity(method, query, headers)
        if path == "/metadata/identity/oauth2/token":
            return self._imds(method, query, headers)
        m = re.fullmatch(r"/openai/deployments/([^/]+)/chat/completions", path)
        params = dict(urllib.parse.parse_qsl(query))
        if not m or method != "POST" or not params.get("api-version"):
            return self._error(404, "404", "Resource not found")
        if not self._authorized(headers):
            return self._error(401, "401", "Unauthorized. Access token is missing, invalid, audience is incorrect "
                               "(https://cognitiveservices.azure.com), or have expired.")
        data = parse_body(body)
        if not isinstance(data, dict):
            return self._error(400, "BadRequest", "Could not parse the request body as JSON")
        unknown = [k for k in data if k not in _CHAT_FIELDS]
        if unknown:
            return self._error(400, "BadRequest", f"Unrecognized request argument supplied: {unknown[0]}")
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(x, dict) and x.get("role") in
                                                                     ("system", "user", "assistant", "developer", "tool")
                                                                     for x in messages):
            return self._error(400, "BadRequest", "'messages' is a required property")
        fault = self._take_fault()
        if fault == "echo":
            return self._error(400, "context_length_exceeded", "This model's maximum context length was exceeded: "
                               + str(messages[-1].get("content", ""))[:200])
        if fault in ("throttle", "overloaded"):
            return self._error(429, "429", "Requests to the ChatCompletions_Create Operation have exceeded the "
                               "call rate limit of your current pricing tier. Please retry after 1 second.",
                               {"retry-after-ms": "10", "retry-after": "1"})
        if fault == "server_error":
            return self._error(500, "InternalServerError", "The server had an error while processing your request.")
        self._accepted(path, headers, data)
        text = self.responder({"messages": messages})
        prompt = sum(count_tokens(str(x.get("content", ""))) for x in messages)
        out = count_tokens(text) + self.reasoning_tokens
        return json_reply(200, {
            "id": "chatcmpl-" + secrets.token_hex(8), "object": "chat.completion", "created": int(time.time()),
            "model": m.group(1), "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None},
                         "content_filter_results": {}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
                      "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
                      "prompt_tokens_details": {"cached_tokens": 0}},
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]})

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.api_key and headers.get("api-key") == self.api_key:
            return True
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer "):
            with self._lock:
                expires = self.tokens.get(auth[7:])
            return expires is not None and expires > time.time()
        return False

    def _issue(self) -> tuple[str, int]:
        token = "eyJ0eXAiOiJKV1QifQ." + secrets.token_urlsafe(24)
        with self._lock:
            self.tokens[token] = time.time() + self.token_lifetime_s
        return token, self.token_lifetime_s

    def _openid(self) -> Reply:
        base = f"{self.base_url}/{self.tenant}"
        return json_reply(200, {"token_endpoint": f"{base}/oauth2/v2.0/token", "issuer": f"{base}/v2.0",
                                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                                "jwks_uri": f"{base}/discovery/v2.0/keys", "response_types_supported": ["code", "token"],
                                "subject_types_supported": ["pairwise"], "id_token_signing_alg_values_supported": ["RS256"],
                                "tenant_region_scope": "EU"})

    def _entra_error(self, status: int, code: str, aadsts: int, text: str) -> Reply:
        return json_reply(status, {"error": code, "error_description": f"AADSTS{aadsts}: {text}", "error_codes": [aadsts],
                                   "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(), "trace_id": secrets.token_hex(8)})

    def _token(self, method: str, headers: dict[str, str], body: bytes) -> Reply:
        if method != "POST" or not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return self._entra_error(400, "invalid_request", 900144, "The request body must contain the parameter 'grant_type'.")
        form = dict(urllib.parse.parse_qsl(body.decode("ascii", "replace")))
        with self._lock:
            self.token_requests.append(form)
        if form.get("grant_type") != "client_credentials":
            return self._entra_error(400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type.")
        if form.get("client_id") != self.client_id:
            return self._entra_error(400, "unauthorized_client", 700016, "Application was not found in the directory.")
        scope = form.get("scope", "")
        if not scope.endswith("/.default"):
            return self._entra_error(400, "invalid_scope", 1002012, "The provided value for scope is not valid. "
                                     "Client credential flows must have a scope value with /.default suffixed.")
        if "client_assertion" in form:
            if form.get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" or \
                    not self.federated_token or form["client_assertion"] != self.federated_token:
                return self._entra_error(401, "invalid_client", 700213, "No matching federated identity record found "
                                         "for presented assertion.")
        elif not self.client_secret or form.get("client_secret") != self.client_secret:
            return self._entra_error(401, "invalid_client", 7000215, "Invalid client secret provided.")
        token, lifetime = self._issue()
        return json_reply(200, {"token_type": "Bearer", "expires_in": lifetime, "ext_expires_in": lifetime,
                                "access_token": token})

    def _managed_identity(self, method: str, query: str, headers: dict[str, str]) -> Reply:
        params = dict(urllib.parse.parse_qsl(query))
        with self._lock:
            self.token_requests.append(params)
        if method != "GET" or not self.identity_header or headers.get("x-identity-header") != self.identity_header:
            return json_reply(401, {"statusCode": 401, "message": "Unauthorized"})
        if params.get("api-version") != "2019-08-01" or not params.get("resource"):
            return json_reply(400, {"statusCode": 400, "message": "Invalid api-version or resource"})
        token, lifetime = self._issue()
        return json_reply(200, {"access_token": token, "expires_on": str(int(time.time()) + lifetime),
                                "resource": params["resource"], "token_type": "Bearer", "client_id": self.client_id})


    def _imds(self, method: str, query: str, headers: dict[str, str]) -> Reply:
        """The VM/AKS node's Instance Metadata Service: ``Metadata: true`` required (it stops SSRF)."""
        params = dict(urllib.parse.parse_qsl(query))
        with self._lock:
            self.token_requests.append(params)
        if method != "GET" or headers.get("metadata") != "true":
            return json_reply(400, {"error": "invalid_request", "error_description": "Required metadata header not specified"})
        if not params.get("api-version") or not params.get("resource"):
            return json_reply(400, {"error": "invalid_request", "error_description": "Required query variable 'resource' is missing"})
        token, lifetime = self._issue()
        now = int(time.time())
        return json_reply(200, {"access_token": token, "client_id": self.client_id, "expires_in": str(lifetime),
                                "expires_on": str(now + lifetime), "ext_expires_in": str(lifetime), "not_before": str(now),
                                "resource": params["resource"], "token_type": "Bearer"})
