"""A differential run against crfm-helm: the same benchmark, the same instances and the same deterministic model
answered through HELM's own ``helm-run`` and through ``medhelm run``, compared instance by instance.

    cases = select(["pubmed_qa", "medec"])
    report = run_differential(cases, helm=HelmRun(python, deps), shared_data=..., work=..., limit=5)
    report.rows  # one Row per benchmark; report.unexplained() -> the differences no KNOWN line explains

What is run. For each case a slice of the real public data (the first ``limit`` items of the file under the
shared data folder, or all of them) is written twice in the layouts each side reads offline: HELM's download
target under ``<helm output>/scenarios/<benchmark>/`` (so ``ensure_file_downloaded`` finds it and never reaches
out) and our air-gapped mirror (``<mirror>/<benchmark>/<upstream file name>``). Neither side samples: the slice
is smaller than both sides' instance caps, so the same items are evaluated, and items pair by position (HELM's
``id<i>`` in file order, our records in position order; a mismatch shows as a reference difference). One
``MockOpenAIServer`` answers both, with ``KeyedAnswers``: each request is answered by a hash of the item its
prompt names (a passage of the item both layouts carry), so a different prompt layout still gets the same
completion and the metrics compare on the same answers. Both sides read one prod_env (an OpenAI-compatible
deployment whose base_url is the mock, the key in credentials.conf); helm-run runs in crfm-helm's own venv as
its own process, ``medhelm run`` as its own process of this interpreter.

What is compared, per instance: the request as it reached the server (the prompt text byte for byte, the
messages, max tokens, stop sequences, temperature, every other body field; where the prompts differ, the words
only one of them has must be the case's ``prompt_words``, so a layout difference cannot hide a changed text), the
references (text and
correctness), the completion, and every metric both compute (to 1e-9); per run, the aggregate (the mean over
the instances) of every shared stat and the leaderboard's main metric. Token counts and timings are accounting
(HELM counts with its tokenizer, we with the server's usage) and are not compared. A difference is *explained* when the
benchmark's ``KNOWN`` entry names its kind and says why (docs/metrics.md lists them with both numbers); a kind
KNOWN names that no longer differs is reported too (``vanished``), so a fixed difference drops its line.

Failure semantics: a side that fails to run raises ``DiffError`` with the tail of its log (no instance text
beyond the public benchmark data); a benchmark whose data file is missing is skipped (``Row.skipped`` says
why), never compared on partial data. Building HELM's run dependencies (``ensure_run_deps``) needs PyPI once;
offline it raises ``DiffError`` naming the folder, which a test turns into a skip.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medhelm.devtools.mock_openai import KeyedAnswers, MockOpenAIServer, collapse

HELM_VERSION = "0.5.16"
# what helm-run imports beyond the client path's packages of the crfm-helm venv (its core requirements, at
# versions within its pins; torch/transformers/spacy left out: no compared run needs them)
RUN_PACKAGES = ("Mako==1.4.3", "pandas==2.3.3", "bottle==0.12.25", "nltk==3.10.4", "rouge-score==0.1.2",
                "scipy==1.17.1", "scikit-learn==1.9.1", "datasets==3.6.0", "pyarrow-hotfix==0.7",
                "uncertainty-calibration==0.1.4", "parameterized==0.9.0")
DEPLOYMENT, MODEL = "mock/diff-model", "mockorg/diff-model"
JUDGES = ("mock/diff-judge-a", "mock/diff-judge-b")  # the jury of both sides: deployments on the same mock
TOLERANCE = 1e-9
# per-instance stats that are accounting, not metrics: HELM counts tokens with its tokenizer and times its own
# client; ours come from the server's usage and our client
ACCOUNTING = frozenset({"num_prompt_tokens", "num_completion_tokens", "num_output_tokens", "num_train_instances",
                        "num_references", "num_train_trials", "inference_runtime", "batch_size", "prompt_truncated",
                        "max_prob", "logprob", "num_perplexity_tokens", "num_bytes", "finish_reason_length",
                        "finish_reason_stop", "finish_reason_endoftext", "finish_reason_unknown",
                        "training_co2_cost", "training_energy_cost", "inference_denoised_runtime",
                        "inference_idealized_runtime", "num_instances", "unscored", "judge_prompt_tokens",
                        "judge_completion_tokens"})
KINDS = ("prompt", "request", "references", "completion", "metrics", "aggregate", "main")


class DiffError(Exception):
    """A side of the differential could not run (its log's tail in the message)."""


# -- the benchmarks ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One public benchmark: where its slice comes from and goes, what names an item, what the mock answers."""

    name: str  # the run entry's name, the same on both sides
    shared: str  # the slice under the shared data folder
    mirror: str  # our mirror's path for it: <benchmark>/<upstream file name>
    # HELM's download targets under <helm output>/scenarios/<benchmark>/: name -> None (the slice) or a text
    # (e.g. an empty file of a split the slice does not hold); none when HELM reads ``hf_dataset``
    helm_files: tuple[tuple[str, str | None], ...]
    read: Callable[[Path], list[Any]]  # the file's items, in file order
    write: Callable[[list[Any], Path], None]  # a slice, in the file's own format
    key: Callable[[Any], str]  # a passage of the item that every layout of its prompt carries
    answers: Callable[[Any], list[str]]  # the mock's candidate completions for the item
    main: str  # the leaderboard's main metric (our card's)
    helm_main: str  # the stat HELM's schema ranks the benchmark by
    known: dict[str, str] = field(default_factory=dict)  # kind -> why ours differs on purpose
    # HELM reads it with datasets.load_dataset(<hf_dataset>[-<version>]): the slice is served from a CSV instead
    hf_dataset: str = ""
    hf_int_columns: tuple[str, ...] = ()  # the dataset's integer columns (the others are strings)
    # a per-instance metric difference KNOWN["metrics"] explains: excuse(item, completion, metric, HELM's, ours)
    excuse: Callable[[Any, str, str, float | None, float | None], bool] | None = None
    # known kinds that show only on some items (a slice without such an item has none to show)
    on_some_items: frozenset[str] = frozenset()
    our_args: str = ""  # run-entry arguments medhelm's entry adds (e.g. the one test file of the slice)
    # the words (whitespace-separated) only HELM's prompt has and only ours has, with their counts: a layout
    # difference; a prompt whose words differ otherwise is a "prompt words" difference (never explained)
    prompt_words: tuple[dict[str, int], dict[str, int]] = ({}, {})
    jury: tuple[str, ...] = ()  # the rubric's criteria: a jury benchmark, judged by JUDGES on both sides
    # the same for the judges' prompts: HELM's annotator text is ours byte for byte, its {QUESTION} is the
    # instance's input, so only the input's layout words (the model prompt's) may differ
    judge_prompt_words: tuple[dict[str, int], dict[str, int]] = ({}, {})


def _read_json_items(path: Path) -> list[Any]:
    return list(json.loads(path.read_text(encoding="utf-8")).items())


def _write_json_items(items: list[Any], path: Path) -> None:
    path.write_text(json.dumps(dict(items), ensure_ascii=False), encoding="utf-8")


def _read_csv_rows(path: Path) -> list[Any]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return [dict(zip(header, row)) for row in reader if any(c.strip() for c in row)]


def _write_csv_rows(rows: list[Any], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _medec_key(row: dict) -> str:
    lines = [ln.split(" ", 1)[-1] for ln in row["Sentences"].splitlines() if ln.strip()]
    return max(lines, key=len)


def _medec_answers(row: dict) -> list[str]:
    sid = str(row.get("Error Sentence ID") or "").strip()
    out = ["CORRECT", "correct", "0 The note has no error.", "I am not sure."]
    if sid and sid != "-1":
        out += [f"{sid} {row.get('Corrected Sentence', '').strip()}", f"{sid}"]
    return out


def _medcalc_key(row: dict) -> str:
    return collapse(row["Patient Note"])[:240]


def _medcalc_answers(row: dict) -> list[str]:
    truth, low, high = (str(row.get(k) or "").strip() for k in ("Ground Truth Answer", "Lower Limit", "Upper Limit"))
    out = [truth, f"The answer is {truth}", "0"]
    try:
        out += [low, f"{float(high) * 1.2:g}"] if low and high else []
    except ValueError:
        pass
    return out


# the categories MedCalc-Bench's published data spells otherwise than HELM's MedCalcBenchMetric expects ("lab",
# "dosage conversion"): HELM scores every answer of these 0
MEDCALC_HELM_UNKNOWN_CATEGORIES = ("lab test", "dosage")


def _medcalc_excuse(row: dict, completion: str, metric: str, helm: float | None, ours: float | None) -> bool:
    return (metric == "medcalc_bench_accuracy" and row.get("Category") in MEDCALC_HELM_UNKNOWN_CATEGORIES
            and helm == 0 and ours == 1)


def _aci_answers(record: dict) -> list[str]:
    note = record["tgt"]
    return [note, note[: len(note) // 3], "", "CHIEF COMPLAINT\n\nFollow-up.\n\nASSESSMENT AND PLAN\n\nNo changes."]


def _hash(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:8], 16)


def jury_verdict(criteria: tuple[str, ...]) -> Callable[[dict, str], str | None]:
    """The judges' answer (None for a candidate's request): a score 1-5 per criterion by a hash of (judge, item,
    criterion) as a JSON verdict; the second judge answers prose on about a quarter of the items (unparseable:
    both sides drop that judge for the item)."""

    def verdict(body: dict, key: str) -> str | None:
        model = str(body.get("model", ""))
        if not any(model == j.split("/", 1)[1] for j in JUDGES):
            return None
        if model == JUDGES[1].split("/", 1)[1] and _hash(model, key) % 4 == 0:
            return "I would rather not grade this note."
        return json.dumps({c: {"score": 1 + _hash(model, key, c) % 5, "explanation": "keyed"} for c in criteria})

    return verdict


def _medec_excuse(row: dict, completion: str, metric: str, helm: float | None, ours: float | None) -> bool:
    """HELM's MEDEC bug we do not copy: its gold sentence id is ``int()`` of the whole reference ("3 The ...":
    always fails), so an error note's sentence is never credited (HELM 0 where ours may be 1); and HELM's sentence
    accuracy credits a clean note only on the exact answer ``CORRECT`` (ours reads CORRECT in any case)."""
    if metric != "medec_error_sentence_accuracy":
        return False
    if str(row.get("Error Flag", "")).strip() == "1":
        return helm == 0
    answer = completion.strip()
    return answer != "CORRECT" and re.match(r"^correct\b", answer, re.I) is not None and (helm, ours) == (0, 1)


CASES: tuple[Case, ...] = (
    Case("pubmed_qa", "pubmedqa/ori_pqal_sample.json", "pubmed_qa/ori_pqal.json", (("data/test_set.json", None),),
         _read_json_items, _write_json_items, key=lambda item: item[1]["QUESTION"],
         answers=lambda item: ["A", "B", "C", "B.", "maybe"], main="exact_match", helm_main="exact_match",
         prompt_words=({"Question:": 1}, {}),
         known={"prompt": "layout: HELM writes `Question: Context: <abstract>\\n\\nQuestion: <question>\\n` (its "
                          "passage and question nouns doubled), ours `Context:\\n<abstract>\\n\\nQuestion: "
                          "<question>`; the instructions, abstract, question, options and `Answer:` cue are the "
                          "same (docs/catalogue.md, Prompts)"}),
    Case("medcalc_bench", "medcalc_bench/one_shot_data.csv", "medcalc_bench/test_data.csv", (),
         _read_csv_rows, _write_csv_rows, key=_medcalc_key, answers=_medcalc_answers,
         main="medcalc_bench_accuracy", helm_main="medcalc_bench_accuracy", hf_dataset="ncbi/MedCalc-Bench",
         hf_int_columns=("Row Number", "Calculator ID"), prompt_words=({"needed:": 1}, {"needed.": 1, "Answer:": 1}),
         known={"prompt": "layout: HELM ends the prompt with its output noun, `Answer only the requested quantity "
                          "without units. No explanation needed:`; ours puts that sentence after the instructions "
                          "and ends with `Answer:`; instructions, note and question the same",
                "metrics": "MedCalc ground truth: HELM's MedCalcBenchMetric knows the categories `lab` and `dosage "
                           "conversion`, the data says `lab test` and `dosage`, so HELM scores every answer of "
                           "those 0; ours scores them within the dataset's limits (a right answer 1)",
                "aggregate": "follows from the metrics' difference (HELM's category bug)",
                "main": "follows from the metrics' difference (HELM's category bug)"},
         excuse=_medcalc_excuse, on_some_items=frozenset({"metrics", "aggregate", "main"})),
    Case("aci_bench", "aci_bench/clinicalnlp_taskB_test1_full.json", "aci_bench/clinicalnlp_taskB_test1_full.json",
         (("aci_bench_test_1.json", None), ("aci_bench_train.json", '{"data": []}'),
          ("aci_bench_test_2.json", '{"data": []}'), ("aci_bench_test_3.json", '{"data": []}')),
         lambda path: json.loads(path.read_text(encoding="utf-8"))["data"],
         lambda items, path: path.write_text(json.dumps({"data": items}, ensure_ascii=False), encoding="utf-8"),
         key=lambda record: collapse(record["src"])[:240], answers=_aci_answers,
         main="jury_score_normalized", helm_main="aci_bench_accuracy",
         our_args="subset=clinicalnlp_taskB_test1", jury=("accuracy", "completeness", "clarity"),
         judge_prompt_words=({"Doctor-patient": 1, "dialogue:": 1}, {}),
         prompt_words=({"The": 1, "conversation": 1, "is:": 1, "Doctor-patient": 1, "dialogue:": 1}, {}),
         known={"prompt": "layout and one phrase: HELM's instructions end `The conversation is:` followed by "
                          "`Conversation: Doctor-patient dialogue:\\n\\n<dialogue>`, and `Clinical Note:` after a "
                          "single newline; ours `Conversation:\\n<dialogue>` and a blank line before `Clinical Note:`; "
                          "the four-section instructions and the dialogue the same",
                "judge prompt": "HELM's ACIBenchAnnotator text byte for byte on both sides (builtin_prompts: helm); "
                                "only its {QUESTION}, the instance's input, differs: HELM's scenario writes it "
                                "`Doctor-patient dialogue:\\n\\n<dialogue>`, ours `<dialogue>` (the model "
                                "prompt's layout row); the words only one side has are checked on every request",
                "main": "the ranked column: ours is jury_score_normalized (0-1, unscored when no judge is valid), "
                        "HELM ranks aci_bench_accuracy (1-5, 1.0 when no judge is valid), which ours computes "
                        "beside it and which is equal (docs/metrics.md, Two rules, two names)"}),
    Case("medec", "medec/MEDEC-MS-TestSet-sample.csv",
         "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv", (("medec_test.csv", None),),
         _read_csv_rows, _write_csv_rows, key=_medec_key, answers=_medec_answers,
         main="medec_error_flag_accuracy", helm_main="medec_error_flag_accuracy",
         known={"prompt": "layout: HELM starts the note on its label's line (`Clinical Note: 0 A 29-year-old ...`) "
                          "and puts `Answer:` on the line after the last sentence; ours `Clinical Note:\\n0 A "
                          "29-year-old ...` and a blank line before `Answer:`; instructions and sentences the same",
                "metrics": "medec_error_sentence_accuracy: HELM reads the gold sentence id with int() of the "
                           "whole reference (`3 The causative agent ...`), which always fails, so it never credits "
                           "an error note's sentence (ours reads the id); and it credits a clean note only on the "
                           "exact answer `CORRECT` (ours reads CORRECT in any case)",
                "aggregate": "follows from the metrics' difference (HELM's sentence id bug)"},
         excuse=_medec_excuse, on_some_items=frozenset({"metrics", "aggregate"})),
)


def select(names: Iterable[str] | None = None) -> list[Case]:
    by_name = {c.name: c for c in CASES}
    if names is None:
        return list(CASES)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"no differential case for {', '.join(unknown)} (known: {', '.join(by_name)})")
    return [by_name[n] for n in names]


# -- the two sides ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HelmRun:
    """crfm-helm's venv interpreter and the folder of its run dependencies (``ensure_run_deps``)."""

    python: Path
    deps: Path

    @property
    def helm_run(self) -> Path:
        return self.python.parent / "helm-run"


def ensure_run_deps(python: Path, folder: Path) -> Path:
    """``RUN_PACKAGES`` installed for crfm-helm's venv under ``folder`` (pip --target, reused when present)."""
    ok = folder / ".ok"
    want = "\n".join(RUN_PACKAGES)
    if ok.is_file() and ok.read_text() == want:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
                           str(folder), *RUN_PACKAGES], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise DiffError(f"cannot install helm-run's dependencies in {folder} (offline?): "
                        f"{(done.stderr.strip().splitlines() or [''])[-1][:200]}")
    ok.write_text(want)
    return folder


def write_prod_env(folder: Path, base_url: str) -> Path:
    """One prod_env both sides read: the mock as an OpenAI-compatible deployment, its key in credentials.conf."""
    folder.mkdir(parents=True, exist_ok=True)
    host = DEPLOYMENT.split("/")[0]
    pairs = [(DEPLOYMENT, MODEL)] + [(j, _model_of(j)) for j in JUDGES]
    (folder / "model_deployments.yaml").write_text("model_deployments:\n" + "".join(
        f"  - name: {name}\n    model_name: {model}\n    tokenizer_name: mock/simple\n"
        "    max_sequence_length: 1000000\n    client_spec:\n"
        '      class_name: "helm.clients.openai_client.OpenAIClient"\n'
        f'      args:\n        base_url: "{base_url}"\n' for name, model in pairs))
    (folder / "model_metadata.yaml").write_text("models:\n" + "".join(
        f"  - name: {model}\n    display_name: Differential {model}\n    description: KeyedAnswers mock\n"
        "    creator_organization_name: MockOrg\n    access: open\n    release_date: 2025-01-01\n"
        "    tags: [TEXT_MODEL_TAG, PARTIAL_FUNCTIONALITY_TEXT_MODEL_TAG]\n" for _, model in pairs))
    # the jury in upstream's judges.yaml shape, which both sides read (the label is the deployment's name)
    (folder / "judges.yaml").write_text("judges:\n" + "".join(
        f"  - name: {j}\n    model: {_model_of(j)}\n    model_deployment: {j}\n" for j in JUDGES))
    (folder / "tokenizer_configs.yaml").write_text(
        "tokenizer_configs:\n  - name: mock/simple\n    tokenizer_spec:\n"
        '      class_name: "helm.tokenizers.simple_tokenizer.SimpleTokenizer"\n'
        '    end_of_text_token: "</s>"\n    prefix_token: "<s>"\n')
    (folder / "credentials.conf").write_text(f'{host}ApiKey: "diff-key"\n')
    return folder


def _model_of(deployment: str) -> str:
    return "mockorg/" + deployment.split("/", 1)[1]


def _entry(case: Case, work: Path, ours: bool) -> str:
    args = [case.our_args] if ours and case.our_args else []
    if case.jury:
        args.append(f"jury_config_path={(work / 'prod_env' / 'judges.yaml').resolve()}")
    return f"{case.name}:{','.join(args + [f'model={MODEL}', f'model_deployment={DEPLOYMENT}'])}"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HELM_CREDENTIALS", "OPENAI_BASE_URL")}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", **extra})
    return env


