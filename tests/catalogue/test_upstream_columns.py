"""Upstream's columns under upstream's names, ours under names that say what they compute (issue 30).

One release mixes real crfm-helm 0.5.16 output (`import-helm` of tests/data/helm) and our own runs (`medhelm run`
on the mock OpenAI server): the multiple-choice column `exact_match` must be HELM's rule on both sides, our
lenient rule must be `lenient_match` beside it, and the jury's `<benchmark>_accuracy` must be MedHELM's 1-5 mean.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.scoring.jury.metric import helm_jury_mean
from medhelm.records import JudgeScore, JudgeStatus
from medhelm.store import open_store, read
from tests.leaderboard.helpers import run_cli

ROOT = Path(__file__).parents[2]
REAL = ROOT / "tests/data/helm/real/runs/fixtures"
LAYOUT = ROOT / "tests/data/helm/medhelm_layout/runs/layout"

def _fixture_data_module():
    """scripts/helm_fixtures/data.py: the rows HELM ran shc_conf_med on (loaded from its file, not sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("helm_fixture_data", ROOT / "scripts/helm_fixtures/data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# our multiple-choice model's answer to row i, from its label (helm_fixtures/data.py: "A" if i % 3 else "B"):
# the bare correct letter, forms only the lenient rule reads, and a wrong letter
FORMS = ("{right}", "({right})", "The answer is {right}", "{wrong}", "{lower}.")
JUDGE_SCORES = {"judge-a": (4, 5, 3), "judge-b": (2, 2, 1)}  # per criterion (accuracy, completeness, clarity)


def _helm_exact_match(state: dict, text: str) -> float:
    """HELM's exact_match of one request state, as ``compute_reference_metrics`` computes it: strip the
    completion, map it through ``output_mapping``, compare with every correct reference."""
    pred = (state.get("output_mapping") or {}).get(text.strip())
    golds = [r["output"]["text"] for r in state["instance"]["references"] if "correct" in r["tags"]]
    return max(float(bool(pred) and gold.strip() == pred.strip()) for gold in golds)


def _helm_per_instance(run: Path) -> dict[str, dict[str, float]]:
    """HELM's per-instance values (entries of one instance merged; perturbed and empty stats left out)."""
    out: dict[str, dict[str, float]] = {}
    for entry in json.loads((run / "per_instance_stats.json").read_text()):
        for s in entry["stats"]:
            if s.get("count") and not s["name"].get("perturbation"):
                out.setdefault(entry["instance_id"], {})[s["name"]["name"]] = s["sum"] / s["count"]
    return out


def test_our_exact_match_is_helms_on_helms_own_request_states() -> None:
    """HELM's shc_conf_med request states, our scorer on the same options and answers: HELM's numbers."""
    from medhelm.scoring.choice import helm_family
    from medhelm.specs import Instance, Reference

    checked = 0
    for run in sorted(REAL.glob("shc_conf_med:*")):
        per_instance = _helm_per_instance(run)
        for state in json.loads((run / "scenario_state.json").read_text())["request_states"]:
            refs = state["instance"]["references"]
            inst = Instance(id=state["instance"]["id"], input="",
                            references=tuple(Reference(r["output"]["text"], "correct" in r["tags"]) for r in refs),
                            choices=tuple(r["output"]["text"] for r in refs))
            text = state["result"]["completions"][0]["text"]
            helm = per_instance[state["instance"]["id"]]
            assert helm_family(inst, text) == {k: helm[k] for k in helm_family(inst, text)}
            for variant in (f"{text}.", f"({text})", f"  {text}\n", text.lower(), "C"):
                assert helm_family(inst, variant)["exact_match"] == _helm_exact_match(state, variant), variant
            checked += 1
    assert checked == 30


def _layout_scores(annotation: dict, judges: tuple[str, ...]) -> list[JudgeScore]:
    """A HELM annotation (judge -> criterion -> score; a failed judge absent) as our judgements."""
    out = []
    for judge in judges:
        verdict = annotation.get(judge)
        for criterion in ("accuracy", "clarity"):
            score = verdict[criterion]["score"] if verdict else None
            out.append(JudgeScore(judge, criterion, score, 1, 5,
                                  status=JudgeStatus.OK if verdict else JudgeStatus.ERROR))
    return out


def test_jury_accuracy_is_medhelms_mean_on_helms_own_annotations() -> None:
    """crfm-helm's med_dialog_accuracy per instance (LLMJuryMetric, default 1.0) from its annotations."""
    checked = dropped = 0
    for run in sorted(LAYOUT.glob("med_dialog*")):
        per_instance = _helm_per_instance(run)
        for state in json.loads((run / "scenario_state.json").read_text())["request_states"]:
            annotation = state["annotations"]["med_dialog"]
            scores = _layout_scores(annotation, ("gpt", "llama", "claude"))
            dropped += any(s.status is not JudgeStatus.OK for s in scores)
            assert helm_jury_mean(scores) == pytest.approx(
                per_instance[state["instance"]["id"]]["med_dialog_accuracy"], abs=1e-12)
            checked += 1
    assert checked == 30 and dropped > 0, dropped  # HELM dropped failed judges in some instances
    # a judge with one criterion unscored is dropped whole (HELM's validation); none left -> HELM's default 1.0
    partial = [JudgeScore("j1", "accuracy", 5, 1, 5), JudgeScore("j1", "clarity", None, 1, 5,
                                                                   status=JudgeStatus.UNSCORED),
               JudgeScore("j2", "accuracy", 2, 1, 5), JudgeScore("j2", "clarity", 3, 1, 5)]
    assert helm_jury_mean(partial) == 2.5
    assert helm_jury_mean(partial[:2]) == 1.0


def _responder(body: dict) -> str:
    model = body["model"]
    prompt = body["messages"][-1]["content"]
    if model in JUDGE_SCORES:
        verdict = {c: {"score": s, "explanation": f"{model} gives {s}"}
                   for c, s in zip(("accuracy", "completeness", "clarity"), JUDGE_SCORES[model])}
        return f"<rubric_criteria>{json.dumps(verdict)}</rubric_criteria>"
    if model == "mcq":
        row = int(prompt.split("synthetic note ", 1)[1].split(" ", 1)[0])
        right = "A" if row % 3 else "B"
        return FORMS[row % len(FORMS)].format(right=right, wrong="B" if right == "A" else "A", lower=right.lower())
    return "Assessment: cough. Plan: rest and fluids."


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> dict:
    root = tmp_path_factory.mktemp("columns")
    local, data = root / "prod_env", root / "data"
    local.mkdir()
    _fixture_data_module().write(data)
    (data / "aci_bench").mkdir()
    (data / "aci_bench" / "clinicalnlp_taskB_test1_full.json").symlink_to(
        shared_data / "aci_bench" / "clinicalnlp_taskB_test1_full.json")
    with MockOpenAIServer(responder=_responder) as srv:
        (local / "model_deployments.yaml").write_text("model_deployments:\n" + "".join(
            f"  - name: mock/{m}\n    model_name: test/{m}\n    kind: openai\n    base_url: {srv.base_url}\n"
            f"    served_model_name: {m}\n    max_sequence_length: 8192\n"
            for m in ("mcq", "writer", *JUDGE_SCORES)))
        jury = root / "jury.yaml"
        jury.write_text("judges:\n  - name: mock/judge-a\n  - name: mock/judge-b\nmax_tokens: 400\n"
                        "structured_output: false\n")
        code, _, err = run_cli(
            "run", "--run-entries",
            f"shc_conf_med:data_path={data / 'shc_conf.csv'},model=test/mcq,model_deployment=mock/mcq",
            f"aci_bench:subset=clinicalnlp_taskB_test1,jury_config_path={jury},model=test/writer,"
            "model_deployment=mock/writer",
            "--max-eval-instances", "6", "--data-dir", str(data), "--offline", "--suite", "local",
            "-o", str(root / "out"), "--local-path", str(local), "-q")
        assert code == 0, err
    for helm_suite, release in ((REAL, "mixed"), (LAYOUT, "mixed-jury")):
        code, _, err = run_cli("import-helm", str(helm_suite), "--suites", "local", "--release", release,
                               "-o", str(root / "out"), "--bootstrap", "20")
        assert code == 0, err
    return {"store": root / "out" / "results.sqlite", "runs": root / "out" / "runs" / "local"}


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "instances.jsonl").read_text().splitlines()]


