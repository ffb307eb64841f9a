"""A differential run against crfm-helm: the same benchmark, the same instances and the same deterministic model
answered through HELM's own ``helm-run`` and through ``medhelm run``, compared instance by instance.

    cases = select(["pubmed_qa", "medec"])
    report = run_differential(cases, helm=HelmRun(python, deps), shared_data=..., work=..., limit=5)
    report.rows  # one Row per benchmark; report.unexplained() -> the differences no KNOWN line explains
    rows = run_together(cases, ...)  # the same, in one helm-run and one medhelm run (one start-up of each side)

What is run. For each case a slice of the real public data (the first ``limit`` items of the file under the
shared data folder, or all of them; for a benchmark whose data is not on the machine, of an invented file in the
upstream format under ``SYNTHETIC_DATA``) is written twice in the layouts each side reads offline: HELM's download
target under ``<helm output>/scenarios/<scenario>/`` (so ``ensure_file_downloaded`` finds it and never reaches
out) and our air-gapped mirror (``<mirror>/<benchmark>/<upstream file name>``). Neither side samples: the slice
is smaller than both sides' instance caps, so the same items are evaluated (a custom benchmark's case,
``Case.custom``, has its YAML and the files it names copied into the work folder, both sides' working directory,
its CSV cut to the slice), and items pair by position (HELM's
``id<i>`` in file order, our records in position order; a mismatch shows as a reference difference). One
``MockOpenAIServer`` answers both, with ``KeyedAnswers``: each request is answered by a hash of the item its
prompt names (a passage of the item both layouts carry), so a different prompt layout still gets the same
completion and the metrics compare on the same answers. Both sides read one prod_env (an OpenAI-compatible
deployment whose base_url is the mock, the key in credentials.conf); helm-run runs in crfm-helm's own venv as
its own process, ``medhelm run`` as its own process of this interpreter. Given an ``Engine`` (a real
OpenAI-compatible server, e.g. vLLM at temperature 0), it answers both sides instead: the prod_env names it through
HELM's ``VLLMChatClient``, a ``FaultProxy`` in front of it keeps each body as it arrived, and each side sends one
request at a time; ``KeyedAnswers`` then only pairs each request with its item.

What is compared, per instance: the request as it reached the server (the prompt text byte for byte, the
messages, max tokens, stop sequences, temperature, every other body field; a prompt that is not byte-equal is
a difference no case may explain), for a jury benchmark each judge's request (its prompt byte for byte, every
other field) and the verdicts as parsed (none of which a case may explain either), the references (text and
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

import json
import math
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medhelm.devtools.helm_diff_cases import (  # noqa: F401  (the harness's public names, in one place)
    CASES, DEPLOYMENT, JUDGES, MEDCALC_HELM_UNKNOWN_CATEGORIES, MODEL, SYNTHETIC_DATA, Case, jury_verdict, select)
from medhelm.devtools.fault_proxy import FaultProxy
from medhelm.devtools.helm_diff_sides import (  # noqa: F401
    HELM_VERSION, RUN_PACKAGES, DiffError, Engine, HelmRun, Side, attach_wire, case_deps, ensure_run_deps,
    read_helm, read_ours, run_helm_all, run_ours_all, write_prod_env)
from medhelm.devtools.mock_openai import KeyedAnswers, MockOpenAIServer

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
            roles = tuple([m.get("role") for m in body.get("messages") or []] for body in (hw, ow))
            fields = _other_fields(hw, ow)
            row.add("request", not fields and roles[0] == roles[1],
                    f"{where}: {fields}" + ("" if roles[0] == roles[1] else f" roles {roles}"))
        if case.jury:
            _compare_jury(row, where, helm, ours, i)
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
    row.explained = {k: why for k, why in case.known.items() if k in row.differences and k != "prompt"}
    if "metrics not excused" in row.differences:  # then the aggregates' difference is not only the known one
        row.explained = {k: v for k, v in row.explained.items() if k not in ("aggregate", "main")}
    row.vanished = sorted(k for k in case.known if k not in row.differences)
    return row


def _compare_jury(row: Row, where: str, helm: Side, ours: Side, i: int) -> None:
    """The judges asked, each judge's request (prompt byte for byte, other fields), the verdicts as parsed."""
    hj = helm.judge_wire[i] if i < len(helm.judge_wire) else {}
    oj = ours.judge_wire[i] if i < len(ours.judge_wire) else {}
    row.add("judges", sorted(hj) == sorted(oj), f"{where}: HELM asked {sorted(hj)}, medhelm {sorted(oj)}")
    for judge in sorted(set(hj) & set(oj)):
        hp, op = _prompt(hj[judge]), _prompt(oj[judge])
        row.add("judge prompt", hp == op, f"{where} {judge}: {_first_difference(hp, op)}")
        fields = _other_fields(hj[judge], oj[judge])
        row.add("judge request", not fields, f"{where} {judge}: {fields}")
    hv, ov = helm.verdicts[i], ours.verdicts[i]
    row.add("verdicts", hv == ov, f"{where}: only HELM {sorted(hv - ov)}, only medhelm {sorted(ov - hv)}")