# HELM's scenarios that read a Hugging Face dataset get the slice from a local CSV, through the csv builder of
# `datasets`, typed as the Hub's dataset is (every column a string but the integer ones named): a sitecustomize
# module in the helm-run process
SITECUSTOMIZE = """\
import csv
import os

_SLICES = os.environ.get("MEDHELM_DIFF_HF_SLICES", "")
_INTS = set(filter(None, os.environ.get("MEDHELM_DIFF_HF_INTS", "").split(",")))
if _SLICES:
    import datasets

    _load = datasets.load_dataset

    def load_dataset(path, *args, **kwargs):
        for pair in _SLICES.split(os.pathsep):
            name, _, csv_file = pair.partition("=")
            if path == name or path.startswith(name + "-"):
                with open(csv_file, newline="", encoding="utf-8") as fh:
                    header = next(csv.reader(fh))
                features = datasets.Features({c: datasets.Value("int64" if c in _INTS else "string")
                                              for c in header})
                return _load("csv", data_files={"test": csv_file}, features=features)
        return _load(path, *args, **kwargs)

    datasets.load_dataset = load_dataset

if os.environ.get("MEDHELM_DIFF_ROUGE_ONLY"):
    # SummarizationMetric needs torch, spacy's en_core_web_sm, summ_eval and downloads (QAFactEval): its ROUGE
    # part only (medhelm_diff_rouge, HELM's own ROUGE functions); the device asked for is the CPU
    import sys
    import types

    _gpu = types.ModuleType("helm.common.gpu_utils")
    _gpu.is_cuda_available = lambda: False
    _gpu.get_torch_device_name = lambda: "cpu"
    sys.modules["helm.common.gpu_utils"] = _gpu
    from helm.benchmark.metrics import common_metric_specs as _specs
    from helm.benchmark.metrics.metric import MetricSpec as _MetricSpec

    def get_summarization_metric_specs(args):
        return [_MetricSpec(class_name="medhelm_diff_rouge.SummarizationRouge", args={})] + \
            _specs.get_basic_metric_specs([])

    _specs.get_summarization_metric_specs = get_summarization_metric_specs
"""
# SummarizationMetric's ROUGE stats as it computes them (its _remove_braces, the prediction stripped, the max over
# the references of HELM's get_rouge_function), without the rest of the class's imports
ROUGE_METRIC = """\
from helm.benchmark.metrics.evaluate_reference_metrics import get_rouge_function
from helm.benchmark.metrics.metric import Metric
from helm.benchmark.metrics.metric_name import MetricName
from helm.benchmark.metrics.statistic import Stat


def _remove_braces(text):
    if text.startswith("{"):
        text = text[1:]
    if text.endswith("}"):
        text = text[:-1]
    return text


class SummarizationRouge(Metric):
    def __init__(self):
        self.rouge_fns = {"rouge_1": get_rouge_function("rouge1"), "rouge_2": get_rouge_function("rouge2"),
                          "rouge_l": get_rouge_function("rougeL")}

    def evaluate_generation(self, adapter_spec, request_state, metric_service, eval_cache_path):
        refs = [_remove_braces(ref.output.text) for ref in request_state.instance.references]
        pred = _remove_braces(request_state.result.completions[0].text.strip())
        return [Stat(MetricName(name)).add(float(max(fn(ref, pred) for ref in refs)))
                for name, fn in self.rouge_fns.items()]
"""


