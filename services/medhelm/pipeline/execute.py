"""Execute planned runs: prompts -> inference -> metrics -> durable records, with bounded concurrency.

Prompts are fitted to the deployment's ``max_sequence_length``, else to the context length the server
reports (vLLM ``GET /v1/models`` ``max_model_len``), minus the output tokens. Each run keeps
``max_concurrency`` instances in flight: a fixed set of worker tasks pulling from a bounded queue that one
producer fills from the sampled instances as they are read (``sampling.stream_run``), so neither the
instances nor the queue grow with the benchmark; statistics are aggregated while the records are merged
(``finish.finalize``), never from all records in memory. Every finished instance is appended to
the run's records at once; a run that is stopped at any point resumes without redoing finished instances.
Before the first run the pool is told at most how many requests the runs send each deployment
(``expected_requests``, from ``max_eval_instances``): under ``auto`` a deployment sent few starts high (pacing.md).

Failure semantics, per instance:
* the server refuses the request for good (non-retryable, e.g. prompt too long) -> recorded with an
  ``error`` and no scores (counted in run.json; retried on the next run); a bad request (HTTP 400, not a
  content filter's refusal of that instance) also makes the CLI exit 2 naming the first one;
* the provider refuses the credential (HTTP 401/403 for good) or says the account's quota is spent (a 429 not to
  be retried: ``wire.SPENT``) -> the run stops at once, nothing recorded for that instance, and the CLI exits 2
  with the provider's line (deployment, status, message);
* a retryable failure that outlasts the retries -> not recorded (retried on the next run); the CLI exits 2
  naming the last such error (its status or the address it could not reach);
* every instance refused for good -> the run's status is ``failed`` (not ``complete``) and the CLI exits 2
  naming the first error;
* the server cannot be reached -> the run stops (its finished instances are kept) and the suite goes on
  with its other runs; the CLI reports it and exits 2.

Every instance and request is counted in the process's ``medhelm.telemetry.Telemetry`` when one is given
(``medhelm run/job --metrics-port``); the retries of every request of a run (finished or not) are written
to the run directory and summed into run.json, and so is where and when the evaluated deployment was asked
(``ClientPool.watch``: its endpoint, the model the server said answered, the first and last request in UTC;
``RunDir.add_access``, run.json ``access``). A process killed outright (SIGKILL) writes neither line for that
invocation: its retries and its part of the window are not known.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from medhelm.benchmarks.base import PromptBudget
from medhelm.deployments import DeploymentRegistry
from medhelm.errors import InferenceError, MedhelmError, ServerUnreachable
from medhelm.inference import utc_iso
from medhelm.inference.base import CHAT_TEMPLATE_TOKENS
from medhelm.pipeline.aggregate import RecordTally
from medhelm.pipeline.finish import finalize, finished_positions
from medhelm.pipeline.options import RunOptions
from medhelm.pipeline.plan import RunPlan
from medhelm.pipeline.progress import Progress
from medhelm.pipeline.sampling import stream_run
from medhelm.rundir import RunDir, compat_digest
from medhelm.scoring import registry as metric_registry
from medhelm.scoring.base import Metric, MetricResult, ScoringContext, ScoringItem
from medhelm.records import InstanceResult, JudgeScore
from medhelm.specs import GenerationRequest, Instance, MetricSpec, Usage
from medhelm.telemetry import NULL_RUN_METRICS, Telemetry
from medhelm.tokens import approx_tokens

# How a run gets its metrics: the registry here; `medhelm job` passes one that reaches the gRPC services.
MetricsBuilder = Callable[[Sequence[MetricSpec], ScoringContext], list[Metric]]


@dataclass(frozen=True)
class Shard:
    """This worker evaluates the instances whose position % count == index."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise MedhelmError(f"bad shard {self.index} of {self.count}: need 0 <= index < count")

    def owns(self, position: int) -> bool:
        return position % self.count == self.index


@dataclass
class RunOutcome:
    plan: RunPlan
    status: dict = field(default_factory=dict)
    skipped: bool = False
    error: str | None = None  # why the run stopped early (user-facing, one line)
    wall_time_s: float = 0.0
    evaluated: int = 0  # instances evaluated in this invocation
    transient_failures: int = 0  # instances left for the next run after exhausting retries
    last_transient: str = ""  # the last of those errors (it names the status, or the address not reached)
    bad_requests: int = 0  # instances the provider refused as a bad request (HTTP 400), recorded with the error
    first_bad_request: str = ""
    retries: int = 0  # retried attempts of the evaluated model's requests in this invocation (all instances)
    judge_retries: int = 0  # retried attempts of in-process judges / other deployments in this invocation
    pacing: str = ""  # the evaluated deployment's pacer at the end of the run (limit, plateau, 429s, waiting)


