"""The differential run against crfm-helm's own ``helm-run`` (issue 54), its fast part: a few instances per public
benchmark whose data slice is on the machine, HELM and ``medhelm run`` answered by one ``KeyedAnswers`` mock,
compared per instance (request, references, completion, metrics) and per run (aggregates, main metric) by
``medhelm.devtools.helm_differential``; and a custom benchmark (``diff_custom``: invented rows in tests/data, through
HELM's configurable scenario and ours, an exact-match metric and a jury). Every difference must be one its case's
``known`` explains (and listed in
docs/metrics.md); a known difference that vanished fails too, so its line is dropped (one that shows only on
some items, e.g. HELM's MedCalc category bug, may be absent from a few). The full comparison (every
item of every slice) is ``bench/bench_helm_differential.py``. The public benchmarks whose real data is not on the
machine run on invented slices in the upstream format (tests/data/helm_diff, ``Case.synthetic``).

The benchmarks whose real data is not on the machine run on invented slices (tests/data/helm_diff, each in its
upstream file's format), all in one helm-run and one medhelm run.

crfm-helm's venv is the one tests/providers/test_helm_differential.py builds (its fixture, imported); helm-run's
further dependencies go beside it (``helm-0.5.16-run`` under MEDHELM_ENGINES_DIR, or MEDHELM_HELM_RUN_DEPS).
Offline and not built, the HELM tests skip saying so; the harness's own checks below run everywhere."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from medhelm.devtools import helm_differential as diff
from medhelm.devtools.mock_openai import KeyedAnswers, MockHTTPError, MockOpenAIServer
from tests.helm_venv import ENGINES  # the venv's one recipe (its fixture: tests/conftest.py helm_python)

LIMIT = 4  # instances per benchmark in CI: helm-run's start-up dominates, a few instances show every field


@pytest.fixture(scope="session")
def helm_run(helm_python) -> diff.HelmRun:  # noqa: F811
    folder = Path(os.environ.get("MEDHELM_HELM_RUN_DEPS") or ENGINES / f"helm-{diff.HELM_VERSION}-run")
    try:
        return diff.HelmRun(helm_python, diff.ensure_run_deps(helm_python, folder))
    except diff.DiffError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def invented(helm_run, tmp_path_factory) -> tuple[dict[str, diff.Row], dict[str, str]]:
    """The cases on invented slices (tests/data/helm_diff) in one helm-run and one medhelm run: one start-up of each
    side for all of them, so they stay cheap. A case whose HELM scenario needs a package helm-run lacks (PyPI once)
    is left out when it cannot be installed: its reason, by name."""
    cases, unavailable = [], {}
    for case in (c for c in diff.CASES if c.synthetic):
        try:
            if case.helm_packages:
                diff.case_deps(helm_run, case)
            cases.append(case)
        except diff.DiffError as err:
            unavailable[case.name] = str(err)
    rows = diff.run_together(cases, helm_run, diff.SYNTHETIC_DATA, tmp_path_factory.mktemp("invented"), LIMIT)
    return {row.benchmark: row for row in rows}, unavailable


@pytest.mark.parametrize("name", [c.name for c in diff.CASES])
def test_helm_run_and_medhelm_run_agree_instance_by_instance(name, helm_run, tmp_path, request):
    case = diff.select([name])[0]
    if case.synthetic:  # an invented slice written here in the upstream format (parquet, DOCX, XLSX)
        pytest.importorskip("pyarrow")
        pytest.importorskip("docx")
        rows, unavailable = request.getfixturevalue("invented")
        if name in unavailable:
            pytest.skip(unavailable[name])
        row = rows[name]
    else:
        shared_data = request.getfixturevalue("shared_data")
        (row,) = diff.run_differential([case], helm_run, shared_data, tmp_path, limit=LIMIT).rows
    assert not row.skipped, row.skipped
    assert row.instances == LIMIT
    assert not row.unexplained(), row.unexplained()
    stale = set(row.vanished) - case.on_some_items  # those show only on some items, maybe none of these
    assert not stale, f"{stale} now equal to HELM: drop them from the case's known"
    assert row.equal["prompt"] == row.total["prompt"] == LIMIT, row.differences.get("prompt")  # byte for byte
    kinds = ("request", "references", "completion", "metrics", "main")
    case_jury = diff.select([name])[0].jury
    for kind in kinds + (diff.JUDGE_KINDS_EQUAL if case_jury else ()):
        assert row.total.get(kind) and row.equal[kind] == row.total[kind] or kind in row.explained, (kind, row)
    assert row.total["request"] == LIMIT  # every request of both sides was seen by the server and paired
    assert row.metrics_compared  # at least one metric both compute, compared on every instance
    if case.custom:  # the custom benchmark's YAML asks for both: both compared on every instance
        assert {"exact_match", "jury_score"} <= set(row.metrics_compared)
    if case_jury:  # the jury: both sides asked the same judges and parsed the same verdicts; MedHELM's column equal
        assert row.equal["judges"] == row.total["judges"] == LIMIT and row.equal["verdicts"] == LIMIT
        # HELM's column: a built-in rubric's <benchmark>_accuracy; a custom benchmark's LLMJuryMetric, jury_score
        assert ("jury_score" if case.custom else f"{case.run_entry}_accuracy") in row.metrics_compared
        assert not diff.judge_requests_unequal(row), diff.judge_requests_unequal(row)  # HELM's prompt byte for byte
        assert not set(diff.JUDGE_KINDS_EQUAL) & set(case.known)  # and no reason may excuse a difference there


def test_keyed_answers_answer_one_item_the_same_in_any_layout():
    table = {"Is the patient febrile?": ["A", "B", "C"], "Does the note mention sepsis?": ["yes", "no"]}
    answers = KeyedAnswers(table, seed=3)
    one = answers({"messages": [{"role": "user", "content": "Question: Is the patient\nfebrile?\nA. yes"}]})
    other = answers({"messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Context:\nIs the  patient febrile?"}]})
    assert one == other and one in table["Is the patient febrile?"]
    with pytest.raises(MockHTTPError) as err:
        answers({"messages": [{"role": "user", "content": "an item nobody listed"}]})
    assert err.value.status == 400
    picks = {KeyedAnswers(table, seed=s)({"messages": [{"role": "user", "content": "Is the patient febrile?"}]})
             for s in range(12)}
    assert len(picks) > 1  # the seed is part of the hash


def test_keyed_answers_keep_the_mocks_fault_injection(tmp_path):
    """Faults are drawn before the responder: the keyed mode fails the same requests as any other responder."""
    import json
    import urllib.error
    import urllib.request

    body = {"model": "m", "messages": [{"role": "user", "content": "Is the patient febrile?"}]}

    def statuses(responder):
        out = []
        with MockOpenAIServer(responder, error_rate=0.5, seed=7) as srv:
            for _ in range(8):
                req = urllib.request.Request(srv.base_url + "/chat/completions", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        out.append((resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]))
                except urllib.error.HTTPError as err:
                    out.append((err.code, None))
        return out

    keyed = statuses(KeyedAnswers({"Is the patient febrile?": ["B"]}))
    plain = statuses(lambda b: "B")
    assert keyed == plain and {s for s, _ in keyed} == {200, 500}


def test_a_difference_nobody_explained_is_reported():
    """The comparison itself: a changed reference, completion or metric is found and is unexplained."""
    case = diff.select(["pubmed_qa"])[0]
    body = {"model": "diff-model", "messages": [{"role": "user", "content": "Q"}], "max_tokens": 1,
            "temperature": 0.0}

    def side(reference, completion, em, stop=None):
        wire = dict(body, **({"stop": stop} if stop else {}))
        return diff.Side(["id0"], [[("yes", reference), ("no", not reference)]], [completion],
                         [{"exact_match": em, "num_prompt_tokens": 3}], {"exact_match": (1, em)}, [wire])

    same = diff.compare(case, side(True, "A", 1.0), side(True, "A", 1.0))
    assert not same.differences and same.vanished == []
    changed = diff.compare(case, side(True, "A", 1.0), side(False, "B", 0.0, stop=["\n"]))
    assert set(changed.unexplained()) == {"references", "completion", "metrics", "metrics not excused", "aggregate",
                                          "main", "request"}
    assert "stop" in changed.differences["request"][0]
    assert changed.metrics_compared == ["exact_match"]  # token counts are accounting, not compared
    layout = side(True, "A", 1.0)
    layout.wire[0] = dict(body, messages=[{"role": "user", "content": "Q\n"}])  # one byte of layout
    assert set(diff.compare(case, layout, side(True, "A", 1.0)).unexplained()) == {"prompt"}
    # a prompt difference is never explained, even by a case that declares one
    declared = dataclasses.replace(case, known={"prompt": "layout"})
    assert set(diff.compare(declared, layout, side(True, "A", 1.0)).unexplained()) == {"prompt"}


def test_only_the_known_medcalc_categories_excuse_a_metric_difference():
    """HELM's MedCalc bug explains a 0 against our 1 on `lab test`/`dosage` items only; anything else is not."""
    case = diff.select(["medcalc_bench"])[0]
    body = {"model": "diff-model", "messages": [{"role": "user", "content": "Q"}], "max_tokens": 10}

    def side(values):
        return diff.Side([str(i) for i in range(len(values))], [[("1.0", True)]] * len(values), ["1.0"] * len(values),
                         [{"medcalc_bench_accuracy": v} for v in values],
                         {"medcalc_bench_accuracy": (1, sum(values) / len(values))}, [body] * len(values))

    lab, risk = {"Category": "lab test"}, {"Category": "risk"}
    excused = diff.compare(case, side([0.0, 1.0]), side([1.0, 1.0]), [lab, risk])
    assert not excused.unexplained() and set(excused.explained) == {"metrics", "aggregate", "main"}
    not_excused = diff.compare(case, side([0.0, 0.0]), side([1.0, 1.0]), [lab, risk])
    assert set(not_excused.unexplained()) == {"metrics not excused", "aggregate", "main"}