def run_helm(helm: HelmRun, case: Case, work: Path, count: int) -> Path:
    """helm-run on the slice; returns its run folder."""
    log = work / f"helm-{case.name}.log"
    site = work / "helm_site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "medhelm_diff_rouge.py").write_text(ROUGE_METRIC)
    slices = f"{case.hf_dataset}={work / 'mirror' / case.mirror}" if case.hf_dataset else ""
    with open(log, "w") as fh:
        done = subprocess.run([str(helm.helm_run), "--run-entries", _entry(case, work, False), "--suite", "diff",
                               "--max-eval-instances", str(count), "--local-path", "prod_env",
                               "--output-path", "helm", "-n", "1"], cwd=work, stdout=fh, stderr=subprocess.STDOUT,
                              env=_env(PYTHONPATH=f"{site}{os.pathsep}{helm.deps}", MEDHELM_DIFF_HF_SLICES=slices,
                                         MEDHELM_DIFF_HF_INTS=",".join(case.hf_int_columns),
                                         MEDHELM_DIFF_ROUGE_ONLY="1" if case.jury else ""),
                              timeout=3600)
    runs = [p for p in (work / "helm/runs/diff").glob(f"{case.name}:*") if (p / "scenario_state.json").is_file()]
    if done.returncode != 0 or len(runs) != 1:
        raise DiffError(f"helm-run {case.name} failed (exit {done.returncode}): {_tail(log)}")
    return runs[0]