async def run_suite(plans: Sequence[RunPlan], options: RunOptions, *, pool=None,
                    deployments: DeploymentRegistry | None = None, shard: Shard | None = None,
                    progress: Progress | bool | None = None,
                    build_metrics: MetricsBuilder | None = None,
                    telemetry: Telemetry | None = None) -> list[RunOutcome]:
    from medhelm.inference import ClientPool, PacingPolicy, RequestCache, RetryPolicy

    deployments = deployments or DeploymentRegistry.load(options.local_path)
    if build_metrics is None:  # judges asked from this process (a Job's remote jury is the service's to reach)
        await check_judges_reachable(plans, deployments)
    own_pool = pool is None
    if own_pool:
        cache = RequestCache(options.cache_path) if options.use_cache else None
        pool = ClientPool(cache=cache, retry=RetryPolicy(max_attempts=options.max_attempts,
                                                         base_delay_s=options.retry_base_delay_s,
                                                         rate_limit_wait_s=options.rate_limit_wait_s),
                          observer=telemetry, connections=options.max_concurrency,
                          pacing=PacingPolicy(adaptive=options.adaptive, share=options.rate_share))
    pool.expect(expected_requests(plans))
    if not isinstance(progress, Progress):
        progress = Progress(enabled=options.progress if progress is None else bool(progress))
    outcomes = []
    try:
        for i, plan in enumerate(plans):
            progress.begin_run(i + 1, len(plans), plan.spec.name)
            outcome = await run_one(plan, options, pool=pool, deployments=deployments, shard=shard,
                                    progress=progress, build_metrics=build_metrics, telemetry=telemetry)
            progress.end_run(outcome)
            outcomes.append(outcome)
    finally:
        if own_pool:
            await pool.aclose()
    return outcomes


def _judges(plan: RunPlan) -> list[str]:
    """The deployments the plan's juries name (each asked once an instance, and once more on an unreadable verdict)."""
    return [str(j.get("name")) for m in plan.spec.benchmark.metrics
            for j in (m.args.to_json().get("judges") or ()) if isinstance(j, dict)]


def expected_requests(plans: Sequence[RunPlan]) -> dict[str, int]:
    """Per deployment, at most how many requests these runs send it: one an instance from the evaluated model, two
    from each judge (a verdict and its re-ask), over ``max_eval_instances``. A deployment one of whose runs has no
    bound (the whole dataset) is left out: its count is not known before the instances are read. ``auto`` starts a
    deployment sent few requests high (``ClientPool.expect``): a run that short cannot pay back a climb from 4."""
    counts: dict[str, int] = {}
    unbounded: set[str] = set()
    for plan in plans:
        n = plan.spec.max_eval_instances
        for name, each in ((plan.deployment.name, 1), *((judge, 2) for judge in _judges(plan))):
            if n is None:
                unbounded.add(name)
            else:
                counts[name] = counts.get(name, 0) + each * n
    return {name: count for name, count in counts.items() if name not in unbounded}


JUDGE_CONNECT_TIMEOUT_S = 5.0


async def check_judges_reachable(plans: Sequence[RunPlan], deployments: DeploymentRegistry) -> None:
    """Before anything is written (run folders, the candidate's records): every remote judge the plans' juries
    name accepts a TCP connection. An unreachable judge stopped the run only after the candidate had answered
    and its folder was written. Skipped for a host a proxy serves (the proxy is the one to reach it)."""
    import urllib.parse
    import urllib.request

    names = {name for plan in plans for name in _judges(plan)}
    targets = {}
    proxies = urllib.request.getproxies()
    for name in sorted(names):
        dep = deployments.get(name) if name in deployments else None
        if dep is None or not dep.base_url:
            continue  # in-process judges (llama.cpp) were checked at plan time
        url = urllib.parse.urlsplit(dep.base_url)
        if url.scheme in proxies and not urllib.request.proxy_bypass(url.hostname or ""):
            continue
        targets[name] = (dep.base_url, url.hostname, url.port or (443 if url.scheme == "https" else 80))

    async def probe(name: str, base_url: str, host: str, port: int) -> str | None:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), JUDGE_CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as err:
            reason = "no answer in 5 s" if isinstance(err, asyncio.TimeoutError) else (err.strerror or str(err))
            return (f"judge '{name}' cannot be reached at {base_url} ({reason}); nothing was run or written: start "
                    "it, or name other judges with jury_config_path=")
        writer.close()
        return None

    problems = await asyncio.gather(*(probe(n, *t) for n, t in targets.items()))
    first = next((p for p in problems if p), None)
    if first:
        raise ServerUnreachable(first)