@pytest.mark.parametrize("answer, note, helm, ours, excused", [
    ("correct", {"Error Flag": "0"}, 0.0, 1.0, True),  # sentence accuracy on a clean note: HELM wants CORRECT
    ("CORRECT", {"Error Flag": "0"}, 0.0, 1.0, False),  # the exact word: both read it alike, a difference is real
    ("3 The corrected sentence.", {"Error Flag": "0"}, 1.0, 0.0, False),
])
def test_the_medec_excuse_covers_helms_exact_correct_rule_only(answer, note, helm, ours, excused):
    case = diff.select(["medec"])[0]
    assert case.excuse(note, answer, "medec_error_sentence_accuracy", helm, ours) is excused
    assert not case.excuse(note, answer, "medec_error_flag_accuracy", helm, ours)  # the flag column is HELM's rule


def test_the_medec_excuse_covers_helms_sentence_id_bug_only_on_error_notes():
    case = diff.select(["medec"])[0]
    assert case.excuse({"Error Flag": "1"}, "3 x", "medec_error_sentence_accuracy", 0.0, 1.0)
    assert not case.excuse({"Error Flag": "0"}, "3 x", "medec_error_sentence_accuracy", 0.0, 1.0)
    assert not case.excuse({"Error Flag": "1"}, "3 x", "medec_error_sentence_accuracy", 1.0, 0.0)


