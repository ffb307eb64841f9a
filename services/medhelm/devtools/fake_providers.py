"""Local stand-ins for the cloud model APIs, strict as the real services, for tests and benchmarks.

    with FakeAnthropic(api_key="k") as srv:          # also FakeGemini, FakeBedrock, FakeAzureOpenAI
        srv.base_url; srv.requests; srv.fail_next(2, "overloaded"); srv.kill(); srv.restart()

Each server is built from its provider's published API reference and refuses what the real one refuses:

* ``FakeAnthropic`` — Messages API ``POST /v1/messages``: the key (``x-api-key``, or ``Authorization:
  Bearer`` as the 2026 SDKs send it) and a known ``anthropic-version`` (2023-06-01, 2026-10-21) required,
  unknown body fields refused ("Extra inputs are not permitted"), the first turn a user turn,
  ``thinking.budget_tokens`` >= 1024 and < ``max_tokens``; with thinking on, a ``thinking`` block (or, with
  ``redact_thinking = True``, an encrypted ``redacted_thinking`` block) before the text, its tokens billed in
  ``output_tokens`` with no count of their own, as the API does; errors as ``{"type":"error","error":{...}}``,
  overload as HTTP 529 ``overloaded_error``. Also the Bedrock ``/model/<id>/invoke`` (SigV4,
  ``anthropic_version: bedrock-2023-05-31``) and Vertex ``...:rawPredict`` (bearer, ``vertex-2023-10-16``)
  routes, selected by ``platform``; both also take ``2026-10-21`` (current SDKs send it; the real Bedrock
  refuses it for older ARN-versioned models, which the fake does not model).
* ``FakeGemini`` — ``POST /v1beta/models/<m>:generateContent`` (``x-goog-api-key`` or ``?key=``) and the
  Vertex route; unknown fields refused as Google's JSON parser does (``Unknown name "x"``, camelCase or
  snake_case accepted); ``RESOURCE_EXHAUSTED`` 429; a prompt holding ``block_marker`` is blocked
  (``promptFeedback.blockReason: SAFETY``, no candidates); ``thinking_tokens`` > 0 reports
  ``thoughtsTokenCount``.
* ``FakeBedrock`` — Converse ``POST /model/<id>/converse``: the SigV4 signature recomputed from the request
  as received (``InvalidSignatureException`` 403 on mismatch, ``UnrecognizedClientException`` for an
  unknown key, ``Signature expired`` beyond 5 minutes), unknown fields ``ValidationException``; Claude's
  thinking through ``additionalModelRequestFields`` answers with a ``reasoningContent`` block
  (``reasoningText`` + signature, or ``redactedContent``) billed in ``outputTokens``, and Claude's thinking rules
  (budget >= 1024 and < ``maxTokens``, temperature 1 only) refused as ``ValidationException``;
  ``ThrottlingException`` 429 with ``x-amzn-ErrorType``.
* ``FakeSHCGateway`` — Stanford Health Care's gateway routes for Claude and Gemini, strict to the private
  bodies HELM's ``StanfordHealthCareClaudeClient``/``...GoogleClient`` post (see the class).
* ``FakeAzureOpenAI`` — ``POST /openai/deployments/<d>/chat/completions?api-version=``: no api-version is a
  404, ``api-key`` or an Entra bearer token it issued and that has not expired; unknown arguments refused
  ("Unrecognized request argument supplied"); 429 with ``retry-after-ms``/``retry-after``. It is also the
  Entra token endpoint: ``POST /<tenant>/oauth2/v2.0/token`` (client secret or federated
  ``client_assertion``), the OpenID metadata MSAL reads, and the managed-identity endpoints
  (``GET /msi/token`` with ``X-IDENTITY-HEADER``; IMDS ``GET /metadata/identity/oauth2/token`` with
  ``Metadata: true``). ``expire_tokens()`` makes every issued token expired.

Where: ``medhelm.devtools`` (beside ``mock_openai.py``), not ``tests/``: bench/bench_native_clients.py
measures our clients against them, and a developer can point a deployment at one from the CLI
(``python -m medhelm.devtools.fake_providers anthropic --port 8000``). The answers come from
``mock_openai.default_responder`` (a letter for multiple choice, Yes/No, else the first words); token
counts are words and punctuation marks, not a real tokenizer. Faults are planned, never random:
``fail_next(n, fault)`` answers the next ``n`` model requests with that fault: ``throttle`` (429),
``overloaded`` (529 / 503), ``server_error`` (500 / 503), or ``echo`` (a 400 whose message quotes the prompt, as
some servers do: the PHI check of our error messages is tested with it). ``kill()`` closes the
listening socket and every open connection (a crashed service); ``die_after = n`` makes the server crash
so on the POST after the next ``n`` (deterministic, whatever the timing); ``restart()`` listens again on the
same port. ``echo_credentials(n, status)`` answers the next ``n`` requests (any route: token endpoints too)
with that status in the provider's own error shape, its message quoting every credential received
(``mock_openai.credential_echo``: headers raw, URL-encoded and base64-wrapped, the URL with ``?key=``, a
form's ``client_secret``), and the same text in a reply header.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import http.server
import json
import re
import secrets
import socket
import socketserver
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from medhelm.devtools.mock_openai import credential_echo, default_responder

Reply = tuple[int, dict[str, str], bytes]
_WORD = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_WORD.findall(text))


def _json(status: int, data: Any, headers: dict[str, str] | None = None) -> Reply:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode("utf-8")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real endpoints

    def log_message(self, *args: Any) -> None:  # quiet: tests read srv.requests
        pass

    def _serve(self, method: str) -> None:
        fake: FakeServer = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urllib.parse.urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        if fake.dying(method):  # a crash mid-run: no reply, the connection and the listener go away
            self.close_connection = True
            threading.Thread(target=fake.kill, daemon=True).start()
            return
        try:
            status, out_headers, content = fake.handle(method, parts.path, parts.query, headers, body)
        except Exception as err:  # a bug in the fake: say so plainly
            status, out_headers, content = _json(500, {"error": {"message": f"fake bug: {type(err).__name__}"}})
        self.send_response(status)
        for k, v in out_headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], fake: FakeServer, context: ssl.SSLContext | None) -> None:
        super().__init__(address, _Handler)
        self.fake, self.context = fake, context
        self.open: set[socket.socket] = set()

    def get_request(self):  # TLS per connection, when configured
        conn, addr = super().get_request()
        if self.context is not None:
            conn = self.context.wrap_socket(conn, server_side=True)
        self.open.add(conn)
        return conn, addr

    def shutdown_request(self, request):
        self.open.discard(request)
        super().shutdown_request(request)


class FakeServer:
    """The threaded server and the bookkeeping every fake shares; subclasses implement ``route``."""

    name = "fake"

    def __init__(self, responder: Callable[[dict[str, Any]], str] | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, certfile: str | None = None, keyfile: str | None = None) -> None:
        self.responder = responder or default_responder
        self.host, self.port = host, port
        self._context = None
        if certfile:
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._context.load_cert_chain(certfile, keyfile)
        self.requests: list[dict[str, Any]] = []  # model requests accepted: {"path", "headers", "body"}
        self.refused: list[tuple[int, str]] = []  # (status, error type) of every refusal
        self.request_count = 0  # model requests received (refused or not)
        self._faults: list[str] = []
        self._echoes: list[int] = []
        self._echo_only: str | None = None
        self.die_after: int | None = None  # crash on the POST after this many (see ``dying``)
        self._posts = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None

    # -- life cycle ----------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        scheme = "https" if self._context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self) -> FakeServer:
        self._server = _Server((self.host, self.port), self, self._context)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def kill(self) -> None:
        """Stop listening and drop every open connection, as a crashed service would."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        for conn in list(server.open):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def restart(self) -> None:
        self._posts = 0
        self.start()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def dying(self, method: str) -> bool:
        """True for the POST that comes after ``die_after`` POSTs: the server then dies without replying."""
        if method != "POST":
            return False
        with self._lock:
            self._posts += 1
            if self.die_after is not None and self._posts > self.die_after:
                self.die_after = None
                return True
        return False

    def fail_next(self, n: int, fault: str) -> None:
        """Answer the next ``n`` model requests with ``fault`` (a kind the subclass knows: throttle,
        overloaded, server_error, ...)."""
        with self._lock:
            self._faults.extend([fault] * n)

    def _take_fault(self) -> str | None:
        with self._lock:
            self.request_count += 1
            return self._faults.pop(0) if self._faults else None

    def echo_credentials(self, n: int, status: int = 401, only: str | None = None) -> None:
        """Answer the next ``n`` requests with ``status``, the credentials they carried quoted in the error
        (``only``: requests whose path holds that text; the others, a token endpoint's, answer as usual)."""
        with self._lock:
            self._echoes.extend([status] * n)
            self._echo_only = only

    def echo_error(self, status: int, message: str) -> Reply:
        """The provider's error shape carrying ``message`` (OpenAI's, unless a fake says otherwise)."""
        return _json(status, {"error": {"code": str(status), "message": message, "type": "invalid_request_error"}})

    def handle(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            wanted = self._echoes and (self._echo_only is None or self._echo_only in path)
            echo = self._echoes.pop(0) if wanted else None
        if echo is not None:
            text = credential_echo(path + ("?" + query if query else ""), headers, body)
            status, out, content = self.echo_error(echo, text)
            with self._lock:
                self.refused.append((status, "echo"))
            return status, {**out, "WWW-Authenticate": f'Bearer error="invalid_token", echo="{text[:2000]}"'}, content
        reply = self.route(method, path, query, headers, body)
        if reply[0] >= 400:
            try:
                kind = error_kind(json.loads(reply[2]), reply[1])
            except ValueError:
                kind = ""
            with self._lock:
                self.refused.append((reply[0], kind))
        return reply

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        raise NotImplementedError

    def _accepted(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})

    def answer(self, system: str, turns: list[tuple[str, str]]) -> str:
        messages = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": r, "content": t} for r, t in turns]
        return self.responder({"messages": messages})