async def run_one(plan: RunPlan, options: RunOptions, *, pool, deployments: DeploymentRegistry,
                  shard: Shard | None = None, progress: Progress | None = None,
                  build_metrics: MetricsBuilder | None = None, telemetry: Telemetry | None = None) -> RunOutcome:
    started = time.perf_counter()
    spec = plan.spec
    run_dir = RunDir(plan.run_dir)
    if options.skip_completed and _is_complete(run_dir, plan):
        return RunOutcome(plan, status=run_dir.status(), skipped=True)

    sample = stream_run(plan.benchmark, spec)
    run_dir.prepare(spec, sample.ids())
    finished = finished_positions(run_dir)  # a bit a position (a million instances: 125 KB)
    owns = shard.owns if shard is not None else None
    mine = sample.count if shard is None else len(range(shard.index, sample.count, shard.count))
    already = sum(1 for pos in finished if owns is None or owns(pos))
    todo = mine - already
    progress = progress or Progress(enabled=False)
    progress.set_total(mine, already_done=already)
    measure = telemetry.bind_run(plan.deployment.name, spec.benchmark.name) if telemetry else NULL_RUN_METRICS
    main_stat = spec.benchmark.main_metric
    retries_before = _retries(pool)

    metrics = (build_metrics or metric_registry.build_all)(spec.benchmark.metrics, ScoringContext(
        deployments=deployments, clients=pool, evaluated_deployment=plan.deployment.name))
    client = pool.get(plan.deployment)
    budget = PromptBudget(max_prompt_tokens=await _prompt_limit(plan, client), count_tokens=_token_counter(client))
    writer = run_dir.writer((shard.index, shard.count) if shard else None, tally=RecordTally)
    outcome = RunOutcome(plan)
    run_name = spec.name  # a property that formats the name: once per run, not per instance
    n_workers = max(1, min(options.max_concurrency, todo))
    # bounded: the producer reads instances only as fast as the workers take them (backpressure). A full
    # queue is refilled once the workers have taken half of it (``refill``), not an item at a time: that
    # woke the producer's task once an instance.
    queue: asyncio.Queue[tuple[int, Instance] | None] = asyncio.Queue(maxsize=2 * n_workers)
    refill = asyncio.Event()
    stop = asyncio.Event()

    async def produce() -> None:
        try:
            for position, instance in enumerate(sample):
                if stop.is_set():
                    return
                if (owns is None or owns(position)) and (not finished or position not in finished):
                    if queue.full():
                        refill.clear()
                        await refill.wait()
                        if stop.is_set():
                            return
                    queue.put_nowait((position, instance))
        finally:
            if not stop.is_set():
                for _ in range(n_workers):
                    await queue.put(None)  # one end mark per worker

    def halt() -> None:
        """Stop every worker after its instance in flight: what is queued is dropped, each gets an end mark."""
        stop.set()
        refill.set()  # a producer waiting for room sees the stop
        while not queue.empty():
            queue.get_nowait()
        for _ in range(n_workers):
            queue.put_nowait(None)

    async def worker() -> None:
        while not stop.is_set():
            item = await queue.get()
            if queue.qsize() <= n_workers and not refill.is_set():
                refill.set()
            if item is None:
                return
            position, instance = item
            try:
                record, judged_here, bad_request = await _evaluate(plan, position, instance, client, metrics, budget,
                                                                   run_name)
            except ServerUnreachable as err:
                outcome.error = outcome.error or str(err)
                if not stop.is_set():
                    halt()
                return
            except InferenceError as err:
                if not err.retryable:
                    if err.status not in STOPS_THE_RUN:
                        raise
                    why = "the account's quota is spent" if err.status == 429 else "the credential was refused"
                    outcome.error = outcome.error or f"{err} ({why}: the run stopped; fix it and run again to resume)"
                    if not stop.is_set():
                        halt()
                    return
                outcome.transient_failures += 1
                outcome.last_transient = str(err)
                measure.retries_exhausted()
                progress.advance(failed=True)
                continue
            writer.write(record)
            if bad_request is not None:
                outcome.bad_requests += 1
                outcome.first_bad_request = outcome.first_bad_request or bad_request
            outcome.evaluated += 1
            measure.recorded(error=record.error is not None, unscored=record.stats.get(main_stat) is None)
            if judged_here:
                measure.judgements(judged_here)
            progress.advance(failed=record.error is not None)

    # where, when and what this invocation asks of the evaluated deployment: a line when the first request is
    # sent (a process killed outright leaves at least the window's start), one more when it ends
    watch = getattr(pool, "watch", None)
    describe = getattr(client, "endpoint", None)
    endpoint = describe() if describe is not None else {}
    invocation = uuid.uuid4().hex[:16]
    where = (shard.index, shard.count) if shard else None

    def opened(at: float) -> None:
        run_dir.add_access({**endpoint, "invocation": invocation, "open": True, "first_request": utc_iso(at)},
                           shard=where)

    window = watch(plan.deployment.name, opened) if watch is not None else None
    measure.started(mine, already)
    try:
        producer = asyncio.create_task(produce())
        workers = [asyncio.create_task(worker()) for _ in range(n_workers)]
        try:
            await asyncio.gather(*workers)
            await _finish(producer)  # stopped early (unreachable server): it is cancelled
        except BaseException:
            stop.set()
            for w in (*workers, producer):
                w.cancel()
            await asyncio.gather(*workers, producer, return_exceptions=True)
            raise
    finally:
        measure.finished()
        writer.close()
        for m in metrics:
            await m.aclose()
        outcome.retries, outcome.judge_retries = _retries_since(pool, retries_before, plan.deployment.name)
        run_dir.add_retries(outcome.retries, outcome.judge_retries, shard=(shard.index, shard.count) if shard else None)
        if window is not None:
            pool.unwatch(window)
            run_dir.add_access({**endpoint, "invocation": invocation, **window.to_json()}, shard=where)

    outcome.wall_time_s = time.perf_counter() - started
    pacers = pool.pacers() if hasattr(pool, "pacers") else {}
    if plan.deployment.name in pacers:
        outcome.pacing = pacers[plan.deployment.name].summary()
    if shard is None:
        outcome.status = finalize(run_dir, extra_status={"wall_time_s": round(outcome.wall_time_s, 3)},
                                  ledger=writer.ledger, total=sample.count)
    else:
        outcome.status = {"status": "shard-done" if not outcome.error else "partial",
                          "instances_total": mine, "instances_done": already + outcome.evaluated}
    if outcome.status.get("status") == "failed" and not outcome.error:
        outcome.error = f"every instance failed (first error: {run_dir.first_error()})"
    if not outcome.error:
        parts = []
        if outcome.bad_requests:
            parts.append(f"{outcome.bad_requests} instance(s) refused as a bad request (first: "
                         f"{outcome.first_bad_request})")
        if outcome.transient_failures:
            parts.append(f"{outcome.transient_failures} instance(s) still failing after retries (last: "
                         f"{outcome.last_transient}); run again to resume")
        outcome.error = "; ".join(parts) or None
    return outcome