def test_imported_and_native_rows_share_helms_exact_match_with_lenient_match_beside(mixed: dict) -> None:
    [native_run] = [d for d in mixed["runs"].iterdir() if d.name.startswith("shc_conf_med")]
    records = _records(native_run)
    assert len(records) == 6  # --max-eval-instances
    helm_rule = {r["instance"]["id"]: _helm_exact_match(
        {"output_mapping": {"AB"[i]: c for i, c in enumerate(r["instance"]["choices"])},
         "instance": {"references": [{"output": {"text": ref["text"]}, "tags": ["correct"] if ref["correct"] else []}
                                     for ref in r["instance"]["references"]]}}, r["completion"]["text"])
        for r in records}
    lenient = {r["instance"]["id"]: r["stats"]["lenient_match"] for r in records}
    assert {r["instance"]["id"]: r["stats"]["exact_match"] for r in records} == helm_rule
    assert 0 < sum(helm_rule.values()) < sum(lenient.values())  # "B.", "(B)", "a", "The answer is A" differ
    with open_store(mixed["store"]) as store:
        [bench] = [b for b in read.benchmarks(store, "mixed") if b["benchmark"] == "shc_conf_med"]
        cells = {c["model"]: c for c in read.cells(store, "mixed") if c["benchmark"] == "shc_conf_med"}
        beside = read.column_values(store, "mixed", "shc_conf_med", ("exact_match", "lenient_match"))
        assert not read.legacy_names(store, "mixed")
    assert bench["main_metric"] == "exact_match"
    assert set(cells) == {"test/mcq", "mockorg/gpt-4-mock-a", "mockorg/gpt-4-mock-b", "mockorg/gpt-4-mock-c"}
    assert cells["test/mcq"]["value"] == pytest.approx(sum(helm_rule.values()) / 6)
    assert beside[("test/mcq", "mock/mcq")] == pytest.approx(
        {"exact_match": sum(helm_rule.values()) / 6, "lenient_match": sum(lenient.values()) / 6})
    # an exported bundle, even redacted, carries both columns
    bundle = mixed["store"].parent / "bundle"
    code, _, err = run_cli("export", str(bundle), "--redact", "--release", "mixed", "--store", str(mixed["store"]))
    assert code == 0, err
    with open_store(bundle / "results.sqlite") as exported:
        assert read.column_values(exported, "mixed", "shc_conf_med", ("exact_match", "lenient_match")) == beside
    assert "lenient_match" in (bundle / "run_stats.csv").read_text()
    for run in sorted(REAL.glob("shc_conf_med:*")):  # imported: HELM's stats.json value, same column
        helm = next(s for s in json.loads((run / "stats.json").read_text())
                    if s["name"]["name"] == "exact_match" and not s["name"].get("perturbation"))
        model = json.loads((run / "run_spec.json").read_text())["adapter_spec"]["model"]
        deployment = json.loads((run / "run_spec.json").read_text())["adapter_spec"]["model_deployment"]
        assert cells[model]["value"] == pytest.approx(helm["mean"], abs=1e-12)
        assert beside[(model, deployment)] == pytest.approx({"exact_match": helm["mean"]})  # no lenient: absent


