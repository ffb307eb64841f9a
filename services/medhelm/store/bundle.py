"""``medhelm export``: a shareable bundle of one release — a results store (servable by
``medhelm serve --store``) plus CSV/JSON copies of the aggregate tables.

Redacted (``--redact``): aggregates only. No instances, no instance ids (private datasets may use
record numbers as ids), no run specs (they hold local data paths), no per-instance subgroup labels (the
subgroup scores and gaps, already small-cell suppressed, are kept: store/subgroups.py). Without it the bundle also
carries the instance records of runs that are not redacted — prompts and outputs, PHI for private
data — and the caller warns. Every export, redacted or not, is written to the source store's audit
trail (who, release, run ids) before the bundle is; if that fails (``AuditError``) no bundle is written.

The CSVs are formula-safe (``safecsv``: every field quoted, text starting with = + - @ tab CR prefixed
with '), so names and descriptions from data open in a spreadsheet as text. An existing bundle (folder
with files, or .zip) is never overwritten unless ``force``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from medhelm import safecsv
from medhelm.access import Principal, audit
from medhelm.errors import ConfigError
from medhelm.store.backends import Store
from medhelm.store.opening import open_store
from medhelm.store.subgroups import GAPS as SUBGROUP_GAPS
from medhelm.store.subgroups import SCORES as SUBGROUP_SCORES
from medhelm.store.subgroups import copy_release as copy_subgroups

# run_stats: every stat of every run (numbers only), so the columns shown beside the main one (lenient_match,
# upstream's <benchmark>_accuracy; docs/metrics.md) travel with the bundle
AGGREGATES = ("meta", "benchmarks", "cells", "models", "leaderboard", "group_scores", "run_stats")
CSV_TABLES = ("leaderboard", "cells", "group_scores", "models", "benchmarks", "run_stats")


@dataclass(frozen=True)
class BundleReport:
    path: Path
    release: str
    instances: int
    redacted: bool
    with_text: int = 0  # instances whose record (prompt, output) is in the bundle; imported HELM runs carry none


def write_bundle(source: Store, release: str, out: Path, *, redact: bool, principal: Principal | None = None,
                 force: bool = False) -> BundleReport:
    out = Path(out)
    as_zip = out.suffix == ".zip"
    folder = out.with_suffix("") if as_zip else out
    taken = [p for p in ((out,) if as_zip else ()) + (folder,)
             if p.is_file() or p.is_symlink() or (p.is_dir() and any(p.iterdir()))]
    if taken and not force:
        raise ConfigError("already exists; choose a new bundle path or pass --force to replace it", path=taken[0])
    for p in taken:
        if p.is_dir() and not p.is_symlink() and not (p / "manifest.json").is_file():
            # --force replaces a bundle, never some other folder
            raise ConfigError("exists and is not a bundle (no manifest.json); --force will not replace it", path=p)
    run_ids = [r[0] for r in source.query("SELECT run_id FROM runs WHERE release = ?", (release,))]
    audit.record(source, principal or Principal.local(source="cli"), "export-redacted" if redact else "export",
                 release=release, run_ids=run_ids, detail=f"bundle {out.name}")  # no audit row, no bundle
    for p in taken:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    instances = with_text = 0
    with open_store(folder / "results.sqlite", create=True) as target:
        with target.transaction():
            for table in AGGREGATES:
                _copy(source, target, table, "SELECT * FROM {t} WHERE release = ?", (release,))
            runs = source.query_dicts("SELECT * FROM runs WHERE release = ?", (release,))
            if redact:
                runs = [{**r, "spec_json": None, "value_ids": None, "value_blob": None} for r in runs]
                target.execute("UPDATE meta SET value = '1' WHERE release = ? AND key = 'redact'", (release,))
            _insert(target, "runs", runs)
            with_subgroups = copy_subgroups(source, target, release, labels=not redact)
            if not redact:
                for r in runs:
                    rows = source.query_dicts("SELECT * FROM instances WHERE run_id = ?", (r["run_id"],))
                    _insert(target, "instances", rows)
                    instances += len(rows)
                    with_text += sum(1 for row in rows if row.get("record_json"))
        for table in CSV_TABLES + ((SUBGROUP_SCORES, SUBGROUP_GAPS) if with_subgroups else ()):
            _write_csv(target, table, release, folder / f"{table}.csv")
    (folder / "manifest.json").write_text(json.dumps(
        {"release": release, "redacted": redact, "instances": instances, "files": sorted(
            p.name for p in folder.iterdir())}, indent=1) + "\n", encoding="utf-8")
    for leftover in folder.glob("results.sqlite-*"):  # WAL side files after a clean close
        leftover.unlink(missing_ok=True)
    if as_zip:
        shutil.make_archive(str(folder), "zip", root_dir=folder)
        shutil.rmtree(folder)
    return BundleReport(out, release, instances, redact, with_text)


def _copy(source: Store, target: Store, table: str, sql: str, params: tuple) -> None:
    _insert(target, table, source.query_dicts(sql.format(t=table), params))


def _insert(target: Store, table: str, rows: list[dict]) -> None:
    if rows:
        columns = list(rows[0])  # same schema on both sides
        target.insert_many(table, columns, [[r[c] for c in columns] for r in rows])


def _write_csv(store: Store, table: str, release: str, path: Path) -> None:
    rows = store.query_dicts(f"SELECT * FROM {table} WHERE release = ?", (release,))
    columns = [c for c in (rows[0] if rows else {}) if c != "boot"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = safecsv.writer(f)
        w.writerow(columns)
        w.writerows([[r[c] for c in columns] for r in rows])
