"""A set of single-connection ``httpx.AsyncClient`` "lanes", one request per lane at a time.

Why not one client with a pool of N connections: httpcore's pool re-scans every connection (a
``select`` per connection) for every queued request and hands a freed connection to several waiters
at once, the losers spinning; at 16 requests in flight that cost ~2-3 ms of CPU per request, more than
the rest of the pipeline together. One connection per client never queues inside httpcore: measured
~3x less client CPU per request (bench/bench_core.py). Lanes are created on demand, up to ``size``,
and share one SSL context (building one loads the CA bundle: ~70 ms each).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable

import httpx


class HttpLanes:
    def __init__(self, factory: Callable[[], httpx.AsyncClient], size: int) -> None:
        self._factory, self._size = factory, max(1, size)
        self._idle: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        self._waiters: collections.deque[asyncio.Future[httpx.AsyncClient]] = collections.deque()

    @contextlib.asynccontextmanager
    async def lane(self) -> AsyncIterator[httpx.AsyncClient]:
        client = await self._acquire()
        try:
            yield client
        finally:
            self._release(client)

    async def _acquire(self) -> httpx.AsyncClient:
        if self._idle:
            return self._idle.pop()  # LIFO: the most recently used connection is the likeliest still open
        if len(self._all) < self._size:
            client = self._factory()
            self._all.append(client)
            return client
        waiter: asyncio.Future[httpx.AsyncClient] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a lane just as we were cancelled
                self._release(waiter.result())
            raise

    def _release(self, client: httpx.AsyncClient) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(client)
                return
        self._idle.append(client)

    async def aclose(self) -> None:
        clients, self._all, self._idle = self._all, [], []
        for client in clients:
            await client.aclose()