def test_native_jury_run_carries_upstreams_accuracy_beside_ours(mixed: dict) -> None:
    [native_run] = [d for d in mixed["runs"].iterdir() if d.name.startswith("aci_bench")]
    records = _records(native_run)
    assert len(records) == 6
    every = [s for scores in JUDGE_SCORES.values() for s in scores]
    for r in records:
        assert r["stats"]["aci_bench_accuracy"] == pytest.approx(sum(every) / len(every))  # MedHELM: plain mean
        assert r["stats"]["jury_score_normalized"] == pytest.approx((sum(every) / len(every) - 1) / 4)
    with open_store(mixed["store"]) as store:
        benches = {b["benchmark"]: b for b in read.benchmarks(store, "mixed-jury")}
        ours = read.column_values(store, "mixed-jury", "aci_bench", ("aci_bench_accuracy",))
        imported = read.column_values(store, "mixed-jury", "med_dialog", ("med_dialog_accuracy",))
    assert benches["aci_bench"]["main_metric"] == benches["med_dialog"]["main_metric"] == "jury_score_normalized"
    assert ours == {("test/writer", "mock/writer"): {"aci_bench_accuracy": pytest.approx(sum(every) / len(every))}}
    helm: dict[tuple[str, str], list[float]] = {}
    for run in sorted(LAYOUT.glob("med_dialog*")):  # HELM's 1-5 column kept as HELM wrote it, beside ours
        stat = next(s for s in json.loads((run / "stats.json").read_text())
                    if s["name"]["name"] == "med_dialog_accuracy" and not s["name"].get("perturbation"))
        spec = json.loads((run / "run_spec.json").read_text())["adapter_spec"]
        total = helm.setdefault((spec["model"], spec["model_deployment"]), [0.0, 0.0])
        total[0] += stat["sum"]
        total[1] += stat["count"]
    assert len(helm) == 3
    assert imported == {key: {"med_dialog_accuracy": pytest.approx(t / n)} for key, (t, n) in helm.items()}