def error_kind(data: Any, headers: dict[str, str]) -> str:
    amz = headers.get("x-amzn-ErrorType") or ""
    if amz:
        return amz.split(":", 1)[0]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("type") or err.get("status") or err.get("code") or "")
    return ""


def _text_of(content: Any) -> str:
    """A message's text: a string, or text blocks (Anthropic) / parts (Gemini) / content blocks (Bedrock)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


# ==================================================================================================
# SigV4 verification (Bedrock)


class SigV4Verifier:
    """Recomputes an AWS Signature Version 4 from the request as received, as AWS does."""

    def __init__(self, keys: dict[str, str], region: str, service: str = "bedrock", max_skew_s: float = 300.0):
        self.keys, self.region, self.service, self.max_skew_s = keys, region, service, max_skew_s

    def problem(self, method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes) -> tuple[str, str] | None:
        """None when the signature is valid, else (error type, message) as AWS words them."""
        auth = headers.get("authorization", "")
        m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?"
                         r"SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})", auth)
        if not m:
            return "IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders'"
        access, day, region, service, signed, signature = m.groups()
        secret = self.keys.get(access)
        if secret is None:
            return "UnrecognizedClientException", "The security token included in the request is invalid."
        amz_date = headers.get("x-amz-date", "")
        try:
            when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        except ValueError:
            return "IncompleteSignatureException", "X-Amz-Date is missing or malformed"
        if abs((dt.datetime.now(dt.timezone.utc) - when).total_seconds()) > self.max_skew_s:
            return "InvalidSignatureException", "Signature expired"
        if region != self.region or service != self.service or day != amz_date[:8]:
            return "InvalidSignatureException", "Credential should be scoped to a valid region/service"
        names = signed.split(";")
        if "host" not in names:
            return "InvalidSignatureException", "'Host' must be a signed header"
        canonical_headers = "".join(f"{n}:{' '.join(headers.get(n, '').split())}\n" for n in names)
        uri = "/".join(urllib.parse.quote(seg, safe="-_.~") for seg in raw_path.split("/"))
        pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
        cq = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in pairs)
        canonical = "\n".join((method, uri, cq, canonical_headers, signed, hashlib.sha256(body).hexdigest()))
        scope = f"{day}/{region}/{service}/aws4_request"
        to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
        key = ("AWS4" + secret).encode()
        for part in (day, region, service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            return "InvalidSignatureException", ("The request signature we calculated does not match the signature "
                                                 "you provided. Check your AWS Secret Access Key and signing method.")
        return None


def _amz_error(status: int, kind: str, message: str) -> Reply:
    amz_type = f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    return status, {"Content-Type": "application/json", "x-amzn-ErrorType": amz_type,
                    "x-amzn-RequestId": secrets.token_hex(8)}, json.dumps({"message": message}).encode()


# ==================================================================================================
# Anthropic Messages


_ANTHROPIC_FIELDS = {"model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k", "stop_sequences",
                     "metadata", "stream", "thinking", "tools", "tool_choice", "service_tier", "container",
                     "mcp_servers", "context_management", "cache_control", "diagnostics", "inference_geo",
                     "output_config", "user_profile_id", "anthropic_version", "anthropic_beta"}
_ANTHROPIC_VERSIONS = ("2023-01-01", "2023-06-01", "2026-10-21")
# The fakes' thinking (Anthropic thinking blocks, Converse reasoningContent): billed in the output count, as
# the real APIs bill thinking in output_tokens / outputTokens with no count of its own
THOUGHT = "Let me think about the question step by step before answering."


class FakeAnthropic(FakeServer):
    name = "anthropic"

    def __init__(self, *args: Any, api_key: str = "sk-ant-test", platform: str = "direct",
                 aws_keys: dict[str, str] | None = None, region: str = "us-east-1", bearer: str = "ya29.test",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key, self.platform, self.bearer = api_key, platform, bearer
        self.sigv4 = SigV4Verifier(aws_keys or {}, region)
        self.redact_thinking = False  # True: the thinking comes back as a redacted_thinking block (encrypted)

    def _error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Reply:
        return _json(status, {"type": "error", "error": {"type": kind, "message": message}},
                     {"request-id": "req_" + secrets.token_hex(8), **(headers or {})})

    def echo_error(self, status: int, message: str) -> Reply:
        if self.platform == "bedrock":
            return _amz_error(status, "UnrecognizedClientException", message)
        return self._error(status, "authentication_error" if status in (401, 403) else "invalid_request_error", message)

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if method != "POST":
            return self._error(405, "invalid_request_error", "Method Not Allowed")
        if self.platform == "direct":
            if path != "/v1/messages":
                return self._error(404, "not_found_error", "Not Found")
            # the key in x-api-key, or (SDKs from 2026) as a bearer token
            if headers.get("x-api-key") != self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
                return self._error(401, "authentication_error", "invalid x-api-key")
            if not headers.get("anthropic-version"):
                return self._error(400, "invalid_request_error", "anthropic-version: header is required")
            if headers["anthropic-version"] not in _ANTHROPIC_VERSIONS:
                return self._error(400, "invalid_request_error",
                                   f"anthropic-version: unknown version {headers['anthropic-version'][:40]!r}")
            version = None
        elif self.platform == "bedrock":
            m = re.fullmatch(r"/model/([^/]+)/invoke", path)
            if not m:
                return _amz_error(404, "UnknownOperationException", "Unknown operation")
            problem = self.sigv4.problem(method, path, query, headers, body)
            if problem:
                status = 403 if problem[0] != "IncompleteSignatureException" else 400
                return _amz_error(status, *problem)
            version = "bedrock-2023-05-31"
        else:
            if not re.fullmatch(r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+:rawPredict", path):
                return _json(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})
            if headers.get("authorization") != f"Bearer {self.bearer}":
                return _json(401, {"error": {"code": 401, "message": "Request had invalid authentication credentials.",
                                             "status": "UNAUTHENTICATED"}})
            version = "vertex-2023-10-16"
        data = _parse_body(body)
        if not isinstance(data, dict):
            return self._error(400, "invalid_request_error", "The request body is not valid JSON.")
        problem = self._check(data, version)
        if problem:
            return self._error(400, "invalid_request_error", problem)
        fault = self._take_fault()
        if fault == "echo":
            quoted = _text_of(data["messages"][-1]["content"])[:200]
            return self._error(400, "invalid_request_error", "prompt is too long: " + quoted)
        if fault == "overloaded":
            return self._error(529, "overloaded_error", "Overloaded")
        if fault == "throttle":
            return self._error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute "
                               "rate limit", {"retry-after": "2"})
        if fault == "server_error":
            return self._error(500, "api_error", "Internal server error")
        self._accepted(path, headers, data)
        system = _text_of(data.get("system", ""))
        turns = [(m["role"], _text_of(m["content"])) for m in data["messages"]]
        text = self.answer(system, turns)
        stops = [s for s in data.get("stop_sequences") or [] if s in text]
        content: list[dict[str, Any]] = []
        thinking_tokens = 0
        if data.get("thinking", {}).get("type") == "enabled":
            thinking_tokens = count_tokens(THOUGHT)
            if self.redact_thinking:  # flagged by the safety systems: the API returns it encrypted
                content.append({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix" + secrets.token_hex(16)})
            else:
                content.append({"type": "thinking", "thinking": THOUGHT,
                                "signature": "EqQBCgIYAhIM" + secrets.token_hex(8)})
        words = text.split()
        limit = data["max_tokens"] - thinking_tokens
        stop_reason = "end_turn"
        if stops:
            text, stop_reason = text.split(stops[0], 1)[0], "stop_sequence"
        elif count_tokens(text) > limit:
            text, stop_reason = " ".join(words[:max(limit, 0)]), "max_tokens"
        content.append({"type": "text", "text": text})
        prompt = count_tokens(system) + sum(count_tokens(t) for _, t in turns)
        out = {"id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
               "model": data.get("model") or path.rsplit("/", 1)[-1].split(":")[0], "content": content,
               "stop_reason": stop_reason, "stop_sequence": stops[0] if stop_reason == "stop_sequence" else None,
               "usage": {"input_tokens": prompt, "output_tokens": count_tokens(text) + thinking_tokens,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
        return _json(200, out, {"request-id": "req_" + secrets.token_hex(8)})

    def _check(self, data: dict[str, Any], version: str | None) -> str | None:
        for key in data:
            if key not in _ANTHROPIC_FIELDS or (key == "anthropic_version" and version is None) \
                    or (key == "model" and version is not None):
                return f"{key}: Extra inputs are not permitted"
        # Bedrock and Vertex take their platform version or, for current models, the 2026-10-21 API version
        # (what the anthropic SDK sends since late 2026)
        if version is not None and data.get("anthropic_version") not in (version, "2026-10-21"):
            return f"anthropic_version: Input should be '{version}' or '2026-10-21'"
        if version is None and not isinstance(data.get("model"), str):
            return "model: Field required"
        max_tokens = data.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Field required" if max_tokens is None else "max_tokens: Input should be a valid integer >= 1"
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or set(m) - {"role", "content"}:
                return f"messages.{i}: Input should be a message with role 'user' or 'assistant' and content"
            if not isinstance(m.get("content"), (str, list)):
                return f"messages.{i}.content: Field required"
        if messages[0]["role"] != "user":
            return "messages: first message must use the \"user\" role"
        temperature = data.get("temperature")
        if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 1):
            return "temperature: Input should be less than or equal to 1"
        thinking = data.get("thinking")
        if thinking is not None:
            budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
            if thinking.get("type") == "enabled":
                if not isinstance(budget, int) or budget < 1024:
                    return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                if budget >= max_tokens:
                    return "`max_tokens` must be greater than `thinking.budget_tokens`"
                if temperature is not None and temperature != 1:
                    return "`temperature` may only be set to 1 when thinking is enabled"
        stops = data.get("stop_sequences")
        if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) and s.strip() for s in stops)):
            return "stop_sequences: each stop sequence must contain non-whitespace"
        system = data.get("system")
        if system is not None and not isinstance(system, (str, list)):
            return "system: Input should be a valid string or a list of text blocks"
        return None


# ==================================================================================================
# Gemini generateContent


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


_GEMINI_FIELDS = {"contents", "systemInstruction", "generationConfig", "safetySettings", "tools", "toolConfig",
                  "cachedContent", "labels", "model"}
_GEMINI_CONFIG = {"stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema", "candidateCount",
                  "maxOutputTokens", "temperature", "topP", "topK", "seed", "presencePenalty", "frequencyPenalty",
                  "responseLogprobs", "logprobs", "thinkingConfig", "responseModalities", "mediaResolution",
                  "speechConfig", "enableEnhancedCivicAnswers", "routingConfig", "audioTimestamp",
                  "imageConfig", "modelSelectionConfig"}
_GEMINI_THINKING = {"thinkingBudget", "includeThoughts", "thinkingLevel"}


class FakeGemini(FakeServer):
    name = "gemini"

    def __init__(self, *args: Any, api_key: str = "AIza-test", platform: str = "public", bearer: str = "ya29.test",
                 block_marker: str | None = None, thinking_tokens: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key, self.platform, self.bearer = api_key, platform, bearer
        self.block_marker, self.thinking_tokens = block_marker, thinking_tokens

    @staticmethod
    def _error(code: int, status: str, message: str) -> Reply:
        return _json(code, {"error": {"code": code, "message": message, "status": status}})

    def echo_error(self, status: int, message: str) -> Reply:
        return self._error(status, "UNAUTHENTICATED" if status == 401 else "INVALID_ARGUMENT", message)

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if self.platform == "public":
            m = re.fullmatch(r"/v1(?:beta|alpha)?/models/([^/:]+):generateContent", path)
            key = headers.get("x-goog-api-key") or dict(urllib.parse.parse_qsl(query)).get("key")
            if not m or method != "POST":
                return self._error(404, "NOT_FOUND", "Not found")
            if not key:
                return self._error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers "
                                   "without established identity). Please use API Key or other form of API consumer "
                                   "identity to call this API.")
            if key != self.api_key:
                return self._error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        else:
            m = re.fullmatch(r"/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/google/models/([^/:]+)"
                             r":generateContent", path)
            if not m or method != "POST":
                return self._error(404, "NOT_FOUND", "Not found")
            if headers.get("authorization") != f"Bearer {self.bearer}":
                return self._error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. "
                                   "Expected OAuth 2 access token, login cookie or other valid authentication credential.")
        data = _parse_body(body)
        if not isinstance(data, dict):
            return self._error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        problem = self._check(data)
        if problem:
            return self._error(400, "INVALID_ARGUMENT", problem)
        fault = self._take_fault()
        if fault == "echo":
            return self._error(400, "INVALID_ARGUMENT", "The input token count exceeds the maximum: "
                               + _text_of(data["contents"][-1].get("parts"))[:200])
        if fault == "throttle":
            return _json(429, {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                         "status": "RESOURCE_EXHAUSTED"}})
        if fault in ("overloaded", "server_error"):
            return self._error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
        self._accepted(path, headers, data)
        system = _text_of((data.get("systemInstruction") or data.get("system_instruction") or {}).get("parts"))
        turns = [("assistant" if c.get("role") == "model" else "user", _text_of(c.get("parts"))) for c in data["contents"]]
        prompt = count_tokens(system) + sum(count_tokens(t) for _, t in turns)
        config = data.get("generationConfig") or data.get("generation_config") or {}
        config = {_camel(k): v for k, v in config.items()}
        thinking = {_camel(k): v for k, v in (config.get("thinkingConfig") or {}).items()}
        thoughts = self.thinking_tokens if thinking.get("thinkingBudget", 1) != 0 else 0
        usage: dict[str, Any] = {"promptTokenCount": prompt}
        if self.block_marker and any(self.block_marker in t for _, t in turns) or \
                (self.block_marker and self.block_marker in system):
            usage["totalTokenCount"] = prompt
            return _json(200, {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]},
                "usageMetadata": usage, "modelVersion": m.group(1)})
        text = self.answer(system, turns)
        finish = "STOP"
        limit = config.get("maxOutputTokens")
        if isinstance(limit, int) and count_tokens(text) > limit:
            text, finish = " ".join(text.split()[:limit]), "MAX_TOKENS"
        for stop in config.get("stopSequences") or []:
            if stop in text:
                text = text.split(stop, 1)[0]
        usage.update(candidatesTokenCount=count_tokens(text), totalTokenCount=prompt + count_tokens(text) + thoughts)
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return _json(200, {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                           "finishReason": finish, "index": 0}],
                           "usageMetadata": usage, "modelVersion": m.group(1),
                           "responseId": secrets.token_urlsafe(12)})

    def _check(self, data: dict[str, Any]) -> str | None:
        for key in data:
            if _camel(key) not in _GEMINI_FIELDS:
                return f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
        contents = data.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        for i, c in enumerate(contents):
            if not isinstance(c, dict) or set(c) - {"role", "parts"}:
                return f'Invalid JSON payload received. Unknown name in "contents[{i}]": Cannot find field.'
            if c.get("role") not in (None, "user", "model"):
                return f"Please use a valid role: user, model. (contents[{i}].role)"
            parts = c.get("parts")
            if not isinstance(parts, list) or not parts:
                return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        config = data.get("generationConfig", data.get("generation_config"))
        if config is not None:
            if not isinstance(config, dict):
                return 'Invalid value at \'generation_config\': Starting an object on a scalar field'
            for key, value in config.items():
                if _camel(key) not in _GEMINI_CONFIG:
                    return f'Invalid JSON payload received. Unknown name "{key}" at \'generation_config\': Cannot find field.'
                if _camel(key) == "thinkingConfig":
                    for k in value or {}:
                        if _camel(k) not in _GEMINI_THINKING:
                            return (f'Invalid JSON payload received. Unknown name "{k}" at '
                                    "'generation_config.thinking_config': Cannot find field.")
            temperature = config.get("temperature")
            if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 2):
                return "* GenerateContentRequest.generation_config.temperature: must be in [0.0, 2.0]"
            stops = config.get("stopSequences", config.get("stop_sequences")) or []
            if len(stops) > 5:
                return "* GenerateContentRequest.generation_config.stop_sequences: at most 5 stop sequences"
        return None


# ==================================================================================================
# Bedrock Converse


_CONVERSE_FIELDS = {"messages", "system", "inferenceConfig", "toolConfig", "guardrailConfig",
                    "additionalModelRequestFields", "promptVariables", "additionalModelResponseFieldPaths",
                    "requestMetadata", "performanceConfig", "serviceTier"}
_CONVERSE_CONFIG = {"maxTokens", "temperature", "topP", "stopSequences"}


def _converse_thinking(data: dict[str, Any]) -> Any:
    """The thinking budget of a Converse request to Claude (additionalModelRequestFields.thinking), else None."""
    extra = data.get("additionalModelRequestFields")
    thinking = extra.get("thinking") if isinstance(extra, dict) else None
    return thinking.get("budget_tokens") if isinstance(thinking, dict) and thinking.get("type") == "enabled" else None


class FakeBedrock(FakeServer):
    name = "bedrock"

    def __init__(self, *args: Any, aws_keys: dict[str, str] | None = None, region: str = "us-east-1",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sigv4 = SigV4Verifier(aws_keys or {"AKIDEXAMPLE": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}, region)
        self.redact_thinking = False  # True: reasoningContent.redactedContent instead of reasoningText

    def echo_error(self, status: int, message: str) -> Reply:
        return _amz_error(status, "UnrecognizedClientException", message)

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        m = re.fullmatch(r"/model/([^/]+)/converse", path)
        if not m or method != "POST":
            return _amz_error(404, "UnknownOperationException", "Unknown operation")
        problem = self.sigv4.problem(method, path, query, headers, body)
        if problem:
            return _amz_error(403 if problem[0] != "IncompleteSignatureException" else 400, *problem)
        data = _parse_body(body)
        if not isinstance(data, dict):
            return _amz_error(400, "SerializationException", "Could not parse the request body")
        problem_text = self._check(data)
        if problem_text:
            return _amz_error(400, "ValidationException", problem_text)
        fault = self._take_fault()
        if fault == "echo":
            return _amz_error(400, "ValidationException", "Input is too long for requested model: "
                              + _text_of(data["messages"][-1]["content"])[:200])
        if fault == "throttle":
            return _amz_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
        if fault in ("overloaded", "server_error"):
            return _amz_error(503, "ServiceUnavailableException", "The service is temporarily unavailable.")
        self._accepted(path, headers, data)
        system = _text_of(data.get("system"))
        turns = [(msg["role"], _text_of(msg["content"])) for msg in data["messages"]]
        text = self.answer(system, turns)
        config = data.get("inferenceConfig") or {}
        stop = "end_turn"
        blocks: list[dict[str, Any]] = []
        thinking_tokens = 0
        if _converse_thinking(data):  # Claude's extended thinking: a reasoningContent block before the text
            thinking_tokens = count_tokens(THOUGHT)
            blocks.append({"reasoningContent": {"reasoningText": {"text": THOUGHT,
                                                                  "signature": "EqQBCgIYAhIM" + secrets.token_hex(8)}}}
                          if not self.redact_thinking else
                          {"reasoningContent": {"redactedContent": "RW5jcnlwdGVk" + secrets.token_hex(8)}})
        limit = config["maxTokens"] - thinking_tokens if isinstance(config.get("maxTokens"), int) else None
        if limit is not None and count_tokens(text) > limit:
            text, stop = " ".join(text.split()[:max(limit, 0)]), "max_tokens"
        prompt = count_tokens(system) + sum(count_tokens(t) for _, t in turns)
        out = count_tokens(text) + thinking_tokens
        blocks.append({"text": text})
        return _json(200, {"output": {"message": {"role": "assistant", "content": blocks}},
                           "stopReason": stop, "usage": {"inputTokens": prompt, "outputTokens": out,
                                                         "totalTokens": prompt + out},
                           "metrics": {"latencyMs": 1}}, {"x-amzn-RequestId": secrets.token_hex(8)})

    @staticmethod
    def _check(data: dict[str, Any]) -> str | None:
        for key in data:
            if key not in _CONVERSE_FIELDS:
                return (f"Malformed input request: extraneous key [{key}] is not permitted, please reformat your "
                        "input and try again.")
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant") or \
                    not isinstance(msg.get("content"), list) or set(msg) - {"role", "content"}:
                return f"1 validation error detected: Value at 'messages.{i + 1}' failed to satisfy constraint"
            for block in msg["content"]:
                if not isinstance(block, dict) or len(block) != 1:
                    return f"1 validation error detected: Value at 'messages.{i + 1}.content' failed to satisfy constraint"
        if messages[0]["role"] != "user":
            return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
        system = data.get("system")
        if system is not None and not (isinstance(system, list) and all(isinstance(b, dict) for b in system)):
            return "1 validation error detected: Value at 'system' failed to satisfy constraint"
        config = data.get("inferenceConfig") or {}
        for key in config:
            if key not in _CONVERSE_CONFIG:
                return f"Malformed input request: extraneous key [inferenceConfig.{key}] is not permitted"
        temperature = config.get("temperature")
        if temperature is not None and not (0 <= temperature <= 1):
            return ("1 validation error detected: Value at 'inferenceConfig.temperature' failed to satisfy "
                    "constraint: Member must have value less than or equal to 1")
        max_tokens = config.get("maxTokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return ("1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy "
                    "constraint: Member must have value greater than or equal to 1")
        budget = _converse_thinking(data)
        if budget is not None:  # Claude's rules for thinking, passed through by Converse
            if not isinstance(budget, int) or budget < 1024:
                return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            if isinstance(max_tokens, int) and budget >= max_tokens:
                return "`max_tokens` must be greater than `thinking.budget_tokens`"
            if temperature is not None and temperature != 1:
                return "`temperature` may only be set to 1 when thinking is enabled"
        return None


# ==================================================================================================
# Azure OpenAI + Entra ID


_CHAT_FIELDS = {"messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "n",
                "presence_penalty", "frequency_penalty", "logit_bias", "user", "response_format", "tools",
                "tool_choice", "logprobs", "top_logprobs", "stream", "stream_options", "parallel_tool_calls",
                "data_sources", "reasoning_effort", "store", "metadata", "prediction", "modalities", "audio",
                "functions", "function_call", "user_security_context"}
_OPENID = ("/v2.0/.well-known/openid-configuration", "/.well-known/openid-configuration")


class FakeAzureOpenAI(FakeServer):
    name = "azure_openai"

    def __init__(self, *args: Any, api_key: str | None = "azure-key", tenant: str = "hospital-tenant",
                 client_id: str = "medhelm-app", client_secret: str | None = "entra-secret",
                 federated_token: str | None = None, identity_header: str | None = None,
                 token_lifetime_s: int = 3599, reasoning_tokens: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key, self.tenant, self.client_id = api_key, tenant, client_id
        self.client_secret, self.federated_token, self.identity_header = client_secret, federated_token, identity_header
        self.token_lifetime_s, self.reasoning_tokens = token_lifetime_s, reasoning_tokens
        self.tokens: dict[str, float] = {}  # issued access token -> when it expires (server clock)
        self.token_requests: list[dict[str, str]] = []  # forms/queries received (secrets included: tests only)

    def expire_tokens(self) -> None:
        with self._lock:
            self.tokens = dict.fromkeys(self.tokens, 0.0)

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Reply:
        return _json(status, {"error": {"code": code, "message": message}},
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
        data = _parse_body(body)
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
        return _json(200, {
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
        return _json(200, {"token_endpoint": f"{base}/oauth2/v2.0/token", "issuer": f"{base}/v2.0",
                           "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                           "jwks_uri": f"{base}/discovery/v2.0/keys", "response_types_supported": ["code", "token"],
                           "subject_types_supported": ["pairwise"], "id_token_signing_alg_values_supported": ["RS256"],
                           "tenant_region_scope": "EU"})

    def _entra_error(self, status: int, code: str, aadsts: int, text: str) -> Reply:
        return _json(status, {"error": code, "error_description": f"AADSTS{aadsts}: {text}", "error_codes": [aadsts],
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
        return _json(200, {"token_type": "Bearer", "expires_in": lifetime, "ext_expires_in": lifetime,
                           "access_token": token})

    def _managed_identity(self, method: str, query: str, headers: dict[str, str]) -> Reply:
        params = dict(urllib.parse.parse_qsl(query))
        with self._lock:
            self.token_requests.append(params)
        if method != "GET" or not self.identity_header or headers.get("x-identity-header") != self.identity_header:
            return _json(401, {"statusCode": 401, "message": "Unauthorized"})
        if params.get("api-version") != "2019-08-01" or not params.get("resource"):
            return _json(400, {"statusCode": 400, "message": "Invalid api-version or resource"})
        token, lifetime = self._issue()
        return _json(200, {"access_token": token, "expires_on": str(int(time.time()) + lifetime),
                           "resource": params["resource"], "token_type": "Bearer", "client_id": self.client_id})


    def _imds(self, method: str, query: str, headers: dict[str, str]) -> Reply:
        """The VM/AKS node's Instance Metadata Service: ``Metadata: true`` required (it stops SSRF)."""
        params = dict(urllib.parse.parse_qsl(query))
        with self._lock:
            self.token_requests.append(params)
        if method != "GET" or headers.get("metadata") != "true":
            return _json(400, {"error": "invalid_request", "error_description": "Required metadata header not specified"})
        if not params.get("api-version") or not params.get("resource"):
            return _json(400, {"error": "invalid_request", "error_description": "Required query variable 'resource' is missing"})
        token, lifetime = self._issue()
        now = int(time.time())
        return _json(200, {"access_token": token, "client_id": self.client_id, "expires_in": str(lifetime),
                           "expires_on": str(now + lifetime), "ext_expires_in": str(lifetime), "not_before": str(now),
                           "resource": params["resource"], "token_type": "Bearer"})


