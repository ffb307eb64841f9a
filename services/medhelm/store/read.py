"""Reading the store: what the dashboard, ``export`` and the tests ask of it.

Only pre-aggregated tables are read here, except ``instances_page``/``paired_instances`` (the
drill-down), which read one page of one run and refuse redacted rows. Those two take the ``Principal``
asking: below analyst, or a release restricted to other groups, is ``AccessDenied`` (and audited as
denied); otherwise the page's ids are written to the audit trail before the text is returned, and if
that write fails (``AuditError``) nothing is returned.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from medhelm.access import audit
from medhelm.access.roles import AccessDenied, Principal
from medhelm.errors import ConfigError, escape
from medhelm.store.backends import Store
from medhelm.store.sources import LEGACY_CHOICE_MARK, LEGACY_CHOICE_NAMES
from medhelm.store.tables import CellTable, Column


def resolve_release(store: Store, release: str | None) -> str:
    known = store.releases()
    if not known:
        raise ConfigError(f"the results store {store.url} holds no release yet; run `medhelm summarize`")
    if release is None:
        return known[0]
    if release not in known:
        raise ConfigError(f"unknown release '{release}' (known: {', '.join(known)})")
    return release


def meta(store: Store, release: str) -> dict[str, str]:
    return dict(store.query("SELECT key, value FROM meta WHERE release = ?", (release,)))


def benchmarks(store: Store, release: str) -> list[dict[str, Any]]:
    return store.query_dicts("SELECT * FROM benchmarks WHERE release = ? ORDER BY category, subcategory, benchmark",
                             (release,))


def models(store: Store, release: str) -> list[dict[str, Any]]:
    return store.query_dicts("SELECT * FROM models WHERE release = ? ORDER BY model, deployment", (release,))


def stored_leaderboard(store: Store, release: str) -> list[dict[str, Any]]:
    return store.query_dicts("SELECT * FROM leaderboard WHERE release = ? ORDER BY rank, model, deployment",
                             (release,))


def cells(store: Store, release: str) -> list[dict[str, Any]]:
    return store.query_dicts("SELECT release, benchmark, model, deployment, suites, value, ci_low, ci_high, "
                             "n_instances, n_unscored, n_runs FROM cells WHERE release = ? "
                             "ORDER BY benchmark, model, deployment", (release,))


def load_cells(store: Store, release: str) -> CellTable:
    """Every cell of the release with its bootstrap replicates, as arrays."""
    cols = [Column(b["benchmark"], b["display_name"] or b["benchmark"], b["category"] or "", b["subcategory"] or "",
                   b["access"] or "", bool(b["lower_is_better"])) for b in benchmarks(store, release)]
    rows = [(m, d) for m, d in store.query("SELECT model, deployment FROM models WHERE release = ? "
                                           "ORDER BY model, deployment", (release,))]
    replicates = _replicates(meta(store, release).get("replicates", "0"), len(rows) * len(cols), release)
    ci, ri = {c.benchmark: j for j, c in enumerate(cols)}, {r: i for i, r in enumerate(rows)}
    values = np.full((len(rows), len(cols)), np.nan)
    reps = np.full((replicates, len(rows), len(cols)), np.nan)
    lows, highs = np.full_like(values, np.nan), np.full_like(values, np.nan)
    for benchmark, model, dep, value, low, high, boot in store.query(
            "SELECT benchmark, model, deployment, value, ci_low, ci_high, boot FROM cells WHERE release = ?",
            (release,)):
        i, j = ri.get((model, dep)), ci.get(benchmark)
        if i is None or j is None or value is None:
            continue
        values[i, j] = value
        lows[i, j] = np.nan if low is None else low
        highs[i, j] = np.nan if high is None else high
        # float64 replicates (a group's interval is computed from them); 4 bytes each in stores written before
        if boot and len(boot) not in (8 * replicates, 4 * replicates):
            raise ConfigError(f"release '{release}': a cell's bootstrap replicates do not match meta.replicates "
                              f"(damaged store? re-run `medhelm summarize`)")
        reps[:, i, j] = (np.frombuffer(boot, dtype=np.float64 if len(boot) == 8 * replicates else np.float32)
                         if boot else value)
    return CellTable(tuple(rows), tuple(cols), values, reps, lows, highs)


MAX_REPLICATES = 100_000  # summarize's default is 1,000
MAX_REPLICATE_CELLS = 50_000_000  # replicates x models x benchmarks held at once (~400 MB of float64)


def _replicates(raw: object, cells: int, release: str) -> int:
    """meta.replicates, checked before it sizes an array: a store is data, and data can be hostile."""
    try:
        n = int(str(raw or "0"))
    except ValueError:
        raise ConfigError(f"release '{release}': meta.replicates is not a whole number (damaged store?)") from None
    if not 0 <= n <= MAX_REPLICATES or n * max(cells, 1) > MAX_REPLICATE_CELLS:
        raise ConfigError(f"release '{release}': meta.replicates = {n} is out of range (0 to {MAX_REPLICATES}, "
                          f"at most {MAX_REPLICATE_CELLS:,} replicate values in all); re-run `medhelm summarize`")
    return n


def legacy_names(store: Store, release: str) -> bool:
    """Whether the release was summarized before the multiple-choice columns were renamed: its ``exact_match``
    is then the lenient rule (today's ``lenient_match``) and its letter rule is ``exact_match_strict``."""
    return bool(store.query("SELECT 1 FROM run_stats WHERE release = ? AND stat = ? LIMIT 1",
                            (release, LEGACY_CHOICE_MARK)))


def column_values(store: Store, release: str, benchmark: str, stats: tuple[str, ...], split: str = "test"
                  ) -> dict[tuple[str, str], dict[str, float]]:
    """Per (model, deployment): each stat's mean over its runs' instances (``run_stats`` pooled: sum / count),
    in ``split`` (a run's only split when it has no ``split`` row) — the columns shown beside the main one,
    e.g. ``lenient_match`` beside ``exact_match``, upstream's ``aci_bench_accuracy`` beside
    ``jury_score_normalized``. A stat a run lacks (an import without our rule) is simply absent. In a release
    summarized before the rename the names are read as they were then (``legacy_names``)."""
    stored = {v: k for k, v in LEGACY_CHOICE_NAMES.items()} if legacy_names(store, release) else {}
    wanted = {stored.get(name, name): name for name in stats}
    rows = store.query(
        "SELECT r.model, r.deployment, r.suite, r.run_name, s.stat, s.split, s.sum, s.count FROM runs r "
        "JOIN run_stats s ON s.release = r.release AND s.suite = r.suite AND s.run_name = r.run_name "
        f"WHERE r.release = ? AND r.benchmark = ? AND s.stat IN ({', '.join('?' * len(wanted))})",
        (release, benchmark, *wanted)) if wanted else []
    per_run: dict[tuple, dict[str, tuple[float, float]]] = {}
    for model, dep, suite, run_name, stat, row_split, total, count in rows:
        per_run.setdefault((model, dep, suite, run_name, stat), {})[row_split] = (total or 0.0, count or 0)
    pooled: dict[tuple[str, str], dict[str, list[float]]] = {}
    for (model, dep, _, _, stat), splits in per_run.items():
        chosen = splits.get(split) or (next(iter(splits.values())) if len(splits) == 1 else None)
        if chosen and chosen[1]:
            acc = pooled.setdefault((model, dep), {}).setdefault(wanted[stat], [0.0, 0.0])
            acc[0] += chosen[0]
            acc[1] += chosen[1]
    return {row: {name: total / count for name, (total, count) in values.items()} for row, values in pooled.items()}


def runs(store: Store, release: str, benchmark: str) -> list[dict[str, Any]]:
    return store.query_dicts("SELECT run_id, suite, run_name, stratum, model, deployment, source, redacted, instances_done, "
                             "errors FROM runs WHERE release = ? AND benchmark = ? ORDER BY stratum, model, "
                             "deployment, suite", (release, benchmark))


def run_values(store: Store, run_id: int) -> tuple[list[str], np.ndarray]:
    """A run's instance ids and leaderboard values (NaN = unscored); empty in a redacted export. A crafted or
    damaged vector (ids and values of different lengths, a blob that is not float64s, ids that are not a JSON
    list) is a ConfigError naming the release and the run."""
    found = store.query("SELECT value_ids, value_blob, release, suite, run_name FROM runs WHERE run_id = ?",
                        (int(run_id),))
    if not found or found[0][0] is None:
        return [], np.empty(0)
    ids_json, blob, release, suite, run_name = found[0]
    where = _run_named(release, suite, run_name)
    ids = stored_json(ids_json, where, "instance ids")
    try:
        values = np.frombuffer(blob or b"", dtype=np.float64)
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: its stored values are not a vector of numbers ({len(blob or b'')} bytes); "
                          "re-run `medhelm summarize`") from None
    if not isinstance(ids, list) or len(ids) != len(values):
        count = len(ids) if isinstance(ids, list) else "no list of"
        raise ConfigError(f"{where}: its stored values hold {len(values)} numbers for {count} instance ids; "
                          "re-run `medhelm summarize`")
    return [str(i) for i in ids], values


