"""`medhelm run` through each native kind, against the fakes (real pubmed_qa data from ../shared/data):
records complete with token usage (reasoning apart), a cache hit on re-run, throttling/overload retried
inside a run, resume after the server is killed mid-run (0 lost, 0 duplicated), a jury whose judges are
native kinds, a missing credential said at planning, and a planted marker (a unique string in every
instance's text) absent from every log, message and error — even when a server's error quotes the prompt.
Runs of one provider's own behaviour are in its tests/providers/test_<kind>.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.providers.conftest import (
    KEYS,
    MARKER,
    assert_no_marker,
    deployment_entry,
    judging_responder,
    make_fake,
    medhelm,
    only_run,
    records,
    write_deployments,
)


# the kinds these runs cover, each with the fault its fake plans mid-run; a kind joins them with its line here
FAULT = {"anthropic": "overloaded", "gemini": "throttle", "bedrock": "throttle", "azure_openai": "throttle"}
KINDS = tuple(FAULT)


@pytest.mark.parametrize("kind", KINDS)
def test_pubmed_qa_through_each_native_kind(kind, marked_mirror, tmp_path):
    extra = {"thinking_tokens": 9} if kind == "gemini" else {"reasoning_tokens": 3} if kind == "azure_openai" else {}
    with make_fake(kind, **extra) as srv:
        local = write_deployments(tmp_path / "env", [deployment_entry(kind, srv.base_url)])
        srv.fail_next(2, FAULT[kind])  # the provider's own limit, inside a run: retried, never an error
        run = ["run", "-r", f"pubmed_qa:model={kind}/fake-model", "--data-dir", str(marked_mirror), "--offline",
               "-m", "6", "--max-concurrency", "2", "--local-path", str(local), "-q"]
        first = medhelm(*run, "-o", str(tmp_path / "a"))
        assert first.returncode == 0, first.stderr
        run_dir = only_run(tmp_path / "a")
        status = json.loads((run_dir / "run.json").read_text())
        assert status["status"] == "complete" and status["instances_done"] == 6 and status["errors"] == 0
        assert status["requests"] == 6 and status["retries"] == 2 and status["cache_hits"] == 0
        assert srv.request_count == 8
        recs = records(run_dir)
        assert len({r["instance"]["id"] for r in recs}) == 6
        for r in recs:
            usage = r["completion"]["usage"]
            assert r["error"] is None and r["completion"]["text"] in ("A", "B", "C")  # yes / no / maybe
            assert usage["prompt_tokens"] > 50 and usage["completion_tokens"] >= 1
            if kind == "gemini":
                assert usage["reasoning_tokens"] == 9 and usage["completion_tokens"] == 1 + 9
            elif kind == "azure_openai":
                assert usage["reasoning_tokens"] == 3
            else:
                assert "reasoning_tokens" not in usage
        assert sum(r["completion"]["usage"]["attempts"] for r in recs) == 8
        # the prompt reached the provider in its own shape, the marker with it
        assert all(MARKER in json.dumps(req["body"]) for req in srv.requests)
        second = medhelm(*run, "-o", str(tmp_path / "b"))
        assert second.returncode == 0, second.stderr
        again = json.loads((only_run(tmp_path / "b") / "run.json").read_text())
        assert again["status"] == "complete" and again["cache_hits"] == 6 and again["requests"] == 0
        assert srv.request_count == 8
    assert_no_marker(first, second, folders=(tmp_path / "a", tmp_path / "b"))


@pytest.mark.parametrize("kind", KINDS)
def test_resume_after_the_server_is_killed(kind, marked_mirror, tmp_path):
    n = 12
    with make_fake(kind) as srv:
        local = write_deployments(tmp_path / "env", [deployment_entry(kind, srv.base_url)])
        srv.die_after = 5  # five answers, then the service crashes on the sixth request
        args = ["run", "-r", f"pubmed_qa:model={kind}/fake-model", "--data-dir", str(marked_mirror), "--offline",
                "-m", str(n), "--max-concurrency", "1", "--local-path", str(local), "-o", str(tmp_path / "out"), "-q"]
        crashed = medhelm(*args)
        assert crashed.returncode == 2 and "cannot reach" in crashed.stderr, crashed.stderr
        run_dir = only_run(tmp_path / "out")
        kept = {r["instance"]["id"]: r for r in records(run_dir) if r.get("completion")}
        assert len(kept) == 5 == srv.request_count
        srv.restart()
        resumed = medhelm(*args)
        assert resumed.returncode == 0, resumed.stderr
        summary = json.loads((run_dir / "run.json").read_text())
        by_id: dict[str, list[dict]] = {}
        for rec in records(run_dir):
            by_id.setdefault(rec["instance"]["id"], []).append(rec)
        # complete, every instance once (0 lost, 0 duplicated), none failed, the crash's answers kept as they were
        assert (summary["status"], summary["instances_done"], len(by_id)) == ("complete", n, n)
        assert {len(recs) for recs in by_id.values()} == {1} and not [r for [r] in by_id.values() if r["error"]]
        assert {iid: by_id[iid][0]["completion"] for iid in kept} == {iid: r["completion"] for iid, r in kept.items()}
        assert srv.request_count - 5 == n - 5  # after the restart, only the instances not done before
    assert_no_marker(crashed, resumed, folders=(tmp_path / "out",))


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_quoting_the_prompt_never_shows_the_marker(kind, marked_mirror, tmp_path):
    with make_fake(kind) as srv:
        local = write_deployments(tmp_path / "env", [deployment_entry(kind, srv.base_url)])
        srv.fail_next(1, "echo")  # a 400 whose message quotes the prompt (and the marker in it)
        proc = medhelm("run", "-r", f"pubmed_qa:model={kind}/fake-model", "--data-dir", str(marked_mirror),
                       "--offline", "-m", "3", "--max-concurrency", "1", "--local-path", str(local),
                       "-o", str(tmp_path / "out"), "-q")
        # one instance's error, recorded; the others answered; a bad request is said: exit 2, one line
        assert proc.returncode == 2, proc.stderr
        [line] = [x for x in proc.stderr.splitlines() if x.startswith("medhelm: error:")]
        assert "1 instance(s) refused as a bad request" in line and "HTTP 400" in line
        run_dir = only_run(tmp_path / "out")
        assert json.loads((run_dir / "run.json").read_text())["errors"] == 1
        recs = records(run_dir)
        errors = [r["error"] for r in recs if r["error"]]
        assert len(errors) == 1 and "HTTP 400" in errors[0] and f"deployment '{kind}/fake-model'" in errors[0]
        assert "[server message withheld: it quotes the prompt]" in errors[0]
    assert_no_marker(proc, folders=(tmp_path / "out",))


def test_jury_with_native_judges(tmp_path):
    """A configurable benchmark whose candidate is on Bedrock and whose three judges are on Anthropic, Gemini and
    Azure OpenAI: every native kind in one jury run, throttled and overloaded on the way."""
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "prompt.txt").write_text("Summarize the note of patient {pid}: {note}")
    (bench / "judge.txt").write_text(
        "Judge the summary.\n<QUESTION>\n{QUESTION}\n</QUESTION>\n<RESPONSE>\n{RESPONSE}\n</RESPONSE>\n"
        "Faithfulness (0-5). Safety (0-5).\n<rubric_criteria>\n"
        '{"faithfulness": {"score": 0, "explanation": "why"}, "safety": {"score": 0, "explanation": "why"}}\n'
        "</rubric_criteria>\n")
    (bench / "data.csv").write_text("pid,note\n" + "".join(f"{i:04d},Admitted {MARKER} with pneumonia day {i}.\n"
                                                            for i in range(5)))
    (bench / "bench.yaml").write_text(
        "name: NATIVE-JURY\ndescription: native judges\nprompt_file: prompt.txt\ndataset_file: data.csv\n"
        "max_tokens: 40\nmetrics:\n  - name: jury_score\n    prompt_file: judge.txt\n    judges:\n"
        "      - name: anthropic/judge\n        model_name: test/anthropic-judge\n"
        "      - name: gemini/judge\n        model_name: test/gemini-judge\n"
        "      - name: azure/judge\n        model_name: test/azure-judge\n")
    with make_fake("bedrock") as cand, make_fake("anthropic", responder=judging_responder) as a, \
            make_fake("gemini", responder=judging_responder) as g, \
            make_fake("azure_openai", responder=judging_responder) as z:
        g.fail_next(1, "throttle")
        a.fail_next(1, "overloaded")
        z.fail_next(1, "throttle")
        cand.fail_next(1, "throttle")
        local = write_deployments(tmp_path / "env", [deployment_entry("bedrock", cand.base_url, name="bedrock/cand"),
                                                     deployment_entry("anthropic", a.base_url, name="anthropic/judge"),
                                                     deployment_entry("gemini", g.base_url, name="gemini/judge"),
                                                     deployment_entry("azure_openai", z.base_url, name="azure/judge")])
        proc = medhelm("run", "-r", f"medhelm_configurable_benchmark:model=bedrock/cand,config_path={bench / 'bench.yaml'}",
                       "-o", str(tmp_path / "out"), "--local-path", str(local), "-q")
        assert proc.returncode == 0, proc.stderr
        recs = records(only_run(tmp_path / "out"))
        assert len(recs) == 5
        judgements = [j for r in recs for j in r["judgements"]]
        assert {j["judge"] for j in judgements} == {"anthropic/judge", "gemini/judge", "azure/judge"}
        assert len(judgements) == 5 * 3 * 2 and all(j["status"] == "ok" for j in judgements), judgements
        # each judge's verdict read back as the fakes gave it: faithfulness 4, safety 5
        assert {(j["criterion"], j["score"]) for j in judgements} == {("faithfulness", 4), ("safety", 5)}
        assert [len(s.requests) for s in (cand, a, g, z)] == [5, 5, 5, 5]
        assert [s.request_count for s in (cand, a, g, z)] == [6, 6, 6, 6]  # one refusal each, retried
        again = medhelm("run", "-r", f"medhelm_configurable_benchmark:model=bedrock/cand,config_path={bench / 'bench.yaml'}",
                        "-o", str(tmp_path / "out2"), "--local-path", str(local), "-q")
        assert again.returncode == 0, again.stderr
        assert [s.request_count for s in (cand, a, g, z)] == [6, 6, 6, 6]  # candidate and judges: all from the cache
        assert [r["judgements"] for r in records(only_run(tmp_path / "out2"))] == [r["judgements"] for r in recs]
    assert_no_marker(proc, again, folders=(tmp_path / "out", tmp_path / "out2"))


@pytest.mark.parametrize("kind,missing", [("bedrock", "AWS_SECRET_ACCESS_KEY"), ("anthropic", "GATEWAY_TEST_KEY")])
def test_a_missing_credential_variable_is_said_at_planning(kind, missing, marked_mirror, tmp_path):
    options = {"subscription_key_env": "GATEWAY_TEST_KEY"} if kind == "anthropic" else {}
    local = write_deployments(tmp_path / "env", [deployment_entry(kind, "http://127.0.0.1:9", **options)])
    env = {k: v for k, v in {**os.environ, **KEYS}.items() if k != missing}
    proc = subprocess.run([sys.executable, "-m", "medhelm", "run", "-r", f"pubmed_qa:model={kind}/fake-model",
                           "--data-dir", str(marked_mirror), "--offline", "-m", "2", "--local-path", str(local),
                           "-o", str(tmp_path / "out"), "-q"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2 and missing in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and KEYS[missing] not in proc.stderr
    assert not (tmp_path / "out" / "runs").exists()  # checked before anything is written


@pytest.mark.parametrize("kind,options", [
    ("anthropic", {"thinking_budget": 1024}),
    ("bedrock", {"additional_model_request_fields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}})])
def test_thinking_models_answer_scored_thinking_counted_apart(kind, options, marked_mirror, tmp_path):
    """Claude thinking (Messages ``thinking`` blocks, Converse ``reasoningContent``): the letter is the answer
    scored, the thinking text is in no record, and its tokens — billed inside the one output count — are
    recorded apart as an estimate, flagged."""
    from medhelm.devtools.fakes.server import THOUGHT

    with make_fake(kind) as srv:
        local = write_deployments(tmp_path / "env", [deployment_entry(kind, srv.base_url, **options)])
        done = medhelm("run", "-r", f"pubmed_qa:model={kind}/fake-model", "--data-dir", str(marked_mirror),
                       "--offline", "-m", "3", "--local-path", str(local), "-o", str(tmp_path / "out"), "-q")
        assert done.returncode == 0, done.stderr
    recs = records(only_run(tmp_path / "out"))
    assert len(recs) == 3
    for r in recs:
        usage = r["completion"]["usage"]
        assert r["completion"]["text"] in ("A", "B", "C") and r["stats"]["exact_match"] in (0.0, 1.0)
        # the fake bills 12 thinking tokens + the 1-token letter; our estimate: 13 less the letter's ≈1
        assert (usage["completion_tokens"], usage["reasoning_tokens"], usage["reasoning_tokens_estimated"]) == \
            (13, 12, True)
    assert THOUGHT not in (only_run(tmp_path / "out") / "instances.jsonl").read_text()
