"""Scripted answers for the real-HELM fixture suite (``scripts/helm_fixtures.sh``), served by our mock server.

Deterministic (a hash of model + prompt), so a re-run regenerates the same fixture:
* judge prompts (they carry ``<rubric_criteria>``): a JSON verdict per criterion, 0-4; judge-2 answers
  something unparseable on about a third of the instances (HELM drops that judge for the instance);
* ``gpt-4-mock-c`` on the yes/no benchmark: about a quarter of the requests are refused with the Azure
  content-filter message, which HELM's OpenAIClient records as a failed, non-fatal request;
* everything else: "Yes"/"No", "A"/"B", or a short sentence, chosen per model.
"""

from __future__ import annotations

import hashlib
import json
import re

from medhelm.devtools.mock_openai import MockHTTPError

AZURE_FILTER = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."


def _pick(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:8], 16)


def respond(body: dict) -> str:
    model = str(body.get("model", ""))
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])
    h = _pick(model, text)
    if "<rubric_criteria>" in text:
        if model.endswith("judge-2") and h % 3 == 0:
            return "I would rather not grade this one."
        block = re.search(r"<rubric_criteria>(.*?)</rubric_criteria>", text, re.S)
        criteria = list(json.loads(block.group(1))) if block else ["accuracy"]
        return json.dumps({c: {"score": _pick(model, text, c) % 5, "explanation": "scripted"} for c in criteria})
    if "Answer A or B" in text:
        return "AB"[h % 2]
    if "Yes or No" in text:
        if model.endswith("mock-c") and h % 4 == 0:
            raise MockHTTPError(400, AZURE_FILTER)
        bias = {"gpt-4-mock-a": 3, "gpt-4-mock-b": 2, "gpt-4-mock-c": 2}.get(model, 2)
        truth = "Yes" if "[y]" in text else "No"
        return truth if h % 4 < bias else ("No" if truth == "Yes" else "Yes")
    return "Summary: " + " ".join(text.split()[-6 - h % 5:])
