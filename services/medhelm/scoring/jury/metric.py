"""The ``jury_score`` metric: every judge scores every criterion of one finished instance.

Judges of one instance are asked concurrently (and instances run concurrently in the pipeline),
through the shared ClientPool: same cache, retries and per-deployment caps as inference. The judge's
deployment identity and the rubric-filled prompt are in the request, so they key the cache.

Each judge's prompt is fitted to that judge's own context window (``Rubric.render_within``; the window is
its deployment's ``max_sequence_length`` or what its server reports), so a long dialogue never makes every
judgement an HTTP 400. An unparseable or invalid verdict gets one re-ask (a changed request, so the cache cannot hand back
the same bad answer); what is still invalid is recorded as ``unscored`` with its reason, never 0.

A rubric in HELM's style (``Rubric.helm_request``: a built-in rubric under ``builtin_prompts: helm``, a custom
judge prompt under ``custom_prompts: helm``) is asked
as HELM's annotator asks it: its prompt, its max_tokens and temperature, free text (no JSON schema), no
re-ask, and HELM's brace repair when parsing (``parse_as_helm``); the rest of the parse is ours
(docs/metrics.md lists where the two parses can differ). Every rubric's ``{QUESTION}`` is the instance's input as
the benchmark's upstream scenario words it when the benchmark has one (``Prompt.question``, never truncated by
the candidate's budget), else the instance's input.

Stats (docs/metrics.md, "Two rules, two names"): ``jury_score`` (weighted mean of the valid scores on the
rubric's scale), ``jury_score_normalized`` (the same on 0-1: our leaderboard column), ``jury_coverage``, and,
for a built-in rubric, upstream's own column ``<rubric>_accuracy`` (e.g. ``aci_bench_accuracy``) computed
as MedHELM's ``LLMJuryMetric`` does: the plain mean of every criterion score of the judges whose verdict
was complete (a judge missing a criterion is dropped whole, as HELM's validation drops it), and HELM's
default score 1.0 when no judge is left or the output was empty.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from medhelm.errors import InferenceError
from medhelm.inference.base import CHAT_TEMPLATE_TOKENS, ModelClient
from medhelm.scoring.base import MetricResult, ScoringItem
from medhelm.scoring.jury.config import Judge
from medhelm.scoring.jury.parse import NO_VERDICT, Judgement, Quoted, parse_as_helm, parse_judgement
from medhelm.scoring.jury.rubrics import Rubric
from medhelm.records import JudgeScore, JudgeStatus
from medhelm.specs import Completion, GenerationRequest, Message, Usage
from medhelm.tokens import approx_tokens

STATS = ("jury_score", "jury_score_normalized", "jury_coverage")
HELM_DEFAULT_SCORE = 1.0  # MedHELM's run specs pass LLMJuryMetric(default_score=1.0): no verdict scores 1


def helm_stat(rubric_name: str) -> str:
    """Upstream's name for a built-in rubric's jury column: ``<benchmark>_accuracy`` (a 1-5 mean)."""
    return f"{rubric_name}_accuracy"
EMPTY_RESPONSE_JUDGE = "rule:empty-response"  # not a deployment: marks scores no judge was asked for
EMPTY_RESPONSE_REASON = "the candidate's output was empty: scored as the rubric minimum, no judge asked"
REASK_NOTE = ("\n\nYour previous reply could not be read ({problem}). Reply again with only the JSON object "
              "inside <rubric_criteria> tags: every criterion, each with an integer score from {lo} to {hi}.")
REASK_NOTE_STRUCTURED = ("\n\nYour previous reply could not be read ({problem}). Judge the response above "
                         "yourself: for every criterion write your own explanation and an integer score "
                         "from {lo} to {hi}; do not copy the example.")
REASK_SEED_OFFSET = 1  # the re-ask differs from the first ask in seed and text: a distinct cache entry


@dataclass(frozen=True)
class JudgeCall:
    judge: Judge
    client: ModelClient  # the shared pool's client for the judge's deployment


class JuryMetric:
    def __init__(self, rubric: Rubric, calls: Sequence[JudgeCall], *, max_tokens: int,
                 structured_output: bool, helm_name: str | None = None) -> None:
        self.rubric = rubric
        self.helm_name = helm_name  # upstream's ``<benchmark>_accuracy`` (built-in rubrics only)
        self.calls = tuple(calls)
        self.max_tokens, self.temperature = rubric.helm_request or (max_tokens, 0.0)
        self.schema = rubric.json_schema() if structured_output and rubric.helm_request is None else None
        self.reask = rubric.helm_request is None  # HELM asks each judge once
        self.parse = parse_as_helm if rubric.helm_request is not None else parse_judgement

    @property
    def stat_names(self) -> tuple[str, ...]:
        return STATS if self.helm_name is None else (*STATS, self.helm_name)

    def _stats(self, scores: Sequence[JudgeScore]) -> dict[str, float | None]:
        stats = jury_stats(scores)
        if self.helm_name is not None:
            stats[self.helm_name] = helm_jury_mean(scores)
        return stats

    async def aclose(self) -> None:
        return None  # clients belong to the shared pool

    async def score(self, item: ScoringItem) -> MetricResult:
        response = item.completion.text
        if not response.strip():
            empty = _empty_response(self.rubric)
            return dataclasses.replace(empty, stats=self._stats(empty.judgements))
        gold = next((r.text for r in item.instance.correct_references), "")
        # {QUESTION}: the input as the benchmark's upstream scenario words it (HELM's annotators), else the input
        question = item.prompt.question if item.prompt.question is not None else item.instance.input
        outcomes = await asyncio.gather(*(self._ask(call, question, response, gold)
                                          for call in self.calls))
        scores = tuple(s for judge_scores, _ in outcomes for s in judge_scores)
        return MetricResult(stats=self._stats(scores), judgements=scores,
                            judge_usage=_sum_usage([u for _, usages in outcomes for u in usages]))

    async def _judge_prompt(self, call: JudgeCall, question: str, response: str, gold: str) -> str | None:
        """The rubric filled for this judge, fitted to the judge's OWN context window (its deployment's
        ``max_sequence_length``, else what its server reports) minus its output tokens and room for the
        re-ask note; None when not even the bare rubric fits."""
        window_of = getattr(call.client, "context_window", None)
        window = await window_of() if window_of is not None else None
        limit = None
        if window:
            limit = window - self.max_tokens - CHAT_TEMPLATE_TOKENS - approx_tokens(self._note("x" * 80))
        exact = getattr(call.client, "count_tokens", None)

        def count(text: str) -> int:
            n = exact(text) if exact is not None else None
            return approx_tokens(text) if n is None else n

        fitted = self.rubric.render_within(question=question, response=response, gold=gold, limit=limit,
                                           count=count)
        return None if fitted is None else fitted[0]

    async def _ask(self, call: JudgeCall, question: str, response: str,
                   gold: str) -> tuple[list[JudgeScore], list[Usage]]:
        prompt = await self._judge_prompt(call, question, response, gold)
        if prompt is None:
            return self._failed(call.judge, JudgeStatus.ERROR,
                                "the rubric alone does not fit the judge's context window: give the judge "
                                "a larger max_sequence_length or fewer max_tokens"), []
        quoted = Quoted(prompt)
        request = GenerationRequest(messages=(Message("user", prompt),), max_tokens=self.max_tokens,
                                    temperature=self.temperature, seed=0, json_schema=self.schema)
        try:
            first = await call.client.generate(request)
        except InferenceError as err:
            if err.retryable:
                raise  # still failing after the pool's retries: the instance is retried on resume
            return self._failed(call.judge, JudgeStatus.ERROR, _error_text(err)), []
        usages = [first.usage]
        judgement = self._read(first, quoted)
        if not judgement.complete and self.reask:
            retry = self._reask(request, prompt, judgement)
            try:
                second = await call.client.generate(retry)
            except InferenceError as err:
                if err.retryable:
                    raise
                second = None
            if second is not None:
                usages.append(second.usage)
                again = self._read(second, quoted)
                if again.valid >= judgement.valid:  # the better-read of the two attempts, whole
                    judgement = again
        return self._scores(call.judge, judgement), usages

    def _read(self, completion: Completion, quoted: Quoted) -> Judgement:
        """The verdict in a judge's output; when none was found because the output hit ``max_tokens``
        (finish_reason "length"), the problem says so instead of blaming the judge's format."""
        judgement = self.parse(completion.text, self.rubric, quoted)
        if completion.finish_reason != "length":
            return judgement
        cut = (f"the judge's output was cut at max_tokens ({self.max_tokens}) before its JSON was complete: "
               f"raise the jury's max_tokens")
        return Judgement(tuple(dataclasses.replace(v, problem=cut) if v.problem == NO_VERDICT else v
                               for v in judgement.verdicts))

    def _note(self, problem: str) -> str:
        # Under guided decoding (json_schema) the judge can only emit the bare JSON object: asking for
        # <rubric_criteria> tags there would ask for what the grammar cannot produce.
        template = REASK_NOTE_STRUCTURED if self.schema is not None else REASK_NOTE
        return template.format(problem=problem, lo=self.rubric.min_score, hi=self.rubric.max_score)

    def _reask(self, request: GenerationRequest, prompt: str, judgement: Judgement) -> GenerationRequest:
        problem = next(v.problem for v in judgement.verdicts if v.score is None)
        return GenerationRequest(messages=(Message("user", prompt + self._note(problem)),),
                                 max_tokens=request.max_tokens, temperature=0.0,
                                 seed=(request.seed or 0) + REASK_SEED_OFFSET, json_schema=request.json_schema)

    def _scores(self, judge: Judge, judgement: Judgement) -> list[JudgeScore]:
        return [JudgeScore(judge=judge.name, criterion=v.criterion, score=v.score, min_score=self.rubric.min_score,
                           max_score=self.rubric.max_score,
                           explanation=v.explanation if v.score is not None else f"unscored: {v.problem}",
                           status=JudgeStatus.OK if v.score is not None else JudgeStatus.UNSCORED,
                           weight=judge.weight)
                for v in judgement.verdicts]

    def _failed(self, judge: Judge, status: JudgeStatus, reason: str) -> list[JudgeScore]:
        return [JudgeScore(judge=judge.name, criterion=c, score=None, min_score=self.rubric.min_score,
                           max_score=self.rubric.max_score, explanation=reason, status=status, weight=judge.weight)
                for c in self.rubric.criteria]


