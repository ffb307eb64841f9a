"""ClientPool = cache + retries + concurrency cap + accounting, against the mock server; RetryPolicy maths."""

from __future__ import annotations

import asyncio
import random
import sys
import time

import pytest

from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer
from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference import ClientPool, ClientStats, RequestCache, RetryPolicy, make_client
from medhelm.inference.openai import OpenAIClient
from medhelm.inference.outcome import Outcome, Verdict
from medhelm.inference.retry import RetryingClient, first_rate_limit
from medhelm.specs import Completion, Deployment, GenerationRequest, Message, Usage

FAST = RetryPolicy(max_attempts=8, base_delay_s=0.001, max_delay_s=0.01)


def deployment(base_url: str, **kw) -> Deployment:
    return Deployment(**{"name": "mock/model", "model_name": "test/model", "kind": "openai", "base_url": base_url,
                         "timeout_s": 10.0, **kw})


def request(i: int = 0, **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", f"Case {i}: is the lesion malignant? yes or no"),),
                             max_tokens=4, **kw)


def run_requests(pool: ClientPool, dep: Deployment, reqs: list[GenerationRequest]):
    async def go():
        try:
            return await asyncio.gather(*(pool.get(dep).generate(r) for r in reqs))
        finally:
            await pool.aclose()

    return asyncio.run(go())


# -- retries ------------------------------------------------------------------------------------


def test_retries_recover_from_429_500_and_malformed_and_are_counted():
    with MockOpenAIServer(error_rate=0.15, rate_limit_rate=0.15, malformed_rate=0.15, retry_after_s=0.001,
                          seed=3) as srv:
        pool = ClientPool(retry=FAST)
        completions = run_requests(pool, deployment(srv.base_url), [request(i) for i in range(60)])
        sent = srv.request_count
    stats = pool.stats["mock/model"]
    assert all(c.text in ("Yes", "No") for c in completions)
    assert stats.retries > 10 and stats.retries == sent - 60
    assert stats.requests == sent and stats.errors == 0 and stats.cache_hits == 0
    assert sum(c.usage.attempts - 1 for c in completions) == stats.retries


def test_retries_give_up_after_max_attempts():
    with MockOpenAIServer(error_rate=1.0) as srv:
        pool = ClientPool(retry=RetryPolicy(max_attempts=3, base_delay_s=0.001))
        with pytest.raises(InferenceError) as info:
            run_requests(pool, deployment(srv.base_url), [request()])
        assert srv.request_count == 3
    assert info.value.status == 500
    assert pool.stats["mock/model"] == ClientStats(requests=3, cache_hits=0, retries=2, errors=1)


def _refusing(first: int, status: int, retry_after: float | None = None):
    """A responder that refuses the first ``first`` requests with ``status`` and answers every later one."""
    seen = []

    def respond(body):
        seen.append(1)
        if len(seen) <= first:
            raise MockHTTPError(status, "slow down", retry_after=retry_after)
        return "Yes"

    return respond


def test_a_rate_limit_outlasting_max_attempts_is_waited_out_not_failed():
    """Issue 53: a gateway that refuses with 429 (no rate headers) for longer than ``max_attempts`` covers, while a
    pacer is still learning its budget, loses no instance: the request is retried within ``rate_limit_wait_s``."""
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.001, max_delay_s=0.01)
    with MockOpenAIServer(responder=_refusing(7, 429)) as srv:
        pool = ClientPool(retry=policy)
        (completion,) = run_requests(pool, deployment(srv.base_url), [request()])
        assert srv.request_count == 8
    assert completion.text == "Yes" and completion.usage.attempts == 8
    assert pool.stats["mock/model"] == ClientStats(requests=8, cache_hits=0, retries=7, errors=0)


