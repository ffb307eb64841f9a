"""CPU-heavy scoring work (ROUGE tokenising and stemming, normalising long outputs) off the calling process.

Without a pool (``medhelm run``/``job``) the work runs in a thread, as before. A gRPC service passes a
``CpuPool``: a bounded ``concurrent.futures.ProcessPoolExecutor`` whose worker processes hold their own
GIL, so a caller's 1 MB item keeps no Python thread of the service off the interpreter: health checks,
new calls and streams are answered while it is scored (measured: bench/bench_abuse.py). Threads were not
enough: pure-Python stemming holds the GIL and every other thread, the event loop included, queues behind it.

Bounds: ``workers`` processes (started clean with ``spawn``: no copy of the server's gRPC threads or
sockets; as with any ``spawn``, the program's ``__main__`` must be safe to import, as ``medhelm``'s are), at most ``2 * workers`` tasks handed to them at once (the rest wait, async, holding
nothing extra), workers run at a lower CPU priority (``os.nice``) than the serving process, and each is
replaced after ``max_tasks`` tasks (memory a hostile input fragmented is given back). A worker whose service
died without closing the pool (killed outright) exits within about a second (``ORPHAN_CHECK_S``).

Failure semantics: a worker that dies (killed, out of memory) fails the task it was running with
``ScoringWorkerLost`` (UNAVAILABLE: retry later) and the pool is rebuilt for the next task; an exception
raised by the scoring function itself reaches the caller unchanged, as it would from a thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import BrokenExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from medhelm.errors import InferenceError

if TYPE_CHECKING:  # the process pool (and multiprocessing) is imported when a pool is first made: a run
    from concurrent.futures import ProcessPoolExecutor  # without scoring processes never pays for it

T = TypeVar("T")
WORKER_NICE = 10  # scoring yields the CPU to the serving process (health, I/O) within the pod
ORPHAN_CHECK_S = 1.0  # how often a worker looks whether the service that spawned it is still there


class ScoringWorkerLost(InferenceError):
    """A scoring worker process died while scoring (retryable: the next call gets a fresh worker)."""

    def __init__(self) -> None:
        super().__init__("a scoring worker process died while scoring (out of memory?); retry later",
                         retryable=True)


def _orphan_watch(parent: int) -> None:
    while True:
        time.sleep(ORPHAN_CHECK_S)
        if os.getppid() != parent:  # the service is gone (its orphans are re-parented): so is this worker
            os._exit(0)


def _worker_start(parent: int) -> None:
    """Each worker: a lower CPU priority, and an exit of its own once the service that spawned it has died. A
    service killed outright (SIGKILL, the OOM killer) cannot shut its pool down, and a worker waiting for tasks
    would wait forever, its memory held (a container's processes all die with its first one, a service run
    another way not). A thread rather than ``PR_SET_PDEATHSIG``: that signal follows the *thread* that spawned
    the worker, and the pool spawns replacements from its own manager thread. ``parent`` is the service's pid as
    the service knew it when it made the pool, not ``os.getppid()`` read here: a service killed while this worker
    was still starting would leave it reading init's pid, and it would wait forever."""
    try:
        os.nice(WORKER_NICE)
    except OSError:  # not permitted: the worker still runs, at the same priority
        pass
    threading.Thread(target=_orphan_watch, args=(parent,), name="orphan-watch", daemon=True).start()


class CpuPool:
    """A bounded pool of scoring processes shared by every metric of one service process."""

    def __init__(self, workers: int, *, max_tasks: int = 500) -> None:
        if workers < 1:
            raise ValueError("a CpuPool needs at least one worker")
        self.workers, self._max_tasks = workers, max_tasks
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None

    def _pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=_worker_start, initargs=(os.getpid(),),
                                                     max_tasks_per_child=self._max_tasks)
            return self._executor

    def _broken(self, executor: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is executor:
                self._executor = None
        executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker process (``fn`` and its arguments must pickle: module-level functions)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(2 * self.workers)
        async with self._slots:
            executor = self._pool()
            try:
                return await asyncio.wrap_future(executor.submit(fn, *args))
            except BrokenExecutor:  # BrokenProcessPool (only a process pool runs here)
                self._broken(executor)
                raise ScoringWorkerLost() from None

    def start(self) -> None:
        """Spawn the workers now (a service calls it at start-up, so the first call does not pay for it)."""
        pool = self._pool()
        for f in [pool.submit(os.getpid) for _ in range(self.workers)]:
            f.result()

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


async def run_cpu(pool: CpuPool | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in ``pool``'s worker processes, or in a thread when there is no pool."""
    if pool is None:
        return await asyncio.to_thread(fn, *args)
    return await pool.run(fn, *args)