def jury_stats(scores: Sequence[JudgeScore]) -> dict[str, float | None]:
    """Per-instance stats: weighted means over valid scores (raw and 0-1), and coverage. None = unscored."""
    valid = [s for s in scores if s.status is JudgeStatus.OK and s.score is not None]
    coverage = len(valid) / len(scores) if scores else None
    if not valid:
        return {"jury_score": None, "jury_score_normalized": None, "jury_coverage": coverage}
    total = sum(s.weight for s in valid)
    raw = sum(s.weight * float(s.score) for s in valid) / total  # type: ignore[arg-type]
    norm = sum(s.weight * float(s.normalized) for s in valid) / total  # type: ignore[arg-type]
    return {"jury_score": raw, "jury_score_normalized": norm, "jury_coverage": coverage}


def helm_jury_mean(scores: Sequence[JudgeScore]) -> float:
    """MedHELM's per-instance jury value (``LLMJuryMetric.evaluate_generation``): unweighted mean over the
    (judge x criterion) scores of the judges whose whole verdict was valid; no such judge -> 1.0. An empty
    output is scored by the rule judge at the rubric minimum (1), as HELM's default gives."""
    complete: dict[str, bool] = {}
    for s in scores:
        complete[s.judge] = complete.get(s.judge, True) and s.status is JudgeStatus.OK and s.score is not None
    kept = [float(s.score) for s in scores if complete[s.judge]]  # type: ignore[arg-type]
    return sum(kept) / len(kept) if kept else HELM_DEFAULT_SCORE


def _empty_response(rubric: Rubric) -> MetricResult:
    scores = tuple(JudgeScore(judge=EMPTY_RESPONSE_JUDGE, criterion=c, score=rubric.min_score,
                              min_score=rubric.min_score, max_score=rubric.max_score,
                              explanation=EMPTY_RESPONSE_REASON) for c in rubric.criteria)
    return MetricResult(stats=jury_stats(scores), judgements=scores)


def _sum_usage(usages: Sequence[Usage]) -> Usage:
    if not usages:
        return Usage()

    def total(values: list[int | None]) -> int | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    return Usage(prompt_tokens=total([u.prompt_tokens for u in usages]),
                 completion_tokens=total([u.completion_tokens for u in usages]),
                 reasoning_tokens=total([u.reasoning_tokens for u in usages]),
                 reasoning_estimated=any(u.reasoning_estimated for u in usages),
                 latency_s=sum(u.latency_s for u in usages), cached=all(u.cached for u in usages),
                 attempts=sum(u.attempts for u in usages))


def _error_text(err: InferenceError) -> str:
    # Error texts name the server and status, never the prompt (InferenceError's contract).
    return f"judge call failed: {err}"[:500]
