"""Reference baselines (kind ``baseline``): their answers, planned and run by the real pipeline, summarised
into the leaderboard apart from the models (and with them, by the switch)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from medhelm import baselines
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.errors import ConfigError
from medhelm.rundir import RunDir
from medhelm.scoring.choice import gold_label
from medhelm.specs import Instance, Reference, TaskType
from medhelm.store import open_store, read
from tests.leaderboard.helpers import note_summary_benchmark, run_cli

EXAMPLES = Path(__file__).parents[2] / "examples"
EM_YAML = EXAMPLES / "exact_match_demo" / "exact_match_demo.yaml"
EM_CSV = EXAMPLES / "exact_match_demo" / "exact_match_demo_dataset.csv"


def _mc(i: int, correct: int, n: int = 4) -> Instance:
    options = tuple(f"option {k} of {i}" for k in range(n))
    return Instance(id=f"q{i}", input=f"question {i}", choices=options,
                    references=tuple(Reference(o, correct=k == correct) for k, o in enumerate(options)))


def test_random_is_seeded_per_instance_and_uniform() -> None:
    items = [_mc(i, i % 4) for i in range(4000)]
    first = [baselines.random_answer(x, seed=7) for x in items]
    assert first == [baselines.random_answer(x, seed=7) for x in items]  # reproducible
    assert first[::-1] == [baselines.random_answer(x, seed=7) for x in reversed(items)]  # order does not matter
    assert first != [baselines.random_answer(x, seed=8) for x in items]  # the seed does
    counts = Counter(first)
    assert set(counts) == {"A", "B", "C", "D"}
    assert all(900 <= c <= 1100 for c in counts.values()), counts  # uniform (4000 draws; 5 sigma ~ 137)
    hits = sum(a == "ABCD"[i % 4] for i, a in enumerate(first))
    assert 900 <= hits <= 1100  # chance accuracy 1/4


def test_majority_is_the_most_frequent_gold_label() -> None:
    golds = [0, 2, 2, 1, 2, 0, 3, 2]  # C (index 2) four times
    assert baselines.majority_label(gold_label(_mc(i, g)) for i, g in enumerate(golds)) == ("C", 4, 8)
    texts = [Instance(id=str(i), input="x", references=(Reference(t), Reference("other", correct=False)))
             for i, t in enumerate(["No", "Yes", "No"])]
    assert baselines.majority_label(map(gold_label, texts)) == ("No", 2, 3)
    tie = [Instance(id=str(i), input="x", references=(Reference(t),)) for i, t in enumerate(["Yes", "No"])]
    assert baselines.majority_label(map(gold_label, tie))[0] == "No"  # a tie goes to the label sorting first
    with pytest.raises(ConfigError, match="needs gold labels"):
        baselines.majority_label([gold_label(Instance(id="1", input="x"))])


def test_empty_and_copy_input_and_what_fits_which_task() -> None:
    item = Instance(id="n1", input="Patient note: cough for 3 days.", references=(Reference("A cough."),))
    assert baselines.answer(baselines.EMPTY, item, seed=0) == ""
    assert baselines.answer(baselines.COPY_INPUT, item, seed=0) == item.input
    assert baselines.for_task(TaskType.MULTIPLE_CHOICE) == ("baseline/random", "baseline/majority")
    assert baselines.for_task(TaskType.CLASSIFICATION) == ("baseline/random", "baseline/majority")
    assert baselines.for_task(TaskType.GENERATION) == ("baseline/empty", "baseline/copy-input")
    with pytest.raises(ConfigError, match="answer options"):  # only the correct answer: random would cheat
        baselines.check_fits(baselines.RANDOM, TaskType.GENERATION, [item])


def test_a_user_deployment_cannot_pose_as_a_baseline(tmp_path: Path) -> None:
    from medhelm.deployments import DeploymentRegistry

    local = tmp_path / "prod_env"
    local.mkdir()
    (local / "model_deployments.yaml").write_text(
        "model_deployments:\n  - name: baseline/oracle\n    model_name: x/y\n    kind: openai\n"
        "    base_url: http://127.0.0.1:1/v1\n")
    with pytest.raises(ConfigError, match=r"model_deployments.yaml:2: .*kind 'baseline' goes with the names"):
        DeploymentRegistry.load(local)


def _runs(suite: Path) -> dict[tuple[str, str], RunDir]:
    out = {}
    for p in suite.iterdir():
        run = RunDir(p)
        spec = run.spec()
        out[(spec.benchmark.name, spec.deployment)] = run
    return out


@pytest.fixture(scope="module")
def baseline_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    local = root / "prod_env"
    local.mkdir()
    gen = note_summary_benchmark(root, "GEN-BASE")
    with MockOpenAIServer(responder=lambda body: "Yes" if body["model"] == "says-yes" else "No") as srv:
        (local / "model_deployments.yaml").write_text("model_deployments:\n" + "".join(
            f"  - name: mock/{m}\n    model_name: test/{m}\n    kind: openai\n    base_url: {srv.base_url}\n"
            f"    served_model_name: {m}\n    max_sequence_length: 4096\n" for m in ("says-yes", "says-no")))
        entries = [f"medhelm_configurable_benchmark:model=test/{m},model_deployment=mock/{m},config_path={c}"
                   for m in ("says-yes", "says-no") for c in (EM_YAML, gen)]
        for suite, extra in (("s", ["-n", "8"]), ("again", ["-n", "1"])):  # concurrency must not change answers
            code, out, err = run_cli("run", "--run-entries", *entries, "--baselines", "--suite", suite,
                                     "-o", str(root / "out"), "--local-path", str(local), "-q", *extra)
            assert code == 0, err
    return root


def test_baselines_are_planned_per_task_and_answer_as_specified(baseline_suite: Path) -> None:
    runs = _runs(baseline_suite / "out" / "runs" / "s")
    assert set(runs) == {(b, d) for b in ("EXACT-MATCH-DEMO", "GEN-BASE") for d in ("mock/says-yes", "mock/says-no")} | {
        ("EXACT-MATCH-DEMO", "baseline/random"), ("EXACT-MATCH-DEMO", "baseline/majority"),
        ("GEN-BASE", "baseline/empty"), ("GEN-BASE", "baseline/copy-input")}
    rows = list(csv.DictReader(EM_CSV.open(encoding="utf-8")))
    counts = Counter(r["correct_answer"] for r in rows)
    majority = max(sorted(counts), key=counts.get)
    majority_run = list(runs[("EXACT-MATCH-DEMO", "baseline/majority")].iter_records())
    assert len(majority_run) == len(rows) and {r.completion.text for r in majority_run} == {majority}
    assert sum(r.stats["exact_match"] for r in majority_run) == counts[majority]  # scored by the same metric
    rand = {r.instance.id: r.completion.text for r in runs[("EXACT-MATCH-DEMO", "baseline/random")].iter_records()}
    assert set(rand.values()) <= {"Yes", "No"}
    again = _runs(baseline_suite / "out" / "runs" / "again")
    assert rand == {r.instance.id: r.completion.text
                    for r in again[("EXACT-MATCH-DEMO", "baseline/random")].iter_records()}
    for r in runs[("GEN-BASE", "baseline/empty")].iter_records():
        assert r.completion.text == "" and r.stats["rouge_l"] == 0.0
    for r in runs[("GEN-BASE", "baseline/copy-input")].iter_records():
        assert r.completion.text == r.instance.input and r.completion.usage.completion_tokens == 0


def _board(root: Path, release: str, *flags: str) -> dict[str, dict]:
    code, out, err = run_cli("summarize", "--suites", "s", "--release", release, "-o", str(root / "out"),
                             "--local-path", str(root / "prod_env"), "--bootstrap", "50", *flags)
    assert code == 0, err
    with open_store(root / "out" / "results.sqlite") as store:
        board = {r["deployment"]: r for r in read.stored_leaderboard(store, release)}
        costs = {m["deployment"]: (m["cost_usd"], m["cost_basis"]) for m in read.models(store, release)}
    for dep, row in board.items():
        row["cost"] = costs[dep]
    return board


def test_baselines_stay_out_of_win_rates_and_ranks_unless_switched_in(baseline_suite: Path) -> None:
    board = _board(baseline_suite, "apart")
    models = {d: board[d] for d in ("mock/says-yes", "mock/says-no")}
    base = {d: r for d, r in board.items() if d.startswith("baseline/")}
    assert len(base) == 4 and all(r["rank"] is None for r in base.values())
    assert sorted(r["rank"] for r in models.values()) in ([1, 2], [1, 1])
    # between two models a benchmark's win rates are 1 and 0 (or 0.5 each on a tie): baselines changed nothing
    assert sum(r["win_rate"] for r in models.values()) == pytest.approx(1.0)
    # each baseline is compared with the models (where it would stand), on its benchmark only
    assert all(r["win_rate"] is not None and r["n_benchmarks"] == 1 for r in base.values())
    assert all(r["cost"] == (0.0, "baseline") for r in base.values())

    together = _board(baseline_suite, "together", "--rank-baselines")
    ranks = sorted(r["rank"] for r in together.values())
    assert len(ranks) == 6 and None not in ranks and ranks[0] == 1
    # ranked together, each benchmark compares 4 rows: the win rates are not those of the models apart
    assert {round(r["win_rate"], 6) for r in together.values()} != {round(r["win_rate"], 6) for r in board.values()}


def test_leaderboard_keeps_baselines_apart_or_ranks_them_by_the_switch() -> None:
    import numpy as np

    from medhelm.store.tables import CellTable, Column, leaderboard

    cols = tuple(Column(f"b{i}", f"b{i}", "Clinical Decision Support", "Planning Treatments", "private", False)
                 for i in range(2))
    rows = (("org/a", "dep/a"), ("org/b", "dep/b"), ("baseline/random", "baseline/random"))
    values = np.array([[0.9, 0.4], [0.5, 0.6], [0.7, 0.5]])
    table = CellTable(rows, cols, values, np.empty((0, 3, 2)))
    apart = {r.model: r for r in leaderboard(table)}
    # models among themselves: a wins b0, b wins b1 -> 0.5 each, rank 1 each; the baseline changes nothing
    assert apart["org/a"].win_rate == apart["org/b"].win_rate == 0.5 and apart["org/a"].rank == 1
    # the baseline against the models: b0 beats b (1 of 2), b1 beats a (1 of 2) -> 0.5; marked, no rank
    base = apart["baseline/random"]
    assert base.baseline and base.rank is None and base.win_rate == 0.5
    together = {r.model: r for r in leaderboard(table, rank_baselines=True)}
    assert together["org/a"].win_rate == pytest.approx((1.0 + 0.0) / 2)  # b0: beats both; b1: last
    assert together["org/b"].win_rate == pytest.approx((0.0 + 1.0) / 2)
    assert all(r.rank == 1 for r in together.values()) and together["baseline/random"].baseline
    values[2] = [0.95, 0.9]  # a baseline that beats everyone takes rank 1 only when ranked
    ranked = {r.model: r.rank for r in leaderboard(table, rank_baselines=True)}
    assert ranked == {"baseline/random": 1, "org/a": 2, "org/b": 2}
    assert {r.model: r.rank for r in leaderboard(table)} == {"baseline/random": None, "org/a": 1, "org/b": 1}


def test_embedded_model_has_a_cpu_price_and_baselines_cost_nothing(tmp_path: Path) -> None:
    from medhelm.store.costs import PriceTable, Usage

    builtin = PriceTable.configured(None)
    cost = builtin.cost("local/smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct", Usage(gpu_s=1800.0))
    assert cost.basis == "cpu time" and cost.usd == pytest.approx(0.048 * 2 * 0.5)
    assert builtin.cost("baseline/majority", "baseline/majority", Usage(10, 10, 100.0)).usd == 0.0
    assert builtin.cost("vllm/x", "x", Usage(gpu_s=10.0)).basis == "no price"
    own = tmp_path / "prices.yaml"
    own.write_text("prices:\n  - deployment: local/smollm2-135m-instruct\n    cpu_hour: 0.5\n    cpus: 4\n")
    assert PriceTable.configured(own).cost("local/smollm2-135m-instruct", "m", Usage(gpu_s=3600.0)).usd == \
        pytest.approx(2.0)  # the user's price replaces the built-in one
    own.write_text("prices:\n  - deployment: x\n    cpus: 4\n")
    with pytest.raises(ConfigError, match=r"prices.yaml:2: field 'prices\[0\]': needs .* cpu_hour"):
        PriceTable.load(own)
