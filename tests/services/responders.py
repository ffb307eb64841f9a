"""Answers for the mock OpenAI server in the loopback cluster (``--responder responders:answer``).

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
