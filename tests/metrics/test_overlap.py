"""ROUGE values equal rouge-score's own output on real ACI-Bench text, in a thread and in a service's
scoring processes (``scoring/cpu.py``); a scoring process that dies fails its item retryably, the next works."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from rouge_score.rouge_scorer import RougeScorer

from medhelm.scoring import registry
from medhelm.scoring.cpu import CpuPool, ScoringWorkerLost
from medhelm.specs import MetricSpec

from .conftest import scoring_item


def _ours(pairs: list[tuple[str, list[str]]], ctx: object = None) -> list[dict[str, float | None]]:
    [metric] = registry.build_all([MetricSpec("rouge_l"), MetricSpec("rouge_1")], ctx=ctx)  # type: ignore[arg-type]

    async def run() -> list[dict[str, float | None]]:
        results = await asyncio.gather(*(metric.score(scoring_item(p, refs)) for p, refs in pairs))
        return [r.stats for r in results]

    return asyncio.run(run())


def test_rouge_equals_rouge_score_on_real_pairs(aci_pairs: list[tuple[str, list[str]]]) -> None:
    reference = RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    ours = _ours(aci_pairs)
    for (prediction, refs), stats in zip(aci_pairs, ours, strict=True):
        for stat, rouge_type in (("rouge_1", "rouge1"), ("rouge_2", "rouge2"), ("rouge_l", "rougeL")):
            expected = max(reference.score(ref, prediction)[rouge_type].fmeasure for ref in refs)
            assert stats[stat] == pytest.approx(expected, abs=1e-12)
    # the pairs span the range: identical text, a close paraphrase, unrelated patients
    assert ours[4]["rouge_l"] == 1.0
    assert ours[0]["rouge_1"] > 0.6 > ours[2]["rouge_1"]
    assert ours[3]["rouge_1"] == ours[0]["rouge_1"]  # max over references picks the matching note


def test_no_reference_is_unscored(aci_pairs: list[tuple[str, list[str]]]) -> None:
    [stats] = _ours([(aci_pairs[0][0], [])])
    assert stats == {"rouge_1": None, "rouge_2": None, "rouge_l": None}


def test_main_stat_follows_the_name() -> None:
    assert registry.stat_names(MetricSpec("rouge_2")) == ("rouge_2", "rouge_1", "rouge_l")


def test_scoring_processes_give_the_same_values(aci_pairs: list[tuple[str, list[str]]]) -> None:
    pool = CpuPool(2)
    try:
        assert _ours(aci_pairs, SimpleNamespace(cpu=pool)) == _ours(aci_pairs)
        assert pool._executor is not None and len(pool._executor._processes) >= 1  # really ran out of process
    finally:
        pool.close()


def test_a_dead_scoring_process_fails_its_item_retryably_and_the_pool_recovers() -> None:
    pool = CpuPool(1)
    try:
        async def scenario() -> None:
            pid = await pool.run(os.getpid)
            assert pid != os.getpid()
            with pytest.raises(ScoringWorkerLost) as err:
                await pool.run(os.kill, pid, signal.SIGKILL)  # the worker kills itself mid-task
            assert err.value.retryable
            assert await pool.run(os.getpid) not in (pid, os.getpid())  # a fresh worker
        asyncio.run(scenario())
    finally:
        pool.close()


_OWNER = """
import os, sys
from medhelm.scoring.cpu import CpuPool
pool = CpuPool(2)
pool.start()
print(*sorted(pool._executor._processes), flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_workers_of_a_service_killed_outright_exit_too() -> None:
    """A service killed with SIGKILL cannot shut its pool down; its workers must not stay behind as orphans
    (the chaos test's five metrics-service kills left ten, holding their memory, after the suite ended)."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in owner.stdout.readline().split()]
        assert len(workers) == 2 and owner.pid not in workers
        for pid in workers:
            os.kill(pid, 0)  # alive while their service is
        owner.kill()
        owner.wait(timeout=60)
        deadline = time.monotonic() + 120  # a hang bound only: each worker looks every ORPHAN_CHECK_S
        alive = set(workers)
        while alive and time.monotonic() < deadline:
            for pid in list(alive):
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[0] == "Z":  # exited, not yet reaped by init
                            alive.discard(pid)
                except FileNotFoundError:
                    alive.discard(pid)
            time.sleep(0.1)
        assert not alive, f"workers {sorted(alive)} outlived the service that spawned them"
    finally:
        owner.kill()
        owner.wait(timeout=60)