def run_ours(case: Case, work: Path) -> Path:
    """``medhelm run`` on the slice (offline, from the mirror, no cache); returns its run folder."""
    log = work / f"ours-{case.name}.log"
    with open(log, "w") as fh:
        done = subprocess.run([sys.executable, "-m", "medhelm", "run", "-r", _entry(case, work, True),
                               "--suite", "diff",
                               "--local-path", "prod_env", "--output-path", "ours", "--data-dir", "mirror",
                               "--offline", "--disable-cache", "-n", "4"], cwd=work, stdout=fh,
                              stderr=subprocess.STDOUT, env=_env(), timeout=3600)
    runs = [p for p in (work / "ours/runs/diff").glob(f"{case.name}[:,]*") if (p / "stats.json").is_file()]
    if done.returncode != 0 or len(runs) != 1:
        raise DiffError(f"medhelm run {case.name} failed (exit {done.returncode}): {_tail(log)}")
    return runs[0]


def _tail(log: Path) -> str:
    return " | ".join(log.read_text(errors="replace").strip().splitlines()[-8:])[-1500:]


# -- reading both sides -------------------------------------------------------------------------------------------


@dataclass
class Side:
    """One side's run: per position the request body as the server got it, references, completion, metrics."""

    ids: list[str]
    references: list[list[tuple[str, bool]]]
    completions: list[str | None]
    metrics: list[dict[str, float | None]]
    aggregate: dict[str, tuple[int, float | None]]  # stat -> (count, mean), split test (HELM: count of trials)
    wire: list[dict | None] = field(default_factory=list)
    judge_wire: list[dict[str, dict]] = field(default_factory=list)  # per position: judge model -> first request
    verdicts: list[set[tuple[str, str, int]]] = field(default_factory=list)  # (judge, criterion, score) parsed