# ==================================================================================================
# Stanford Health Care's gateway: the private Claude and Gemini text routes HELM calls


_SHC_CLAUDE_FIELDS = {"model_id": str, "prompt_text": str, "max_tokens": int, "temperature": (int, float)}
_SHC_GOOGLE_CONFIG = {"temperature": (int, float), "topP": (int, float), "topK": int, "candidateCount": int,
                      "maxOutputTokens": int, "stopSequences": list}


class FakeSHCGateway(FakeServer):
    """Azure API Management in front of SHC's Claude (Bedrock) and Gemini (Vertex) routes, strict to the
    bodies HELM's ``StanfordHealthCareClaudeClient`` / ``StanfordHealthCareGoogleClient`` post to
    ``{endpoint}/{deployment}``: ``routes`` maps each route path to ``"claude"`` or ``"google"``. The key is
    the ``Ocp-Apim-Subscription-Key`` header (APIM's 401 otherwise); a body of another shape (an Anthropic
    Messages or ``generateContent`` body, a missing or extra field) is a 400. Claude answers with Bedrock's
    Messages reply (``claude_reply="message"``) or its bare content list (``"list"``); Gemini with the
    ``streamGenerateContent`` chunks as one JSON array (two chunks, the usage on the last), which is what
    HELM's parser reads (``response["content"]`` after wrapping the list)."""

    name = "shc"

    def __init__(self, *args: Any, routes: dict[str, str], subscription_key: str = "shc-key",
                 claude_reply: str = "message", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.routes, self.subscription_key, self.claude_reply = routes, subscription_key, claude_reply

    def echo_error(self, status: int, message: str) -> Reply:
        return _json(status, {"statusCode": status, "message": message})

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        kind = self.routes.get(path)
        if kind is None or method != "POST":
            return _json(404, {"statusCode": 404, "message": "Resource not found"})
        if headers.get("ocp-apim-subscription-key") != self.subscription_key:
            return _json(401, {"statusCode": 401, "message": "Access denied due to invalid subscription key. "
                                                             "Make sure to provide a valid key for an active subscription."})
        data = _parse_body(body)
        problem = self._check_claude(data) if kind == "claude" else self._check_google(data)
        if problem:
            return _json(400, {"error": {"code": "BadRequest", "message": problem}})
        fault = self._take_fault()
        if fault == "throttle":
            return _json(429, {"statusCode": 429, "message": "Rate limit is exceeded. Try again in 1 seconds."},
                         {"Retry-After": "1"})
        if fault in ("overloaded", "server_error"):
            return _json(503, {"statusCode": 503, "message": "Service Unavailable"})
        self._accepted(path, headers, data)
        if kind == "claude":
            prompt = data["prompt_text"]
            text = self.answer("", [("user", prompt)])
            words, stop = text.split(), "end_turn"
            if count_tokens(text) > data["max_tokens"]:
                text, stop = " ".join(words[:data["max_tokens"]]), "max_tokens"
            content = [{"type": "text", "text": text}]
            if self.claude_reply == "list":
                return _json(200, content)
            return _json(200, {"id": "msg_bdrk_" + secrets.token_hex(8), "type": "message", "role": "assistant",
                               "model": data["model_id"], "content": content, "stop_reason": stop,
                               "stop_sequence": None, "usage": {"input_tokens": count_tokens(prompt),
                                                                "output_tokens": count_tokens(text)}})
        prompt = data["contents"]["parts"]["text"]
        config = data["generation_config"]
        text = self.answer("", [("user", prompt)])
        words, finish = text.split(), "STOP"
        if count_tokens(text) > config["maxOutputTokens"]:
            words, finish = words[:config["maxOutputTokens"]], "MAX_TOKENS"
        half = (len(words) + 1) // 2
        pieces = [" ".join(words[:half]), (" " if half < len(words) else "") + " ".join(words[half:])]
        chunks: list[dict[str, Any]] = [{"candidates": [{"content": {"role": "model", "parts": [{"text": pieces[0]}]}}],
                                         "modelVersion": path.rsplit("/", 1)[-1]}]
        chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": pieces[1]}]},
                                       "finishReason": finish}],
                       "usageMetadata": {"promptTokenCount": count_tokens(prompt),
                                         "candidatesTokenCount": len(words),
                                         "totalTokenCount": count_tokens(prompt) + len(words)},
                       "modelVersion": path.rsplit("/", 1)[-1]})
        return _json(200, chunks)

    @staticmethod
    def _check_claude(data: Any) -> str | None:
        if not isinstance(data, dict):
            return "the body must be a JSON object"
        if set(data) != set(_SHC_CLAUDE_FIELDS):
            return f"the body's fields must be exactly {sorted(_SHC_CLAUDE_FIELDS)}, got {sorted(data)[:10]}"
        for key, kind in _SHC_CLAUDE_FIELDS.items():
            if not isinstance(data[key], kind) or isinstance(data[key], bool):
                return f"{key}: wrong type"
        return None

    @staticmethod
    def _check_google(data: Any) -> str | None:
        if not isinstance(data, dict) or set(data) != {"contents", "generation_config"}:
            return "the body's fields must be exactly ['contents', 'generation_config']"
        contents = data["contents"]
        if not (isinstance(contents, dict) and set(contents) == {"role", "parts"} and contents["role"] == "user"
                and isinstance(contents["parts"], dict) and set(contents["parts"]) == {"text"}
                and isinstance(contents["parts"]["text"], str)):
            return "contents must be one user object whose parts is one {text} object"
        config = data["generation_config"]
        if not isinstance(config, dict) or set(config) != set(_SHC_GOOGLE_CONFIG):
            return f"generation_config's fields must be exactly {sorted(_SHC_GOOGLE_CONFIG)}"
        for key, kind in _SHC_GOOGLE_CONFIG.items():
            if not isinstance(config[key], kind) or isinstance(config[key], bool):
                return f"generation_config.{key}: wrong type"
        return None


FAKES = {"anthropic": FakeAnthropic, "gemini": FakeGemini, "bedrock": FakeBedrock, "azure_openai": FakeAzureOpenAI}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m medhelm.devtools.fake_providers",
                                     description="Serve a local fake of a cloud model API (tests, demos).")
    parser.add_argument("provider", choices=sorted(FAKES))
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    srv = FAKES[args.provider](port=args.port).start()
    print(f"{args.provider} fake listening on {srv.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