@pytest.mark.parametrize("name", [c.name for c in diff.CASES if c.synthetic])
def test_an_invented_slice_gives_our_side_one_instance_per_item_naming_its_key(name, tmp_path):
    """Without HELM: the slice written in the upstream format is read by our loader into one instance per item, in
    order, each prompt naming its item's key (what pairs both sides' requests), and HELM's download targets exist."""
    from medhelm.benchmarks import LoadContext, PromptBudget, resolve
    from medhelm.devtools.mock_openai import collapse
    from medhelm.specs import FrozenMap

    pytest.importorskip("pyarrow")
    pytest.importorskip("docx")
    case = diff.select([name])[0]
    written = diff.prepare(case, tmp_path / "unused", tmp_path, None)
    assert written and 5 <= len(written) <= 20
    items = [item for item in written if case.key(item)]  # an item neither side evaluates names no key
    args = FrozenMap(dict(a.split("=", 1) for a in case.args.split(",") if a))
    bench = resolve(case.run_entry, LoadContext(args=args, data_dir=tmp_path / "mirror", offline=True))
    instances = [instance for instance in bench.instances() if instance.split == case.split]
    assert len(instances) == len(items)
    for item, instance in zip(items, instances):
        assert collapse(case.key(item)) in collapse(bench.prompt(instance, PromptBudget()).text)
    for target, _ in case.helm_files:
        assert (tmp_path / "helm/scenarios" / (case.helm_folder or name) / target).exists()


