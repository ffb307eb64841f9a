"""Content-addressed request cache in SQLite: ``GenerationRequest.cache_key(deployment)`` -> Completion.

PHI: the cache holds every prompt and answer in clear text. It lives on the machine (or the Job's
PVC) next to the results, is never uploaded or exported, and is deleted with the results.

Where: ``cache_file(local_path)`` = ``<local-path>/cache/requests.sqlite``, or env ``MEDHELM_CACHE_FILE``.
SQLite's WAL needs shared memory between all its users, which a network filesystem (the cluster's
ReadWriteMany volume) cannot give, so the Helm chart gives every writer (each service pod, each shard
index) its own file and sets ``MEDHELM_CACHE_JOURNAL=delete`` (rollback journal, one process per file).

Concurrency: WAL mode (the default) lets readers run while one writer commits; ``busy_timeout`` makes writers from
several processes (the shards of one suite share a PVC) wait for each other instead of failing.
Reads are single primary-key lookups (tens of microseconds) done inline; writes are queued and committed
by a worker thread in batches gathered over ``commit_interval_s`` (a full batch, ``BATCH`` entries, is
committed at once), so the event loop never waits for a file lock and a run makes a few commits per second,
not one per request. A batch is inserted in key order: the keys are uniformly random digests, so in arrival
order each row would land on a random page of the key's index and the same page be written again and again;
in key order each index page is visited once a commit (fewer pages written to the WAL: docs/design-notes.md).
At most ``MAX_PENDING`` entries wait: beyond that ``put`` (the pool: ``backlogged``/``backlog``) waits for the
next commit (a fast server slows to SQLite's pace). Memory does not grow with the run: the queue, the batch being
committed and SQLite's page cache (``PAGE_CACHE_KIB`` a connection) are all bounded. A queued entry is already
visible to ``get``; entries still queued when a process is killed are simply asked again next time. Only successful
completions are stored; a hit comes back with ``usage.cached=True``, ``latency_s=0`` and ``attempts=0``.

A cache that was empty when this process opened it (a first run) answers a miss without asking SQLite:
the keys this process wrote are remembered in a fixed 1 MiB Bloom filter (a "maybe" asks SQLite), so a
run of a million requests does not pay a million SELECTs that find nothing. Entries another process adds
meanwhile are then not seen by this one (asked again: a cache is never needed for correctness).

Beside the completions, table ``pacing_limits`` keeps the limit each deployment's ``--max-concurrency auto`` pacer
last settled at, keyed by (deployment name, endpoint, setting) — ``PaceSettings.remembered_as`` names the setting;
a fixed ``--max-concurrency N`` has none and never reads or writes it. ``learnt_limit`` reads it when the pool
makes the deployment's pacer; ``remember_limit`` queues a new value, committed with the next batch (within
``commit_interval_s``), so a run that is killed still leaves the last limit it settled at. Forgetting them:
``DELETE FROM pacing_limits`` (or deleting the cache file). A limit is a number, never patient text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

from medhelm.json_text import compact_json
from medhelm.specs import Completion

ENV_FILE, ENV_JOURNAL = "MEDHELM_CACHE_FILE", "MEDHELM_CACHE_JOURNAL"
JOURNAL_MODES = ("wal", "delete", "truncate")
BUSY_TIMEOUT_MS = 60_000
COMMIT_INTERVAL_S = 0.25
BATCH = 4096  # entries a transaction at most; a full batch is committed without waiting for the interval
MAX_PENDING = 2 * BATCH  # queued entries before put() waits for a commit (see put)
PAGE_CACHE_KIB = 512  # SQLite page cache per connection (its default, 2 MiB, fills on a large cache file)
_BLOOM_BITS = 1 << 23  # 1 MiB, 3 probes: few false "maybe"s at a million keys (docs/design-notes.md)
# A batch is inserted ROWS_A_STATEMENT rows a statement (3 parameters a row: under SQLite's oldest limit of 999),
# the rest in statements of power-of-two sizes (``_sizes``): a handful of distinct statements, because the
# sqlite3 module keeps up to 128 prepared ones a connection and a statement of 256 rows is large bytecode (a
# statement per remainder size would hold memory that grows with the run's distinct batch sizes).
# Why not executemany: it binds each row with the GIL held and steps it with the GIL released, so the commit
# thread takes the GIL back from the event loop once a row, CPU the event loop pays on every request
# (docs/design-notes.md). Why not one JSON array walked by json_each: SQLite parses the whole text into a tree (a
# batch's memory several times over) and both sides pay the encoding.
ROWS_A_STATEMENT = 256


def _insert(rows: int) -> str:
    return "INSERT OR REPLACE INTO completions (key, value, created) VALUES " + ", ".join(["(?, ?, ?)"] * rows)


def _sizes(n: int) -> list[int]:
    """``n`` rows as statement sizes: full ones of ROWS_A_STATEMENT, then the rest's binary digits."""
    full, rest = divmod(n, ROWS_A_STATEMENT)
    return [ROWS_A_STATEMENT] * full + [1 << bit for bit in reversed(range(rest.bit_length())) if rest >> bit & 1]