def read_helm(run: Path, annotator: str = "") -> Side:
    """HELM's run folder; ``annotator`` names the jury's annotations (a jury benchmark's own name)."""
    states = json.loads((run / "scenario_state.json").read_text())["request_states"]
    states.sort(key=lambda s: int(str(s["instance"]["id"]).lstrip("id") or 0))
    per = {}
    for entry in json.loads((run / "per_instance_stats.json").read_text()):
        per.setdefault(entry["instance_id"], {}).update(  # one entry per metric class: merged
            {s["name"]["name"]: (s["sum"] / s["count"] if s["count"] else None)
             for s in entry["stats"] if not s["name"].get("perturbation")})
    side = Side([], [], [], [], _helm_aggregate(run))
    for s in states:
        inst = s["instance"]
        side.ids.append(str(inst["id"]))
        side.references.append([(r["output"]["text"], "correct" in r["tags"]) for r in inst["references"]])
        comps = (s.get("result") or {}).get("completions") or []
        side.completions.append(comps[0]["text"] if comps else None)
        side.metrics.append(per.get(inst["id"], {}))
        notes = ((s.get("annotations") or {}).get(annotator) or {}) if annotator else {}
        side.verdicts.append({(judge, criterion, int(v["score"])) for judge, verdict in notes.items()
                              if isinstance(verdict, dict) for criterion, v in verdict.items()
                              if isinstance(v, dict) and isinstance(v.get("score"), (int, float))})
    return side


