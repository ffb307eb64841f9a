"""HELM ``benchmark_output`` run directories read as ``RunSource`` values (for ``import-helm`` and for
suites such as the public ``v2.0.0`` passed to ``summarize``), with every number as HELM computed it.

Per run directory: ``run_spec.json`` (name, ``adapter_spec.model`` / ``model_deployment``, ``groups``,
``metric_specs``, ``scenario_spec``), ``stats.json`` (run aggregates), ``per_instance_stats.json`` and,
when present, ``scenario_state.json`` (which requests failed, which judges answered).

* **Main metric**, in this order: the suite's ``schema.json`` run group (``environment.main_name`` /
  ``main_split``, what helm-summarize shows), the configurable benchmark's own YAML (its first metric),
  the run spec's metric specs (an ``LLMJuryMetric``'s ``metric_name``; the exact-match family), then
  upstream MedHELM's cards (``medhelm/cards.py``). No main metric found -> a one-line error, never a guess.
  Built-in MedHELM jury metrics (``<name>_accuracy``, a 1-5 mean) are stored on 0-1 as
  ``jury_score_normalized`` (the ranked column) and also as HELM wrote them, under their own name: the column
  our runs compute by the same rule (``scoring/jury/metric.py``), shown beside it. HELM's multiple-choice
  ``exact_match`` lands in the column our runs fill by HELM's rule (``scoring/choice.py``); a configurable
  benchmark's ``jury_score`` keeps HELM's raw scale.
* **Per-instance stats**: HELM's runner appends one list per metric, so an instance has one entry per
  metric group (MedHELM's jury runs list the summarization metrics before the jury metric); every entry of
  an instance is merged. Perturbed entries and extra train trials are not leaderboard values and are skipped.
  A well-formed file is decoded in pieces by msgspec (fast); one with anything unusual is read again entry by
  entry by ijson, which names what is wrong: the two give the same values, or the same error.
* **Errors**: HELM keeps failed requests only in ``scenario_state.json`` (``result.success: false``, scored
  0) and a failed judge only as a missing key in ``annotations``. That file is streamed with ijson (it
  reaches gigabytes; prompts are never kept): a failed request, or an instance no judge could score, is
  stored as an error without a leaderboard value, as our own runs store it — unless
  ``failed_as_zero`` (``import-helm --failed-as-zero``) keeps HELM's 0. Partial judge failures are counted.

Failure semantics: every malformed input is a ``ConfigError`` naming the file (and entry) — raised while
the summarize transaction is open, so nothing is half-imported. A run file that is there must be a regular
file (a FIFO or ``/dev/zero`` is named, never read as "no instances"); a per-instance file that lists no
instance is an error; streamed files are checked for nesting before ijson builds them; every stat number
is a finite JSON number where HELM writes one (text, a list or a ``null`` sum is an error, never 0); a
folder of a suite without ``run_spec.json`` is named in a note. A suite folder wins over a release folder
when run folders sit in it (``helm-summarize --suite`` writes ``runs_to_run_suites.json`` there too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.cards import BY_HELM_NAME, BenchmarkCard
from medhelm.errors import ConfigError, escape
from medhelm.json_text import compact_json
from medhelm.records import Stat
from medhelm.specs import Access, BenchmarkSpec, MetricSpec
from medhelm.store.helm_stats import per_instance, plain_stat, present, stat_name, stream_items, strict_number
from medhelm.store.sources import JURY_STAT_NORMALIZED, InstanceRow, RunSource, list_suite

RUN_SPEC, STATS, PER_INSTANCE, SCENARIO_STATE = ("run_spec.json", "stats.json", "per_instance_stats.json",
                                                 "scenario_state.json")
JURY_METRIC_CLASS = "LLMJuryMetric"
EXACT_MATCH_CLASS = "BasicGenerationMetric"
SUMMARIZATION_CLASS = "SummarizationMetric"
_JURY_MIN, _JURY_MAX = 1.0, 5.0  # built-in MedHELM rubrics: three criteria on 1-5
# The built-in MedHELM jury metrics (MedDialogMetric, ...) take their judges from the annotator module's
# ANNOTATOR_MODELS (crfm-helm 0.5.16 helm/benchmark/annotation/*_annotator.py), not from the run spec.
BUILTIN_JUDGES = ("gpt", "llama", "claude")


@dataclass(frozen=True)
class HelmSchema:
    """What helm-summarize's ``schema.json`` says about run groups: main metric and split, display name."""

    main: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # group -> (main_name, main_split)
    display: Mapping[str, str] = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def load(cls, path: Path | None) -> HelmSchema:
        if path is None or not Path(path).is_file():
            return cls()
        doc = files.load_json(path)
        groups = doc.get("run_groups") if isinstance(doc, Mapping) else None
        if not isinstance(groups, list):
            raise ConfigError("not a HELM schema (no run_groups list)", path=path)
        main, display = {}, {}
        for i, g in enumerate(groups):
            if not isinstance(g, Mapping) or not isinstance(g.get("name"), str):
                raise ConfigError(f"run group #{i} has no name", path=path)
            env = g.get("environment") or {}
            if isinstance(env, Mapping) and env.get("main_name"):
                main[g["name"]] = (str(env["main_name"]), str(env.get("main_split") or "test"))
            if g.get("display_name"):
                display[g["name"]] = str(g["display_name"])
        return cls(main, display, Path(path))