_SCHEMA = "CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
# Added to older cache files as they are opened (CREATE ... IF NOT EXISTS, as completions): nothing else changes.
_LIMITS_SCHEMA = ("CREATE TABLE IF NOT EXISTS pacing_limits (deployment TEXT NOT NULL, endpoint TEXT NOT NULL, "
                  "setting TEXT NOT NULL, learnt INTEGER NOT NULL, updated REAL NOT NULL, "
                  "PRIMARY KEY (deployment, endpoint, setting))")
_UPSERT_LIMIT = ("INSERT OR REPLACE INTO pacing_limits (deployment, endpoint, setting, learnt, updated) "
                 "VALUES (?, ?, ?, ?, ?)")
LimitKey = tuple[str, str, str]  # (deployment name, endpoint, setting): see the module's docstring


def cache_file(local_path: str | Path) -> Path:
    """This process's cache file: env MEDHELM_CACHE_FILE, else ``<local-path>/cache/requests.sqlite``.

    ``{writer}`` in MEDHELM_CACHE_FILE becomes ``shard-<JOB_COMPLETION_INDEX>`` in a Job's shard (the same
    file when the index is retried) and the host name (the pod's name) anywhere else."""
    template = os.environ.get(ENV_FILE)
    if not template:
        return Path(local_path) / "cache" / "requests.sqlite"
    index = os.environ.get("JOB_COMPLETION_INDEX")
    writer = f"shard-{index}" if index else socket.gethostname()
    return Path(template.replace("{writer}", writer))


def journal_mode() -> str:
    from medhelm.errors import ConfigError

    mode = (os.environ.get(ENV_JOURNAL) or "wal").lower()
    if mode not in JOURNAL_MODES:
        raise ConfigError(f"{ENV_JOURNAL}={mode!r} is not one of {', '.join(JOURNAL_MODES)}")
    return mode


