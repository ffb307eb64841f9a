"""Model clients for every deployment kind, composed with cache, retries and accounting by ``ClientPool``.

    pool = ClientPool(cache=RequestCache(path), retry=RetryPolicy(), observer=telemetry)  # or NullObserver()
    client = pool.get(deployment)          # one client per (deployment, role), reused
    judge = pool.get(judge_deployment, role="judge")
    completion = await client.generate(request)
    pool.stats["vllm/qwen2.5-7b-instruct"].retries
    await pool.aclose()

Order per request: cache lookup (a hit never waits for a slot) -> retries -> the deployment's pacer
(``pacing/``: a concurrency slot, fixed or adaptive, and its rate budget; held for one attempt, released
during backoff; a 429/503 pauses it for ``Retry-After``) -> the kind's client.
With a cache, ``auto``'s pacer starts at the limit the deployment's last run settled at and keeps the one it
settles at (``RequestCache.learnt_limit``/``remember_limit``, keyed by deployment, endpoint and setting).
Candidate models and judges share one pool, so they share connections, cache and counters. The
observer (``medhelm.telemetry.Telemetry``) is bound once per (deployment, role): per request it costs a
few counter increments (attempt code and latency, retries, in-flight, tokens, cache hits apart).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import PurePosixPath

from medhelm.backend_kinds import BY_KIND
from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference.base import InferenceObserver, ModelClient, NullObserver
from medhelm.inference.cache import RequestCache
from medhelm.inference.pacing import OVERLOAD_STATUS, Pacer, PacingPolicy
from medhelm.inference.retry import RetryingClient, RetryPolicy
from medhelm.specs import Completion, Deployment, GenerationRequest, canonical_json

__all__ = ["ClientPool", "ClientStats", "InferenceError", "NullObserver", "PacingPolicy", "PooledClient",
           "RequestCache", "RequestWindow", "RetryPolicy", "ServerUnreachable", "make_client", "public_url"]


@dataclass(frozen=True)
class ClientStats:
    requests: int = 0  # HTTP/model calls actually made, retries included (cache hits excluded)
    cache_hits: int = 0
    retries: int = 0
    errors: int = 0  # generate() calls that failed for good (after retries)


def make_client(deployment: Deployment, *, connections: int | None = None) -> ModelClient:
    """The bare client for a deployment's kind (no cache, no retries): the class its row of
    ``backend_kinds.KINDS`` names, imported now. ``connections``: how many requests the caller may have in
    flight, the HTTP clients' connection cap when the deployment sets no ``max_concurrency`` (never below
    ``http.DEFAULT_POOL_SIZE``)."""
    row = BY_KIND.get(deployment.kind.value)
    if row is None:
        raise ConfigError(f"deployment '{deployment.name}': unsupported kind '{deployment.kind.value}'")
    path = row.client_path(deployment.options)
    if path is None:
        allowed = " or ".join(f"'{value}'" for value in row.variants)
        raise ConfigError(f"deployment '{deployment.name}': options.{row.option} must be {allowed}")
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise ConfigError(f"deployment '{deployment.name}': kind '{row.kind}' is not available in this "
                          f"installation ({module_name} is missing)") from None
    return getattr(module, class_name)(deployment, connections=connections)



class RequestWindow:
    """What a run asked of one deployment (``ClientPool.watch``): when its first request was sent and when its
    last answer (or failure) came back, as wall-clock times in UTC, how many requests (attempts) were sent,
    and the models the server said answered (``Completion.model``, at most ``MAX_ANSWERED`` different ones).
    Cache hits are no requests: an answer taken from the cache was asked for before the window."""

    __slots__ = ("first", "last", "requests", "answered", "on_first")
    MAX_ANSWERED = 8

    def __init__(self, on_first: Callable[[float], None] | None = None) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.requests = 0
        self.answered: dict[str, int] = {}
        self.on_first = on_first  # called once, with the time, when the first request is sent

    def sent(self, at: float) -> None:
        if self.first is None:
            self.first = at
            if self.on_first is not None:
                self.on_first(at)
        self.requests += 1

    def done(self, at: float, model: str | None) -> None:
        if self.last is None or at > self.last:
            self.last = at
        if model is not None and (model in self.answered or len(self.answered) < self.MAX_ANSWERED):
            self.answered[model] = self.answered.get(model, 0) + 1

    def to_json(self) -> dict:
        return {"first_request": utc_iso(self.first), "last_request": utc_iso(self.last), "requests": self.requests,
                "answered_models": sorted(self.answered, key=lambda m: -self.answered[m])}


IN_PROCESS, NO_MODEL = "in-process", "none (no model)"  # a run's access endpoint when no server is asked


def utc_iso(at: float | None) -> str | None:
    """A wall-clock time as ISO 8601 in UTC with its zone (``2026-12-01T22:40:01.123+00:00``)."""
    return None if at is None else datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds")


def public_url(url: str | None) -> str | None:
    """``url`` as a report may show it: scheme, host, port and path; never a user, password, query string
    (an Azure ``api-version``, a key in ``?key=``) or fragment. None when it is not a URL."""
    if not url:
        return None
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    if not parts.scheme or not host:
        return None
    host = f"[{host}]" if ":" in host else host
    return urllib.parse.urlunsplit((parts.scheme, host + (f":{port}" if port else ""), parts.path, "", ""))


def engine_version(distribution: str) -> str | None:
    """The installed version of an in-process engine (``llama_cpp_python``), None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