def is_helm_run(path: Path) -> bool:
    """A HELM run directory: its run_spec.json has an ``adapter_spec`` (ours has ``entry``)."""
    keys = _peek_keys(path / RUN_SPEC)
    return "adapter_spec" in keys and "entry" not in keys


@dataclass(frozen=True)
class HelmRelease:
    """The run directories of one HELM suite or release, and the schema helm-summarize wrote for them."""

    name: str
    runs: tuple[tuple[Path, str], ...]  # (run directory, suite it lives in)
    schema: HelmSchema
    not_runs: tuple[Path, ...] = ()  # folders of the suite without run_spec.json (named in a note, never dropped silently)


def find_helm_release(path: Path, release: str | None = None) -> HelmRelease:
    """``path`` is a suite folder (``runs/<suite>``: run directories, maybe ``schema.json`` and ``groups/``), a
    release folder (``releases/<r>``: ``runs_to_run_suites.json``, ``schema.json``, ``groups/``) or a
    ``benchmark_output`` root holding either (pick with ``release``)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("not found (give a HELM suite folder, release folder or benchmark_output root)", path=path)
    if not path.is_dir():
        raise ConfigError("not a folder (give a HELM suite folder, release folder or benchmark_output root)",
                          path=path)
    try:
        return _find_release(path, release)
    except OSError as err:  # a folder on the way that cannot be listed
        raise ConfigError(f"cannot read the folder ({err.strerror or type(err).__name__})",
                          path=err.filename or path) from None


def _find_release(path: Path, release: str | None) -> HelmRelease:
    # A suite folder summarized with `helm-summarize --suite` holds runs_to_run_suites.json too: run folders here
    # make it a suite (a release folder never holds runs itself).
    runs_here, others = list_suite(path)
    if runs_here:
        return HelmRelease(release or path.name, tuple((d, path.name) for d in runs_here),
                           HelmSchema.load(path / "schema.json"), tuple(others))
    if (path / "runs_to_run_suites.json").is_file():
        return _release_folder(path, path.parent.parent / "runs")
    if (path / "runs").is_dir():
        releases = sorted(p.parent.name for p in (path / "releases").glob("*/runs_to_run_suites.json"))
        suites = sorted(p.name for p in (path / "runs").iterdir() if any(p.glob(f"*/{RUN_SPEC}")))
        chosen = release or (releases[0] if len(releases) == 1 else suites[0] if not releases and len(suites) == 1
                             else None)
        if chosen in releases:
            return _release_folder(path / "releases" / chosen, path / "runs")
        if chosen in suites:
            return find_helm_release(path / "runs" / chosen)
        if chosen is not None:
            raise ConfigError(f"no release or suite '{chosen}' here (releases: {', '.join(releases) or 'none'}; "
                              f"suites: {', '.join(suites) or 'none'})", path=path)
        raise ConfigError(f"several releases/suites here ({', '.join(releases + suites) or 'none with runs'}): "
                          "name one with --release, or give runs/<suite>", path=path)
    raise ConfigError("no HELM run directories here (folders with run_spec.json), nor runs/ or "
                      "runs_to_run_suites.json", path=path)


def _release_folder(folder: Path, runs_root: Path) -> HelmRelease:
    mapping = files.load_json(folder / "runs_to_run_suites.json")
    if not isinstance(mapping, Mapping) or not all(isinstance(v, str) for v in mapping.values()):
        raise ConfigError("expected an object of run name -> suite", path=folder / "runs_to_run_suites.json")
    runs = []
    for run, suite in sorted(mapping.items()):
        run_dir = runs_root / suite / run
        if not (run_dir / RUN_SPEC).is_file():
            raise ConfigError(f"run '{run}' of suite '{suite}' is listed but not here (download runs/{suite} too)",
                              path=run_dir)
        runs.append((run_dir, suite))
    return HelmRelease(folder.name, tuple(runs), HelmSchema.load(folder / "schema.json"))


@dataclass(frozen=True)
class _Main:
    stat: str  # HELM's stat name
    split: str
    jury: bool  # an LLM-jury mean
    normalize: bool  # built-in 1-5 jury mean, stored on 0-1
    judges: tuple[str, ...]  # judge names the jury metric expects in the annotations
    annotator: str  # the annotations key (the jury's scenario name)
    source: str  # where the main metric came from (for the error message / docs)


def read_helm_run(path: Path, suite: str, schema: HelmSchema | None = None, *,
                  failed_as_zero: bool = False) -> RunSource:
    path = Path(path)
    spec = _load(path / RUN_SPEC)
    if not isinstance(spec, Mapping) or not isinstance(spec.get("adapter_spec"), Mapping):
        raise ConfigError("not a HELM run spec (no adapter_spec)", path=path / RUN_SPEC)
    has_stats, has_instances = present(path / STATS), present(path / PER_INSTANCE)
    if not has_stats and not has_instances:
        raise ConfigError(f"not a finished HELM run: neither {STATS} nor {PER_INSTANCE} is here", path=path)
    name = str(spec.get("name") or path.name)
    adapter = spec["adapter_spec"]
    groups = [str(g) for g in spec.get("groups") or ()]
    info = _benchmark_of(name, groups, spec)
    main = _main_metric(path, spec, groups, info, schema or HelmSchema())
    scale = _jury_scale if main.normalize else _identity
    leaderboard_stat = JURY_STAT_NORMALIZED if main.normalize else main.stat
    raw_stats = _load(path / STATS) if has_stats else []
    stats = _stats(raw_stats, path / STATS, main, scale)
    if not has_instances and not any(s.name == leaderboard_stat and s.count for s in stats):
        raise ConfigError(f"no '{main.stat}' stat (the main metric, from {main.source}) and no {PER_INSTANCE}: "
                          "nothing to rank this run by", path=path / STATS)
    display = (schema.display.get(groups[0]) if schema and groups else None) or info.display_name
    bench = BenchmarkSpec(name=info.name, display_name=display, description="imported from HELM",
                          category=info.category, subcategory=info.subcategory, access=info.access,
                          task_type=_task_type(spec, main, info), metrics=(MetricSpec(leaderboard_stat),),
                          main_metric=leaderboard_stat, max_tokens=_max_tokens(adapter, path / RUN_SPEC),
                          source="HELM benchmark_output", main_split=main.split)
    reader = _RunReader(path, main, scale, leaderboard_stat, failed_as_zero)
    return RunSource(suite=suite, run_name=path.name, benchmark=bench, model=str(adapter.get("model") or "?"),
                     deployment=str(adapter.get("model_deployment") or adapter.get("model") or "?"),
                     main_stat=leaderboard_stat, status={"status": "complete", "source": "helm"}, stats=stats,
                     spec_json=json.dumps(spec, ensure_ascii=False), source="helm",
                     rows=lambda with_text: reader.rows(), summary=reader.summary)


def _max_tokens(adapter: Mapping[str, Any], where: Path) -> int:
    value = adapter.get("max_tokens")
    if value is None:
        return 0
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or not 0 <= value <= 100_000_000:
        raise ConfigError("must be a whole number of tokens >= 0", path=where, field="adapter_spec.max_tokens")
    return value


# --------------------------------------------------------------------------------------------------------
# which benchmark, which main metric


def _benchmark_of(run_name: str, groups: list[str], spec: Mapping[str, Any]) -> BenchmarkCard:
    head = run_name.split(":", 1)[0].split(",", 1)[0]
    for candidate in (head, *groups):
        if candidate in BY_HELM_NAME:
            return BY_HELM_NAME[candidate]
    # Not a MedHELM leaf: kept, unclassified. A configurable benchmark (its YAML `name` is the run name and group)
    # runs on the user's own data: private.
    scenario = str((spec.get("scenario_spec") or {}).get("class_name") or "")
    configurable = "Configurable" in scenario or head == "medhelm_configurable_benchmark"
    name = groups[0] if groups and head == "medhelm_configurable_benchmark" else head
    return BenchmarkCard(name, name, "", "", Access.PRIVATE if configurable else Access.PUBLIC, "")


def _metric_specs(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    out = []
    for m in spec.get("metric_specs") or ():
        if isinstance(m, Mapping):
            out.append((str(m.get("class_name") or "").rsplit(".", 1)[-1], m.get("args") or {}))
    return out


def _jury_spec(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((args for cls, args in _metric_specs(spec) if cls == JURY_METRIC_CLASS), None)


def _main_metric(path: Path, spec: Mapping[str, Any], groups: list[str], info: BenchmarkCard,
                 schema: HelmSchema) -> _Main:
    jury = _jury_spec(spec)
    jury_name = str(jury.get("metric_name")) if jury and jury.get("metric_name") else None
    stat = split = source = None
    for g in groups:
        if g in schema.main:
            (stat, split), source = schema.main[g], f"{schema.path.name if schema.path else 'schema'} run group '{g}'"
            break
    if stat is None:
        stat, source = _configurable_main(spec), "the configurable benchmark's YAML"
    if stat is None and jury_name:
        stat, source = jury_name, "the run spec's LLMJuryMetric"
    if stat is None and info.helm_main_stat:
        stat, source = info.helm_main_stat, "upstream MedHELM's schema"
    if stat is None and any(cls == EXACT_MATCH_CLASS and "exact_match" in (args.get("names") or ())
                            for cls, args in _metric_specs(spec)):
        stat, source = "exact_match", "the run spec's exact-match metrics"
    if stat is None:
        raise ConfigError("cannot tell this run's main metric: no schema.json run group, no configurable YAML, "
                          "no jury or exact-match metric spec (pass the suite folder holding schema.json)",
                          path=path / RUN_SPEC)
    is_jury = stat == jury_name or (info.jury and stat == info.helm_main_stat)
    judges = tuple(str(j) for j in ((jury or {}).get("annotator_models") or {})) or \
        (BUILTIN_JUDGES if is_jury else ())
    annotator = str((jury or {}).get("scenario_name") or (groups[0] if groups else info.name))
    return _Main(stat, split or info.main_split or "test", is_jury, is_jury and info.jury, judges, annotator,
                 source or "")


def _configurable_main(spec: Mapping[str, Any]) -> str | None:
    """The first metric of a configurable benchmark's YAML, when the file is still where HELM read it."""
    args = (spec.get("scenario_spec") or {}).get("args") or {}
    config = args.get("config_path") if isinstance(args, Mapping) else None
    if not config or not Path(str(config)).is_file():
        return None
    doc = files.load_yaml(Path(str(config)))
    metrics = doc.get("metrics") if isinstance(doc, Mapping) else None
    first = metrics[0] if isinstance(metrics, list) and metrics else None
    return str(first["name"]) if isinstance(first, Mapping) and first.get("name") else None