def stored_json(text: str | bytes | None, where: str, what: str) -> Any:
    """A JSON column of the store (a record, stats, ids) decoded, or a ConfigError naming ``where`` and ``what``
    when it is not JSON or nested deeper than any record is (a crafted store): one line, never a traceback."""
    from medhelm.files import MAX_DEPTH, check_depth

    if not text:
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{where}: its stored {what} are nested too deeply (more than {MAX_DEPTH} levels); "
                          "re-run `medhelm summarize`") from None
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: its stored {what} are not JSON; re-run `medhelm summarize`") from None
    try:
        check_depth(value, where)
    except ConfigError:
        raise ConfigError(f"{where}: its stored {what} are nested too deeply (more than {MAX_DEPTH} levels); "
                          "re-run `medhelm summarize`") from None
    return value


def _run_named(release: str, suite: str, run_name: str) -> str:
    return f"release '{escape(release)}', run '{escape(suite)}/{escape(run_name, 200)}'"


def _where(store: Store, run_id: int) -> str:
    found = store.query("SELECT release, suite, run_name FROM runs WHERE run_id = ?", (int(run_id),))
    return _run_named(*found[0]) if found else f"run id {int(run_id)}"


def instances_page(store: Store, run_id: int, *, principal: Principal, offset: int = 0, limit: int = 20
                   ) -> list[dict[str, Any]]:
    """One page of a run's instances with text, judgements and per-metric values (refused when redacted,
    or when ``principal`` may not read the run's text; audited before it is returned)."""
    release = _guard(store, principal, [run_id], "view-instances")
    rows = store.query_dicts("SELECT instance_id, main_value, error, stats_json, record_json FROM instances "
                             "WHERE run_id = ? ORDER BY position, instance_id LIMIT ? OFFSET ?",
                             (int(run_id), int(limit), int(offset)))
    audit.record(store, principal, "view-instances", release=release, run_ids=[run_id],
                 instance_ids=[r["instance_id"] for r in rows], detail=f"offset={int(offset)} limit={int(limit)}")
    where = _where(store, run_id)
    return [_decoded(r, where) for r in rows]