class _Counters:
    __slots__ = ("requests", "cache_hits", "retries", "errors", "windows")

    def __init__(self) -> None:
        self.requests = self.cache_hits = self.retries = self.errors = 0
        self.windows: list[RequestWindow] = []  # the runs watching this deployment's requests (ClientPool.watch)

    def snapshot(self) -> ClientStats:
        return ClientStats(self.requests, self.cache_hits, self.retries, self.errors)


class _Slots:
    """Counts and times every attempt, and holds the deployment's pacer slot (if it is paced) while it runs."""

    def __init__(self, inner: ModelClient, counters: _Counters, pacer: Pacer | None, metrics) -> None:
        self._inner, self._counters, self._metrics = inner, counters, metrics
        self._pacer = pacer

    @property
    def deployment(self) -> Deployment:
        return self._inner.deployment

    async def generate(self, request: GenerationRequest) -> Completion:
        pacer = self._pacer
        if pacer is None:
            return await self._attempt(request)
        tokens = _expected_tokens(request) if pacer.counts_tokens else 0.0
        started = await pacer.acquire(tokens)
        try:
            completion = await self._attempt(request)
        except InferenceError as err:
            overloaded = err.status in OVERLOAD_STATUS or getattr(err, "throttled", False)
            pacer.release(started, ok=False, overloaded=overloaded, retry_after=err.retry_after, tokens_taken=tokens)
            raise
        except BaseException:
            pacer.release(started, ok=False, tokens_taken=tokens)
            raise
        usage = completion.usage
        used = (usage.prompt_tokens or 0) + (usage.completion_tokens or 0) if usage.prompt_tokens is not None \
            else None
        pacer.release(started, ok=True, tokens_used=used, tokens_taken=tokens)
        return completion

    async def _attempt(self, request: GenerationRequest) -> Completion:
        counters = self._counters
        counters.requests += 1
        windows = counters.windows
        if windows:
            now = time.time()
            for window in windows:
                window.sent(now)
        metrics = self._metrics
        metrics.attempt_started()
        started = time.perf_counter()
        try:
            completion = await self._inner.generate(request)
        except InferenceError as err:
            metrics.attempt_finished(time.perf_counter() - started, err)
            _answered(windows, None)
            raise
        except BaseException:
            metrics.attempt_cancelled()
            _answered(windows, None)
            raise
        metrics.attempt_finished(time.perf_counter() - started, None)
        _answered(windows, completion.model, request)
        return completion

    async def aclose(self) -> None:
        await self._inner.aclose()


def _answered(windows: list[RequestWindow], model: str | None, request: GenerationRequest | None = None) -> None:
    if windows:
        now = time.time()
        if model is not None and request is not None and not all(model in w.answered for w in windows) \
                and not names_a_model(model, request):
            model = None  # a new name is checked once per window: never a server's echo of the prompt
        for window in windows:
            window.done(now, model)


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+ -]{0,239}")