def _as_before_the_rename(src: Path, dst: Path) -> dict[str, tuple[float, float]]:
    """A copy of a native multiple-choice run as the scorer wrote it before the rename: the lenient rule as
    ``exact_match``, the letter rule as ``exact_match_strict``, no HELM family. Returns id -> (strict, lenient)."""
    import shutil

    shutil.copytree(src, dst)
    old, values = [], {}
    for line in (dst / "instances.jsonl").read_text().splitlines():
        r = json.loads(line)
        strict, lenient = r["stats"]["exact_match"], r["stats"]["lenient_match"]
        values[r["instance"]["id"]] = (strict, lenient)
        for name in ("quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match", "lenient_match"):
            del r["stats"][name]
        r["stats"].update(exact_match=lenient, exact_match_strict=strict)
        old.append(json.dumps(r) + "\n")
    (dst / "instances.jsonl").write_text("".join(old))
    stats = json.loads((dst / "stats.json").read_text())
    renamed = {"exact_match": "exact_match_strict", "lenient_match": "exact_match"}
    kept = [s for s in stats if s["name"]["name"] not in ("quasi_exact_match", "prefix_exact_match",
                                                           "quasi_prefix_exact_match")]
    for s in kept:
        s["name"]["name"] = renamed.get(s["name"]["name"], s["name"]["name"])
    (dst / "stats.json").write_text(json.dumps(kept))
    return values