def _helm_aggregate(run: Path) -> dict[str, tuple[int, float | None]]:
    out = {}
    for s in json.loads((run / "stats.json").read_text()):
        name = s["name"]
        if name.get("split") == "test" and not name.get("perturbation"):
            out[name["name"]] = (s["count"], s.get("mean"))
    return out


def read_ours(run: Path) -> Side:
    latest: dict[int, dict] = {}
    with open(run / "instances.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                latest[rec["position"]] = rec
    side = Side([], [], [], [], {})
    for pos in sorted(latest):
        rec = latest[pos]
        side.ids.append(rec["instance"]["id"])
        side.references.append([(r["text"], bool(r["correct"])) for r in rec["instance"]["references"]])
        side.completions.append((rec.get("completion") or {}).get("text"))
        side.metrics.append(dict(rec.get("stats") or {}))
        side.verdicts.append({(j["judge"], j["criterion"], int(j["score"])) for j in rec.get("judgements") or []
                              if j.get("status") == "ok" and not str(j["judge"]).startswith("rule:")})
    for s in json.loads((run / "stats.json").read_text()):
        if s["name"].get("split") == "test":
            side.aggregate[s["name"]["name"]] = (s["count"], s.get("mean"))
    return side


def attach_wire(side: Side, bodies: list[dict], responder: KeyedAnswers, keys: list[str]) -> None:
    """Each position's request bodies as the server received them (the item's key named in their messages): the
    candidate's, and the first of each judge's."""
    candidate = MODEL.split("/", 1)[1]
    by_key: dict[str, dict] = {}
    judged: dict[str, dict[str, dict]] = {}
    for body in bodies:
        named = responder.keys_of(body)
        if not named:
            continue
        if body.get("model") == candidate:
            by_key.setdefault(named[0], body)
        else:
            judged.setdefault(named[0], {}).setdefault(str(body.get("model")), body)
    side.wire = [by_key.get(collapse(k)) for k in keys]
    side.judge_wire = [judged.get(collapse(k), {}) for k in keys]


# -- comparing ----------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One benchmark's comparison: counts of equal instances per kind and the differences found."""

    benchmark: str
    instances: int = 0
    equal: dict[str, int] = field(default_factory=dict)  # kind -> instances (or stats) equal
    total: dict[str, int] = field(default_factory=dict)
    differences: dict[str, list[str]] = field(default_factory=dict)  # kind -> examples
    explained: dict[str, str] = field(default_factory=dict)  # kind -> why (from KNOWN)
    vanished: list[str] = field(default_factory=list)  # KNOWN kinds that no longer differ
    main: tuple[float | None, float | None] = (None, None)  # (HELM, ours)
    metrics_compared: list[str] = field(default_factory=list)
    skipped: str = ""

    def add(self, kind: str, same: bool, example: str) -> None:
        self.total[kind] = self.total.get(kind, 0) + 1
        if same:
            self.equal[kind] = self.equal.get(kind, 0) + 1
        else:
            self.equal.setdefault(kind, 0)
            examples = self.differences.setdefault(kind, [])
            if len(examples) < 3:
                examples.append(example)

    def unexplained(self) -> dict[str, list[str]]:
        return {k: v for k, v in self.differences.items() if k not in self.explained}

    def cell(self, kind: str) -> str:
        if kind not in self.total:
            return "—"
        n, of = self.equal.get(kind, 0), self.total[kind]
        return f"yes ({n}/{of})" if n == of else f"**no** ({n}/{of})"


def _same_number(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=TOLERANCE)


def compare(case: Case, helm: Side, ours: Side, items: list[Any] | None = None) -> Row:
    """The comparison of one benchmark; ``items`` (the slice, in order) lets ``case.excuse`` see each item."""
    row = Row(case.name, instances=len(helm.ids))
    if len(helm.ids) != len(ours.ids):
        row.add("references", False, f"HELM evaluated {len(helm.ids)} instances, medhelm {len(ours.ids)}")
    shared: set[str] = set()
    for i in range(min(len(helm.ids), len(ours.ids))):
        where = f"{helm.ids[i]}/{ours.ids[i]}"
        hw, ow = (helm.wire[i] if i < len(helm.wire) else None), (ours.wire[i] if i < len(ours.wire) else None)
        if hw is None or ow is None:
            row.add("request", False, f"{where}: {'HELM' if hw is None else 'medhelm'}'s request not seen")
        else:
            hp, op = _prompt(hw), _prompt(ow)
            row.add("prompt", hp == op, f"{where}: {_first_difference(hp, op)}")
            h_words, o_words = Counter(hp.split()), Counter(op.split())
            words = (dict(h_words - o_words), dict(o_words - h_words))
            row.add("prompt words", hp == op or words == case.prompt_words,
                    f"{where}: only in HELM's {words[0]}, only in ours {words[1]} (expected {case.prompt_words})")
            roles = tuple([m.get("role") for m in body.get("messages") or []] for body in (hw, ow))
            fields = _other_fields(hw, ow)
            row.add("request", not fields and roles[0] == roles[1],
                    f"{where}: {fields}" + ("" if roles[0] == roles[1] else f" roles {roles}"))
        if case.jury:
            _compare_jury(row, where, helm, ours, i, case)
        row.add("references", helm.references[i] == ours.references[i],
                f"{where}: HELM {helm.references[i]!r}, medhelm {ours.references[i]!r}")
        row.add("completion", helm.completions[i] == ours.completions[i],
                f"{where}: HELM {helm.completions[i]!r}, medhelm {ours.completions[i]!r}")
        names = (set(helm.metrics[i]) & set(ours.metrics[i])) - ACCOUNTING
        shared |= names
        bad = sorted(n for n in names if not _same_number(helm.metrics[i][n], ours.metrics[i][n]))
        item = items[i] if items is not None and i < len(items) else None
        excused = [n for n in bad if case.excuse is not None and item is not None
                   and case.excuse(item, helm.completions[i] or "", n, helm.metrics[i][n], ours.metrics[i][n])]
        unexcused = [n for n in bad if n not in excused]
        row.add("metrics", not bad, f"{where}: " + ", ".join(
            f"{n} HELM {helm.metrics[i][n]} medhelm {ours.metrics[i][n]}" for n in bad))
        if unexcused:  # a difference KNOWN["metrics"] does not cover: its own kind, never explained
            row.add("metrics not excused", False, f"{where}: " + ", ".join(
                f"{n} HELM {helm.metrics[i][n]} medhelm {ours.metrics[i][n]}" for n in unexcused))
    row.metrics_compared = sorted(shared)
    for name in sorted(shared):
        h, o = helm.aggregate.get(name), ours.aggregate.get(name)
        # the means: HELM's count is of train trials (1 here), ours of instances
        same = h is not None and o is not None and _same_number(h[1], o[1])
        row.add("aggregate", same, f"{name}: HELM mean {h and h[1]}, medhelm mean {o and o[1]}")
    hm, om = helm.aggregate.get(case.helm_main), ours.aggregate.get(case.main)
    row.main = (hm[1] if hm else None, om[1] if om else None)
    row.add("main", hm is not None and om is not None and _same_number(hm[1], om[1]),
            f"HELM {case.helm_main} {row.main[0]}, medhelm {case.main} {row.main[1]}")
    row.explained = {k: why for k, why in case.known.items() if k in row.differences}
    if "metrics not excused" in row.differences:  # then the aggregates' difference is not only the known one
        row.explained = {k: v for k, v in row.explained.items() if k not in ("aggregate", "main")}
    row.vanished = sorted(k for k in case.known if k not in row.differences)
    return row


def _compare_judge_prompt(row: Row, where: str, hp: str, op: str, case: Case) -> None:
    """One judge's prompt: byte for byte, and the words only one side has must be the case's declared ones."""
    row.add("judge prompt", hp == op, f"{where}: {_first_difference(hp, op)}")
    words = (dict(Counter(hp.split()) - Counter(op.split())), dict(Counter(op.split()) - Counter(hp.split())))
    row.add("judge prompt words", hp == op or words == case.judge_prompt_words,
            f"{where}: only in HELM's {words[0]}, only in ours {words[1]} (expected {case.judge_prompt_words})")


def _compare_jury(row: Row, where: str, helm: Side, ours: Side, i: int, case: Case) -> None:
    """The judges asked, each judge's request (prompt byte for byte, other fields), the verdicts as parsed."""
    hj = helm.judge_wire[i] if i < len(helm.judge_wire) else {}
    oj = ours.judge_wire[i] if i < len(ours.judge_wire) else {}
    row.add("judges", sorted(hj) == sorted(oj), f"{where}: HELM asked {sorted(hj)}, medhelm {sorted(oj)}")
    for judge in sorted(set(hj) & set(oj)):
        _compare_judge_prompt(row, f"{where} {judge}", _prompt(hj[judge]), _prompt(oj[judge]), case)
        fields = _other_fields(hj[judge], oj[judge])
        row.add("judge request", not fields, f"{where} {judge}: {fields}")
    hv, ov = helm.verdicts[i], ours.verdicts[i]
    row.add("verdicts", hv == ov, f"{where}: only HELM {sorted(hv - ov)}, only medhelm {sorted(ov - hv)}")


# never a known difference; "judge prompt" itself may differ only in the words the case declares
JUDGE_KINDS_EQUAL = ("judges", "judge prompt words", "judge request", "verdicts")


def judge_requests_unequal(row: Row) -> dict[str, str]:
    """The jury kinds that are not equal on every request compared (the judge prompts' words, every other field
    of each judge's request): a jury benchmark's judges are asked what HELM's annotator asks them
    (``builtin_prompts: helm``, docs/jury.md), so none of these may differ or be explained away."""
    return {k: row.cell(k) for k in JUDGE_KINDS_EQUAL
            if k not in row.total or row.equal.get(k, 0) != row.total[k]}


def _other_fields(h: dict, o: dict) -> str:
    """The body fields but the messages that differ, as 'field: HELM x, medhelm y'; '' when none."""
    rest_h = {k: v for k, v in h.items() if k != "messages"}
    rest_o = {k: v for k, v in o.items() if k != "messages"}
    fields = sorted(k for k in set(rest_h) | set(rest_o) if rest_h.get(k) != rest_o.get(k))
    return "; ".join(f"{k}: HELM {rest_h.get(k)!r}, medhelm {rest_o.get(k)!r}" for k in fields)


def _prompt(body: dict) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])