def _task_type(spec: Mapping[str, Any], main: _Main, info: BenchmarkCard) -> str:
    method = str((spec.get("adapter_spec") or {}).get("method") or "")
    if main.jury or any(cls == SUMMARIZATION_CLASS for cls, _ in _metric_specs(spec)):
        return "generation"
    if info.name == "medcalc_bench":
        return "calculation"
    if info.name == "ehr_sql":
        return "code"
    return "multiple_choice" if method.startswith("multiple_choice") else "classification"


def _jury_scale(value: float | None) -> float | None:
    return None if value is None else (value - _JURY_MIN) / (_JURY_MAX - _JURY_MIN)


def _identity(value: float | None) -> float | None:
    return value


# --------------------------------------------------------------------------------------------------------
# stats.json


def _stats(raw: Any, where: Path, main: _Main, scale: Any) -> tuple[Stat, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"expected a list of stats, found a JSON {type(raw).__name__}", path=where)
    out = []
    for i, s in enumerate(raw):
        name = stat_name(s, where, i)
        if not plain_stat(s):
            continue
        field = f"stat #{i} ({escape(name['name'], 80)})"
        count = strict_number(s, "count", where, field, whole=True)
        count = 0 if count is None else int(count)
        split = str(name.get("split") or "test")
        total, squares = (strict_number(s, key, where, field, required=count > 0)
                          for key in ("sum", "sum_squared"))
        low, high, mean = (strict_number(s, key, where, field) for key in ("min", "max", "mean"))
        if main.normalize and name["name"] == main.stat:  # the 1-5 column, stored on 0-1 under our name
            v = scale(mean if mean is not None else (total / count if count and total is not None else None))
            out.append(Stat(JURY_STAT_NORMALIZED, split, count, (v or 0.0) * count, (v or 0.0) ** 2 * count,
                            scale(low), scale(high)))
        out.append(Stat(name["name"], split, count, total or 0.0, squares or 0.0, low, high))
    return tuple(out)