def test_a_run_and_a_store_from_before_the_rename_still_read_honestly(mixed: dict, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    [native_run] = [d for d in mixed["runs"].iterdir() if d.name.startswith("shc_conf_med")]
    out = tmp_path / "out"
    values = _as_before_the_rename(native_run, out / "runs" / "old" / native_run.name)
    strict = sum(v[0] for v in values.values()) / len(values)
    lenient = sum(v[1] for v in values.values()) / len(values)
    assert strict < lenient
    # an old run folder summarized now: ranked by HELM's rule, the lenient one beside it, under today's names
    code, _, err = run_cli("summarize", "--suites", "old", "--release", "now", "-o", str(out), "--bootstrap", "20")
    assert code == 0, err
    # an old store: what summarize wrote before the rename (the stats as the run named them)
    from medhelm.store import sources

    monkeypatch.setattr(sources, "_legacy_choice", lambda stats, records: False)
    code, _, err = run_cli("summarize", "--suites", "old", "--release", "before", "-o", str(out), "--bootstrap", "20")
    assert code == 0, err
    with open_store(out / "results.sqlite") as store:
        now = {c["release"]: c["value"] for c in (*read.cells(store, "now"), *read.cells(store, "before"))}
        assert not read.legacy_names(store, "now") and read.legacy_names(store, "before")
        for release in ("now", "before"):  # the beside columns read right in both
            assert read.column_values(store, release, "shc_conf_med", ("exact_match", "lenient_match")) == {
                ("test/mcq", "mock/mcq"): {"exact_match": pytest.approx(strict), "lenient_match": pytest.approx(lenient)}}
        [run_id] = [r["run_id"] for r in read.runs(store, "now", "shc_conf_med")]
        ids, stored = read.run_values(store, run_id)
        # compare (the release gate, trends, gauges): the old release is read by HELM's rule too, so the rename
        # is no drop
        from medhelm.store.compare import compare, side_from_release

        [result] = compare(side_from_release(store, "before"), side_from_release(store, "now")).results
        # the governance report: the beside column in its own table; the old release flagged
        from medhelm.report.content import read_content
        from medhelm.report.render import render

        pages = {r: render(read_content(store, r), "now").decode() for r in ("now", "before")}
        beside = read_content(store, "now").parts["beside"]
    assert now == {"now": pytest.approx(strict), "before": pytest.approx(lenient)}  # the old store ranked leniently
    assert dict(zip(ids, stored.tolist())) == {i: v[0] for i, v in values.items()}
    assert result.score_a == result.score_b == pytest.approx(strict) and result.diff == 0 and result.change != "drop"
    assert beside == [{"benchmark": "shc_conf_med", "model": "test/mcq", "deployment": "mock/mcq",
                       "stat": "lenient_match", "value": pytest.approx(lenient)}]
    assert "Beside the main metric" in pages["now"] and "summarized before" not in pages["now"]
    assert "summarized before the multiple-choice columns were renamed" in pages["before"]


def test_every_column_a_card_names_is_a_stat_its_benchmark_emits() -> None:
    """The cards (one owner) name each benchmark's ranked column and the ones beside it; the catalogue's
    metrics must emit them all, upstream's `<name>_accuracy` included."""
    from medhelm.benchmarks.catalogue import all_entries
    from medhelm.cards import BY_NAME
    from medhelm.scoring import registry

    beside = {}
    for entry in all_entries():
        card = BY_NAME[entry.name]
        emitted = {name for metric in entry.metrics for name in registry.stat_names(metric)}
        assert set(card.columns) <= emitted, entry.name
        beside[entry.name] = card.beside
    assert beside["pubmed_qa"] == ("lenient_match",) and beside["aci_bench"] == ("aci_bench_accuracy",)
    assert beside["medhallu"] == () and beside["medcalc_bench"] == ("medcalc_bench_accuracy_lenient",)
    assert sum(b == ("lenient_match",) for b in beside.values()) == 19  # every multiple-choice benchmark
    assert sum(b[:1] == (f"{n}_accuracy",) for n, b in beside.items()) == 13  # every built-in jury rubric


def test_dashboard_benchmark_page_shows_the_beside_column_and_flags_an_old_release(
        mixed: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dashboard_env: None) -> None:
    import os

    from streamlit.testing.v1 import AppTest

    [native_run] = [d for d in mixed["runs"].iterdir() if d.name.startswith("shc_conf_med")]
    out = tmp_path / "out"
    values = _as_before_the_rename(native_run, out / "runs" / "old" / native_run.name)
    from medhelm.store import sources

    monkeypatch.setattr(sources, "_legacy_choice", lambda stats, records: False)
    assert run_cli("summarize", "--suites", "old", "--release", "before", "-o", str(out), "--bootstrap", "20")[0] == 0
    os.environ.pop("MEDHELM_REDACTED", None)
    pages = {}
    for store, release in ((mixed["store"], "mixed"), (out / "results.sqlite", "before")):
        os.environ["MEDHELM_STORE"], os.environ["MEDHELM_RELEASE"] = str(store), release
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60).run()
        at.sidebar.radio(key="page").set_value("Benchmark").run()
        at.selectbox(key="bench_page_benchmark").set_value("shc_conf_med").run()
        assert not at.exception, [e.value for e in at.exception]
        pages[release] = (at.dataframe[0].value.set_index("model"), [w.value for w in at.warning])
    cells, warnings = pages["mixed"]
    assert not warnings
    assert cells["lenient_match"].isna()["mockorg/gpt-4-mock-a"]  # HELM never computed ours: empty, not 0
    assert cells.loc["mockorg/gpt-4-mock-a", "value"] >= 0
    native = cells.loc["test/mcq"]
    assert native["value"] < native["lenient_match"]
    old_cells, old_warnings = pages["before"]
    assert any("summarized before the multiple-choice columns were renamed" in w for w in old_warnings)
    assert old_cells.loc["test/mcq", "lenient_match"] == pytest.approx(
        sum(v[1] for v in values.values()) / len(values))