@pytest.mark.parametrize("status, retry_after, wait_s", [
    (429, None, 0.0),  # the operator turned the wait off: max_attempts, as before
    (429, 2.0, 0.5),  # the gateway asks for longer than we wait (a spent daily quota): max_attempts
    (503, None, 600.0),  # a server down, no wait stated: max_attempts, as any other failure
    (529, None, 600.0),
])
def test_a_refusal_that_is_no_rate_limit_to_wait_out_gets_max_attempts_only(status, retry_after, wait_s):
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.01, rate_limit_wait_s=wait_s)
    with MockOpenAIServer(responder=_refusing(50, status, retry_after)) as srv:
        pool = ClientPool(retry=policy)
        with pytest.raises(InferenceError) as info:
            run_requests(pool, deployment(srv.base_url), [request()])
        assert srv.request_count == 3
    assert info.value.status == status


@pytest.mark.parametrize("error", [
    MockHTTPError(429, "You exceeded your current quota.", code="insufficient_quota"),  # OpenAI, Azure OpenAI
    MockHTTPError(429, "Rate limit reached.", headers={"x-should-retry": "false"}),  # the server says: no retry
])
def test_a_refusal_the_server_says_no_retry_helps_is_not_retried(error):
    def respond(body):
        raise error

    with MockOpenAIServer(responder=respond) as srv:
        pool = ClientPool(retry=FAST)
        with pytest.raises(InferenceError) as info:
            run_requests(pool, deployment(srv.base_url), [request()])
        assert srv.request_count == 1
    assert info.value.status == 429 and not info.value.retryable


def test_the_retry_policy_waits_out_a_rate_limit_for_rate_limit_wait_s():
    """``RetryPolicy.retries``, the one rule the pool and the seeded simulations follow."""
    policy = RetryPolicy(max_attempts=6, rate_limit_wait_s=600.0)
    limited, down = Outcome(Verdict.RATE_LIMITED), Outcome(Verdict.TRANSIENT)
    assert policy.retries(5, down, 500, None) and not policy.retries(6, down, 500, None)
    assert not policy.retries(1, Outcome(Verdict.FATAL), 400, None)
    assert policy.retries(40, limited, 429, 599.0) and not policy.retries(40, limited, 429, 600.0)
    assert policy.retries(6, Outcome(Verdict.RATE_LIMITED, 30.0), 429, 570.0)  # back within the wait
    assert not policy.retries(6, Outcome(Verdict.RATE_LIMITED, 31.0), 429, 570.0)  # asked to come back after it
    assert not policy.retries(6, limited, 503, 1.0) and policy.retries(6, Outcome(Verdict.RATE_LIMITED, 2.0), 503, 1.0)
    assert policy.retries(6, limited, 400, 1.0)  # a provider's throttling code (Bedrock's ThrottlingException)
    # the wait counts from the request's first rate-limit refusal, not from a 500 before it
    assert first_rate_limit(down, 500, None, 5.0) is None
    assert first_rate_limit(limited, 429, None, 7.0) == 7.0 and first_rate_limit(limited, 429, 7.0, 9.0) == 7.0
    with pytest.raises(ValueError):
        RetryPolicy(rate_limit_wait_s=-1.0)


def test_non_retryable_400_fails_fast_with_a_clear_message():
    def reject(body):
        raise MockHTTPError(400, "model 'x' does not exist")

    with MockOpenAIServer(responder=reject) as srv:
        pool = ClientPool()  # default policy: 6 attempts, but a 400 is never retried
        with pytest.raises(InferenceError, match=r"HTTP 400: model 'x' does not exist") as info:
            run_requests(pool, deployment(srv.base_url), [request()])
        assert srv.request_count == 1
    assert not info.value.retryable and pool.stats["mock/model"].retries == 0


def test_retry_after_is_a_floor_for_the_wait():
    calls = []

    def throttle_once(body):
        calls.append(1)
        if len(calls) == 1:
            raise MockHTTPError(429, "slow down", retry_after=0.3)
        return "Yes"

    waits: list[float] = []
    with MockOpenAIServer(responder=throttle_once) as srv:
        async def go():
            client = RetryingClient(OpenAIClient(deployment(srv.base_url)), RetryPolicy(base_delay_s=0.001),
                                    on_retry=lambda err, n, wait: waits.append(wait))
            try:
                return await client.generate(request())
            finally:
                await client.aclose()

        completion = asyncio.run(go())
    assert completion.text == "Yes" and completion.usage.attempts == 2 and waits == [0.3]