def names_a_model(name: str, request: GenerationRequest, window: int = 12) -> bool:
    """Whether a server's answered-model field looks like a model name (letters, digits and ``._:/@+ -``)
    and quotes none of the prompt (no run of ``window`` characters of a message): a hostile or broken server
    cannot put patient text into a run's access record."""
    if not _MODEL_NAME.fullmatch(name):
        return False
    for message in request.messages:
        text = " ".join(message.content.split())
        for i in range(0, max(len(text) - window, 0) + 1, window // 2):
            chunk = text[i:i + window]
            if len(chunk) >= window and chunk in name:
                return False
    return True


def _expected_tokens(request: GenerationRequest) -> float:
    """What a tokens-per-minute budget is charged up front (gateways count the prompt and ``max_tokens``);
    the real usage replaces it when the answer comes. ~4 characters a token is the usual estimate."""
    return len(request.messages_json()) / 4.0 + (request.max_tokens or 0)


class PooledClient:
    """A deployment's client with the pool's cache, retries, concurrency cap and accounting."""

    def __init__(self, inner: ModelClient, pool: ClientPool, counters: _Counters, role: str = "candidate") -> None:
        self._raw, self._pool, self._counters = inner, pool, counters
        self._deployment = inner.deployment
        self.role = role
        self._metrics = pool.observer.bind_client(self._deployment, role)
        self._window: int | None = None
        self._window_known = False
        self._identity = canonical_json(self._deployment.identity())  # the cache keys' constant part
        self._client = RetryingClient(_Slots(inner, counters, pool.pacer(inner), self._metrics),
                                      pool.retry, on_retry=self._count_retry)

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    @property
    def answers_instances(self):
        """The raw client's ``answer(instance, request, majority=)`` when it answers from the instance (kind
        baseline: no model, nothing to cache or retry), else None."""
        return getattr(self._raw, "answer", None)

    def endpoint(self) -> dict[str, str | None]:
        """Where and what this client asks, as a run's access record keeps it: the kind, the endpoint (the URL
        without credentials or query string; ``in-process`` for an engine in this process), the model name a
        server is asked for; for an in-process engine the model file's name (never its folder) and the engine's
        version."""
        d = self._deployment
        row = BY_KIND[d.kind.value]
        out: dict[str, str | None] = {"kind": d.kind.value}
        if not (row.in_process or row.local):  # the model name a server is asked for
            out["served_model"] = d.served_model_name or d.model_name
        if row.in_process:
            out["endpoint"] = IN_PROCESS
            if d.gguf_path:
                out["model_file"] = PurePosixPath(d.gguf_path.removeprefix("package:").replace("\\", "/")).name
            version = engine_version("llama_cpp_python") if d.kind.value == "llamacpp" else None
            out["engine"] = f"llama-cpp-python {version}" if version else None
        elif row.local:
            out["endpoint"] = NO_MODEL
        else:
            out["endpoint"] = public_url(d.base_url or getattr(self._raw, "endpoint_url", None))
        return out

    def count_tokens(self, text: str) -> int | None:
        """Exact token count when the model's tokenizer is local (llama.cpp), else None (estimate yourself)."""
        counter = getattr(self._raw, "count_tokens", None)
        return counter(text) if counter is not None else None

    async def context_window(self) -> int | None:
        """The deployment's context length: its ``max_sequence_length``, else what the server reports
        (vLLM's ``max_model_len``), asked once; None when neither says. An in-process engine's own window
        (llama.cpp ``n_ctx``) is always read, and the smaller of it and ``max_sequence_length`` wins."""
        stated = self._deployment.max_sequence_length
        local = getattr(self._raw, "context_window_is_local", False)
        if stated and not local:
            return stated
        if not self._window_known:
            ask = getattr(self._raw, "context_window", None)
            self._window = await ask() if ask is not None else None
            self._window_known = True
        if stated and self._window:
            return min(stated, self._window)
        return self._window or stated

    async def generate(self, request: GenerationRequest) -> Completion:
        cache = self._pool.cache
        key = request.cache_key(self._identity) if cache is not None else ""
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                self._counters.cache_hits += 1
                self._metrics.cache_hit(hit)
                return hit
        started = time.perf_counter()
        try:
            completion = await self._client.generate(request)
        except InferenceError:
            self._counters.errors += 1
            self._metrics.request_finished(time.perf_counter() - started, None)
            raise
        self._metrics.request_finished(time.perf_counter() - started, completion)
        if cache is not None:
            cache.put_nowait(key, completion)
            if cache.backlogged():  # commits fall far behind: wait (put's rule, without a coroutine a request)
                await cache.backlog()
        return completion

    def _count_retry(self, err: InferenceError, retry: int, wait: float) -> None:
        self._counters.retries += 1
        self._metrics.retried()

    async def aclose(self) -> None:
        await self._raw.aclose()


def _endpoint(url: str | None) -> str:
    """The base URL as the pacing limits' key keeps it (``public_url``: no user, password, query or fragment,
    which the cache file must not hold)."""
    return public_url(url) or ""


class ClientPool:
    def __init__(self, cache: RequestCache | None = None, retry: RetryPolicy | None = None,
                 observer: InferenceObserver | None = None, connections: int | None = None,
                 pacing: PacingPolicy | None = None) -> None:
        self.cache = cache
        self.connections = connections  # requests in flight the owner allows (a run's --max-concurrency)
        self.retry = retry or RetryPolicy()
        self.observer = observer or NullObserver()
        self.pacing = pacing or PacingPolicy(ceiling=connections or PacingPolicy.ceiling)
        self._clients: dict[tuple[Deployment, str], PooledClient] = {}
        self._counters: dict[str, _Counters] = {}
        self._pacers: dict[Deployment, Pacer | None] = {}

    def pacer(self, raw: ModelClient) -> Pacer | None:
        """The deployment's one pacer (shared by its roles), or None when nothing limits it but the workers."""
        deployment = raw.deployment
        if deployment not in self._pacers:
            local = not BY_KIND[deployment.kind.value].paced  # in-process engines and baselines: no server to pace
            settings = self.pacing.settings(fixed=deployment.max_concurrency, rate_limits=deployment.rate_limits,
                                            local=local, deployment=deployment.name)
            remember = None
            setting = settings.remembered_as
            if self.cache is not None and setting is not None:  # auto: start where its last run settled
                key = (deployment.name, _endpoint(deployment.base_url), setting)
                if settings.start is None:
                    settings = dataclasses.replace(settings, start=self.cache.learnt_limit(key))
                remember = functools.partial(self.cache.remember_limit, key)
            paced = settings.fixed or settings.adaptive or settings.requests_per_minute or settings.tokens_per_minute
            bind = getattr(self.observer, "bind_pacing", None)
            pacer = Pacer(settings, observer=bind(deployment) if bind is not None else None,
                          on_settled=remember) if paced or (not local and hasattr(raw, "rate_listener")) else None
            if pacer is not None and hasattr(raw, "rate_listener"):
                raw.rate_listener = pacer.observe_headers  # the server's x-ratelimit-* headers reach the budget
            self._pacers[deployment] = pacer
        return self._pacers[deployment]

    def pacers(self) -> dict[str, Pacer]:
        """Deployment name -> its pacer (the run's summary line reads limits, plateaus and waits here)."""
        return {d.name: p for d, p in self._pacers.items() if p is not None}

    def get(self, deployment: Deployment, role: str = "candidate") -> PooledClient:
        """The pooled client of ``deployment``; ``role`` (candidate | judge) labels its metrics only."""
        client = self._clients.get((deployment, role))
        if client is None:
            counters = self._counters.setdefault(deployment.name, _Counters())
            same = next((c for (d, _), c in self._clients.items() if d == deployment), None)
            raw = same._raw if same is not None else make_client(deployment, connections=self.connections)  # one connection pool per deployment
            client = PooledClient(raw, self, counters, role)
            self._clients[(deployment, role)] = client
        return client

    def watch(self, deployment: str, on_first: Callable[[float], None] | None = None) -> RequestWindow:
        """A window that records every request sent to ``deployment`` (any role) until ``unwatch``;
        ``on_first(time)`` is called when the first one is sent."""
        window = RequestWindow(on_first)
        self._counters.setdefault(deployment, _Counters()).windows.append(window)
        return window

    def unwatch(self, window: RequestWindow) -> None:
        for counters in self._counters.values():
            if window in counters.windows:
                counters.windows.remove(window)

    @property
    def stats(self) -> dict[str, ClientStats]:
        return {name: c.snapshot() for name, c in self._counters.items()}

    def total(self) -> ClientStats:
        snaps = self.stats.values()
        return ClientStats(*(sum(getattr(s, f) for s in snaps) for f in ("requests", "cache_hits", "retries",
                                                                          "errors")))

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        closed: set[int] = set()
        for client in clients:
            if id(client._raw) not in closed:  # a deployment used in two roles shares one raw client
                closed.add(id(client._raw))
                await client.aclose()
        if self.cache is not None:
            await self.cache.aflush()
