"""What a run's access record is made of (issue 51): ``ClientPool.watch`` counts every request sent to a
deployment (retries included, cache hits not) with the models the server says answered; ``public_url`` keeps no
credential, query string or fragment; ``Completion.model`` is neither recorded per instance nor cached nor part
of a completion's equality. Against the mock OpenAI server; times compared with the test's own clock only."""

from __future__ import annotations

import asyncio
import time

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.inference import ClientPool, RequestCache, RetryPolicy, public_url
from medhelm.specs import Completion, Deployment, GenerationRequest, Message, Usage


def _dep(base_url: str, name: str = "mock/model") -> Deployment:
    return Deployment(name=name, model_name="test/model", kind="openai", base_url=base_url, served_model_name="model",
                      timeout_s=10.0)


def _req(i: int) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", f"case {i}"),), max_tokens=2)


@pytest.mark.parametrize("url, shown", [
    ("https://user:pw@llm.internal.example:8443/v1?api-version=2024-10-21#frag", "https://llm.internal.example:8443/v1"),
    ("https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?key=AIzaSECRET",
     "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent"),
    ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ("http://LLM.example/v1/", "http://llm.example/v1/"),
    ("not a url", None), ("", None), (None, None), ("http://host:99999/v1", None),
])
def test_public_url_keeps_no_credential_or_query(url, shown):
    assert public_url(url) == shown


def test_a_watch_counts_requests_retries_and_answers_not_cache_hits(tmp_path):
    with MockOpenAIServer(answered_model="model-2026-11-01", error_rate=0.3, seed=5) as srv:
        dep = _dep(srv.base_url)
        pool = ClientPool(cache=RequestCache(tmp_path / "cache.sqlite"),
                          retry=RetryPolicy(max_attempts=10, base_delay_s=0.001, max_delay_s=0.01))
        opened: list[float] = []

        async def go():
            before = time.time()
            window = pool.watch(dep.name, opened.append)
            other = pool.watch("another/deployment")
            try:
                await asyncio.gather(*(pool.get(dep).generate(_req(i)) for i in range(12)))
                await asyncio.gather(*(pool.get(dep, role="judge").generate(_req(i)) for i in range(12, 14)))
                await asyncio.gather(*(pool.get(dep).generate(_req(i)) for i in range(12)))  # the cache answers
            finally:
                pool.unwatch(window)
                pool.unwatch(other)
            await pool.get(dep).generate(_req(99))  # after unwatch: not counted
            after = time.time()
            await pool.aclose()
            return window, other, before, after

        window, other, before, after = asyncio.run(go())
        sent = srv.request_count
    assert window.requests == sent - 1 and window.requests >= 14  # every attempt, retries too; both roles
    assert pool.stats[dep.name].cache_hits == 12
    assert window.answered == {"model-2026-11-01": 14}
    assert opened == [window.first] and before <= window.first <= window.last <= after
    assert other.requests == 0 and other.first is None
    doc = window.to_json()
    assert doc["first_request"].endswith("+00:00") and doc["answered_models"] == ["model-2026-11-01"]


def test_the_answered_model_is_not_recorded_cached_or_compared():
    a = Completion("Yes", "stop", Usage(prompt_tokens=3), model="gpt-4o-2024-08-06")
    b = Completion("Yes", "stop", Usage(prompt_tokens=3))
    assert a == b and "model" not in a.to_json() and Completion.from_json(a.to_json()).model is None


@pytest.mark.parametrize("answered", ["Synthetic note 7: BP 117 mmHg", "<script>x</script>", "gpt-4o?note=a&b"])
def test_an_answered_model_that_is_no_model_name_is_not_kept(answered):
    """A hostile or broken server that puts the prompt (patient text) or markup in its model field: not kept."""
    with MockOpenAIServer(answered_model=answered) as srv:
        dep = _dep(srv.base_url)
        pool = ClientPool()

        async def go():
            window = pool.watch(dep.name)
            for i in range(3):
                await pool.get(dep).generate(GenerationRequest(
                    messages=(Message("user", f"Synthetic note {i}: BP {110 + i} mmHg. Yes or no?"),), max_tokens=2))
            await pool.aclose()
            return window

        window = asyncio.run(go())
    assert window.requests == 3 and window.answered == {} and window.to_json()["answered_models"] == []