# never a known difference
JUDGE_KINDS_EQUAL = ("judges", "judge prompt", "judge request", "verdicts")


def judge_requests_unequal(row: Row) -> dict[str, str]:
    """The jury kinds that are not equal on every request compared (the judges asked, each judge's prompt byte for
    byte and every other field of its request, the verdicts): a jury benchmark's judges are asked what HELM's
    annotator asks them (``builtin_prompts: helm``, docs/jury.md), so none of these may differ or be explained
    away."""
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


def slice_path(case: Case, shared_data: Path) -> Path:
    """Where the case's slice is read: the shared data folder, or the invented slices' folder."""
    return (SYNTHETIC_DATA if case.synthetic else shared_data) / case.shared


def prepare(case: Case, shared_data: Path, work: Path, limit: int | None) -> list[Any] | None:
    """The slice written for both sides; None when the benchmark's data is not on this machine."""
    if case.custom is not None:
        return _prepare_custom(case, work, limit)
    source = slice_path(case, shared_data)
    if not source.exists():
        return None
    items = case.read(source)
    items = items[:limit] if limit else items
    targets = [(work / "mirror" / case.mirror, None)]
    scenario = work / "helm/scenarios" / (case.helm_folder or case.name)
    targets += [(scenario / name, text) for name, text in case.helm_files]
    for target, text in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            case.write(items, target)
        else:
            target.write_text(text, encoding="utf-8")
    return items


def _prepare_custom(case: Case, work: Path, limit: int | None) -> list[Any] | None:
    """A custom benchmark's files copied into the work folder, both sides' working directory (HELM reads the
    files its YAML names from there), its CSV cut to the slice."""
    assert case.custom is not None
    if not case.custom.is_file():
        return None
    doc = yaml.safe_load(case.custom.read_text(encoding="utf-8"))
    judge_prompts = [m["prompt_file"] for m in doc["metrics"] if isinstance(m, dict) and "prompt_file" in m]
    (work / "mirror").mkdir(parents=True, exist_ok=True)  # ours reads no mirror: an empty one
    for name in (case.custom.name, doc["prompt_file"], *judge_prompts):
        shutil.copyfile(case.custom.parent / name, work / name)
    items = case.read(case.custom.parent / doc["dataset_file"])
    items = items[:limit] if limit else items
    case.write(items, work / doc["dataset_file"])
    return items


def run_case(case: Case, helm: HelmRun, shared_data: Path, work: Path, limit: int | None, seed: int = 0,
             engine: Engine | None = None) -> Row:
    return run_together([case], helm, shared_data, work, limit, seed, engine)[0]