def test_the_ehr_sql_excuse_covers_its_three_kept_rules_only():
    case = diff.select(["ehr_sql"])[0]
    acc, answerable = "ehr_sql_execution_accuracy", {"query": "select patient.age from patient", "is_impossible": False}
    empty_gold = {"query": "select patient.age from patient where patient.age = 'none'", "is_impossible": False}
    impossible = {"query": "null", "is_impossible": True}
    assert case.excuse(answerable, "select 1; select 2;", "ehr_sql_query_validity", 0.0, 1.0)  # first statement
    assert case.excuse(impossible, "I cannot answer this question.", acc, 0.0, 1.0)  # prose abstains
    assert not case.excuse(impossible, "", acc, 0.0, 1.0)
    assert case.excuse(empty_gold, "select patient.age from patient where 1 = 0", acc, 0.0, 1.0)  # both empty
    assert not case.excuse(answerable, "select patient.age from patient", acc, 0.0, 1.0)  # a real difference
    assert not case.excuse(answerable, "select 1; select 2;", "exact_match", 0.0, 1.0)  # HELM's columns only


def test_the_proxy_in_front_of_an_engine_keeps_each_body_as_it_arrived():
    """The engine mode's record of what vLLM was sent: the bytes as the client wrote them (spacing, key order,
    escapes), a refused request's too, forwarded unchanged; other paths are not bodies of a completion."""
    import json
    import urllib.error
    import urllib.request

    from medhelm.devtools.fault_proxy import FaultProxy

    raws = [b'{"model": "m",   "messages": [{"role": "user", "content": "Is the patient febrile?\\u00e9"}]}',
            b'{"messages":[{"content":"REFUSE me","role":"user"}],"model":"m","temperature":0.0}']
    with MockOpenAIServer(KeyedAnswers({"Is the patient febrile?": ["B"]})) as server, \
            FaultProxy(server.base_url, bad_request_marker="REFUSE") as proxy:
        statuses = []
        for raw in raws:
            req = urllib.request.Request(proxy.base_url + "/chat/completions", raw,
                                         {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    statuses.append((resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]))
            except urllib.error.HTTPError as err:
                statuses.append((err.code, None))
        with urllib.request.urlopen(proxy.base_url + "/models", timeout=60) as resp:
            assert resp.status == 200
        assert statuses == [(200, "B"), (400, None)]
        assert proxy.received == raws  # byte for byte, the refused one too
        assert server.requests == [json.loads(raws[0])]  # forwarded: the server parsed what the client sent
        proxy.reset()
        assert proxy.received == []
