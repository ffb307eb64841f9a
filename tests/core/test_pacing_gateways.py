"""``auto`` behind real gateways (medhelm.devtools.gateways), rate limiters nobody here wrote. nginx's ``limit_req``:
its bare refusals (429 without ``Retry-After``, or nginx's default 503) pace the real ``ClientPool``, no instance
fails, and what the pacer counts is what nginx's own access log says it did. HAProxy's stick table, which counts the
refused requests too: a client refused while it sends is not kept locked out. Timing-free assertions only: a loaded
machine sends slower, never faster, so the bounds on refusals (the issue's first measurement: 47 % refused) hold on
any host. The budget used and the refusals after the first minute are bench/bench_pacing_gateways.py's
(docs/benchmarks.md). Needs nginx and HAProxy: scripts/_env.sh unpacks Debian's packages into the tools cache;
each test skips without its gateway."""

from __future__ import annotations

import asyncio

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.devtools.gateways import HaproxyGateway, NginxGateway, haproxy_binary, nginx_binary
from medhelm.inference import ClientPool, NullObserver, PacingPolicy
from medhelm.specs import Deployment, GenerationRequest, Message

NGINX = pytest.mark.skipif(nginx_binary() is None, reason="nginx missing: scripts/_env.sh unpacks Debian's nginx")
HAPROXY = pytest.mark.skipif(haproxy_binary() is None,
                             reason="HAProxy missing: scripts/_env.sh unpacks Debian's haproxy and its libraries")

INSTANCES = 240
WORKERS = 32


class _Counts(NullObserver):
    def __init__(self) -> None:
        self.refused = 0

    def bind_pacing(self, deployment):
        counts = self

        class Watch:
            def limit_changed(self, limit, plateau) -> None: ...

            def waited(self, seconds) -> None: ...

            def rate_learnt(self, requests_per_s, tokens_per_s) -> None: ...

            def rate_limited(self) -> None:
                counts.refused += 1

        return Watch()


async def _run(url: str, shards: int = 1, instances: int = INSTANCES) -> tuple[list[int], list[int], list, _Counts]:
    """``INSTANCES`` requests a shard through pools of ``auto`` (``share`` 1/shards) against ``url``: each shard's
    answered and failed counts, its pacer, and the refusals its observer saw."""
    counts = _Counts()
    dep = Deployment(name="gw/nginx", model_name="gw/model", kind="openai", base_url=url,
                     served_model_name="mock-model")

    async def shard(index: int):
        pool = ClientPool(connections=WORKERS, observer=counts, pacing=PacingPolicy(adaptive=True, share=1 / shards))
        client = pool.get(dep)
        todo = list(range(instances))
        answered = failed = 0

        async def worker() -> None:
            nonlocal answered, failed
            while todo:
                i = todo.pop()
                request = GenerationRequest(messages=(Message("user", f"shard {index} item {i}: a short note"),),
                                            max_tokens=8)
                try:
                    await client.generate(request)
                    answered += 1
                except Exception:  # noqa: BLE001 - counted: an instance that failed
                    failed += 1

        await asyncio.gather(*(worker() for _ in range(WORKERS)))
        pacer = next(iter(pool.pacers().values()))
        await pool.aclose()
        return answered, failed, pacer

    done = await asyncio.gather(*(shard(i) for i in range(shards)))
    return [d[0] for d in done], [d[1] for d in done], [d[2] for d in done], counts


@pytest.fixture
def upstream():
    with MockOpenAIServer(latency_s=0.02) as srv:
        yield srv


