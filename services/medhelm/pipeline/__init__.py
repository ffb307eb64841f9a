"""The pipeline: plan a suite, execute its runs, record and aggregate. Every door calls these."""

from medhelm.pipeline.execute import RunOutcome, Shard, run_one, run_suite
from medhelm.pipeline.options import RunOptions
from medhelm.pipeline.plan import RunPlan, plan_runs
from medhelm.pipeline.finish import collect_shards, finalize, finished_positions

__all__ = ["RunOptions", "RunPlan", "RunOutcome", "Shard", "plan_runs", "run_suite", "run_one", "collect_shards",
           "finalize", "finished_positions"]
