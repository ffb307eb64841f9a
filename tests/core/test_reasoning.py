"""Reasoning models counted right: thinking tokens recorded apart from the answer (Usage, records, stats),
priced apart, shown with the leaderboard's costs and in `medhelm jury stats`; the thinking budget added to
the output budget; only the final answer scored, with or without a reasoning parser on the server. Against
the project's mock OpenAI server imitating both server shapes."""

from __future__ import annotations

import json

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.inference.openai import OpenAIClient
from medhelm.pipeline.aggregate import instance_stats, scored_row_json
from medhelm.json_text import plain_json
from medhelm.records import InstanceResult
from medhelm.specs import Completion, Deployment, GenerationRequest, Instance, Message, Prompt, Usage
from medhelm.store.costs import Price, PriceTable
from medhelm.store.costs import Usage as Totals
from tests.core.conftest import generate_once


def deployment(base_url: str, **options) -> Deployment:
    return Deployment(name="mock/r1", model_name="test/r1", kind="openai", base_url=base_url,
                      served_model_name="r1", timeout_s=10.0, options=options)


def ask(dep: Deployment, max_tokens: int = 1, text: str = "Which one?\nA. one\nB. two\nAnswer:"):
    return generate_once(dep, text, max_tokens)


def test_split_server_answer_is_content_and_thinking_is_counted_apart():
    with MockOpenAIServer(reasoning="split", thinking_tokens=8) as srv:
        completion = ask(deployment(srv.base_url, thinking_budget=16))
        [body] = srv.requests
    assert body["max_tokens"] == 1 + 16  # the answer's budget after the thinking
    assert completion.text in ("A", "B")  # content, never reasoning_content ("step0 step1 ...")
    assert completion.usage.reasoning_tokens == 8 and completion.usage.completion_tokens == 9


def test_inline_think_block_is_cut_when_the_server_has_no_reasoning_parser():
    with MockOpenAIServer(reasoning="inline", thinking_tokens=5) as srv:
        completion = ask(deployment(srv.base_url, thinking_budget=10))
    assert completion.text in ("A", "B") and "step" not in completion.text
    # the server did not say: our estimate, flagged as one (6 completion tokens less the answer's one)
    assert completion.usage.completion_tokens == 6
    assert completion.usage.reasoning_tokens == 5 and completion.usage.reasoning_estimated
    assert completion.usage.to_json()["reasoning_tokens_estimated"] is True


def test_split_reasoning_estimate():
    from medhelm.tokens import split_reasoning

    assert split_reasoning(None, "A") is None
    assert split_reasoning(14, "seven eight") == 11  # 11 characters ≈ 3 tokens of answer
    assert split_reasoning(2, "a much longer answer than the count allows") == 0  # never negative
    assert split_reasoning(9, "") == 9  # no answer: every token was thinking


def test_an_estimated_count_survives_the_record():
    usage = Usage(10, 14, 0.5, reasoning_tokens=11, reasoning_estimated=True)
    assert Usage.from_json(json.loads(json.dumps(usage.to_json()))) == usage
    assert "reasoning_tokens_estimated" not in Usage(10, 14, reasoning_tokens=11).to_json()  # stated: as before


@pytest.mark.parametrize("mode", ["split", "inline"])
def test_a_one_token_budget_without_a_thinking_budget_answers_nothing(mode):
    """Why the thinking budget exists: a reasoning model given MedHELM's 1-token MC budget spends it thinking."""
    with MockOpenAIServer(reasoning=mode, thinking_tokens=8) as srv:
        completion = ask(deployment(srv.base_url))
    assert completion.text == "" and completion.finish_reason == "length"
    # the one generated token was thinking, stated by the split server, known from the inline one's empty answer
    assert completion.usage.completion_tokens == 1 and completion.usage.reasoning_tokens == 1


def test_o_series_options_shape_the_body():
    with MockOpenAIServer(reasoning="split") as srv:
        ask(deployment(srv.base_url, reasoning_effort="high", max_tokens_param="max_completion_tokens",
                       sampling=False, thinking_budget=100), max_tokens=3)
        [body] = srv.requests
    assert body["max_completion_tokens"] == 103 and "max_tokens" not in body
    assert body["reasoning_effort"] == "high" and "temperature" not in body


