"""The pacing package (inference/pacing/) decides as the module it replaced (inference/pacing.py at 521e40b), but for
what was added since on purpose and can be switched off (``climb=False``: slow start's climb while latency stays
flat, issue 53): the decision traces of a few simulated runs and random event streams (tests/core/pacing_trace.py)
match the digests recorded from that module in pacing_traces.json. bench/bench_pacing_equivalence.py compares the
two directly over many more cases, and a live run replayed; a deliberate change of a decision re-records the file."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from medhelm.inference import pacing
from tests.core.pacing_trace import RECORDED_REPLAYS, RECORDED_SIM, digest, replay, sim_trace

AdaptiveLimit = functools.partial(pacing.AdaptiveLimit, climb=False)  # the rules of 521e40b
RECORDED = json.loads((Path(__file__).parent / "pacing_traces.json").read_text())


@pytest.mark.parametrize("name,kw", RECORDED_SIM, ids=[name for name, _ in RECORDED_SIM])
def test_a_simulated_run_takes_the_recorded_decisions(name, kw):
    trace, counts = sim_trace(kw, AdaptiveLimit)
    want = RECORDED["simulation"][name]
    assert (len(trace), counts) == (want["decisions"], want["counts"])
    assert digest(trace) == want["digest"]
    assert want["decisions"] >= 5  # the case makes decisions: a trace of nothing would prove nothing


def test_random_event_streams_reach_the_recorded_states():
    for seed in RECORDED_REPLAYS:
        same, events, _, states = replay(seed, AdaptiveLimit, AdaptiveLimit)
        assert same and states == RECORDED["replay"][str(seed)]["digest"], seed


@pytest.mark.parametrize("module,name,value,case", [("shards", "RESTART_QUEUE", 1.2, "shards fifo c=32 n=4 lockstep"),
                                                    ("solo", "MIN_GAIN", 0.04, "solo fifo c=24 probe down")])
def test_the_trace_sees_a_changed_decision(monkeypatch, module, name, value, case):
    """The check can fail: a controller whose bar moves a little decides otherwise, and so does the climb."""
    monkeypatch.setattr(getattr(pacing, module), name, value)
    trace, _ = sim_trace(dict(RECORDED_SIM)[case], AdaptiveLimit)
    assert digest(trace) != RECORDED["simulation"][case]["digest"]


def test_the_climb_is_the_one_difference():
    name, kw = "solo fifo c=16", dict(RECORDED_SIM)["solo fifo c=16"]
    trace, _ = sim_trace(kw, pacing.AdaptiveLimit)
    assert digest(trace) != RECORDED["simulation"][name]["digest"]
