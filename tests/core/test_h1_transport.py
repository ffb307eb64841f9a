"""The lean HTTP/1.1 transport (inference/h1.py behind JsonTransport) against real sockets: the mock OpenAI
server for keep-alive and the pool's cap, and small raw asyncio servers for the wire cases a model server
or a proxy in front of it can produce (chunked, close-delimited, gzip, stale kept-alive connections, a
reply cut mid-body, a reply after the deadline, TLS with a hospital's own CA)."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference.http import JsonTransport
from medhelm.specs import Deployment

BODY = b'{"model":"m","messages":[{"role":"user","content":"Is the patient febrile?"}],"max_tokens":4}'


def dep(base_url: str, **kw) -> Deployment:
    return Deployment(name="d", model_name="m", kind="openai", base_url=base_url, **kw)


class RawServer:
    """A TCP server on 127.0.0.1 whose per-connection behaviour is ``handler(reader, writer, n)`` (n = the
    connection's number); counts connections and the requests it read."""

    def __init__(self, handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler, self.tls = handler, tls
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def on_conn(reader, writer):
            self.connections += 1
            try:
                await self.handler(reader, writer, self.connections)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        self.server = self.loop.run_until_complete(asyncio.start_server(on_conn, "127.0.0.1", 0, ssl=self.tls))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        self.server.close()
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    def __enter__(self) -> RawServer:
        self.thread.start()
        assert self.ready.wait(300), "the test server never started"  # a hang only: it starts in ms
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)

    def url(self, scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}/v1"


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return lines[0].encode(), headers, body


def reply(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", *extra]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in extra):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def post(transport: JsonTransport, url: str, n: int = 1, body: bytes = BODY):
    async def go():
        try:
            return await asyncio.gather(*(transport.post_bytes(url + "/chat/completions", body, "here")
                                          for _ in range(n)))
        finally:
            await transport.aclose()
    return [r for r, _ in asyncio.run(go())]


def test_connections_are_kept_alive_and_capped_at_max_concurrency():
    with MockOpenAIServer(latency_s=0.01) as srv:
        transport = JsonTransport(dep(srv.base_url, max_concurrency=4), {})

        async def go():
            url = srv.base_url + "/chat/completions"
            replies = await asyncio.gather(*(transport.post_bytes(url, BODY, "here") for _ in range(200)))
            made = transport._pool.connections_made
            await transport.aclose()
            return replies, made
        replies, made = asyncio.run(go())
    assert [r.status_code for r, _ in replies] == [200] * 200
    assert all(json.loads(r.content)["choices"][0]["message"]["content"] for r, _ in replies)
    assert made == 4  # 200 requests over the 4 connections the cap allows, each kept alive
    assert srv.request_count == 200


def test_request_head_carries_host_auth_and_query_and_a_host_override_wins():
    seen = []

    async def handler(reader, writer, n):
        line, headers, body = await read_request(reader)
        seen.append((line, headers, body))
        writer.write(reply(b'{"ok": true}'))
        await writer.drain()

    with RawServer(handler) as srv:
        post(JsonTransport(dep(srv.url()), {"Authorization": "Bearer k"}, {"api-version": "2024-06-01"}), srv.url())
        post(JsonTransport(dep(srv.url()), {"Host": "pubmed.models.example.com"}), srv.url())
    (line, headers, body), (_, headers2, _) = seen
    assert line == b"POST /v1/chat/completions?api-version=2024-06-01 HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{srv.port}" and headers["authorization"] == "Bearer k"
    assert headers["content-type"] == "application/json" and body == BODY
    assert headers2["host"] == "pubmed.models.example.com"  # KServe's ingress routes on the Host header


def test_a_header_with_a_line_break_is_refused_before_any_request(refused_url):
    with pytest.raises(ConfigError, match="line break"):
        JsonTransport(dep(f"{refused_url}/v1"), {"X-Team": "qa\r\nX-Injected: 1"})


def test_chunked_close_delimited_and_gzip_bodies_are_read_whole():
    payload = json.dumps({"choices": [{"message": {"content": "yes " * 500}}]}).encode()

    async def handler(reader, writer, n):
        await read_request(reader)
        if n == 1:  # chunked, in three chunks written apart
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(payload), 900):
                part = payload[i:i + 900]
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await read_request(reader)  # the connection is reused for the next request
            writer.write(reply(gzip.compress(payload), "Content-Encoding: gzip"))
            await writer.drain()
        else:  # no length at all: the body ends where the connection does
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + payload[:1000])
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.write(payload[1000:])
            await writer.drain()

    with RawServer(handler) as srv:
        transport = JsonTransport(dep(srv.url(), max_concurrency=1), {})

        async def go():
            url = srv.url() + "/chat/completions"
            out = [await transport.post_bytes(url, BODY, "here") for _ in range(3)]
            await transport.aclose()
            return [r for r, _ in out]
        chunked, gzipped, until_close = asyncio.run(go())
    assert chunked.content == payload and gzipped.content == payload and until_close.content == payload
    assert srv.connections == 2


