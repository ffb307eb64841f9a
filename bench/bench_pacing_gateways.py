"""``--max-concurrency auto`` behind real gateways (medhelm.devtools.gateways: Debian's nginx and HAProxy, rate
limiters nobody here wrote), in front of the repository's mock (20 ms, no limit of its own): issue 53's "pace to any
gateway" checked against the real things, measured in one run, written to docs/benchmarks.md.

nginx refuses past its rate with a bare 429 (or its default 503): no ``Retry-After``, no rate header. Cases: a
second of burst (``burst=10 nodelay`` at 10 requests a second), the same answered 503, shards of a Job behind one
address (nginx's key is the client address: they share one bucket), ``burst`` without ``nodelay`` (nginx holds the
burst's requests to its pace instead of refusing them), no ``burst`` at all (nginx's bare ``limit_req``: any request
sooner than the rate's spacing after the last one let through is refused) and a small budget; and HAProxy's
sliding count of every request over 1, 10 or 60 s, the refused ones included (``track-sc`` before ``deny``), refusing
past its part of 600 a minute with a bare 429. Each case's clients
run in a process of their own (the real ``ClientPool``, ``auto``, 64 workers a pool that always have a prompt; shards
are pools with ``share`` 1/n), all cases at once for ``--seconds`` (240). Counted from the first minute on, from
the gateway's own access log (the oracle): refusals over requests, requests let through over the budget; each shard's
accepted (its own count) over a fair share; instances failed (the pool's ``RetryPolicy`` gave up: a 429 past six
attempts and ten minutes).
``python bench/bench_pacing_gateways.py [--seconds 240] [--no-write]``; needs nginx and HAProxy (scripts/_env.sh
unpacks them).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import cpu_described, write_section  # noqa: E402

from medhelm.devtools.mock_openai import MockOpenAIServer  # noqa: E402
from medhelm.devtools.gateways import HaproxyGateway, NginxGateway, haproxy_binary, nginx_binary  # noqa: E402


@dataclass(frozen=True)
class NginxCase:
    name: str
    rpm: int
    burst: int
    nodelay: bool = True
    status: int | None = 429  # None: nginx's default (503)
    shards: int = 1

    def gateway(self, upstream: str) -> NginxGateway:
        return NginxGateway(upstream, self.rpm, self.burst, self.nodelay, self.status)


@dataclass(frozen=True)
class HaproxyCase:
    name: str
    rpm: int
    window_s: int
    shards: int = 1

    def gateway(self, upstream: str) -> HaproxyGateway:
        return HaproxyGateway(upstream, self.rpm, self.window_s)


CASES = (
    NginxCase("600 r/m, burst=10 nodelay (a second of burst), 429", 600, 10),
    NginxCase("600 r/m, burst=10 nodelay, nginx's default 503", 600, 10, status=None),
    NginxCase("2 shards, 600 r/m, burst=10 nodelay", 600, 10, shards=2),
    NginxCase("3 shards, 900 r/m, burst=15 nodelay", 900, 15, shards=3),
    NginxCase("600 r/m, burst=10 without nodelay (nginx holds the burst to its pace)", 600, 10, nodelay=False),
    NginxCase("600 r/m, no burst (one request: nginx's bare limit_req)", 600, 0),
    NginxCase("60 r/m, burst=1 nodelay", 60, 1),
    HaproxyCase("HAProxy: more than 10 in 1 s refused (600 a minute), refused ones counted", 600, 1),
    HaproxyCase("HAProxy: more than 100 in 10 s refused, refused ones counted", 600, 10),
    HaproxyCase("HAProxy: more than 600 in 60 s refused, refused ones counted", 600, 60),
    HaproxyCase("2 shards, HAProxy: more than 600 in 60 s refused, refused ones counted", 600, 60, shards=2),
)


def _clients(conn, case: NginxCase | HaproxyCase, url: str, t0: float, seconds: float) -> None:
    import asyncio

    from bench_pacing_rates import Case, shard

    async def run():
        like = Case(case.name, None, shards=case.shards)
        return await asyncio.gather(*(shard(like, url, i, t0, seconds) for i in range(case.shards)))

    records = asyncio.run(run())
    conn.send([(len(r.accepted), sum(1 for t, _ in r.accepted if t >= min(60.0, seconds / 2)), r.failed, r.summary)
               for r in records])


def row(case: NginxCase | HaproxyCase, log: list[tuple[float, int]], t0: float, seconds: float, shards: list) -> str:
    a = min(60.0, seconds / 2)  # shorter runs (a smoke test): their second half
    counted = [status for at, status in log if a <= at - t0 < seconds]
    ok = sum(1 for status in counted if status == 200)
    refused = len(counted) - ok
    used = ok / (case.rpm / 60.0 * (seconds - a))
    each = [late for _, late, _, _ in shards]
    fair = sum(each) / len(each) if each else 0.0
    share = " / ".join(f"{e / fair:.2f}" for e in each) if len(each) > 1 and fair else ""
    failed = sum(f for _, _, f, _ in shards)
    paced = next((p for p in shards[0][3].split("; ") if p.startswith("paced to")), "") if shards else ""
    return (f"| {case.name} | **{used:.3f}** | {refused}/{len(counted)} (**{refused / max(1, len(counted)):.2%}**) | "
            f"{share or '—'} | {failed} | {paced} |")


def run_all(seconds: float) -> list[str]:
    upstream = MockOpenAIServer(latency_s=0.02).start()
    gateways = [c.gateway(f"http://127.0.0.1:{upstream.port}").start() for c in CASES]
    t0 = time.time() + 5.0  # the clients' processes start first (spawned: they import medhelm)
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    try:
        for case, gw in zip(CASES, gateways):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_clients, args=(child, case, gw.base_url, t0, seconds))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        results = [parent.recv() for parent in pipes]
        for proc in procs:
            proc.join(30)
    finally:
        for gw in gateways:
            gw.stop()
        upstream.stop()
    return [row(case, gw.log(), t0, seconds, res) for case, gw, res in zip(CASES, gateways, results)]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=240.0)
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md as it is")
    args = p.parse_args()
    if nginx_binary() is None or haproxy_binary() is None:
        print("bench_pacing_gateways: nginx or HAProxy not found (scripts/_env.sh unpacks Debian's packages into the "
              "tools cache)", file=sys.stderr)
        return 2
    load = os.getloadavg()
    version = os.popen(f"{nginx_binary()} -v 2>&1").read().strip().removeprefix("nginx version: ")
    haproxy = HaproxyGateway.version()
    rows = run_all(args.seconds)
    cpu, _, _ = cpu_described(())
    body = "\n".join([
        f"Issue 53 against real gateways: {version}'s `limit_req` and HAProxy {haproxy}'s stick table (Debian's "
        "packages) in front of the repository's mock (20 ms, no limit of its own), refusing with a bare 429 (no "
        "`Retry-After`, no rate header) or nginx's default 503; the real `ClientPool` (`auto`, 64 workers a pool), "
        f"each case's clients in a process of their own, every case at once for {args.seconds:.0f} s, counted from "
        "the first minute in the gateway's own access log. Shards share nginx's bucket (one client address). Targets "
        "as the mock's cases: refusals <= 2 %, >= 95 % of the budget, each shard >= 0.60 of a fair share, no instance "
        "failed. Without `burst` nginx refuses any request sooner than its rate's spacing after the last one it let "
        "through: a client alone then spaces its sends evenly, and the network's jitter sets what it can use "
        "(docs/pacing.md, a gateway without burst). HAProxy counts the refused requests too: a "
        "client refused while it sends keeps its window full (docs/pacing.md, a gateway that counts refused "
        "requests).",
        "",
        "| gateway | let through over the budget | refused | shares | instances failed | the run's summary (first "
        "shard) |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"Reproduce: `python bench/bench_pacing_gateways.py --seconds {args.seconds:.0f}`. CPU: {cpu}, "
        f"{os.cpu_count()} cores; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}.",
    ])
    print(body)
    if not args.no_write:
        write_section("pacing-nginx", "Pacing behind real gateways: nginx and HAProxy (issue 53)", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