# --------------------------------------------------------------------------------------------------------
# per-instance stats + scenario_state


@dataclass
class RunSummary:
    """What the import found in one run, beyond its values (printed as a note by import-helm)."""

    instances: int = 0
    failed_requests: int = 0
    judge_failures: int = 0  # (instance, judge) pairs where the judge gave no usable verdict
    judge_requests: int = 0
    unjudged: int = 0  # instances no judge could score (HELM scored the metric's default)
    helm_mean: float | None = None  # HELM's mean of the main metric (failed requests as 0)
    mean: float | None = None  # the leaderboard's mean (failed requests left out, unless failed_as_zero)

    def note(self) -> str | None:
        parts = []
        if self.failed_requests:
            parts.append(f"{self.failed_requests} of {self.instances} requests failed")
        if self.unjudged:
            parts.append(f"{self.unjudged} instance(s) no judge could score")
        if self.judge_failures:
            parts.append(f"judges failed {self.judge_failures} of {self.judge_requests} times")
        if not parts:
            return None
        if self.helm_mean is not None and self.mean is not None and abs(self.helm_mean - self.mean) > 1e-12:
            parts.append(f"HELM scored the failures 0 (mean {self.helm_mean:.4g}); the leaderboard leaves them out "
                         f"(mean {self.mean:.4g}; --failed-as-zero keeps HELM's)")
        return "; ".join(parts)