def test_unreachable_server_raises_server_unreachable_naming_the_url(refused_url):
    url = f"{refused_url}/v1"
    pool = ClientPool(retry=RetryPolicy(max_attempts=2, base_delay_s=0.001))
    with pytest.raises(ServerUnreachable, match=f"cannot reach {url}"):
        run_requests(pool, deployment(url), [request()])
    assert pool.stats["mock/model"] == ClientStats(requests=2, cache_hits=0, retries=1, errors=1)


def test_backoff_is_exponential_capped_and_fully_jittered():
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=30)
    assert [policy.backoff(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    rng = random.Random(0)
    draws = [policy.delay(3, rng) for _ in range(2000)]
    assert 0 <= min(draws) < 0.1 and 1.9 < max(draws) <= 2.0  # uniform over [0, 2]
    assert policy.delay(1, rng, retry_after=5.0) == 5.0
    assert policy.delay(1, rng, retry_after=500.0) == 30  # a server's Retry-After within our ceiling
    assert RetryPolicy(jitter="none").delay(2, rng) == 1.0
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


# -- cache --------------------------------------------------------------------------------------


def test_second_identical_request_makes_no_http_request(tmp_path):
    path = tmp_path / "cache" / "requests.sqlite"
    with MockOpenAIServer(latency_s=0.01) as srv:
        first = run_requests(ClientPool(cache=RequestCache(path)), deployment(srv.base_url),
                             [request(i) for i in range(20)])
        assert srv.request_count == 20
        srv.reset()
        pool = ClientPool(cache=RequestCache(path))  # a fresh pool and connection: what a second run does
        second = run_requests(pool, deployment(srv.base_url), [request(i) for i in range(20)])
        assert srv.request_count == 0
        # anything that changes the answer is a different key
        run_requests(ClientPool(cache=RequestCache(path)), deployment(srv.base_url), [request(0, temperature=0.7)])
        run_requests(ClientPool(cache=RequestCache(path)), deployment(srv.base_url, served_model_name="other"),
                     [request(0)])
        assert srv.request_count == 2
    assert [c.text for c in second] == [c.text for c in first]
    assert all(c.usage.cached and c.usage.latency_s == 0 and c.usage.attempts == 0 for c in second)
    assert [c.usage.prompt_tokens for c in second] == [c.usage.prompt_tokens for c in first]
    assert pool.stats["mock/model"] == ClientStats(requests=0, cache_hits=20, retries=0, errors=0)


def test_failures_are_not_cached(tmp_path):
    cache = RequestCache(tmp_path / "c.sqlite")
    with MockOpenAIServer(error_rate=1.0) as srv:
        with pytest.raises(InferenceError):
            run_requests(ClientPool(cache=cache, retry=RetryPolicy(max_attempts=1)), deployment(srv.base_url),
                         [request()])
    assert len(cache) == 0


def test_cache_hit_within_one_run_before_the_commit(tmp_path):
    cache = RequestCache(tmp_path / "c.sqlite")
    with MockOpenAIServer() as srv:
        async def go():
            client = ClientPool(cache=cache).get(deployment(srv.base_url))
            a = await client.generate(request())
            b = await client.generate(request())  # queued for commit, already visible
            await client.aclose()
            return a, b

        a, b = asyncio.run(go())
        assert srv.request_count == 1
    assert not a.usage.cached and b.usage.cached and a.text == b.text


def test_writes_are_committed_in_batches(tmp_path):
    cache = RequestCache(tmp_path / "c.sqlite", commit_interval_s=0.05)

    async def trickle():
        started = time.perf_counter()
        for i in range(100):  # completions arriving one by one, as they do from a server
            cache.put_nowait(f"k{i}", Completion(f"a{i}", "stop", Usage()))
            await asyncio.sleep(0.002)
        await cache.aclose()
        return time.perf_counter() - started

    elapsed = asyncio.run(trickle())
    reopened = RequestCache(tmp_path / "c.sqlite")
    assert len(reopened) == 100 and reopened.get("k99").text == "a99"
    # at most one commit per interval (plus the final one), bounded by the time it really took: a loaded
    # machine stretches the trickle and the bound alike
    assert 1 <= cache.commits <= elapsed / 0.05 + 2

    # and without the clock: entries arriving one by one within an interval (an hour) are one commit
    slow = RequestCache(tmp_path / "d.sqlite", commit_interval_s=3600.0)

    async def burst() -> None:
        for i in range(100):
            slow.put_nowait(f"k{i}", Completion(f"a{i}", "stop", Usage()))
            await asyncio.sleep(0)  # the loop turns between arrivals
        await slow.aclose()

    asyncio.run(burst())
    assert slow.commits == 1 and len(RequestCache(tmp_path / "d.sqlite")) == 100


WRITER = r"""
import asyncio, sys
from medhelm.inference.cache import RequestCache
from medhelm.specs import Completion, Usage

async def main(path, worker):
    cache = RequestCache(path)
    async def put(i):
        await asyncio.sleep(0)
        cache.put_nowait(f"key-{i}", Completion(f"answer {i}", "stop", Usage(prompt_tokens=i, completion_tokens=1)))
    for start in range(0, 600, 50):  # shared keys 0..599 from every worker, in bursts of concurrent tasks
        await asyncio.gather(*(put(i) for i in range(start, start + 50)))
        await asyncio.sleep(0.001)
    await asyncio.gather(*(put(1000 * (worker + 1) + i) for i in range(200)))  # own keys
    await cache.aclose()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_cache_is_safe_with_three_concurrent_writer_processes(tmp_path):
    import sqlite3
    import subprocess

    path = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w)], stderr=subprocess.PIPE, text=True)
             for w in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    cache = RequestCache(path)
    assert len(cache) == 600 + 3 * 200
    for key, i in [("key-0", 0), ("key-599", 599), ("key-1000", 1000), ("key-3199", 3199)]:
        hit = cache.get(key)
        assert hit is not None and hit.text == f"answer {i}" and hit.usage.prompt_tokens == i and hit.usage.cached
    cache.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- pool ---------------------------------------------------------------------------------------


def test_concurrency_cap_per_deployment():
    # replies are held until 3 (then 12) requests are in flight at once: the counts are reached however slowly
    # this machine sends them, and a cap that let a fourth through would show as 4
    with MockOpenAIServer(hold_until_in_flight=3) as srv:
        run_requests(ClientPool(), deployment(srv.base_url, max_concurrency=3), [request(i) for i in range(12)])
        assert srv.request_count == 12 and srv.max_in_flight == 3
    with MockOpenAIServer(hold_until_in_flight=12) as srv:
        run_requests(ClientPool(), deployment(srv.base_url), [request(i) for i in range(12)])
        assert srv.max_in_flight == 12


def test_one_client_per_deployment_and_separate_counters():
    with MockOpenAIServer() as srv:
        pool = ClientPool()
        a, b = deployment(srv.base_url), deployment(srv.base_url, name="mock/judge")
        assert pool.get(a) is pool.get(a) and pool.get(a) is not pool.get(b)

        async def go():
            await pool.get(a).generate(request(1))
            await asyncio.gather(pool.get(b).generate(request(2)), pool.get(b).generate(request(3)))
            await pool.aclose()

        asyncio.run(go())
    assert pool.stats["mock/model"].requests == 1 and pool.stats["mock/judge"].requests == 2
    assert pool.total() == ClientStats(requests=3)


def _samples(telemetry) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in telemetry.registry.collect() for s in fam.samples}


def test_telemetry_sees_numbers_never_text(tmp_path):
    """Per attempt and per request, through the pool: retries, codes, cache hits apart, tokens only of requests
    that reached the model; no label carries prompt or answer text."""
    from medhelm.telemetry import Telemetry

    t = Telemetry("test")
    with MockOpenAIServer(rate_limit_rate=0.5, retry_after_s=0.001, seed=1) as srv:
        pool = ClientPool(cache=RequestCache(tmp_path / "c.sqlite"), retry=FAST, observer=t)
        done = run_requests(pool, deployment(srv.base_url), [request(i) for i in range(10)])
        sent = srv.request_count
        pool2 = ClientPool(cache=RequestCache(tmp_path / "c.sqlite"), retry=FAST, observer=t)
        run_requests(pool2, deployment(srv.base_url), [request(0)])
        assert srv.request_count == sent  # the cache answered
    with MockOpenAIServer(error_rate=1.0) as srv:
        with pytest.raises(InferenceError):
            run_requests(ClientPool(retry=RetryPolicy(max_attempts=1), observer=t), deployment(srv.base_url),
                         [request()])
    got = _samples(t)
    lab = (("deployment", "mock/model"), ("role", "candidate"))

    def value(name: str, *extra: tuple[str, str]) -> float:
        return got.get((name, tuple(sorted(lab + extra))), 0.0)

    assert value("medhelm_model_requests_total", ("outcome", "ok")) == 10
    assert value("medhelm_model_requests_total", ("outcome", "cached")) == 1
    assert value("medhelm_model_requests_total", ("outcome", "error")) == 1
    assert value("medhelm_model_attempts_total", ("code", "429")) == sent - 10
    assert value("medhelm_model_attempts_total", ("code", "200")) == 10
    assert value("medhelm_model_attempts_total", ("code", "500")) == 1
    assert value("medhelm_model_retries_total") == sent - 10 == pool.stats["mock/model"].retries
    assert value("medhelm_model_attempt_duration_seconds_count") == sent + 1
    assert value("medhelm_model_request_duration_seconds_count") == 11  # cache hits are not timed
    assert value("medhelm_model_request_duration_seconds_sum") > 0
    assert value("medhelm_tokens_total", ("kind", "prompt")) == sum(c.usage.prompt_tokens for c in done)
    assert value("medhelm_cached_tokens_total", ("kind", "prompt")) == done[0].usage.prompt_tokens
    assert value("medhelm_model_requests_in_flight") == 0
    texts = {v for (_, labels), _ in got.items() for _, v in labels}
    assert not any("lesion" in v or "Case" in v or v in ("Yes", "No") for v in texts)


def test_kserve_v2_without_its_module_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "medhelm.inference.kserve_v2", None)  # as if the file were missing
    dep = Deployment(name="kserve/x", model_name="x", kind="kserve_v2", base_url="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="kserve/x.*kserve_v2"):
        make_client(dep)


def test_batched_commit_keeps_every_character_of_the_completion(tmp_path, monkeypatch):
    """A batch goes to SQLite as multi-row INSERT statements (cache.py; 4 rows a statement here, so the 9
    entries take two full statements and a partial one): text with quotes, backslashes, line breaks, NULs,
    non-Latin script, emoji and RTL marks reads back identical from a fresh process's view."""
    from medhelm.inference import cache as cache_module

    monkeypatch.setattr(cache_module, "ROWS_A_STATEMENT", 4)
    texts = ['He said "no".', "C:\\temp\\x", "line1\nline2\r\n\ttab", "nul\x00inside", "Fièvre 39 °C, 発熱",
             "emoji 🩺 and \u202eRTL", "", "[1, 2]", '{"json": true}']
    cache = RequestCache(tmp_path / "c.sqlite")

    async def fill():
        for i, text in enumerate(texts):
            await cache.put(f"k{i}", Completion(text=text, finish_reason="stop", usage=Usage(prompt_tokens=i)))
        await cache.aclose()
    asyncio.run(fill())
    again = RequestCache(tmp_path / "c.sqlite")
    got = [again.get(f"k{i}") for i in range(len(texts))]
    again.close()
    assert [c.text for c in got] == texts
    assert [c.usage.prompt_tokens for c in got] == list(range(len(texts))) and all(c.usage.cached for c in got)


def test_a_full_batch_is_committed_without_waiting_and_a_transaction_holds_at_most_a_batch(tmp_path, monkeypatch):
    """Answers arriving faster than the commit interval: every BATCH entries are committed at once (not after
    the interval, 30 s here), so the queue and a transaction's rows stay bounded however long the run."""
    from medhelm.inference import cache as cache_module

    monkeypatch.setattr(cache_module, "BATCH", 4)
    cache = RequestCache(tmp_path / "c.sqlite", commit_interval_s=3600.0)
    sizes: list[int] = []
    commit = cache._commit
    monkeypatch.setattr(cache, "_commit", lambda batch: (sizes.append(len(batch)), commit(batch))[1])

    async def fill() -> float:
        for i in range(10):
            await cache.put(f"{i:064x}", Completion(f"a{i}", "stop", Usage()))
        started = time.perf_counter()
        while cache.commits < 2 and time.perf_counter() - started < 600:
            await asyncio.sleep(0.01)
        waited = time.perf_counter() - started
        await cache.aclose()
        return waited

    waited = asyncio.run(fill())
    assert waited < 600 and sizes[:2] == [4, 4]  # two full batches, long before the hour's interval
    assert sum(sizes) == 10 and max(sizes) <= 4
    again = RequestCache(tmp_path / "c.sqlite")
    assert len(again) == 10 and again.get(f"{9:064x}").text == "a9"
    again.close()


def test_batches_of_any_size_use_a_handful_of_distinct_statements(tmp_path, monkeypatch):
    """sqlite3 keeps up to 128 prepared statements a connection and a many-row INSERT is large: batches of
    every size from 1 to 300 rows must be written with statements of a few sizes only (powers of two up to
    ROWS_A_STATEMENT), so the statement cache cannot grow with a long run; every row is stored."""
    from medhelm.inference import cache as cache_module

    used: set[int] = set()
    real = cache_module._insert
    monkeypatch.setattr(cache_module, "_insert", lambda rows: (used.add(rows), real(rows))[1])
    cache = RequestCache(tmp_path / "c.sqlite")
    written = 0
    for size in range(1, 301):
        cache._commit({f"{written + i:064x}": "{}" for i in range(size)})
        written += size
    assert used <= {cache_module.ROWS_A_STATEMENT >> k for k in range(9)} and len(used) <= 9
    assert len(cache) == written
    cache.close()


def test_the_pool_waits_for_commits_when_answers_outrun_sqlite(tmp_path, monkeypatch):
    """The pool queues each answer without a coroutine and waits only when more than MAX_PENDING wait for a
    commit: the queue stays within MAX_PENDING plus the requests in flight however fast the server answers
    and however many requests there are, and every answer is stored."""
    from medhelm.inference import cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_PENDING", 5)
    monkeypatch.setattr(cache_module, "BATCH", 3)
    cache = RequestCache(tmp_path / "c.sqlite", commit_interval_s=0.01)
    most = 0
    put_nowait = cache.put_nowait

    def watched(key, completion):
        nonlocal most
        put_nowait(key, completion)
        most = max(most, len(cache._pending))

    monkeypatch.setattr(cache, "put_nowait", watched)

    async def workers(base_url: str) -> list[Completion]:  # 4 callers, 20 requests each (as a run's workers)
        pool = ClientPool(cache=cache, retry=FAST)
        client = pool.get(deployment(base_url))
        try:
            async def one(w: int) -> list[Completion]:
                return [await client.generate(request(w * 20 + i)) for i in range(20)]
            return [c for part in await asyncio.gather(*(one(w) for w in range(4))) for c in part]
        finally:
            await pool.aclose()

    with MockOpenAIServer() as srv:
        completions = asyncio.run(workers(srv.base_url))
    assert len(completions) == 80 and srv.request_count == 80
    assert most <= 5 + 4  # each caller may queue its answer before it waits for a commit
    again = RequestCache(tmp_path / "c.sqlite")
    assert len(again) == 80
    again.close()
