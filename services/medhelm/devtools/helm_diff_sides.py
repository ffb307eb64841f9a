"""The two sides of the differential (``medhelm.devtools.helm_differential``): running crfm-helm's own ``helm-run`` (in
its venv, its run dependencies installed beside it by ``ensure_run_deps``) and ``medhelm run`` on a case's slice
against one prod_env, and reading each side's run folder into a ``Side`` (per position: ids, references,
completion, metrics, the request bodies the server received, the jury's verdicts). Owns how HELM is driven offline
(the prod_env, the ``sitecustomize`` serving Hugging Face datasets from the slice and answering a GitHub contents
listing from the download folder, the ROUGE-only metric, a case's extra packages) and the two run folders' formats
as read here. The prod_env names either the mock (HELM's ``OpenAIClient`` with its ``base_url``) or a real engine
(``Engine``: HELM's ``VLLMChatClient``, the class a MedHELM user's prod_env names for a vLLM server, with the model
name the engine serves each deployment under).

Failure semantics: a side that fails to run raises ``DiffError`` with the tail of its log (no instance text beyond
the public benchmark data); ``ensure_run_deps`` offline raises ``DiffError`` naming the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from medhelm.devtools.helm_diff_cases import DEPLOYMENT, JUDGES, MODEL, Case
from medhelm.devtools.mock_openai import KeyedAnswers, collapse

HELM_VERSION = "0.5.16"
# what helm-run imports beyond the client path's packages of the crfm-helm venv (its core requirements, at
# versions within its pins; torch/transformers/spacy left out: no compared run needs them)
RUN_PACKAGES = ("Mako==1.4.3", "pandas==2.3.3", "bottle==0.12.25", "nltk==3.10.4", "rouge-score==0.1.2",
                "scipy==1.17.1", "scikit-learn==1.9.1", "datasets==3.6.0", "pyarrow-hotfix==0.7",
                "uncertainty-calibration==0.1.4", "parameterized==0.9.0",
                "openpyxl==3.1.5")


class DiffError(Exception):
    """A side of the differential could not run (its log's tail in the message)."""


@dataclass(frozen=True)
class Engine:
    """A real OpenAI-compatible server (vLLM) answering both sides: its address (``.../v1``) and the model names
    it serves the candidate and each of ``JUDGES`` under (distinct names, so each request's sender is known)."""

    base_url: str
    candidate: str = DEPLOYMENT.split("/", 1)[1]
    judges: tuple[str, ...] = tuple(j.split("/", 1)[1] for j in JUDGES)

    def served(self) -> dict[str, str]:
        return {DEPLOYMENT: self.candidate, **dict(zip(JUDGES, self.judges))}


@dataclass(frozen=True)
class HelmRun:
    """crfm-helm's venv interpreter and the folder of its run dependencies (``ensure_run_deps``)."""

    python: Path
    deps: Path

    @property
    def helm_run(self) -> Path:
        return self.python.parent / "helm-run"


def ensure_run_deps(python: Path, folder: Path, packages: tuple[str, ...] = RUN_PACKAGES) -> Path:
    """``packages`` (``RUN_PACKAGES``) installed for crfm-helm's venv under ``folder`` (pip --target, reused when
    present)."""
    ok = folder / ".ok"
    want = "\n".join(packages)
    if ok.is_file() and ok.read_text() == want:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
                           str(folder), *packages], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise DiffError(f"cannot install helm-run's dependencies in {folder} (offline?): "
                        f"{(done.stderr.strip().splitlines() or [''])[-1][:200]}")
    ok.write_text(want)
    return folder