def _first_difference(a: str, b: str) -> str:
    if a == b:
        return ""
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at character {i}: HELM {a[max(0, i - 20):i + 40]!r}, medhelm {b[max(0, i - 20):i + 40]!r}"


# -- one benchmark, all of them -----------------------------------------------------------------------------------


def prepare(case: Case, shared_data: Path, work: Path, limit: int | None) -> list[Any] | None:
    """The slice written for both sides; None when the benchmark's data is not on this machine."""
    source = shared_data / case.shared
    if not source.is_file():
        return None
    items = case.read(source)
    items = items[:limit] if limit else items
    targets = [(work / "mirror" / case.mirror, None)]
    targets += [(work / "helm/scenarios" / case.name / name, text) for name, text in case.helm_files]
    for target, text in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            case.write(items, target)
        else:
            target.write_text(text, encoding="utf-8")
    return items


def run_case(case: Case, helm: HelmRun, shared_data: Path, work: Path, limit: int | None, seed: int = 0) -> Row:
    work.mkdir(parents=True, exist_ok=True)
    items = prepare(case, shared_data, work, limit)
    if items is None:
        return Row(case.name, skipped=f"no data at {shared_data / case.shared}")
    keys = [case.key(item) for item in items]
    responder = KeyedAnswers({k: case.answers(item) for k, item in zip(keys, items)}, seed=seed,
                             judge=jury_verdict(case.jury) if case.jury else None)
    with MockOpenAIServer(responder) as server:
        write_prod_env(work / "prod_env", server.base_url)
        helm_dir = run_helm(helm, case, work, len(items))
        helm_bodies = list(server.requests)
        server.reset()
        ours_dir = run_ours(case, work)
        our_bodies = list(server.requests)
    helm_side, our_side = read_helm(helm_dir, case.name if case.jury else ""), read_ours(ours_dir)
    attach_wire(helm_side, helm_bodies, responder, keys)
    attach_wire(our_side, our_bodies, responder, keys)
    return compare(case, helm_side, our_side, items)


