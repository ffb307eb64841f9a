"""inference/outcome.py, wire.refusal, paced.py and http.py's two engines: the typed verdict a provider hands up,
the retries and the pacer deciding from it alone, and one mapping of transport failures whether a request goes
direct (h1) or through a forward proxy (aiohttp), against the real mock OpenAI server."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer
from medhelm.errors import InferenceError, ServerUnreachable
from medhelm.inference import ClientPool, PacingPolicy, RetryPolicy
from medhelm.inference.http import HttpReply
from medhelm.inference.openai import OpenAIClient
from medhelm.inference.outcome import Outcome, Refusal, Verdict, outcome_of, verdict_for
from medhelm.inference.wire import THROTTLED, refusal
from medhelm.specs import Deployment, GenerationRequest, Message


def _deployment(url: str, **kw) -> Deployment:
    return Deployment(name="mock/outcome", model_name="mock/model", kind="openai", base_url=url,
                      served_model_name="mock-model", **kw)


def _request(text: str = "Is the patient febrile?") -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), max_tokens=4)


@pytest.mark.parametrize(("status", "kw", "verdict"), [
    (429, {}, Verdict.RATE_LIMITED), (503, {}, Verdict.RATE_LIMITED), (529, {}, Verdict.RATE_LIMITED),
    (400, {"throttled": True}, Verdict.RATE_LIMITED),  # a gateway's 400 carrying ThrottlingException
    (408, {}, Verdict.TRANSIENT), (500, {}, Verdict.TRANSIENT), (502, {}, Verdict.TRANSIENT),
    (401, {"retry": True}, Verdict.TRANSIENT),  # once more with a fresh token
    (400, {}, Verdict.FATAL), (401, {}, Verdict.FATAL), (404, {}, Verdict.FATAL), (422, {}, Verdict.FATAL),
])
def test_one_rule_from_a_status_to_a_verdict(status, kw, verdict):
    assert verdict_for(status, **kw) is verdict


def test_an_untyped_error_reads_as_before_and_a_refusal_keeps_its_own():
    assert outcome_of(InferenceError("x", retryable=True, status=429, retry_after=2.0)) == \
        Outcome(Verdict.RATE_LIMITED, 2.0)
    assert outcome_of(InferenceError("x", retryable=True)).verdict is Verdict.TRANSIENT  # a timeout
    assert outcome_of(ServerUnreachable("cannot reach")).verdict is Verdict.TRANSIENT
    assert outcome_of(InferenceError("x", status=400)).verdict is Verdict.FATAL
    own = Outcome(Verdict.RATE_LIMITED, 1.5, {"x-ratelimit-remaining-requests": "0"})
    err = Refusal("x", own, status=400)
    assert outcome_of(err) is own and err.retryable and err.retry_after == 1.5
    assert not Refusal("x", Outcome(Verdict.FATAL), status=400).retryable


def test_a_refusal_copied_or_pickled_keeps_its_outcome():
    import copy
    import pickle

    err = Refusal("deployment 'd': HTTP 429", Outcome(Verdict.RATE_LIMITED, 2.0, {"retry-after": "2"}), status=429)
    for again in (copy.copy(err), pickle.loads(pickle.dumps(err)), err.with_context("judge 'j': ")):
        assert type(again) is Refusal and again.outcome == err.outcome and again.status == 429
        assert again.retryable and again.retry_after == 2.0
    assert str(err.with_context("judge 'j': ")) == "judge 'j': deployment 'd': HTTP 429"


def test_refusal_names_the_status_takes_the_servers_wait_and_keeps_the_headers():
    headers = {"retry-after-ms": "250", "retry-after": "9", "x-ratelimit-remaining-requests": "0"}
    err = refusal("deployment 'd' (http://h/v1)", HttpReply(400, headers, b"{}"), "ThrottlingException: slow",
                  code="ThrottlingException")
    assert str(err) == "deployment 'd' (http://h/v1): HTTP 400: ThrottlingException: slow"
    assert err.outcome == Outcome(Verdict.RATE_LIMITED, 0.25, headers) and err.status == 400 and err.retryable


def test_a_provider_adds_its_own_slow_down_codes_to_the_shared_ones():
    reply = HttpReply(400, {}, b"{}")
    assert refusal("d", reply, "", code="CapacityExceeded").outcome.verdict is Verdict.FATAL
    own = THROTTLED | {"CapacityExceeded"}
    assert refusal("d", reply, "", code="CapacityExceeded", throttled=own).outcome.verdict is Verdict.RATE_LIMITED
    assert refusal("d", reply, "", code="ThrottlingException", throttled=own).outcome.verdict is Verdict.RATE_LIMITED


@pytest.mark.parametrize(("first", "answered", "retries", "rate_limited"), [
    (MockHTTPError(429, "slow down", retry_after=0.2), True, 1, 1),  # reaches the pacer with its wait; retried
    (MockHTTPError(400, "bad request"), False, 0, 0),  # fatal: not retried, and not a throttle
])
def test_a_refusal_reaches_the_retries_and_the_pacer_by_its_verdict(first, answered, retries, rate_limited):
    calls: list[int] = []

    def refuse_once(body):
        calls.append(1)
        if len(calls) == 1:
            raise first
        return "Yes"

    with MockOpenAIServer(responder=refuse_once) as srv:
        async def main():
            pool = ClientPool(connections=4, retry=RetryPolicy(base_delay_s=0.001),
                              pacing=PacingPolicy(adaptive=True))
            client = pool.get(_deployment(srv.base_url))
            try:
                try:
                    result = await client.generate(_request())
                except Refusal as err:
                    result = err
                return result, pool.pacers()["mock/outcome"], pool.stats["mock/outcome"]
            finally:
                await pool.aclose()

        result, pacer, stats = asyncio.run(main())
    assert (len(calls), stats.requests, stats.retries, pacer.rate_limited) == (retries + 1,) * 2 + (retries, rate_limited)
    if answered:
        assert result.text == "Yes" and result.usage.attempts == 2 and pacer.paused_until > 0
    else:
        assert isinstance(result, Refusal) and result.outcome.verdict is Verdict.FATAL
        assert not result.retryable and result.status == 400


def test_the_rate_headers_an_answer_returns_reach_the_budget():
    with MockOpenAIServer(requests_per_minute=600, rate_headers=True) as srv:
        async def main():
            pool = ClientPool(connections=4)  # no configured budget: only the headers can set one
            client = pool.get(_deployment(srv.base_url))
            try:
                await client.generate(_request())
                return pool.pacers()["mock/outcome"].summary()
            finally:
                await pool.aclose()

        assert "600 requests/min" in asyncio.run(main())


# -- the proxied engine: the same request, the same failures -----------------------------------------------------

async def _forward_proxy(seen: list[bytes]) -> asyncio.Server:
    """A minimal HTTP forward proxy: absolute-form request line -> origin-form on a fresh connection to the
    target, the reply piped back, then both connections closed; ``seen`` gets each absolute URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, _, rest = head.partition(b"\r\n")
            method, url, version = line.split(b" ")
            seen.append(url)
            hostport, _, path = url.split(b"://", 1)[1].partition(b"/")
            host, _, port = hostport.partition(b":")
            length = next((int(h.split(b":", 1)[1]) for h in rest.split(b"\r\n")
                           if h.lower().startswith(b"content-length:")), 0)
            body = await reader.readexactly(length)
            up_reader, up_writer = await asyncio.open_connection(host.decode(), int(port or 80))
            kept = b"\r\n".join(h for h in rest.split(b"\r\n") if h and not h.lower().startswith(
                (b"connection:", b"proxy-connection:", b"keep-alive:")))
            up_writer.write(b"%s /%s %s\r\n%s\r\nConnection: close\r\n\r\n%s" % (method, path, version, kept, body))
            await up_writer.drain()
            writer.write(await up_reader.read())
            await writer.drain()
            up_writer.close()
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _through_proxy(monkeypatch, proxy_url: str) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)


