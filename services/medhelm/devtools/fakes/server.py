"""What every provider fake shares: a threaded HTTP/1.1 server on 127.0.0.1 (TLS when given a certificate)
and ``FakeServer``, the bookkeeping a fake reads and a test drives. A fake subclasses it and implements
``route``; ``requests`` lists the model requests accepted, ``refused`` each refusal (status, error type).

Faults are planned, never random: ``fail_next(n, fault)`` answers the next ``n`` model requests with
``throttle``, ``overloaded``, ``server_error`` or ``echo`` (a 400 quoting the prompt) in the provider's words;
``kill()`` closes the listener and every open connection (a crashed service), ``die_after = n`` crashes on
the POST after the next ``n``, ``restart()`` listens again on the same port; ``echo_credentials(n, status)``
answers with the credentials received quoted in the provider's error shape and a reply header
(``mock_openai.credential_echo``). Answers come from ``mock_openai.default_responder``; token counts are
words and punctuation marks (``count_tokens``), not a tokenizer. A bug in a fake is a 500 saying so.
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import socketserver
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from medhelm.devtools.mock_openai import credential_echo, default_responder

Reply = tuple[int, dict[str, str], bytes]
_WORD = re.compile(r"\w+|[^\w\s]")
# The fakes' thinking (Anthropic thinking blocks, Converse reasoningContent): billed in the output count, as
# the real APIs bill thinking in output_tokens / outputTokens with no count of their own
THOUGHT = "Let me think about the question step by step before answering."


_DEFAULT = object()  # a credential not given: the fake's own default (``FakeServer.api_key``)


def count_tokens(text: str) -> int:
    return len(_WORD.findall(text))


def json_reply(status: int, data: Any, headers: dict[str, str] | None = None) -> Reply:
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
            status, out_headers, content = json_reply(500, {"error": {"message": f"fake bug: {type(err).__name__}"}})
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
    # A deployment that reaches this fake (tests, demos): the environment it reads (None: a variable that must be
    # unset), whose credentials a fake made by ``accepting`` accepts, and its model_deployments.yaml fields beside
    # name, kind and base_url. Empty on a fake that declares none.
    test_environment: Mapping[str, str | None] = {}
    test_entry: Mapping[str, Any] = {}
    # What a fake checks a caller against, each the subclass's default unless the constructor is given another:
    # the API key it accepts (None: no key is), the platform it speaks when its provider is served on several
    # (Anthropic: direct, bedrock, vertex) and the OAuth access token a Google platform accepts as a bearer token.
    api_key: str | None = None
    platform = ""
    bearer = "ya29.test"

    @classmethod
    def accepting(cls, **kwargs: Any) -> FakeServer:
        """This fake, accepting the credentials of ``test_environment`` unless ``kwargs`` say otherwise (the API key
        of the variable ``test_entry``'s ``api_key_env`` names; a fake with other credentials says how)."""
        env = cls.test_entry.get("api_key_env")
        return cls(**{**({"api_key": cls.test_environment[env]} if env else {}), **kwargs})

    def __init__(self, responder: Callable[[dict[str, Any]], str] | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, certfile: str | None = None, keyfile: str | None = None,
                 api_key: str | None | object = _DEFAULT, platform: str | None = None, bearer: str | None = None) -> None:
        if api_key is not _DEFAULT:
            self.api_key = api_key  # type: ignore[assignment]
        self.platform = self.platform if platform is None else platform
        self.bearer = self.bearer if bearer is None else bearer
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
        return json_reply(status, {"error": {"code": str(status), "message": message, "type": "invalid_request_error"}})

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


def text_of(content: Any) -> str:
    """A message's text: a string, or text blocks (Anthropic) / parts (Gemini) / content blocks (Bedrock)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
