"""Answers for the mock OpenAI server in the loopback cluster (``--responder responders:answer``, or
``responders:answer_holding`` to hold chosen requests until a test releases them).

Deterministic in the request alone, so any process, shard or order gets the same answer: candidates say
Yes/No/Maybe, the judge (served model "judge") returns an aci_bench rubric verdict."""

from __future__ import annotations

import hashlib
import json


def _pick(body: dict) -> int:
    text = body["messages"][-1]["content"]
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


def answer(body: dict) -> str:
    n = _pick(body)
    if body.get("model") == "judge":
        scores = {c: {"score": 1 + (n >> k) % 5, "explanation": "ok"}
                  for k, c in enumerate(("accuracy", "completeness", "clarity"))}
        return f"<rubric_criteria>{json.dumps(scores)}</rubric_criteria>"
    return ("Yes", "No", "Maybe")[n % 3]


HOLD_ENV = "MEDHELM_TEST_HOLD"  # a file: one prompt fragment a line; "<file>.release" lets them through


async def answer_holding(body: dict) -> str:
    """``answer``, except that a candidate request whose prompt contains a line of the file named by
    ``$MEDHELM_TEST_HOLD`` waits until ``<that file>.release`` exists (at most 300 s), other requests going on
    meanwhile: a test kills a worker at a known point instead of racing it."""
    import asyncio
    import os
    import time
    from pathlib import Path

    hold = os.environ.get(HOLD_ENV)
    if hold and body.get("model") != "judge":
        text = body["messages"][-1]["content"]
        fragments = [line for line in Path(hold).read_text(encoding="utf-8").splitlines() if line]
        if any(f in text for f in fragments):
            deadline = time.monotonic() + 300
            while not Path(hold + ".release").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
    return answer(body)