class RequestCache:
    def __init__(self, path: str | Path, *, commit_interval_s: float = COMMIT_INTERVAL_S) -> None:
        self.path = Path(path)
        self.commit_interval_s = commit_interval_s
        self.journal = journal_mode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._reader = self._connect()
        empty = self._reader.execute("SELECT NOT EXISTS (SELECT 1 FROM completions)").fetchone()[0]
        self._ours: bytearray | None = bytearray(_BLOOM_BITS // 8) if empty else None  # see the docstring
        self._writer: sqlite3.Connection | None = None
        self._write_lock = threading.Lock()  # one batch commit at a time per process
        self._pending: dict[str, str] = {}  # written by us, not yet committed: visible to get() already
        self._limits: dict[LimitKey, int] = {}  # pacing limits remembered, not yet committed
        self._flusher: asyncio.Task[None] | None = None
        self._gathering = False  # the flusher is waiting for more entries (safe to cancel)
        self._committed: asyncio.Event | None = None  # set after each commit: wakes put()s that wait
        self._full: asyncio.Future[None] | None = None  # resolved when a batch is full: ends the gathering
        self._closing = False  # aflush() is running: the flusher stops after its current commit
        self.commits = 0  # batches committed by this process (observability, tests)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA journal_mode = {self.journal.upper()}")
        # WAL + NORMAL: durable at checkpoints, never corrupt; a rollback journal needs FULL for that
        conn.execute("PRAGMA synchronous = NORMAL" if self.journal == "wal" else "PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        conn.execute(_SCHEMA)
        conn.execute(_LIMITS_SCHEMA)
        return conn

    # -- reading -------------------------------------------------------------------------------

    def get(self, key: str) -> Completion | None:
        value = self._pending.get(key)
        if value is None:
            if self._ours is not None and not self._maybe_ours(key):
                return None  # empty when opened, and never written by us
            row = self._reader.execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            value = row[0]
        completion = Completion.from_json(json.loads(value))
        return dataclasses.replace(
            completion, usage=dataclasses.replace(completion.usage, cached=True, latency_s=0.0, attempts=0))

    def _maybe_ours(self, key: str) -> bool:
        ours = self._ours
        a, b, c = _probes(key)
        return bool(ours[a >> 3] & (1 << (a & 7)) and ours[b >> 3] & (1 << (b & 7))  # type: ignore[index]
                    and ours[c >> 3] & (1 << (c & 7)))

    def learnt_limit(self, key: LimitKey) -> int | None:
        """The limit last remembered for ``key`` (deployment name, endpoint, setting), None if never."""
        if key in self._limits:
            return self._limits[key]
        row = self._reader.execute("SELECT learnt FROM pacing_limits WHERE deployment = ? AND endpoint = ? AND "
                                   "setting = ?", key).fetchone()
        return int(row[0]) if row is not None and int(row[0]) >= 1 else None

    def __len__(self) -> int:
        self.flush()
        return int(self._reader.execute("SELECT COUNT(*) FROM completions").fetchone()[0])

    # -- writing -------------------------------------------------------------------------------

    def put_nowait(self, key: str, completion: Completion) -> None:
        """Queue a completion; it is committed by the running flusher (or by ``flush``/``aflush``)."""
        self._pending[key] = compact_json(completion.to_json())
        ours = self._ours
        if ours is not None:
            a, b, c = _probes(key)
            ours[a >> 3] |= 1 << (a & 7)
            ours[b >> 3] |= 1 << (b & 7)
            ours[c >> 3] |= 1 << (c & 7)
        self._kick()

    def remember_limit(self, key: LimitKey, limit: int) -> None:
        """Queue the limit ``key``'s pacer settled at; committed with the next batch (``flush``/``aflush``)."""
        if self._limits.get(key) == limit:
            return
        self._limits[key] = limit
        self._kick()

    def _kick(self) -> None:
        """Make sure something commits what is queued: the running flusher, or now when there is no event loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: commit now
            self.flush()
            return
        flusher = self._flusher
        if flusher is None or flusher.done() or flusher.get_loop() is not loop:
            self._flusher = loop.create_task(self._flush_loop())
        elif len(self._pending) >= BATCH and self._full is not None:
            _resolve(self._full)

    async def put(self, key: str, completion: Completion) -> None:
        """``put_nowait``, then wait while more than ``MAX_PENDING`` entries are queued: when SQLite commits
        slower than answers come (a fast server, a large cache file), callers slow down instead of the queue
        growing with the run."""
        self.put_nowait(key, completion)
        await self.backlog()

    def backlogged(self) -> bool:
        """More than ``MAX_PENDING`` entries wait for a commit: callers should ``await backlog()``."""
        return len(self._pending) > MAX_PENDING

    async def backlog(self) -> None:
        """Wait while more than ``MAX_PENDING`` entries are queued (see ``put``)."""
        while len(self._pending) > MAX_PENDING and self._flusher is not None and not self._flusher.done():
            if self._committed is None:
                self._committed = asyncio.Event()
            await self._committed.wait()

    async def _flush_loop(self) -> None:
        try:
            while (self._pending or self._limits) and not self._closing:
                if len(self._pending) < BATCH:  # let a batch gather, until it is full or the interval is over
                    loop = asyncio.get_running_loop()
                    full = self._full = loop.create_future()
                    timer = loop.call_later(self.commit_interval_s, _resolve, full)
                    self._gathering = True
                    try:
                        await full
                    finally:
                        self._gathering = False
                        self._full = None
                        timer.cancel()
                # at most BATCH entries a transaction: the batch's copy and SQLite's work stay bounded
                await asyncio.to_thread(self._commit, dict(itertools.islice(self._pending.items(), BATCH)))
                self._wake_putters()
        finally:
            self._wake_putters()  # a flusher that stops (or fails) never leaves a put() waiting

    def _wake_putters(self) -> None:
        committed, self._committed = self._committed, None
        if committed is not None:
            committed.set()

    async def aflush(self) -> None:
        """Commit everything queued so far (await before reading the file from another process)."""
        self._closing = True
        try:
            flusher = self._flusher
            if flusher is not None and not flusher.done():
                if self._gathering:
                    flusher.cancel()
                await asyncio.gather(flusher, return_exceptions=True)
            while self._pending or self._limits:
                await asyncio.to_thread(self._commit, dict(itertools.islice(self._pending.items(), BATCH)))
        finally:
            self._closing = False

    def flush(self) -> None:
        """Blocking commit of everything queued (for code without an event loop)."""
        while self._pending or self._limits:
            self._commit(dict(itertools.islice(self._pending.items(), BATCH)))

    def _commit(self, batch: dict[str, str]) -> None:
        with self._write_lock:
            if self._writer is None:
                self._writer = self._connect()
            now = time.time()
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                items = sorted(batch.items())  # in key order: SQLite's index pages are visited once, in order
                start = 0
                for size in _sizes(len(items)):
                    chunk = items[start:start + size]
                    start += size
                    self._writer.execute(_insert(size), [x for k, v in chunk for x in (k, v, now)])
                limits = dict(self._limits)  # a handful of rows (one a paced deployment)
                for key, limit in limits.items():
                    self._writer.execute(_UPSERT_LIMIT, (*key, limit, now))
                self._writer.execute("COMMIT")
                self.commits += 1
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
        for key, value in batch.items():
            if self._pending.get(key) is value:  # a newer put of the same key stays queued
                self._pending.pop(key, None)
        for key, limit in limits.items():
            if self._limits.get(key) == limit:  # a newer limit stays queued
                self._limits.pop(key, None)

    async def aclose(self) -> None:
        await self.aflush()
        self.close()

    def close(self) -> None:
        self.flush()
        with self._write_lock:
            for conn in (self._reader, self._writer):
                if conn is not None:
                    conn.close()
            self._writer = None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _probes(key: str) -> tuple[int, int, int]:
    # A cache key is a sha256 hex digest (GenerationRequest.cache_key): its own bits are already uniform, so
    # they are the probes; any other key is hashed first (only determinism matters for correctness).
    try:
        h = int(key[:24], 16) if len(key) == 64 else None
    except ValueError:
        h = None
    if h is None:
        h = int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12).digest(), "little")
    mask = _BLOOM_BITS - 1
    return h & mask, (h >> 32) & mask, (h >> 64) & mask
