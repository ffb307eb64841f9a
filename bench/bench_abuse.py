"""Issue 16's bounds under abuse, measured against real `medhelm serve` processes; writes section `abuse` of
docs/benchmarks.md.

1. Scenarios: 20 streams of a 20,000-row (~20 MB) configurable benchmark, each reads one item and stalls:
   RSS growth of the server (``/proc/<pid>/status`` VmRSS) < 250 MB; health p99 <= 100 ms over 200 probes
   while they stall.
2. Metrics: 4 concurrent Score calls with 0.99 MB items (just under the 1 MB item cap) scored by the
   benchmark's ROUGE-L/exact metrics: health p99 <= 100 ms over the probes taken while they run.

    python bench/bench_abuse.py [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from bench_summarize import machine, table, write_section  # noqa: E402
from medhelm.rpc import codec  # noqa: E402
from medhelm.scoring.base import ScoringItem  # noqa: E402
from medhelm.specs import Completion, Instance, Prompt, Reference  # noqa: E402
from medhelm.v1 import common_pb2, metrics_pb2_grpc, scenarios_pb2, scenarios_pb2_grpc  # noqa: E402
from tests.services.conftest import Service, write_deployment, write_qa_benchmark  # noqa: E402
from tests.services.test_abuse import _big_benchmark, _plan, _rss_mb  # noqa: E402


def probes(address: str, n: int, stop: threading.Event | None = None) -> list[float]:
    out = []
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for _ in range(n):
            if stop is not None and stop.is_set():
                break
            t0 = time.perf_counter()
            stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            out.append(time.perf_counter() - t0)
            time.sleep(0.01)
    return out


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    start = machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        root, local = t / "root", t / "prod_env"
        write_deployment(local, "http://127.0.0.1:9/v1")
        cfg = _big_benchmark(root / "big", 20_000, 1000)
        plan = _plan(cfg, local, t / "out")
        svc = Service("scenarios", "--offline", "--output-path", str(t / "out"), "--benchmark-root", str(root))
        try:
            request = scenarios_pb2.StreamInstancesRequest(run_spec_json=codec.dumps(plan.spec.to_json()))
            with grpc.insecure_channel(svc.address) as ch:
                stub = scenarios_pb2_grpc.ScenarioServiceStub(ch)
                idle = probes(svc.address, 200)  # the machine's own noise: the same probes with no calls
                streams = [stub.StreamInstances(request)]
                next(streams[0])
                base = _rss_mb(svc.proc.pid)
                for _ in range(19):
                    streams.append(stub.StreamInstances(request))
                    next(streams[-1])
                time.sleep(1)
                health = probes(svc.address, 200)
                peak = _rss_mb(svc.proc.pid)
                for s in streams:
                    s.cancel()
        finally:
            svc.stop()
        rows += [("scenarios: health p99 with no calls (baseline, 200 probes)", f"{p99(idle) * 1000:.1f} ms", None,
                  None),
                 ("scenarios: RSS growth, 20 stalled streams of a 20 MB benchmark", f"{peak - base:.0f} MB "
                  f"({base:.0f} -> {peak:.0f})", "< 250 MB", peak - base < 250),
                 ("scenarios: health p99 while they stall (200 probes)", f"{p99(health) * 1000:.1f} ms", "<= 100 ms",
                  p99(health) <= 0.1)]

        qa = write_qa_benchmark(root / "qa", 12)
        spec = _plan(qa, local, t / "out").spec
        svc = Service("metrics", "--offline", "--output-path", str(t / "out"), "--local-path", str(local),
                      "--benchmark-root", str(root))
        try:
            text = ("words of a long clinical note " * 140_000)[:1_000_000]
            item = codec.item_message(ScoringItem(spec, Instance("1", "q", (Reference("Yes"),)), Prompt.user("q"),
                                                  Completion(text)), 0)
            request = common_pb2.ScoreRequest(setup=codec.setup_message(spec), item=item)
            stop = threading.Event()
            took: list[float] = []

            def score() -> None:
                with grpc.insecure_channel(svc.address, options=[("grpc.max_send_message_length", 64 << 20)]) as c:
                    t0 = time.perf_counter()
                    metrics_pb2_grpc.MetricsServiceStub(c).Score(request, timeout=600)
                    took.append(time.perf_counter() - t0)

            workers = [threading.Thread(target=score) for _ in range(4)]
            for w in workers:
                w.start()
            watcher = threading.Thread(target=lambda: [w.join() for w in workers] and None or stop.set())
            watcher.start()
            health = probes(svc.address, 100_000, stop)
            watcher.join()
        finally:
            svc.stop()
        rows += [("metrics: 4 concurrent Score calls of 1 MB items", f"{max(took):.1f} s (slowest)", None, None),
                 (f"metrics: health p99 while they run ({len(health)} probes)", f"{p99(health) * 1000:.1f} ms",
                  "<= 100 ms", p99(health) <= 0.1)]
    body = "\n".join([f"Machine: {start}.", "", *table(rows), "",
                      "Limits under test: --max-message-mb 16, 1 MB per item, one shared cached copy of a "
                      "benchmark per server (see docs/security.md)."])
    print(body)
    if not args.no_write:
        write_section("abuse", "Abuse: memory and health under stalled and heavy calls", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