# refused for good for the account, not the instance: a refused credential, a spent quota (a 429 not to be retried)
STOPS_THE_RUN = frozenset({401, 403, 429})


async def _evaluate(plan: RunPlan, position: int, instance: Instance, client, metrics: Sequence[Metric],
                    budget: PromptBudget, run_name: str | None = None
                    ) -> tuple[InstanceResult, list[JudgeScore], str | None]:
    """The instance's record, the judgements made in this process (a remote metric's are counted by the
    service that asked the judges), and the provider's line when it refused the request as a bad one."""
    spec = plan.spec
    run_name = run_name or spec.name
    prompt = plan.benchmark.prompt(instance, budget)
    request = GenerationRequest(messages=prompt.messages, max_tokens=spec.max_tokens,
                                temperature=spec.temperature, seed=spec.seed)
    answer = getattr(client, "answers_instances", None)  # a baseline: no model, answers from the instance (zero cost)
    recorded = getattr(plan.benchmark, "record_instance", None)  # what the record keeps of the instance
    try:
        completion = answer(instance, request, majority=plan.majority) if answer else await client.generate(request)
    except InferenceError as err:
        if err.retryable or err.status in STOPS_THE_RUN:
            raise
        bad = str(err) if err.status == 400 and not err.content_filter else None
        return InstanceResult(run=run_name, instance=recorded(instance) if recorded else instance, prompt=prompt,
                              completion=None, stats={}, error=str(err), position=position), [], bad
    item = ScoringItem(run=spec, instance=instance, prompt=prompt, completion=completion)
    if len(metrics) == 1:  # the common case: no gather (a task per metric) for one coroutine
        results = [await metrics[0].score(item)]
    else:
        results = await asyncio.gather(*(m.score(item) for m in metrics))
    merged = merge_results(results)
    here = [j for m, r in zip(metrics, results) if r.judgements and not getattr(m, "remote", False)
            for j in r.judgements]
    return InstanceResult(run=run_name, instance=recorded(instance) if recorded else instance, prompt=prompt,
                          completion=completion, stats=merged.stats, judgements=merged.judgements,
                          judge_usage=merged.judge_usage, position=position), here, None