def paired_instances(store: Store, left: int, right: int, *, principal: Principal, offset: int = 0,
                     limit: int = 20) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Two runs' answers to the same instances, side by side (joined on the instance id); guarded and
    audited as ``instances_page``."""
    release = _guard(store, principal, [left, right], "view-paired")
    rows = store.query(
        "SELECT a.instance_id, a.main_value, a.error, a.stats_json, a.record_json, "
        "b.instance_id, b.main_value, b.error, b.stats_json, b.record_json "
        "FROM instances a JOIN instances b ON b.run_id = ? AND b.instance_id = a.instance_id "
        "WHERE a.run_id = ? ORDER BY a.position, a.instance_id LIMIT ? OFFSET ?",
        (int(right), int(left), int(limit), int(offset)))
    audit.record(store, principal, "view-paired", release=release, run_ids=[left, right],
                 instance_ids=[r[0] for r in rows], detail=f"offset={int(offset)} limit={int(limit)}")
    keys = ("instance_id", "main_value", "error", "stats_json", "record_json")
    here, there = _where(store, left), _where(store, right)
    return [(_decoded(dict(zip(keys, r[:5])), here), _decoded(dict(zip(keys, r[5:])), there)) for r in rows]


def _guard(store: Store, principal: Principal, run_ids: list[int], action: str) -> str:
    """The runs' release, once ``principal`` may read their text (a refusal is audited as denied) and
    no run is redacted."""
    found = {}
    for run_id in run_ids:
        rows = store.query("SELECT release, redacted, suite, run_name FROM runs WHERE run_id = ?", (int(run_id),))
        if not rows:
            raise ConfigError(f"unknown run id {run_id}")
        found[run_id] = rows[0]
    releases = sorted({row[0] for row in found.values()})
    try:
        if len(releases) != 1:
            raise AccessDenied("runs of different releases cannot be shown together")
        principal.require_text(releases[0])
    except AccessDenied:
        try:
            audit.record(store, principal, "denied", release=releases[0], run_ids=run_ids, detail=action)
        except audit.AuditError:
            pass  # refused either way
        raise
    for _, redacted, suite, run_name in found.values():
        if redacted:
            raise RedactedError(f"run '{suite}/{run_name}' is redacted: aggregates only")
    return releases[0]


class RedactedError(ConfigError):
    """Instance text was asked for a redacted run."""


def _decoded(r: dict[str, Any], where: str) -> dict[str, Any]:
    """A stored instance as the drill-down shows it (text fields None when the source kept none); a record
    of another shape (crafted or damaged) is a ConfigError naming the release, the run and the instance."""
    place = f"{where}, instance '{escape(r['instance_id'], 120)}'"
    rec = stored_json(r.get("record_json"), place, "record") or {}
    stats = stored_json(r.get("stats_json"), place, "values") or (rec.get("stats") if isinstance(rec, dict) else {}) \
        or {}
    if not isinstance(rec, dict) or not isinstance(stats, dict):
        raise ConfigError(f"{place}: its stored record is not a record; re-run `medhelm summarize`")
    try:
        return _shown(r, rec, stats)
    except (AttributeError, TypeError, KeyError):
        raise ConfigError(f"{place}: its stored record is not in the shape a run writes; re-run `medhelm "
                          "summarize`") from None


def _shown(r: dict[str, Any], rec: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    completion = rec.get("completion") or {}
    prompt = rec.get("prompt") or {}
    if isinstance(stats, dict) and LEGACY_CHOICE_MARK in stats:  # a record written before the rename
        stats = {LEGACY_CHOICE_NAMES.get(k, k): v for k, v in stats.items()}
    return {"instance_id": r["instance_id"], "main_value": r["main_value"], "error": r["error"], "stats": stats,
            "input": (rec.get("instance") or {}).get("input"),
            "prompt": "\n\n".join(m["content"] for m in prompt.get("messages") or ()) if prompt else None,
            "output": completion.get("text"), "references": (rec.get("instance") or {}).get("references") or [],
            "judgements": rec.get("judgements") or []}
