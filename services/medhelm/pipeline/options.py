"""Options of a suite run, shared by every door (CLI, Job, gRPC)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunOptions:
    suite: str = "default"
    output_path: Path = Path("benchmark_output")
    local_path: Path = Path("prod_env")  # model_deployments.yaml and the request cache live here
    max_eval_instances: int | None = None  # a run entry's own max_eval_instances= wins (as in HELM)
    max_concurrency: int = 8  # requests in flight per run (with ``adaptive``: the ceiling of every deployment's)
    adaptive: bool = False  # --max-concurrency auto: remote deployments paced to their servers (inference/pacing/)
    rate_share: float = 1.0  # this process's part of configured rate budgets (a Job's shards split them)
    dry_run: bool = False
    skip_completed: bool = False
    data_dir: Path | None = None  # air-gapped mirror of benchmark files
    offline: bool = False  # never download; missing data is an error
    use_cache: bool = True
    seed: int = 0
    num_output_tokens: int | None = None  # overrides every benchmark's max_tokens
    progress: bool = True
    max_attempts: int = 6  # per model request: 1 try + retries (429, 5xx, timeouts, malformed bodies)
    retry_base_delay_s: float = 0.5  # first back-off ceiling; doubles per retry (full jitter), capped at 30 s
    rate_limit_wait_s: float = 600.0  # a rate-limited request is retried past max_attempts this long (retry.py)
    data_roots: tuple[Path, ...] = ()  # --data-root: folders a benchmark YAML may name files in (besides its own)
    any_data_path: bool = False  # --allow-any-data-path: a benchmark YAML may name files anywhere

    @property
    def suite_dir(self) -> Path:
        return Path(self.output_path) / "runs" / self.suite

    @property
    def cache_path(self) -> Path:
        from medhelm.inference.cache import cache_file

        return cache_file(self.local_path)

    @property
    def scenarios_dir(self) -> Path:
        return Path(self.output_path) / "scenarios"
