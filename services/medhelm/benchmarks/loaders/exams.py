"""Exam-style multiple choice: HeadQA, Medbullets, MedQA (USMLE 4 options), MedMCQA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import RemoteFile, fetch_all
from medhelm.benchmarks.loaders.instances import choice_instance, helm_draw
from medhelm.benchmarks.loaders.readers import read_arrow_table, read_csv, read_jsonl
from medhelm.errors import ConfigError
from medhelm.specs import Instance

LETTERS = "ABCDE"


HEAD_QA_LANGUAGES = ("en", "es")
HEAD_QA_CATEGORIES = ("biology", "chemistry", "medicine", "nursing", "pharmacology", "psychology")


def head_qa_files(entry, language: str) -> tuple[RemoteFile, ...]:
    """The test parquet of one language config (upstream's ``language=``; English by default)."""
    (en,) = entry.remote
    if language == "en":
        return entry.remote
    return (RemoteFile(en.url.replace("/en/test/", f"/{language}/test/"), f"{language}/test/0000.parquet"),)


def load_head_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Test split of ``language=`` (en, es); ``category=`` keeps one exam category (``None`` = all, as
    upstream); questions that need an image are skipped (as upstream: text-only benchmark)."""
    language = str(ctx.args.get("language") or "en")
    category = ctx.args.get("category")
    category = None if category in (None, "", "None", "all") else str(category)
    (path,) = fetch_all(ctx, entry.folder, head_qa_files(entry, language))
    for row in read_arrow_table(path, ("qid", "qtext", "ra", "answers", "category")):
        if row.get("image"):
            continue
        if category is not None and row["category"] != category:
            continue
        answers = sorted(row["answers"], key=lambda a: int(a["aid"]))
        ids = [int(a["aid"]) for a in answers]
        if int(row["ra"]) not in ids:
            raise ConfigError(f"question {row['qid']}: right answer {row['ra']} is not among the options", path=path)
        yield choice_instance(f"{row.get('name', '')}-{row['qid']}", row["qtext"], [a["atext"] for a in answers],
                              ids.index(int(row["ra"])), extra={"category": row["category"]})


def load_medbullets(ctx: LoadContext, entry) -> Iterator[Instance]:
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    columns = ("question", "opa", "opb", "opc", "opd", "ope", "answer_idx")
    for line, row in read_csv(path, columns).numbered():
        letter = str(row["answer_idx"]).strip().upper()
        if letter not in LETTERS:
            raise ConfigError("must be a letter A-E", path=path, line=line, field="answer_idx")
        options = [row[c] for c in ("opa", "opb", "opc", "opd", "ope")]
        yield choice_instance(f"medbullets-{line - 1}", row["question"], options, LETTERS.index(letter))


def load_med_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """USMLE 4-option questions. ``instance_set=test`` (default): the whole test split. ``instance_set=leaderboard``:
    the test questions of HELM's seeded draw of 1,000 from dev + test (upstream's eval splits, read dev first as
    its ``ALL_SPLITS`` order), the 503 that reached the leaderboard's test column. 54 options of 45 questions end
    in a stray ``"`` (and a newline) in the published file (github.com/jind11/MedQA issue 5); each option is read
    as upstream reads it (``rstrip('"')`` then whitespace, so a quote before a trailing newline stays), lettered
    in the file's order of its keys, so the prompt is HELM's byte for byte."""
    if ctx.args.get("instance_set") == "leaderboard":
        dev, test = fetch_all(ctx, entry.folder, entry.remote)
        n_dev = len(read_jsonl(dev, ("question", "options", "answer_idx")))
        questions = list(_med_qa_questions(test))
        kept = {i - n_dev for i in helm_draw(n_dev + len(questions)) if i >= n_dev}
        yield from (q for n, q in enumerate(questions) if n in kept)
    else:
        yield from _med_qa_questions(fetch_all(ctx, entry.folder, entry.remote[1:])[0])


def _med_qa_questions(path: Path) -> Iterator[Instance]:
    table = read_jsonl(path, ("question", "options", "answer_idx"))
    for n, (line, row) in enumerate(table.numbered()):
        options = row["options"]
        if not isinstance(options, dict) or row["answer_idx"] not in options:
            raise ConfigError("must be a key of 'options'", path=path, line=line, field="answer_idx")
        keys = list(options)
        yield choice_instance(f"medqa-test-{n}", row["question"], [str(options[k]).rstrip('"').rstrip() for k in keys],
                              keys.index(row["answer_idx"]))


def load_med_mcqa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """The dev file (``dev.json``, JSON Lines) is the evaluation split (``valid``), as upstream."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for line, row in read_jsonl(path, ("id", "question", "opa", "opb", "opc", "opd", "cop")).numbered():
        try:
            correct = int(row["cop"]) - 1  # 1-based in the data
        except (TypeError, ValueError):
            correct = -1
        if not 0 <= correct < 4:
            raise ConfigError("must be 1-4", path=path, line=line, field="cop")
        yield choice_instance(row["id"], row["question"], [row[c] for c in ("opa", "opb", "opc", "opd")], correct,
                              split="valid", extra={"subject": row.get("subject_name", "")})
