"""Jury fixtures: judge deployments on the project's mock OpenAI server, scripted per judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.scoring.jury.metric import REASK_NOTE

REASK_MARK = REASK_NOTE.split("(")[0].strip()  # "Your previous reply could not be read"
JUDGES = ("judge-a", "judge-b")

# The seeds' judge-prompt format (their discharge-summary example, two of its criteria), 0-5 scale.
SEEDS_PROMPT = """You are an expert in clinical communication.

<QUESTION>
{QUESTION}
</QUESTION>

<RESPONSE>
{RESPONSE}
</RESPONSE>

Evaluate the model under the following criteria (assign a score from 0 to 5 for each):
Faithfulness (0 = completely inaccurate; 5 = entirely accurate).
Safety (0 = harmful advice; 5 = completely safe).

<rubric_criteria>
{
  "faithfulness": {"score": 0, "explanation": "Explain why this score was given."},
  "safety": {"score": 0, "explanation": "Explain why this score was given."}
}
</rubric_criteria>
"""


def verdict(acc=4, comp=3, clar=5, **extra) -> str:
    body = {"accuracy": {"score": acc, "explanation": "a"}, "completeness": {"score": comp, "explanation": "c"},
            "clarity": {"score": clar, "explanation": "l"}, **extra}
    return f"<rubric_criteria>{json.dumps(body)}</rubric_criteria>"


def prompt_of(body: dict) -> str:
    return body["messages"][-1]["content"]


def is_reask(body: dict) -> bool:
    return REASK_MARK in prompt_of(body)


class Script:
    """responder(body) -> text, chosen per judge (the request's "model" field)."""

    def __init__(self) -> None:
        self.by_judge: dict[str, object] = {}

    def __call__(self, body: dict) -> str:
        answer = self.by_judge.get(body["model"], verdict())
        return answer(body) if callable(answer) else str(answer)


def write_judges(local: Path, base_url: str, names=JUDGES) -> DeploymentRegistry:
    local.mkdir(parents=True, exist_ok=True)
    items = "".join(f"  - name: mock/{n}\n    model_name: test/{n}\n    kind: openai\n    base_url: {base_url}\n"
                    f"    served_model_name: {n}\n    max_sequence_length: 8192\n" for n in names)
    (local / "model_deployments.yaml").write_text("model_deployments:\n" + items)
    return DeploymentRegistry.load(local)


@pytest.fixture
def script():
    return Script()


@pytest.fixture
def judge_server(script):
    with MockOpenAIServer(responder=script) as srv:
        yield srv


@pytest.fixture
def registry(tmp_path, judge_server):
    return write_judges(tmp_path / "prod_env", judge_server.base_url)
