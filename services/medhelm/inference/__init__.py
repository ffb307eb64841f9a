"""Model clients for every deployment kind, composed with cache, retries, pacing and accounting by ``ClientPool``.

    pool = ClientPool(cache=RequestCache(path), retry=RetryPolicy(), observer=telemetry)  # or NullObserver()
    client = pool.get(deployment)          # one client per (deployment, role), reused
    judge = pool.get(judge_deployment, role="judge")
    completion = await client.generate(request)
    pool.stats["vllm/qwen2.5-7b-instruct"].retries
    await pool.aclose()

One straight path per request, each module entered once: the pool (``PooledClient`` here: the cache lookup — a
hit never waits for a slot — and the request's accounting) -> ``retry.py`` (backoff, deciding from the attempt's
``outcome.Outcome``) -> ``paced.py`` (the gate: the deployment's pacer slot from ``pacing/``, held for one
attempt and released during backoff; the attempt counted; the reply's rate headers and the outcome handed to the
pacer) -> the kind's client (``attempt`` returns an ``outcome.Reply``, raises an ``outcome.Refusal``; helpers
in ``wire.py``) -> ``http.py`` (the transport; ``h1.py`` its connections).
With a cache, ``auto``'s pacer starts at the limit the deployment's last run settled at and keeps the one it
settles at (``RequestCache.learnt_limit``/``remember_limit``, keyed by deployment, endpoint and setting); with none
kept, a process that said it sends a deployment few requests (``expect``) starts it at ``SHORT_START`` and jumps
to ``JUMP_LIMIT`` at its first answer.
Candidate models and judges share one pool, so they share connections, cache and counters. The
observer (``medhelm.telemetry.Telemetry``) is bound once per (deployment, role): per request it costs a
few counter increments (attempt code and latency, retries, in-flight, tokens, cache hits apart).

Failure semantics: an unknown kind, or one whose module this installation lacks, is a ``ConfigError`` naming the
deployment when its client is made; a request that fails for good raises its last attempt's ``InferenceError``
unchanged (counted in ``ClientStats.errors``); a cache hit never fails and never waits.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import time
import urllib.parse
from collections.abc import Callable
from pathlib import PurePosixPath

from medhelm.backend_kinds import BY_KIND
from medhelm.errors import ConfigError, InferenceError, ServerUnreachable
from medhelm.inference.base import InferenceObserver, ModelClient, NullObserver
from medhelm.inference.cache import RequestCache
from medhelm.inference.outcome import WireClient
from medhelm.inference.paced import ClientStats, Counters, PacedClient, RequestWindow, names_a_model, utc_iso
from medhelm.inference.pacing import Pacer, PacingPolicy
from medhelm.inference.retry import RetryingClient, RetryPolicy
from medhelm.json_text import canonical_json
from medhelm.specs import Completion, Deployment, GenerationRequest

__all__ = ["ClientPool", "ClientStats", "InferenceError", "NullObserver", "PacingPolicy", "PooledClient",
           "RequestCache", "RequestWindow", "RetryPolicy", "ServerUnreachable", "make_client", "names_a_model",
           "public_url", "utc_iso"]


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



IN_PROCESS, NO_MODEL = "in-process", "none (no model)"  # a run's access endpoint when no server is asked


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


class PooledClient:
    """A deployment's client with the pool's cache, retries, concurrency cap and accounting."""

    def __init__(self, inner: ModelClient, pool: ClientPool, counters: Counters, role: str = "candidate") -> None:
        self._raw, self._pool, self._counters = inner, pool, counters
        self._deployment = inner.deployment
        self.role = role
        self._metrics = pool.observer.bind_client(self._deployment, role)
        self._window: int | None = None
        self._window_known = False
        self._identity = canonical_json(self._deployment.identity())  # the cache keys' constant part
        self._client = RetryingClient(PacedClient(inner, counters, pool.pacer(inner), self._metrics),
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
        # The one cap on requests in flight: what the owner allows (a run's --max-concurrency, which sizes its
        # workers). auto's ceiling never exceeds it, and each deployment's connection pool follows it
        # (http.connection_cap); a deployment's max_concurrency lowers it for that deployment (the pacer's
        # fixed cap and its connections).
        self.connections = connections
        self.retry = retry or RetryPolicy()
        self.observer = observer or NullObserver()
        pacing = pacing or PacingPolicy()
        self.pacing = dataclasses.replace(pacing, ceiling=min(pacing.ceiling, connections)) if connections else pacing
        self._clients: dict[tuple[Deployment, str], PooledClient] = {}
        self._counters: dict[str, Counters] = {}
        self._pacers: dict[Deployment, Pacer | None] = {}

    def expect(self, requests: dict[str, int]) -> None:
        """Per deployment name, at most how many requests this process will send it; read when the deployment's
        pacer is made (a short run's ``auto`` jumps: ``PaceSettings.jumps``)."""
        self.pacing = dataclasses.replace(self.pacing, expected=tuple(sorted(requests.items())))

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
            # an HTTP provider's replies state the server's rate limits, which a pacer learns its budgets from
            states_limits = not local and isinstance(raw, WireClient)
            bind = getattr(self.observer, "bind_pacing", None)
            pacer = Pacer(settings, observer=bind(deployment) if bind is not None else None,
                          on_settled=remember) if paced or states_limits else None
            self._pacers[deployment] = pacer
        return self._pacers[deployment]

    def pacers(self) -> dict[str, Pacer]:
        """Deployment name -> its pacer (the run's summary line reads limits, plateaus and waits here)."""
        return {d.name: p for d, p in self._pacers.items() if p is not None}

    def get(self, deployment: Deployment, role: str = "candidate") -> PooledClient:
        """The pooled client of ``deployment``; ``role`` (candidate | judge) labels its metrics only."""
        client = self._clients.get((deployment, role))
        if client is None:
            counters = self._counters.setdefault(deployment.name, Counters())
            same = next((c for (d, _), c in self._clients.items() if d == deployment), None)
            raw = same._raw if same is not None else make_client(deployment, connections=self.connections)  # one connection pool per deployment
            client = PooledClient(raw, self, counters, role)
            self._clients[(deployment, role)] = client
        return client

    def watch(self, deployment: str, on_first: Callable[[float], None] | None = None) -> RequestWindow:
        """A window that records every request sent to ``deployment`` (any role) until ``unwatch``;
        ``on_first(time)`` is called when the first one is sent."""
        window = RequestWindow(on_first)
        self._counters.setdefault(deployment, Counters()).windows.append(window)
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