class _RunReader:
    def __init__(self, path: Path, main: _Main, scale: Any, leaderboard_stat: str, failed_as_zero: bool) -> None:
        self.path, self.main, self.scale = path, main, scale
        self.leaderboard_stat, self.failed_as_zero = leaderboard_stat, failed_as_zero
        self.summary = RunSummary()

    def rows(self) -> Iterator[InstanceRow]:
        merged = per_instance(self.path / PER_INSTANCE)
        state = _scenario_state(self.path / SCENARIO_STATE, self.main) if present(self.path / SCENARIO_STATE) \
            else {}
        s = self.summary  # the object the RunSource holds: filled in place
        s.__dict__.update(vars(RunSummary()))
        helm_total = total = 0.0
        helm_n = n = 0
        for position, (instance_id, stats) in enumerate(merged.items()):
            info = state.get(instance_id)
            if self.main.normalize and self.main.stat in stats:
                stats[JURY_STAT_NORMALIZED] = self.scale(stats[self.main.stat])
            value = stats.get(self.leaderboard_stat)
            error = None
            s.instances += 1
            if info is not None:
                if info.error is not None:
                    s.failed_requests += 1
                    error = f"HELM request failed: {info.error}"
                elif self.main.jury and info.judges_expected and info.judges_ok == 0 and info.output:
                    s.unjudged += 1
                    error = "no judge gave a usable verdict (HELM scored the metric's default)"
                s.judge_failures += info.judges_expected - info.judges_ok if info.output else 0
                s.judge_requests += info.judges_expected if info.output else 0
                if info.judges_expected:
                    stats["helm_judges_failed"] = float(info.judges_expected - info.judges_ok)
            if value is not None:
                helm_total, helm_n = helm_total + value, helm_n + 1
            main_value = value if error is None or self.failed_as_zero else None
            if main_value is not None:
                total, n = total + main_value, n + 1
            yield InstanceRow(instance_id, position, main_value, error, compact_json(stats), None,
                              int(stats.get("num_prompt_tokens") or 0), int(stats.get("num_output_tokens") or 0),
                              float(stats.get("inference_runtime") or 0.0), 0, 0)
        if not s.instances and present(self.path / PER_INSTANCE):
            raise ConfigError("lists no instance (an empty list): a finished run has one entry per instance; "
                              f"remove the file to import the run's {STATS} means only", path=self.path / PER_INSTANCE)
        s.helm_mean = helm_total / helm_n if helm_n else None
        s.mean = total / n if n else None