@dataclass
class Report:
    rows: list[Row]

    def unexplained(self) -> dict[str, dict[str, list[str]]]:
        return {r.benchmark: r.unexplained() for r in self.rows if r.unexplained()}

    def vanished(self) -> dict[str, list[str]]:
        return {r.benchmark: r.vanished for r in self.rows if r.vanished}

    def table(self) -> str:
        head = ("| benchmark | instances | prompts byte-equal | other request fields equal | references equal | "
                "completions equal | metrics equal (1e-9) | aggregates equal | main metric HELM / ours | "
                "jury: judges asked / judge prompts / judge requests / verdicts | differences explained |")
        lines = [head, "|" + "---|" * 11]
        for r in self.rows:
            if r.skipped:
                lines.append(f"| `{r.benchmark}` | skipped: {r.skipped} |" + " |" * 9)
                continue
            main = " / ".join("—" if v is None else f"{v:.4f}" for v in r.main)
            jury = " / ".join(r.cell(k) if k != "judge prompt" else f"{r.cell(k)}; words as declared: "
                              f"{r.cell('judge prompt words')}"
                              for k in ("judges", "judge prompt", "judge request", "verdicts")) \
                if "judges" in r.total else "—"
            why = "all" if not r.unexplained() else "**no**: " + ", ".join(sorted(r.unexplained()))
            if r.explained:
                why += " (" + "; ".join(f"{k}: see docs/metrics.md" for k in sorted(r.explained)) + ")"
            prompt = f"{r.cell('prompt')}; words as declared: {r.cell('prompt words')}"
            lines.append(f"| `{r.benchmark}` | {r.instances} | {prompt} | {r.cell('request')} | "
                         f"{r.cell('references')} | {r.cell('completion')} | {r.cell('metrics')} | "
                         f"{r.cell('aggregate')} | {main} | {jury} | {why} |")
        return "\n".join(lines)


def run_differential(cases: Iterable[Case], helm: HelmRun, shared_data: Path, work: Path,
                     limit: int | None = None) -> Report:
    return Report([run_case(c, helm, shared_data, work / c.name, limit) for c in cases])