def write_prod_env(folder: Path, base_url: str, engine: Engine | None = None) -> Path:
    """One prod_env both sides read: the mock as an OpenAI-compatible deployment, its key in credentials.conf; or,
    given ``engine``, HELM's ``VLLMChatClient`` at ``base_url`` (which sends no key) naming the engine's model."""
    folder.mkdir(parents=True, exist_ok=True)
    host = DEPLOYMENT.split("/")[0]
    pairs = [(DEPLOYMENT, MODEL)] + [(j, _model_of(j)) for j in JUDGES]
    served = engine.served() if engine else {}
    pairs = [(name, model) for name, model in pairs if not engine or name in served]
    client = "vllm_client.VLLMChatClient" if engine else "openai_client.OpenAIClient"
    (folder / "model_deployments.yaml").write_text("model_deployments:\n" + "".join(
        f"  - name: {name}\n    model_name: {model}\n    tokenizer_name: mock/simple\n"
        "    max_sequence_length: 1000000\n    client_spec:\n"
        f'      class_name: "helm.clients.{client}"\n'
        f'      args:\n        base_url: "{base_url}"\n'
        + (f'        vllm_model_name: "{served[name]}"\n' if engine else "") for name, model in pairs))
    about = "served by a real engine" if engine else "KeyedAnswers mock"
    (folder / "model_metadata.yaml").write_text("models:\n" + "".join(
        f"  - name: {model}\n    display_name: Differential {model}\n    description: {about}\n"
        "    creator_organization_name: MockOrg\n    access: open\n    release_date: 2025-01-01\n"
        "    tags: [TEXT_MODEL_TAG, PARTIAL_FUNCTIONALITY_TEXT_MODEL_TAG]\n" for _, model in pairs))
    # the jury in upstream's judges.yaml shape, which both sides read (the label is the deployment's name)
    (folder / "judges.yaml").write_text("judges:\n" + "".join(
        f"  - name: {j}\n    model: {_model_of(j)}\n    model_deployment: {j}\n" for j in JUDGES
        if not engine or j in served))
    (folder / "tokenizer_configs.yaml").write_text(
        "tokenizer_configs:\n  - name: mock/simple\n    tokenizer_spec:\n"
        '      class_name: "helm.tokenizers.simple_tokenizer.SimpleTokenizer"\n'
        '    end_of_text_token: "</s>"\n    prefix_token: "<s>"\n')
    (folder / "credentials.conf").write_text(f'{host}ApiKey: "diff-key"\n')
    return folder


def _model_of(deployment: str) -> str:
    return "mockorg/" + deployment.split("/", 1)[1]


def _entry(case: Case, work: Path, ours: bool) -> str:
    model = [f"model={MODEL}", f"model_deployment={DEPLOYMENT}"]
    if case.custom is not None:  # its judges are in its YAML; HELM's run spec takes config_path= alone
        config = f"config_path={(work / case.custom.name).resolve()}"
        return f"medhelm_configurable_benchmark:{','.join([config] + model)}"
    args = [case.args] if case.args else []
    args += [case.our_args] if ours and case.our_args else []
    if case.jury:
        args.append(f"jury_config_path={(work / 'prod_env' / 'judges.yaml').resolve()}")
    return f"{case.run_entry}:{','.join(args + model)}"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HELM_CREDENTIALS", "OPENAI_BASE_URL")}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", **extra})
    return env