@NGINX
@pytest.mark.parametrize("status", [429, None], ids=["429", "nginx-default-503"])
def test_a_run_behind_nginx_limit_req_is_paced_and_every_instance_answered(upstream, status):
    """20 requests a second with a second of burst (``burst=20 nodelay``): every instance answered; nginx's log holds
    one line per attempt, its refusals are the pacer's count (and the observer's), all refused with the status asked
    (nginx's default 503 is rate-limiting too); the pacer learnt a rate from the refusals alone, and its summary says
    so; refusals stay far under the 47 % of an unpaced client."""
    with NginxGateway(f"http://127.0.0.1:{upstream.port}", requests_per_minute=1200, burst=20,
                      status=status) as gw:
        answered, failed, pacers, counts = asyncio.run(_run(gw.base_url))
    log = gw.log()
    refused = [s for _, s in log if s != 200]
    assert answered == [INSTANCES] and failed == [0]
    assert len(log) == INSTANCES + len(refused)  # every attempt reached nginx once: nothing retried unseen
    assert set(refused) <= {status or 503}
    assert pacers[0].rate_limited == counts.refused == len(refused) > 0
    assert upstream.request_count == INSTANCES  # what nginx let through, the model answered
    learnt = pacers[0].learnt
    assert learnt is not None and learnt.paces
    assert "paced to" in pacers[0].summary()
    assert len(refused) <= 0.15 * len(log), (len(refused), len(log))


@NGINX
def test_shards_behind_one_nginx_bucket_are_all_answered_and_counted(upstream):
    """Two shards of a Job behind one address share nginx's bucket (30 a second, 30 of burst): every instance of
    each answered, the refusals nginx logged are the ones the two pacers counted, and the summary tells the Job to
    state its budget (a bare 429 gives shards no fair part to share by)."""
    with NginxGateway(f"http://127.0.0.1:{upstream.port}", requests_per_minute=1800, burst=30) as gw:
        answered, failed, pacers, counts = asyncio.run(_run(gw.base_url, shards=2))
    log = gw.log()
    refused = sum(1 for _, s in log if s == 429)
    assert answered == [INSTANCES, INSTANCES] and failed == [0, 0]
    assert len(log) == 2 * INSTANCES + refused
    assert sum(p.rate_limited for p in pacers) == counts.refused == refused
    assert refused <= 0.15 * len(log), (refused, len(log))
    told = [p for p in pacers if "tell the Job its budget" in p.summary()]
    assert told, [p.summary() for p in pacers]


@NGINX
def test_the_gateway_refuses_a_burst_past_its_limit_and_stops_clean(upstream):
    """The oracle itself: nginx at one request a minute without burst lets one of ten requests sent at once through
    and refuses the rest with the status asked (however slowly a loaded machine sends them), logs each, and its
    folder is gone once stopped."""
    import concurrent.futures
    import urllib.error
    import urllib.request

    def get(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                return reply.status
        except urllib.error.HTTPError as err:
            return err.code

    gw = NginxGateway(f"http://127.0.0.1:{upstream.port}", requests_per_minute=1, status=429).start()
    folder = gw._dir
    try:
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            statuses = sorted(pool.map(lambda _: get(gw.base_url.removesuffix("/v1") + "/v1/models"), range(10)))
    finally:
        gw.stop()
    assert statuses == [200] + [429] * 9
    assert sorted(s for _, s in gw.log()) == statuses
    assert folder is not None and not folder.exists()


@HAPROXY
def test_a_run_behind_haproxy_counting_refused_requests_is_answered_and_counted(upstream):
    """HAProxy refusing more than 200 requests in 10 s, the refused ones counted (``track-sc0`` before ``deny``): every
    instance answered, HAProxy's own log holds each attempt and its refusals are the pacer's count, and the refusals
    are a minority of the attempts. (The lockout such a gateway causes, a learnt rate sent while every request is
    refused, needs a window of a minute: tests/core/test_pacing_rates.py simulates it, bench/bench_pacing_gateways.py
    measures it against HAProxy.)"""
    instances = 200
    with HaproxyGateway(f"http://127.0.0.1:{upstream.port}", requests_per_minute=1200, window_s=10) as gw:
        answered, failed, pacers, counts = asyncio.run(_run(gw.base_url, instances=instances))
    log = gw.log()
    refused = sum(1 for _, s in log if s == 429)
    assert answered == [instances] and failed == [0], (answered, failed, pacers[0].summary())
    assert len(log) == instances + refused and pacers[0].rate_limited == counts.refused == refused
    assert refused <= instances, (refused, pacers[0].summary())