def test_a_kept_alive_connection_the_server_closed_while_idle_is_replaced_once():
    closed = threading.Event()

    async def handler(reader, writer, n):
        await read_request(reader)
        writer.write(reply(b'{"n": %d}' % n))  # says keep-alive (HTTP/1.1 default) ...
        await writer.drain()
        writer.close()  # ... then an idle timeout closes it
        await writer.wait_closed()
        closed.set()

    with RawServer(handler) as srv:
        transport = JsonTransport(dep(srv.url(), max_concurrency=1), {})

        async def go():
            url = srv.url() + "/chat/completions"
            first, _ = await transport.post_bytes(url, BODY, "here")
            assert await asyncio.to_thread(closed.wait, 60)  # the server has closed it, however long that took
            second, _ = await transport.post_bytes(url, BODY, "here")
            await transport.aclose()
            return first, second
        first, second = asyncio.run(go())
    assert json.loads(first.content) == {"n": 1} and json.loads(second.content) == {"n": 2}


def test_a_reply_cut_mid_body_is_a_retryable_transport_error_without_the_prompt():
    async def handler(reader, writer, n):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + b'{"choices": [')
        await writer.drain()
        writer.transport.abort()  # reset

    with RawServer(handler) as srv:
        with pytest.raises(InferenceError) as info:
            post(JsonTransport(dep(srv.url()), {}), srv.url())
    assert info.value.retryable and not isinstance(info.value, ServerUnreachable)
    assert "transport error" in str(info.value) and "febrile" not in str(info.value)


def test_a_late_reply_times_out_and_never_answers_the_next_request():
    # the first reply is held until the client has given up on it (events, not sleeps: on a loaded machine a
    # sleep-late reply could still arrive before the client's timer ran), then sent: it must not be taken
    # for the next request's
    gave_up, late_sent = threading.Event(), threading.Event()

    async def handler(reader, writer, n):
        while True:
            _, _, body = await read_request(reader)
            if n == 1:
                await asyncio.to_thread(gave_up.wait, 120)
            try:
                writer.write(reply(b'{"conn": %d}' % n))
                await writer.drain()
            finally:
                if n == 1:
                    late_sent.set()  # sent, or refused by a connection the client already dropped

    with RawServer(handler) as srv:
        transport = JsonTransport(dep(srv.url(), max_concurrency=1, timeout_s=1.0), {})

        async def go():
            url = srv.url() + "/chat/completions"
            with pytest.raises(InferenceError) as info:
                await transport.post_bytes(url, BODY, "here")
            gave_up.set()
            await asyncio.to_thread(late_sent.wait, 60)
            after, _ = await transport.post_bytes(url, BODY, "here")
            await transport.aclose()
            return info.value, after
        err, after = asyncio.run(go())
    assert err.retryable and "timed out" in str(err)
    assert json.loads(after.content) == {"conn": 2}


def test_a_closed_port_is_server_unreachable_naming_the_url(refused_url):
    url = f"{refused_url}/v1"
    with pytest.raises(ServerUnreachable) as info:
        post(JsonTransport(dep(url), {}), url)
    assert str(info.value).startswith(f"cannot reach {url}")


def make_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=Hospital Test CA")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


def test_https_with_the_hospitals_ca_bundle_and_unverified_without_it(tmp_path):
    ca, cert, key = make_ca(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def handler(reader, writer, n):
        await read_request(reader)
        writer.write(reply(b'{"tls": true}'))
        await writer.drain()

    with RawServer(handler, tls=tls) as srv:
        url = srv.url("https")
        [ok] = post(JsonTransport(dep(url, options={"ca_bundle": str(ca)}), {}), url)
        with pytest.raises(ServerUnreachable) as info:
            post(JsonTransport(dep(url), {}), url)  # the system's CAs do not know the hospital's
    assert json.loads(ok.content) == {"tls": True}
    assert "certificate" in str(info.value).lower()


@pytest.mark.parametrize("connections, expected", [(None, 64), (100, 100), (10, 64)])
def test_without_a_deployment_cap_the_callers_requests_in_flight_set_the_connections(connections, expected):
    """`medhelm run -n 100` against a deployment without max_concurrency has 100 requests in flight, not the
    default 64 connections (with 36 requests queued in the pool behind them)."""
    # replies held until `expected` requests are in flight: that many connections are open at once however
    # slowly the requests go out (a latency could end the first before the last started, and it be reused)
    with MockOpenAIServer(hold_until_in_flight=expected) as srv:
        transport = JsonTransport(dep(srv.base_url), {}, connections=connections)

        async def go():
            url = srv.base_url + "/chat/completions"
            await asyncio.gather(*(transport.post_bytes(url, BODY, "here") for _ in range(100)))
            made = transport._pool.connections_made
            await transport.aclose()
            return made
        assert asyncio.run(go()) == expected