# HELM's scenarios that read a Hugging Face dataset get the slice from a local file: a CSV through the csv builder
# of `datasets`, typed as the Hub's dataset is (every column a string but the integer ones named), a parquet file
# (the Hub's own conversion) through its parquet builder: a sitecustomize module in the helm-run process
SITECUSTOMIZE = """\
import csv
import json
import os

_SLICES = os.environ.get("MEDHELM_DIFF_HF_SLICES", "")
_INTS = set(filter(None, os.environ.get("MEDHELM_DIFF_HF_INTS", "").split(",")))
if _SLICES:
    import datasets

    _load = datasets.load_dataset

    def load_dataset(path, *args, **kwargs):
        for pair in _SLICES.split(os.pathsep):
            name, _, data_file = pair.partition("=")
            if path == name or path.startswith(name + "-"):
                # the split asked for (a Dataset), else the slice as the "test" split (a DatasetDict)
                split = kwargs.get("split")
                files = {split or "test": data_file}
                if not data_file.endswith(".csv"):  # a Hub parquet file: typed by its own schema
                    return _load("parquet", data_files=files, split=split)
                with open(data_file, newline="", encoding="utf-8") as fh:
                    header = next(csv.reader(fh))
                features = datasets.Features({c: datasets.Value("int64" if c in _INTS else "string")
                                              for c in header})
                return _load("csv", data_files=files, features=features, split=split)
        return _load(path, *args, **kwargs)

    datasets.load_dataset = load_dataset

_LISTED = dict(pair.partition("=")[::2] for pair in
               filter(None, os.environ.get("MEDHELM_DIFF_GITHUB_LISTING", "").split(os.pathsep)))
if _LISTED:
    # the one network call of a scenario that lists its files through GitHub's contents API
    # (.../contents/<folder>?ref=...): answered with the names of the files already in that folder's download
    # folder (which the scenario then reads instead of downloading them)
    import requests

    _get = requests.get

    def get(url, *args, **kwargs):
        if url.startswith("https://api.github.com/repos/") and "/contents/" in url:
            folder = url.split("/contents/", 1)[1].split("?", 1)[0].rstrip("/")
            if folder in _LISTED:
                response = requests.Response()
                response.status_code = 200
                response._content = json.dumps([{"name": n, "type": "file"}
                                                for n in sorted(os.listdir(_LISTED[folder]))]).encode()
                return response
        return _get(url, *args, **kwargs)

    requests.get = get

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


def run_helm_all(helm: HelmRun, cases: Sequence[Case], work: Path, count: int) -> dict[str, Path]:
    """One helm-run on the cases' slices (one start-up for all); each case's run folder by its name."""
    log = work / f"helm-{cases[0].name if len(cases) == 1 else 'all'}.log"
    site = work / "helm_site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "medhelm_diff_rouge.py").write_text(ROUGE_METRIC)
    slices = os.pathsep.join(f"{c.hf_dataset}={work / 'mirror' / c.mirror}" for c in cases if c.hf_dataset)
    ints = sorted({n for c in cases for n in c.hf_int_columns})
    with open(log, "w") as fh:
        done = subprocess.run([str(helm.helm_run), "--run-entries", *(_entry(c, work, False) for c in cases),
                               "--suite", "diff", "--max-eval-instances", str(count), "--local-path", "prod_env",
                               "--output-path", "helm", "-n", "1"], cwd=work, stdout=fh, stderr=subprocess.STDOUT,
                              env=_env(MEDHELM_DIFF_HF_SLICES=slices, MEDHELM_DIFF_HF_INTS=",".join(ints),
                                         MEDHELM_DIFF_ROUGE_ONLY="1" if any(c.jury for c in cases) else "",
                                         **_offline_helm_env(helm, cases, work, site)),
                              timeout=3600)
    runs = [p for p in (work / "helm/runs/diff").glob("*") if (p / "scenario_state.json").is_file()]
    found = {c.name: [p for p in runs if _is_helm_run_of(c, p)] for c in cases}
    if done.returncode != 0 or any(len(v) != 1 for v in found.values()):
        raise DiffError(f"helm-run {', '.join(c.name for c in cases)} failed (exit {done.returncode}): {_tail(log)}")
    return {name: v[0] for name, v in found.items()}


def _is_helm_run_of(case: Case, run: Path) -> bool:
    """Whether HELM's run folder is the case's: its scenario (the class's name, e.g. med_qa for medhelm_med_qa) and
    the case's arguments in its scenario spec."""
    scenario = json.loads((run / "scenario.json").read_text())["name"]
    args = json.loads((run / "run_spec.json").read_text())["scenario_spec"].get("args") or {}
    wanted = dict(a.split("=", 1) for a in case.args.split(",") if a)
    return scenario == (case.helm_folder or case.name) and all(str(args.get(k)) == v for k, v in wanted.items())


def _offline_helm_env(helm: HelmRun, cases: list[Case], work: Path, site: Path) -> dict[str, str]:
    """helm-run's PYTHONPATH (the sitecustomize, helm-run's dependencies, the cases' own packages) and the GitHub
    folders whose listing the sitecustomize answers (<upstream folder>=<HELM's download folder>), for any cases."""
    path = [site, helm.deps] + [case_deps(helm, c) for c in cases if c.helm_packages]
    listed = [f"{Path(c.mirror).name}={work / 'helm/scenarios' / (c.helm_folder or c.name)}" for c in cases if c.github_listing]
    return {"PYTHONPATH": os.pathsep.join(map(str, path)), "MEDHELM_DIFF_GITHUB_LISTING": os.pathsep.join(listed)}


def case_deps(helm: HelmRun, case: Case) -> Path:
    """The case's ``helm_packages`` installed for crfm-helm's venv: under MEDHELM_HELM_CASE_DEPS, else beside
    helm-run's dependencies (``<deps>-cases``), one folder per case."""
    root = Path(os.environ.get("MEDHELM_HELM_CASE_DEPS") or f"{helm.deps}-cases")
    return ensure_run_deps(helm.python, root / case.name, case.helm_packages)


def run_ours_all(cases: Sequence[Case], work: Path, concurrency: int = 4) -> dict[str, Path]:
    """One ``medhelm run`` on the cases' slices; each case's run folder by its name."""
    log = work / f"ours-{cases[0].name if len(cases) == 1 else 'all'}.log"
    with open(log, "w") as fh:
        done = subprocess.run([sys.executable, "-m", "medhelm", "run", "-r", *(_entry(c, work, True) for c in cases),
                               "--suite", "diff",
                               "--local-path", "prod_env", "--output-path", "ours", "--data-dir", "mirror",
                               "--offline", "--disable-cache", "-n", str(concurrency)], cwd=work, stdout=fh,
                              stderr=subprocess.STDOUT, env=_env(), timeout=3600)
    runs = [p for p in (work / "ours/runs/diff").glob("*") if (p / "stats.json").is_file()]
    found = {c.name: [p for p in runs if _is_our_run_of(c, p.name)] for c in cases}
    if done.returncode != 0 or any(len(v) != 1 for v in found.values()):
        raise DiffError(f"medhelm run {', '.join(c.name for c in cases)} failed (exit {done.returncode}): "
                        f"{_tail(log)}")
    return {name: v[0] for name, v in found.items()}


def _is_our_run_of(case: Case, folder: str) -> bool:
    """Whether our run folder (``<entry>[,<arg>=<value>...]:model=...``) is the case's."""
    head = folder.split(":", 1)[0].split(",")
    return head[0] == case.run_entry and all(a in head[1:] for a in case.args.split(",") if a)


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


def read_helm(run: Path, annotator: str = "", split: str = "test") -> Side:
    """HELM's run folder; ``annotator`` names the jury's annotations (a jury benchmark's own name), ``split`` the
    aggregates' split."""
    states = json.loads((run / "scenario_state.json").read_text())["request_states"]
    states.sort(key=lambda s: int(str(s["instance"]["id"]).lstrip("id") or 0))
    per = {}
    for entry in json.loads((run / "per_instance_stats.json").read_text()):
        per.setdefault(entry["instance_id"], {}).update(  # one entry per metric class: merged
            {s["name"]["name"]: (s["sum"] / s["count"] if s["count"] else None)
             for s in entry["stats"] if not s["name"].get("perturbation")})
    side = Side([], [], [], [], _helm_aggregate(run, split))
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


def _helm_aggregate(run: Path, split: str) -> dict[str, tuple[int, float | None]]:
    out = {}
    for s in json.loads((run / "stats.json").read_text()):
        name = s["name"]
        if name.get("split") == split and not name.get("perturbation"):
            out[name["name"]] = (s["count"], s.get("mean"))
    return out


def read_ours(run: Path, split: str = "test") -> Side:
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
        if s["name"].get("split") == split:
            side.aggregate[s["name"]["name"]] = (s["count"], s.get("mean"))
    return side


def attach_wire(side: Side, bodies: list[dict], responder: KeyedAnswers, keys: list[str],
                candidate: str = MODEL.split("/", 1)[1]) -> None:
    """Each position's request bodies as the server received them (the item's key named in their messages): the
    candidate's (``candidate``: the model name its requests carry), and the first of each judge's."""
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