async def _finish(producer: asyncio.Task) -> None:
    """Wait for the producer; one stopped early (blocked on a full queue) is cancelled. Its errors (a
    dataset that changed under the run) are raised."""
    if not producer.done():
        producer.cancel()
    try:
        await producer
    except asyncio.CancelledError:
        if not producer.cancelled():
            raise


def _retries(pool) -> dict[str, int]:
    stats = getattr(pool, "stats", None)
    return {name: s.retries for name, s in stats.items()} if stats is not None else {}


def _retries_since(pool, before: dict[str, int], candidate: str) -> tuple[int, int]:
    """(the evaluated deployment's, every other deployment's) retries since ``before`` (runs go one at a time)."""
    after = _retries(pool)
    delta = {name: n - before.get(name, 0) for name, n in after.items()}
    own = delta.pop(candidate, 0)
    return own, sum(delta.values())


def merge_results(results: Sequence[MetricResult]) -> MetricResult:
    """The metrics' results for one instance as one (stats united, judgements and judge tokens summed)."""
    if len(results) == 1 and not results[0].judgements:
        return MetricResult(stats=dict(results[0].stats))
    stats: dict[str, float | None] = {}
    judgements: list[JudgeScore] = []
    judge_prompt = judge_completion = 0
    judge_reasoning: int | None = None  # stays None (absent from the record) unless a judge stated it
    judge_estimated = False  # some judge's thinking is our estimate (tokens.split_reasoning)
    for r in results:
        stats.update(r.stats)
        judgements.extend(r.judgements)
        judge_prompt += r.judge_usage.prompt_tokens or 0
        judge_completion += r.judge_usage.completion_tokens or 0
        if r.judge_usage.reasoning_tokens is not None:
            judge_reasoning = (judge_reasoning or 0) + r.judge_usage.reasoning_tokens
            judge_estimated = judge_estimated or r.judge_usage.reasoning_estimated
    judge_usage = (Usage(prompt_tokens=judge_prompt, completion_tokens=judge_completion,
                         reasoning_tokens=judge_reasoning, reasoning_estimated=judge_estimated)
                   if judgements else Usage())
    return MetricResult(stats=stats, judgements=tuple(judgements), judge_usage=judge_usage)


async def _prompt_limit(plan: RunPlan, client) -> int | None:
    """Prompt tokens that fit: the deployment's ``max_sequence_length``, else the context length the server
    reports (vLLM ``/v1/models`` ``max_model_len``), minus the output tokens; None when nobody says."""
    if plan.max_prompt_tokens is not None:
        return plan.max_prompt_tokens
    ask = getattr(client, "context_window", None)
    window = await ask() if ask is not None else None
    return max(window - plan.spec.max_tokens - CHAT_TEMPLATE_TOKENS, 1) if window else None


def _token_counter(client) -> Callable[[str], int]:
    """The model's own tokenizer when it is local (llama.cpp), else the generous estimate."""
    exact = getattr(client, "count_tokens", None)
    if exact is None:
        return approx_tokens

    def count(text: str) -> int:
        n = exact(text)
        return approx_tokens(text) if n is None else n

    return count


def _is_complete(run_dir: RunDir, plan: RunPlan) -> bool:
    if not run_dir.exists():
        return False
    status = run_dir.status()
    return status.get("status") == "complete" and status.get("compat_digest") == compat_digest(plan.spec) \
        and run_dir.spec().max_eval_instances == plan.spec.max_eval_instances
