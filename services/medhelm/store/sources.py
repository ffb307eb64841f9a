"""Finished runs as the store reads them: one ``RunSource`` per run directory, instances streamed.

Two formats feed the same ingestion: our run directories, read through their owner ``medhelm.rundir``
(``run_spec.json``, ``run.json``, ``stats.json``, ``instances.jsonl``; docs/output-format.md), and HELM's
(``helm_runs.py``). Instances are read one line
at a time, so memory does not grow with the number of instances.

Old run folders keep their meaning: a multiple-choice run written before the column names said what they
compute has the lenient rule under ``exact_match`` and the letter rule under ``exact_match_strict``; it is read
under today's names (``lenient_match``, ``exact_match``; ``LEGACY_CHOICE_NAMES``), so its leaderboard column is
the same rule as a new run's and a HELM import's. The records themselves are stored as written.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from medhelm.errors import ConfigError, escape
from medhelm.rundir import RECORDS, RunDir, raw_lines
from medhelm.json_text import loads_json
from medhelm.records import Stat
from medhelm.specs import BenchmarkSpec

JURY_STAT, JURY_STAT_NORMALIZED = "jury_score", "jury_score_normalized"
# Multiple-choice stats of runs made before the rename (scoring/choice.py): old name -> today's name.
LEGACY_CHOICE_MARK = "exact_match_strict"  # only the old multiple-choice scorer wrote it
LEGACY_CHOICE_NAMES = {"exact_match": "lenient_match", LEGACY_CHOICE_MARK: "exact_match"}


class InstanceRow(NamedTuple):
    """One instance as stored (a NamedTuple: hundreds of thousands are built per summarize)."""

    instance_id: str
    position: int
    main_value: float | None
    error: str | None
    stats_json: str | None  # per-metric values; None when record_json (which holds them) is kept
    record_json: str | None  # the whole InstanceResult line; None when redacted or the source has none
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    judge_prompt_tokens: int
    judge_completion_tokens: int
    judges: tuple[str, ...] = ()  # deployments of the judges whose tokens these are (priced apart as jury cost)
    reasoning_tokens: int = 0  # of completion_tokens, the model's thinking (0 when not stated)
    judge_reasoning_tokens: int = 0
    subgroups: Mapping[str, Any] | None = None  # the instance's patient subgroup labels (store/subgroups.py)
    reasoning_estimated: bool = False  # reasoning_tokens is our estimate (usage.reasoning_tokens_estimated)
    judge_reasoning_estimated: bool = False


@dataclass(frozen=True)
class RunSource:
    suite: str
    run_name: str
    benchmark: BenchmarkSpec
    model: str
    deployment: str
    main_stat: str  # the stat used as the leaderboard value (jury: the 0-1 normalised score)
    status: Mapping[str, Any]
    stats: tuple[Stat, ...]
    spec_json: str
    source: str  # "medhelm" | "helm"
    rows: Callable[[bool], Iterator[InstanceRow]] = field(compare=False)  # rows(with_text)
    summary: Any = field(default=None, compare=False)  # HELM imports: a RunSummary, filled while rows are read

    @property
    def stratum(self) -> str:
        """The run name without its model part: runs of one benchmark with the same arguments."""
        return self.run_name.split(":model=", 1)[0]

    @property
    def complete(self) -> bool:
        return self.status.get("status") == "complete"


def leaderboard_stat(spec: BenchmarkSpec) -> str:
    """The leaderboard column of a benchmark: its main stat, with jury scores taken on the 0-1 scale."""
    return JURY_STAT_NORMALIZED if spec.main_metric == JURY_STAT else spec.main_metric


def find_run_dirs(suite_dir: Path) -> list[Path]:
    return list_suite(suite_dir)[0]


# folders a HELM suite holds besides its runs (never runs themselves)
_NOT_RUNS = frozenset({"groups", "eval_cache", "cache", "scenarios", "shards", "logs"})


def list_suite(suite_dir: Path) -> tuple[list[Path], list[Path]]:
    """(run folders, other folders) of a suite; an unreadable suite folder is an error, never "no runs"."""
    if not suite_dir.is_dir():
        raise ConfigError("suite folder not found (run `medhelm run --suite ...` first)", path=suite_dir)
    try:
        entries = sorted(os.scandir(suite_dir), key=lambda e: e.name)
    except OSError as err:
        raise ConfigError(f"cannot read the suite folder ({err.strerror})", path=suite_dir) from None
    runs, others = [], []
    for entry in entries:
        try:
            if not entry.is_dir() or entry.name.startswith(".") or entry.name in _NOT_RUNS:
                continue
            (runs if (Path(entry.path) / "run_spec.json").exists() else others).append(Path(entry.path))
        except OSError:
            others.append(Path(entry.path))
    return runs, others


def read_medhelm_run(path: Path, suite: str) -> RunSource:
    run = RunDir(path)
    spec_json = run.spec_doc()
    spec = run.spec()
    for name in ("entry", "model", "deployment"):  # a record's identity: text, never trusted as anything else
        if type(getattr(spec, name)) is not str:
            raise ConfigError("must be text", path=path / "run_spec.json", field=name)
    status = run.status()
    for name, kinds in (("instances_total", (int,)), ("instances_done", (int,)), ("wall_time_s", (int, float))):
        v = status.get(name)
        if v is not None and (type(v) not in kinds or not 0 <= v < math.inf):
            raise ConfigError("must be a number >= 0", path=path / "run.json", field=name)
    stats = tuple(run.stats()) if run.has_stats() else ()
    main = leaderboard_stat(spec.benchmark)
    legacy = _legacy_choice(stats, path / RECORDS)
    if legacy:
        stats = tuple(dataclasses.replace(s, name=LEGACY_CHOICE_NAMES.get(s.name, s.name)) for s in stats)
    return RunSource(suite=suite, run_name=path.name, benchmark=spec.benchmark, model=spec.model,
                     deployment=spec.deployment, main_stat=main, status=status, stats=stats,
                     spec_json=json.dumps(spec_json, ensure_ascii=False), source="medhelm",
                     rows=lambda with_text: _medhelm_rows(path / RECORDS, main, with_text, _done(status), legacy))


def _legacy_choice(stats: tuple[Stat, ...], records: Path) -> bool:
    """Whether a run was scored under the old multiple-choice names (its stats, else its first record, say)."""
    if stats:
        return any(s.name == LEGACY_CHOICE_MARK for s in stats)
    if not records.is_file():
        return False
    lines = raw_lines(records, 1)
    try:
        first = next(lines, None)
        return first is not None and LEGACY_CHOICE_MARK in (loads_json(first[1]).get("stats") or {})
    except (ValueError, TypeError, AttributeError, RecursionError):
        return False  # a bad record is named by the row reader, with its line
    finally:
        lines.close()


def _done(status: Mapping[str, Any]) -> int | None:
    done = status.get("instances_done")
    return done if isinstance(done, int) and not isinstance(done, bool) and done >= 0 else None


def _medhelm_rows(path: Path, main: str, with_text: bool, limit: int | None = None,
                  legacy: bool = False) -> Iterator[InstanceRow]:
    # The raw line is stored as is (no re-encoding): summarize's cost is one parse per instance (orjson).
    # This loop runs once per instance of a release (370k in the bench): keep it flat.
    # A `medhelm run` may resume this run while summarize reads it (after summarize read run.json): its new
    # records are appended after the finalized ones, the last maybe torn. Only the first ``limit`` lines
    # (run.json's instances_done) are the finished run; the run folder's reader (``rundir.raw_lines``)
    # stops there and never yields a line without its newline.
    if not path.exists():
        raise ConfigError("missing (the run has no records)", path=path)
    loads, dumps = loads_json, json.dumps  # orjson parses (the json module what it refuses)
    rename = legacy and not with_text  # stats_json is stored under today's names; record_json as written
    key = main if not legacy or rename else {v: k for k, v in LEGACY_CHOICE_NAMES.items()}.get(main, main)
    for lineno, line in raw_lines(path, limit):
        try:
            d = loads(line)
            stats = d["stats"] or {}
            if rename and type(stats) is dict:
                stats = {LEGACY_CHOICE_NAMES.get(k, k): v for k, v in stats.items()}
            usage = (d["completion"] or {}).get("usage") or {}
            judge = d.get("judge_usage") or {}
            row = InstanceRow(
                str(d["instance"]["id"]), d.get("position", 0), number(stats.get(key)), d.get("error"),
                None if with_text else dumps(stats), line.rstrip("\n") if with_text else None,
                usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0,
                usage.get("latency_s") or 0.0, judge.get("prompt_tokens") or 0,
                judge.get("completion_tokens") or 0,
                tuple({str(j.get("judge", "")): 0 for j in d.get("judgements") or ()}) if judge else (),
                usage.get("reasoning_tokens") or 0, judge.get("reasoning_tokens") or 0,
                d["instance"].get("subgroups"), usage.get("reasoning_tokens_estimated") is True,
                judge.get("reasoning_tokens_estimated") is True)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise ConfigError(f"bad instance record ({type(e).__name__})", path=path, line=lineno) from None
        bad = bad_field(row, stats)
        if bad is not None:
            raise ConfigError(f"bad instance record: {bad}", path=path, line=lineno)
        yield row


_COUNT_FIELDS = (("prompt_tokens", "completion.usage.prompt_tokens"),
                 ("completion_tokens", "completion.usage.completion_tokens"),
                 ("judge_prompt_tokens", "judge_usage.prompt_tokens"),
                 ("judge_completion_tokens", "judge_usage.completion_tokens"))
_MAX_COUNT = 1 << 53  # token counts past this are not counts (and lose precision as floats)


def bad_field(row: InstanceRow, stats: Mapping[str, Any]) -> str | None:
    """What is wrong with a parsed record's typed fields (named, never its value), or None.

    A record is trusted only as far as its types are checked here: a string latency, a list as ``error`` or a
    huge negative token count must be one line naming the field, never a traceback or a silent 0."""
    for attr, name in _COUNT_FIELDS:
        v = getattr(row, attr)
        if type(v) is not int or not 0 <= v < _MAX_COUNT:
            return f"'{name}' must be a token count (a whole number from 0 to 2^53)"
    lat = row.latency_s
    if type(lat) not in (int, float) or not 0 <= lat < math.inf:
        return "'completion.usage.latency_s' must be a finite number of seconds >= 0"
    if row.error is not None and type(row.error) is not str:
        return "'error' must be text or null"
    if type(row.position) is not int or not 0 <= row.position < _MAX_COUNT:
        return "'position' must be a whole number >= 0"
    if type(stats) is not dict:
        return "'stats' must be an object of stat name -> number or null"
    for name, v in stats.items():
        if v is not None and type(v) not in (float, int, bool):
            return f"stat '{escape(name, 80)}' must be a number or null (unscored)"
    return None


def number(value: Any) -> float | None:
    """A stat value as a float, or None for unscored/missing/NaN (never a silent 0)."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f
