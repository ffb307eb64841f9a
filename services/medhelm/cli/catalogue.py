"""`medhelm list` (the catalogue by category -> subcategory, with access level and data availability here)
and `medhelm describe NAME`."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.catalogue import CatalogueEntry, all_entries, get_entry
from medhelm.benchmarks.entry import PROMPT_PATH
from medhelm.benchmarks.loaders.fetch import find_local, mirror_candidates
from medhelm.cards import BY_NAME
from medhelm.specs import Access
from medhelm.taxonomy import TAXONOMY


def _where(p: argparse.ArgumentParser) -> None:
    env = os.environ.get("MEDHELM_DATA_DIR")
    p.add_argument("--data-dir", type=Path, default=Path(env) if env else None,
                   help="local mirror of benchmark files (env MEDHELM_DATA_DIR)")
    p.add_argument("-o", "--output-path", type=Path, default=Path("benchmark_output"),
                   help="results root; downloads are cached in <output-path>/scenarios (default: %(default)s)")


def add_list_arguments(p: argparse.ArgumentParser) -> None:
    _where(p)
    p.add_argument("--access", choices=[a.value for a in Access], help="only this access level")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_describe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="benchmark run-entry name, e.g. medcalc_bench")
    _where(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def availability(entry: CatalogueEntry, ctx: LoadContext) -> str:
    """'mirror' | 'cached' | 'download' | 'data_path' — where this benchmark's data would come from here."""
    if entry.access is not Access.PUBLIC:
        return "data_path"
    directory = entry.options.get("directory")
    if directory:  # a folder of notes (MTSamples)
        if any(c.is_dir() for c in mirror_candidates(ctx, entry.folder, str(directory))):
            return "mirror"
        return "cached" if (Path(ctx.cache_dir) / entry.folder / str(directory) / ".complete").is_file() else "download"
    if entry.name == "med_dialog":  # one folder per subset
        found = [find_local(ctx, f"{entry.folder}/{f.url.split('/')[-2]}", f) for f in entry.remote]
    else:
        found = [find_local(ctx, entry.folder, f) for f in entry.remote]
    if all(found):
        mirror = ctx.data_dir is not None and all(Path(ctx.data_dir) in p.parents for p in found if p)
        return "mirror" if mirror else "cached"
    return "download"


def _ctx(args: argparse.Namespace) -> LoadContext:
    return LoadContext(data_dir=args.data_dir, cache_dir=Path(args.output_path) / "scenarios")


def main_list(args: argparse.Namespace) -> int:
    ctx = _ctx(args)
    entries = [e for e in all_entries() if args.access in (None, e.access.value)]
    if args.json:
        print(json.dumps([{**e.spec({}).to_json(), "data": availability(e, ctx)} for e in entries], indent=2))
        return 0
    for category, subcategories in TAXONOMY.items():
        in_cat = [e for e in entries if e.category == category]
        if not in_cat:
            continue
        print(category)
        for sub in subcategories:
            rows = [e for e in in_cat if e.subcategory == sub]
            if not rows:
                continue
            print(f"  {sub}")
            for e in rows:
                print(f"    {e.name:<28} {e.display_name:<22} {e.access.value:<8} {e.task_type.value:<16} "
                      f"{availability(e, ctx)}")
    counts = {a.value: sum(e.access is a for e in entries) for a in Access}
    print(f"\n{len(entries)} benchmarks ({', '.join(f'{n} {a}' for a, n in counts.items())}). Data column: mirror = "
          f"in --data-dir, cached = downloaded before, download = fetched on first run, data_path = bring your own.")
    return 0


def main_describe(args: argparse.Namespace) -> int:
    entry = get_entry(args.name)
    ctx = _ctx(args)
    spec = entry.spec({})
    if args.json:
        print(json.dumps({**spec.to_json(), "args": [a.__dict__ for a in entry.args],
                          "data": availability(entry, ctx), "mirror_files": _mirror_files(entry),
                          "expected": entry.expected, "access_note": entry.access_note,
                          "expected_instances": entry.counts.to_json(), "left_out": entry.left_out,
                          "count_note": entry.count_note,
                          "instance_sets": [s.__dict__ for s in entry.instance_sets]},
                         indent=2, default=list))
        return 0
    wrap = lambda s: textwrap.fill(s, 100, initial_indent="  ", subsequent_indent="  ")  # noqa: E731
    print(f"{entry.display_name} ({entry.name})\n")
    print(wrap(entry.description) + "\n")
    print(f"  category      {entry.category} -> {entry.subcategory}")
    print(f"  access        {entry.access.value}")
    print(f"  task type     {entry.task_type.value}, max {entry.max_tokens} output tokens")
    beside = BY_NAME[entry.name].beside if entry.name in BY_NAME else ()
    print(f"  metrics       {', '.join(m.name for m in spec.metrics)} (leaderboard column: {spec.main_metric}, "
          f"split {spec.main_split}" + (f"; beside it: {', '.join(beside)}" if beside else "") + ")")
    print(f"  source        {entry.source}")
    print(f"  instances     {_counts(entry)}")
    if entry.left_out:
        print(wrap_field("left out", entry.left_out))
    for a in entry.args + (PROMPT_PATH,):
        extra = f" one of {', '.join(a.choices)}" if a.choices else ""
        need = "required" if a.required else f"default {a.default}" if a.default else "optional"
        print(f"  arg           {a.name}= ({need}) {a.help}{';' + extra if extra else ''}")
    if entry.access is Access.PUBLIC:
        print(f"  data here     {availability(entry, ctx)}")
        print("  mirror files  " + "\n                ".join(_mirror_files(entry)))
    else:
        print(f"  data_path     {entry.expected}")
        print(f"  access        {entry.access_note}")
    print(f"\n  example       medhelm run --run-entries '{_example(entry)}' --max-eval-instances 10")
    return 0


def _counts(entry: CatalogueEntry) -> str:
    """The instance count of the full published data (what `medhelm validate` compares with)."""
    if not entry.counts:
        if entry.access is not Access.PUBLIC:
            return "not stated (depends on your release of the data; `medhelm validate` prints what it loaded)"
        return f"not known here: {entry.count_note}; `medhelm validate` prints what it loaded"
    default = entry.counts.get("")
    per_arg = [f"{k}: {v:,}" for k, v in entry.counts.items() if k]
    parts = ([f"{default:,}"] if default is not None else []) + per_arg
    other = f"; other sets not known here: {entry.count_note}" if entry.count_note else ""
    what = "per instance set" if entry.instance_sets else "full published data"
    return "; ".join(parts) + f" ({what}; `medhelm validate` compares){other}"


def wrap_field(label: str, text: str) -> str:
    return textwrap.fill(text, 100, initial_indent=f"  {label:<14}", subsequent_indent=" " * 16)


def _mirror_files(entry: CatalogueEntry) -> list[str]:
    if entry.options.get("directory"):
        return [f"<data-dir>/{entry.folder}/{entry.options['directory']}/*.txt"]
    if entry.name == "med_dialog":
        return [f"<data-dir>/{entry.folder}/{f.url.split('/')[-2]}/{f.name}" for f in entry.remote]
    return [f"<data-dir>/{entry.folder}/{f.name}" for f in entry.remote]


def _example(entry: CatalogueEntry) -> str:
    parts = []
    for a in entry.args:
        if a.required:
            parts.append(f"{a.name}={a.choices[0] if a.choices else '/path/to/data'}")
    parts.append("model=local/smollm2-135m-instruct")
    return f"{entry.name}:{','.join(parts)}"