def test_a_forward_proxy_carries_the_request_and_returns_the_headers(monkeypatch):
    pytest.importorskip("aiohttp")
    seen: list[bytes] = []
    with MockOpenAIServer(requests_per_minute=600, rate_headers=True) as srv:
        async def main():
            proxy = await _forward_proxy(seen)
            _through_proxy(monkeypatch, f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
            client = OpenAIClient(_deployment(srv.base_url))
            try:
                return await client.attempt(_request())
            finally:
                await client.aclose()
                proxy.close()

        reply = asyncio.run(main())
    assert seen == [f"{srv.base_url}/chat/completions".encode()]  # absolute-form: the proxy was asked
    assert reply.completion.text and reply.rate is not None
    assert reply.rate.get("x-ratelimit-limit-requests") == "600"  # case-insensitive, as h1's lower-case names


def test_a_proxy_nobody_answers_is_unreachable_like_a_server(monkeypatch, refused_url):
    pytest.importorskip("aiohttp")
    _through_proxy(monkeypatch, refused_url)
    url = "http://10.255.255.1:8000/v1"  # never asked directly: the proxy is

    async def main():
        client = OpenAIClient(_deployment(url))
        try:
            await client.generate(_request())
        finally:
            await client.aclose()

    with pytest.raises(ServerUnreachable) as info:
        asyncio.run(main())
    assert str(info.value).startswith(f"cannot reach {url}") and info.value.retryable
    assert "febrile" not in str(info.value)


def test_a_timeout_through_the_proxy_reads_as_a_direct_one(monkeypatch):
    pytest.importorskip("aiohttp")
    seen: list[bytes] = []
    with MockOpenAIServer(latency_s=60.0) as srv:
        async def main():
            proxy = await _forward_proxy(seen)
            _through_proxy(monkeypatch, f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
            client = OpenAIClient(_deployment(srv.base_url, timeout_s=0.2))
            try:
                await client.generate(_request())
            finally:
                await client.aclose()
                proxy.close()

        with pytest.raises(InferenceError) as info:
            asyncio.run(main())
    err = info.value
    assert len(seen) == 1  # the proxy was asked (h1 would have timed out alike, straight to the server)
    assert err.retryable and "timed out" in str(err) and not isinstance(err, ServerUnreachable)
    assert outcome_of(err).verdict is Verdict.TRANSIENT