def run_together(cases: Sequence[Case], helm: HelmRun, shared_data: Path, work: Path, limit: int | None,
                 seed: int = 0, engine: Engine | None = None) -> list[Row]:
    """The cases in one folder, run by one ``helm-run`` and one ``medhelm run`` (each side's start-up paid once),
    one mock answering every case's items (their keys are distinct passages); one Row per case, in order. The
    jury cases must share one rubric's criteria (the judges' keyed verdicts). With ``engine``, a real server answers
    instead, reached through a ``FaultProxy`` injecting nothing, which keeps every body as it arrived; the sides
    run one after the other, each sending one request at a time, so the engine answers each request alone (the
    mock's table then only pairs each request with its item)."""
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, Row] = {}
    slices: dict[str, tuple[Case, list[Any], list[str]]] = {}
    for case in cases:
        items = prepare(case, shared_data, work, limit)
        if items is None:
            rows[case.name] = Row(case.name, skipped=f"no data at {slice_path(case, shared_data)}")
            continue
        # an item neither side evaluates (no reference, an image question) names no key: it stays in the files only
        items = [item for item in items if case.key(item)]
        slices[case.name] = (case, items, [case.key(item) for item in items])
    run = [case for case, _, _ in slices.values()]
    criteria = {case.jury for case in run if case.jury}
    if len(criteria) > 1:
        raise ValueError(f"cases run together must share one rubric's criteria, not {sorted(criteria)}")
    if run:
        responder = KeyedAnswers({k: case.answers(item) for case, items, keys in slices.values()
                                  for k, item in zip(keys, items)}, seed=seed,
                                 judge=jury_verdict(criteria.pop()) if criteria else None)
        count = max(len(items) for _, items, _ in slices.values())
        if engine is None:
            with MockOpenAIServer(responder) as server:
                write_prod_env(work / "prod_env", server.base_url)
                helm_dirs = run_helm_all(helm, run, work, count)
                helm_bodies = list(server.requests)
                server.reset()
                our_dirs = run_ours_all(run, work)
                our_bodies = list(server.requests)
        else:
            with FaultProxy(engine.base_url) as proxy:
                write_prod_env(work / "prod_env", proxy.base_url, engine)
                helm_dirs = run_helm_all(helm, run, work, count)
                helm_bodies = [json.loads(raw) for raw in proxy.received]
                proxy.reset()
                our_dirs = run_ours_all(run, work, concurrency=1)
                our_bodies = [json.loads(raw) for raw in proxy.received]
        candidate = engine.candidate if engine else MODEL.split("/", 1)[1]
        for case, items, keys in slices.values():
            helm_side = read_helm(helm_dirs[case.name], case.run_entry if case.jury else "", case.split)
            our_side = read_ours(our_dirs[case.name], case.split)
            attach_wire(helm_side, helm_bodies, responder, keys, candidate)
            attach_wire(our_side, our_bodies, responder, keys, candidate)
            rows[case.name] = compare(case, helm_side, our_side, items)
    return [rows[case.name] for case in cases]


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
            jury = " / ".join(r.cell(k) for k in JUDGE_KINDS_EQUAL) if "judges" in r.total else "—"
            why = "all" if not r.unexplained() else "**no**: " + ", ".join(sorted(r.unexplained()))
            if r.explained:
                why += " (" + "; ".join(f"{k}: see docs/metrics.md" for k in sorted(r.explained)) + ")"
            lines.append(f"| `{r.benchmark}` | {r.instances} | {r.cell('prompt')} | {r.cell('request')} | "
                         f"{r.cell('references')} | {r.cell('completion')} | {r.cell('metrics')} | "
                         f"{r.cell('aggregate')} | {main} | {jury} | {why} |")
        return "\n".join(lines)


def run_differential(cases: Iterable[Case], helm: HelmRun, shared_data: Path, work: Path,
                     limit: int | None = None) -> Report:
    return Report([run_case(c, helm, shared_data, work / c.name, limit) for c in cases])