@dataclass(frozen=True)
class _StateInfo:
    error: str | None  # the failed request's error (None when the request succeeded)
    output: bool  # the model produced non-empty text (HELM asks judges only then)
    judges_expected: int
    judges_ok: int


def _scenario_state(path: Path, main: _Main) -> dict[str, _StateInfo]:
    """instance id -> request outcome and judge verdicts, streamed one request state at a time."""
    out: dict[str, _StateInfo] = {}
    judges = set(main.judges)
    for position, rs in enumerate(stream_items(path, "request_states.item", "a scenario state")):
        if not isinstance(rs, Mapping) or not isinstance(rs.get("instance"), Mapping):
            raise ConfigError(f"request state #{position} has no instance", path=path)
        instance = rs["instance"]
        if instance.get("perturbation") or rs.get("train_trial_index", 0) or rs.get("reference_index") is not None:
            continue
        result = rs.get("result") or {}
        failed = isinstance(result, Mapping) and result.get("success") is False
        completions = (result.get("completions") or []) if isinstance(result, Mapping) else []
        text = completions[0].get("text") if completions and isinstance(completions[0], Mapping) else ""
        annotations = rs.get("annotations") or {}
        verdicts = annotations.get(main.annotator) if isinstance(annotations, Mapping) else None
        ok = sum(1 for j in judges if isinstance(verdicts, Mapping) and verdicts.get(j)) if main.jury else 0
        error = _safe_error(result.get("error")) if failed else None
        out[str(instance.get("id"))] = _StateInfo(error, bool(str(text or "").strip()), len(judges) if main.jury else 0,
                                                   ok)
    return out


def _safe_error(error: Any) -> str:
    """The first line of HELM's error, cut short: an API error can quote the request (patient text)."""
    first = str(error or "no error message").strip().splitlines()[0] if str(error or "").strip() else "unknown"
    return first if len(first) <= 80 else first[:77] + "..."


def _load(path: Path) -> Any:
    return files.load_json(path, missing="missing (not a HELM run directory?)")


def _peek_keys(path: Path) -> set[str]:
    """The top-level keys of a run spec, through the guarded reader (a damaged file has none: the caller
    that reads it for real names the problem)."""
    try:
        doc = files.load_json(path)
    except ConfigError:
        return set()
    return set(doc) if isinstance(doc, dict) else set()

