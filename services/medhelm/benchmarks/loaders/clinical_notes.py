"""ACI-Bench (dialogue -> note) and the two MTSamples benchmarks (notes -> plan)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import RemoteFile, download, fetch_all, mirror_candidates
from medhelm.benchmarks.loaders.instances import text_instance
from medhelm.benchmarks.loaders.readers import clean_text, note_skipped, read_json
from medhelm.errors import ConfigError, DataUnavailable
from medhelm.specs import Instance


def load_aci_bench(ctx: LoadContext, entry) -> Iterator[Instance]:
    """The three ACI-Bench test files (``subset=`` picks one); the train file is not needed (zero-shot)."""
    subset = ctx.args.get("subset", "all")
    files = [f for f in entry.remote if subset == "all" or f.name.startswith(subset)]
    for remote, path in zip(files, fetch_all(ctx, entry.folder, files)):
        doc = read_json(path)
        records = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(records, list):
            raise ConfigError("expected {\"data\": [{\"src\", \"tgt\", \"file\"}, ...]}", path=path)
        stem = remote.name.removesuffix("_full.json")
        for n, rec in enumerate(records):
            if not isinstance(rec, dict) or not rec.get("src") or not rec.get("tgt"):
                raise ConfigError(f"record {n}: expected non-empty 'src' and 'tgt'", path=path)
            yield text_instance(f"{stem}:{rec.get('file', n)}", rec["tgt"], context=rec["src"])


# MTSamples: the reference is the first line after the first present section header, preferring PLAN;
# the input is the text *before* that section (upstream removed only PLAN, leaking SUMMARY/FINDINGS
# references into the input, and matched headers case-insensitively but split case-sensitively).
SECTIONS = ("PLAN", "SUMMARY", "FINDINGS")


def split_note(text: str) -> tuple[str, str] | None:
    for section in SECTIONS:
        m = re.search(rf"\b{section}\s*:", text, re.I)
        if m:
            reference = text[m.end():].lstrip(" \t").split("\n", 1)[0].strip()
            if reference:
                return text[:m.start()].strip(), reference
    return None


# Upstream's GitHub contents-API listing returned at most this many entries of the folder, in name order.
UPSTREAM_LISTING_CAP = 1000


def split_note_as_upstream(text: str, cut_any: bool = False) -> tuple[str, str] | None:
    """Upstream's selection (``MTSamplesReplicateScenario``): a header is looked for in the upper-cased text
    but split on in the text as written, so a note with ``Plan:``/``Summary:``/``Findings:`` and no upper-case
    twin raised and was skipped; a header found with nothing after it on its line gives no reference; PLAN is
    preferred to SUMMARY to FINDINGS. The reference is upstream's; the input stops before that section (as
    ``split_note``: upstream's replicate scenario kept a SUMMARY/FINDINGS reference in the input), or with
    ``cut_any`` (``MTSamplesProceduresScenario``'s rule) before the first of the three headers written in upper
    case, whichever is the reference."""
    text = text.strip()
    upper = text.upper()
    found: dict[str, str] = {}
    for section in SECTIONS:
        header = f"{section}:"
        if header in upper:
            if header not in text:
                return None  # upstream: IndexError, the note printed as an error and skipped
            found[section] = text.split(header, 1)[1].split("\n", 1)[0].strip()
    section = next((s for s in SECTIONS if found.get(s)), None)
    if section is None:
        return None
    before = text[:text.index(f"{section}:")].strip()
    if cut_any:
        before = text[:min(text.index(f"{s}:") for s in SECTIONS if f"{s}:" in text)].strip()
    # a note opening with its section: upstream's input was the note up to PLAN (or all of it)
    return (before or text.split("PLAN:")[0].strip() or text), found[section]


def load_mtsamples(ctx: LoadContext, entry) -> Iterator[Instance]:
    files = _mtsamples_files(ctx, entry)
    split = split_note
    if ctx.args.get("instance_set") == "leaderboard":
        note_skipped(files[0].parent if files else Path("."), max(0, len(files) - UPSTREAM_LISTING_CAP), "note",
                     "past the first 1,000 files upstream's listing returned")
        files = files[:UPSTREAM_LISTING_CAP]
        split = partial(split_note_as_upstream, cut_any=entry.options.get("input_cut") == "any_section")
    skipped = 0
    for path in files:
        parsed = split(clean_text(path.read_text(encoding="utf-8-sig", errors="replace")))
        if parsed is None or not parsed[0]:
            skipped += 1  # a note without PLAN/SUMMARY/FINDINGS has no reference: not part of the benchmark
            continue
        note, reference = parsed
        yield text_instance(path.stem, reference, context=note)
    if files:
        note_skipped(files[0].parent, skipped, "note", "no PLAN, SUMMARY or FINDINGS section: no reference"
                     if split is split_note else "no reference by upstream's rule")


def _mtsamples_files(ctx: LoadContext, entry) -> list[Path]:
    """The ``*.txt`` notes: from the mirror folder, else the cache, else the pinned GitHub listing."""
    folder = entry.folder
    for cand in mirror_candidates(ctx, folder, str(entry.options["directory"])):
        if cand.is_dir() and any(cand.glob("*.txt")):
            return sorted(cand.glob("*.txt"))
    cache = Path(ctx.cache_dir) / folder / str(entry.options["directory"])
    done = cache / ".complete"
    if done.is_file():
        return sorted(cache.glob("*.txt"))
    (listing,) = entry.remote
    if ctx.offline:
        where = f"{Path(ctx.data_dir) / folder}" if ctx.data_dir else "a --data-dir / MEDHELM_DATA_DIR mirror"
        raise DataUnavailable(f"{entry.name}: data not available offline; copy the folder "
                              f"{entry.options['directory']}/ (*.txt, from {entry.source}) into {where}")
    names = _list_txt(ctx, folder, listing, str(entry.options["directory"]))
    import httpx

    with httpx.Client() as client:  # one connection pool and TLS context for hundreds of small files
        for name in names:
            download(ctx, f"{folder}/{entry.options['directory']}",
                     RemoteFile(f"{entry.options['raw_base']}/{_quote(name)}", name), client)
    cache.mkdir(parents=True, exist_ok=True)
    done.write_text(str(len(names)))
    return sorted(cache.glob("*.txt"))


def _list_txt(ctx: LoadContext, folder: str, listing: RemoteFile, directory: str) -> list[str]:
    """Every ``*.txt`` of ``directory`` from the pinned commit's git tree. (Upstream listed the folder with
    the GitHub *contents* API, which returns at most 1,000 entries, so a download saw fewer notes than a
    mirror of the folder; the tree API lists them all, so download and mirror hold the same instances.)"""
    path = download(ctx, folder, listing)
    doc = read_json(path)
    tree = doc.get("tree") if isinstance(doc, dict) else None
    if not isinstance(tree, list):
        raise DataUnavailable(f"unexpected GitHub tree listing at {listing.url}")
    if doc.get("truncated"):
        raise DataUnavailable(f"the GitHub tree listing at {listing.url} is truncated; mirror the folder "
                              f"{directory}/ instead (--data-dir)")
    prefix = f"{directory}/"
    return sorted(str(i["path"])[len(prefix):] for i in tree
                  if isinstance(i, dict) and i.get("type") == "blob" and str(i.get("path", "")).startswith(prefix)
                  and str(i["path"]).endswith(".txt") and "/" not in str(i["path"])[len(prefix):])


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name)