def test_default_body_bytes_are_unchanged_by_the_reasoning_code():
    dep = deployment("http://127.0.0.1:9/v1")
    req = GenerationRequest((Message("user", "hi"),), max_tokens=5, stop=("\n",))
    client = OpenAIClient(dep)
    assert client.body(req) == (b'{"model":"r1","messages":[{"content":"hi","role":"user"}],"max_tokens":5,'
                                b'"temperature":0.0,"stop":["\\n"],"seed":0}')
    assert json.loads(client.body(req)) == client.payload(req)


def test_reasoning_options_join_the_cache_identity_only_when_set():
    plain = deployment("http://h/v1")
    assert "options" not in plain.identity()  # every existing cache key unchanged
    thinking = deployment("http://h/v1", thinking_budget=512)
    assert thinking.identity()["options"] == {"thinking_budget": 512}
    req = GenerationRequest((Message("user", "x"),), max_tokens=1)
    assert req.cache_key(plain) != req.cache_key(thinking)


def test_openai_zero_reasoning_tokens_keep_the_record_bytes():
    """gpt-4o states completion_tokens_details.reasoning_tokens: 0 — no reasoning: the record stays as it was."""
    from medhelm.inference.openai import reasoning_tokens

    assert reasoning_tokens({"completion_tokens_details": {"reasoning_tokens": 0}}) is None
    assert reasoning_tokens({"completion_tokens_details": {"reasoning_tokens": 7}}) == 7
    assert reasoning_tokens({"completion_tokens_details": None}) is None
    assert reasoning_tokens({"completion_tokens_details": {"reasoning_tokens": True}}) is None


def _record(usage: Usage, judge: Usage = Usage()) -> InstanceResult:
    return InstanceResult(run="r", instance=Instance("1", "q"), prompt=Prompt.user("q"),
                          completion=Completion("A", "stop", usage), stats={"exact_match": 1.0}, judge_usage=judge)


def test_records_without_reasoning_keep_their_bytes_and_old_records_read():
    old = _record(Usage(10, 2, 0.5))
    text = plain_json(old.to_json())
    assert "reasoning" not in text
    assert text == ('{"run": "r", "position": 0, "instance": {"id": "1", "input": "q", "references": [], '
                    '"split": "test", "choices": [], "extra": {}}, "prompt": {"messages": [{"role": "user", '
                    '"content": "q"}], "truncated": false}, "completion": {"text": "A", "finish_reason": "stop", '
                    '"usage": {"prompt_tokens": 10, "completion_tokens": 2, "latency_s": 0.5, "cached": false, '
                    '"attempts": 1}}, "stats": {"exact_match": 1.0}, "judgements": [], "judge_usage": '
                    '{"prompt_tokens": null, "completion_tokens": null, "latency_s": 0.0, "cached": false, '
                    '"attempts": 1}, "error": null}')
    assert InstanceResult.from_json(json.loads(text)) == old
    new = _record(Usage(10, 40, 0.5, reasoning_tokens=38))
    again = InstanceResult.from_json(json.loads(plain_json(new.to_json())))
    assert again.completion.usage.reasoning_tokens == 38


def test_per_instance_stats_count_the_thinking_from_objects_and_from_json_alike():
    rec = _record(Usage(10, 40, 0.5, reasoning_tokens=38))
    stats = instance_stats(rec)
    assert stats["num_reasoning_tokens"] == 38 and stats["num_completion_tokens"] == 40
    assert scored_row_json(json.loads(plain_json(rec.to_json())))[1] == stats
    assert "num_reasoning_tokens" not in instance_stats(_record(Usage(10, 2)))


