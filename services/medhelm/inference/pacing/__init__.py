"""Pacing: how many requests a deployment has in flight, and how fast new ones may start (docs/pacing.md).

One module per part, lowest first: ``window`` (what a controller measures), ``limit`` (the controllers' template),
``solo`` and ``shards`` (the two controllers of ``--max-concurrency auto``), ``budget`` (rate budgets and the
servers' rate headers), ``ledger`` (the sends and refusals a learnt rate counts), ``burst`` (whether a gateway holds any
burst), ``learnt`` (a rate learnt from 429s alone), ``gate`` (the per-deployment ``Pacer``).
This module only names what the rest of ``medhelm`` imports.

Failure semantics: those of its parts — pacing never fails a request, it only delays its start."""

from medhelm.inference.pacing.budget import Bucket, RateHeaders, parse_reset, retry_after_seconds
from medhelm.inference.pacing.gate import (AUTO, AUTO_CEILING, JUMP_AFTER_S, JUMP_LIMIT, OVERLOAD_STATUS, SHORT_RUN,
                                           SHORT_START, AdaptiveLimit, PaceSettings, Pacer, PacerObserver,
                                           PacingPolicy, short_run_limit)
from medhelm.inference.pacing.learnt import LearntRate
from medhelm.inference.pacing.limit import START_LIMIT, Limit
from medhelm.inference.pacing.shards import (DRAIN_EVERY_S, PROBE_BACKOFF, QUIET_DRAINS, RESTART_LIMIT,
                                             RESYNC_DRAINS, ShardLimit)
from medhelm.inference.pacing.solo import KNEE_GAIN, LATENCY_BOUND, MIN_GAIN, SoloLimit
from medhelm.inference.pacing.window import Sample, Window


__all__ = ["AUTO", "AUTO_CEILING", "DRAIN_EVERY_S", "JUMP_AFTER_S", "JUMP_LIMIT", "KNEE_GAIN", "LATENCY_BOUND",
           "MIN_GAIN", "OVERLOAD_STATUS", "PROBE_BACKOFF", "QUIET_DRAINS", "RESTART_LIMIT", "RESYNC_DRAINS",
           "SHORT_RUN", "SHORT_START", "START_LIMIT", "AdaptiveLimit", "Bucket", "LearntRate", "Limit", "PaceSettings",
           "Pacer", "PacerObserver", "PacingPolicy", "RateHeaders", "Sample", "ShardLimit", "SoloLimit", "Window",
           "parse_reset", "retry_after_seconds", "short_run_limit"]