def test_prices_charge_thinking_at_its_own_price(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("prices:\n  - deployment: openai/o3-mini\n    input_per_million: 1.0\n"
                    "    output_per_million: 4.0\n    reasoning_per_million: 8.0\n"
                    "  - deployment: plain\n    input_per_million: 1.0\n    output_per_million: 4.0\n")
    table = PriceTable.load(path)
    usage = Totals(prompt_tokens=1_000_000, completion_tokens=1_000_000, reasoning_tokens=750_000)
    # 1 M prompt at 1 + 250 k answer at 4 + 750 k thinking at 8
    assert table.cost("openai/o3-mini", "m", usage).usd == pytest.approx(1.0 + 1.0 + 6.0)
    assert table.cost("plain", "m", usage).usd == pytest.approx(1.0 + 4.0)  # thinking at the output price
    assert PriceTable({"x": Price(1.0, 4.0)}).cost("x", "m", Totals(1_000_000, 1_000_000)).usd == pytest.approx(5.0)
    path.write_text("prices:\n  - deployment: a\n    output_per_million: 1\n    reasoning_per_million: -2\n")
    with pytest.raises(Exception, match=r"prices\.yaml:4.*reasoning_per_million"):
        PriceTable.load(path)


@pytest.mark.parametrize("option,value,message", [("thinking_budget", "lots", "must be a whole number"),
                                                   ("request_shape", "openai", "must be 'medhelm', 'helm', 'helm_vertex', 'helm_together' or 'helm_hf'"),
                                                   ("extra_body", "[1]", "must be a mapping")])
def test_a_reasoning_option_of_the_wrong_type_is_one_line_naming_the_field(tmp_path, option, value, message):
    from medhelm.deployments import DeploymentRegistry
    from medhelm.errors import ConfigError

    (tmp_path / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: a/b\n    model_name: a/b\n    kind: openai\n    base_url: http://h/v1\n"
        f"    options:\n      {option}: {value}\n")
    with pytest.raises(ConfigError, match=rf"model_deployments.yaml:7: field 'model_deployments\[0\]\.options\."
                                          rf"{option}': {message}"):
        DeploymentRegistry.load(tmp_path)


def test_extra_body_reaches_the_server_and_keys_the_cache():
    with MockOpenAIServer() as srv:
        dep = deployment(srv.base_url, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        ask(dep)
        [body] = srv.requests
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["max_tokens"] == 1
    assert dep.identity()["options"] == {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}


def test_jury_summary_counts_judges_thinking_only_when_stated():
    from medhelm.scoring.jury.summary import summarize
    from medhelm.records import JudgeScore

    def judged(reasoning):
        j = JudgeScore(judge="j", criterion="accuracy", score=4.0, min_score=1.0, max_score=5.0)
        return InstanceResult(run="r", instance=Instance("1", "q"), prompt=Prompt.user("q"),
                              completion=Completion("x"), stats={"jury_score": 4.0, "jury_score_normalized": 0.75},
                              judgements=(j,), judge_usage=Usage(100, 30, reasoning_tokens=reasoning))

    summary = summarize([judged(20), judged(5)], n_boot=10)
    assert summary.to_json()["judge_reasoning_tokens"] == 25
    assert "judge_reasoning_tokens" not in summarize([judged(None)], n_boot=10).to_json()


def _run_and_summarize(tmp_path, srv, thinking_budget: int | None):
    """`medhelm run` of a yes/no benchmark (max_tokens 2) on the mock reasoning server, then `summarize`."""
    from medhelm.cli import main
    from medhelm.devtools.fixtures import write_configurable_benchmark
    from medhelm.store import open_store, read

    cfg = write_configurable_benchmark(tmp_path / "bench", 6, answers=("Yes",))
    env = tmp_path / "prod_env"
    env.mkdir()
    extra = f"    options: {{thinking_budget: {thinking_budget}}}\n" if thinking_budget is not None else ""
    (env / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: mock/r1\n    model_name: test/r1\n    kind: openai\n"
        f"    base_url: {srv.base_url}\n    served_model_name: r1\n    max_sequence_length: 4096\n" + extra)
    (env / "prices.yaml").write_text("prices:\n  - deployment: mock/r1\n    input_per_million: 1.0\n"
                                     "    output_per_million: 2.0\n    reasoning_per_million: 10.0\n")
    (env / "model_metadata.yaml").write_text("models:\n  - name: test/r1\n    display_name: Test R1\n"
                                             "    creator_organization_name: Tests\n    access: open\n"
                                             "    release_date: 2025-01-20\n  - name: other/model\n")
    out = tmp_path / "out"
    assert main(["run", "--run-entries", f"medhelm_configurable_benchmark:model=mock/r1,config_path={cfg}",
                 "--suite", "s", "-o", str(out), "--local-path", str(env), "-q"]) == 0
    assert main(["summarize", "--suite", "s", "-o", str(out), "--local-path", str(env)]) == 0
    with open_store(f"sqlite:///{out / 'results.sqlite'}") as store:
        [model] = read.models(store, "s")
        meta = read.meta(store, "s")
    # thinking totals live in the release's meta (only when a model thought: other stores keep their layout)
    model["reasoning"] = json.loads(meta.get("reasoning_tokens") or "{}").get("test/r1|mock/r1")
    # HELM's model_metadata.yaml: this release's models only, shown beside them on the leaderboard
    assert json.loads(meta["model_metadata"]) == {"test/r1": {
        "name": "test/r1", "display_name": "Test R1", "creator_organization_name": "Tests", "access": "open",
        "release_date": "2025-01-20"}}
    records = [json.loads(line) for line in next(out.glob("runs/s/*/instances.jsonl")).read_text().splitlines()]
    return model, records


@pytest.mark.parametrize("mode", ["split", "inline"])
def test_a_reasoning_model_end_to_end_answers_with_its_thinking_budget_and_is_priced_apart(tmp_path, mode):
    """split: the server states the count; inline: it does not, and our estimate (flagged) is priced the same way."""
    def yes(body):
        return "Yes"

    with MockOpenAIServer(responder=yes, reasoning=mode, thinking_tokens=7) as srv:
        model, records = _run_and_summarize(tmp_path, srv, thinking_budget=64)
        assert {b["max_tokens"] for b in srv.requests} == {2 + 64}
    assert all(r["completion"]["text"] == "Yes" and r["stats"]["exact_match"] == 1.0 for r in records)
    assert all(r["completion"]["usage"]["reasoning_tokens"] == 7 for r in records)
    assert all(r["completion"]["usage"].get("reasoning_tokens_estimated", False) is (mode == "inline") for r in records)
    assert model["reasoning"] == [6 * 7, 0] + ([True, False] if mode == "inline" else [])
    assert model["completion_tokens"] == 6 * 8
    prompt = model["prompt_tokens"]
    assert model["cost_usd"] == pytest.approx((prompt * 1.0 + 6 * 1 * 2.0 + 6 * 7 * 10.0) / 1e6)


def test_without_a_thinking_budget_the_one_token_answers_are_lost_to_thinking(tmp_path):
    def yes(body):
        return "Yes"

    with MockOpenAIServer(responder=yes, reasoning="split", thinking_tokens=7) as srv:
        _, records = _run_and_summarize(tmp_path, srv, thinking_budget=None)
    assert all(r["completion"]["text"] == "" and r["stats"]["exact_match"] == 0.0 for r in records)
    assert all(r["completion"]["finish_reason"] == "length" for r in records)


@pytest.mark.parametrize("mode,shown", [("split", [42]), ("inline", ["≈42"])])
def test_the_leaderboard_shows_reasoning_tokens_and_model_metadata(tmp_path, dashboard_env, mode, shown):
    """The Streamlit app itself (AppTest: the real script on the real store) after a reasoning model's run: the
    count the server stated (split), or our estimate shown as such (inline: no count stated; 8 tokens each, of
    which the answer "Yes" ≈ 1)."""
    import os
    from pathlib import Path

    app_test = pytest.importorskip("streamlit.testing.v1").AppTest

    def yes(body):
        return "Yes"

    with MockOpenAIServer(responder=yes, reasoning=mode, thinking_tokens=7) as srv:
        _run_and_summarize(tmp_path, srv, thinking_budget=64)
    os.environ["MEDHELM_STORE"] = str(tmp_path / "out" / "results.sqlite")
    for key in ("MEDHELM_RELEASE", "MEDHELM_REDACTED"):
        os.environ.pop(key, None)
    at = app_test.from_file(str(Path(__file__).parents[2] / "dashboard" / "app.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    board = at.dataframe[0].value
    assert board["Reasoning tokens"].tolist() == shown and board["Output tokens"].tolist() == [48]
    assert board[["Display name", "Creator", "Access", "Released"]].values.tolist() == [
        ["Test R1", "Tests", "open", "2025-01-20"]]


@pytest.mark.parametrize("mode", ["split", "inline"])
def test_jury_stats_counts_a_reasoning_judges_thinking(tmp_path, capsys, mode):
    """Judges that think (the mock server with a reasoning parser, or inline <think> without one): their
    verdict is the content, their thinking is counted per record and shown by `medhelm jury stats` — with
    "≈" when no count was stated and the number is our estimate."""
    from medhelm.cli import main
    from tests.jury.conftest import SEEDS_PROMPT, write_judges

    def responder(body):
        if body["model"] == "candidate":
            return "Summary of the stay."
        return json.dumps({"faithfulness": {"score": 4, "explanation": "f"},
                           "safety": {"score": 5, "explanation": "s"}})

    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "prompt.txt").write_text("Write a summary for patient {patient_id}.")
    (bench / "judge.txt").write_text(SEEDS_PROMPT)
    (bench / "data.csv").write_text("patient_id\n0001\n0002\n0003\n")
    (bench / "bench.yaml").write_text(
        "name: JURY-R\ndescription: d\nprompt_file: prompt.txt\ndataset_file: data.csv\nmax_tokens: 20\n"
        "metrics:\n  - name: jury_score\n    prompt_file: judge.txt\n    judges:\n"
        "      - name: mock/judge-a\n        model_name: test/judge-a\n")
    with MockOpenAIServer(responder=responder, reasoning=mode, thinking_tokens=6) as srv:
        write_judges(tmp_path / "env", srv.base_url, names=("judge-a", "candidate"))
        entry = f"medhelm_configurable_benchmark:model=mock/candidate,config_path={bench / 'bench.yaml'}"
        assert main(["run", "-r", entry, "--suite", "s", "-o", str(tmp_path / "out"), "--local-path",
                     str(tmp_path / "env"), "-q"]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in next((tmp_path / "out").glob("runs/s/*/instances.jsonl")).open()]
    assert all(r["stats"]["jury_score"] == 4.5 for r in records)  # the verdict came from content
    usage = [r["judge_usage"] for r in records]
    assert main(["jury", "stats", "--suite", "s", "-o", str(tmp_path / "out"), "--bootstrap", "10"]) == 0
    if mode == "split":
        assert [u["reasoning_tokens"] for u in usage] == [6, 6, 6] and "reasoning_tokens_estimated" not in usage[0]
        assert "(of which reasoning 18)" in capsys.readouterr().out
    else:
        assert all(u["reasoning_tokens_estimated"] is True and u["reasoning_tokens"] >= 0 for u in usage)
        assert f"(of which reasoning ≈{sum(u['reasoning_tokens'] for u in usage)})" in capsys.readouterr().out


def test_medhelm_plan_reprices_thinking_from_a_release_and_from_a_suite(tmp_path):
    """`medhelm plan`'s cost per instance: thinking at reasoning_per_million, from the store and the records."""
    from medhelm.store import open_store
    from medhelm.store.sample_size import costs_from_release, costs_from_suite

    def yes(body):
        return "Yes"

    with MockOpenAIServer(responder=yes, reasoning="split", thinking_tokens=7) as srv:
        model, _ = _run_and_summarize(tmp_path, srv, thinking_budget=64)
    prices = PriceTable.load(tmp_path / "prod_env" / "prices.yaml")
    per_instance = (model["prompt_tokens"] * 1.0 + 6 * 1 * 2.0 + 6 * 7 * 10.0) / 1e6 / 6
    with open_store(f"sqlite:///{tmp_path / 'out' / 'results.sqlite'}") as store:
        assert costs_from_release(store, "s", prices)[("test/r1", "mock/r1")] == pytest.approx(per_instance)
    assert costs_from_suite(tmp_path / "out", "s", prices)[("test/r1", "mock/r1")] == pytest.approx(per_instance)
