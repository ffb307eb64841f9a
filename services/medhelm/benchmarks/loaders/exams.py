"""Exam-style multiple choice: HeadQA, Medbullets, MedQA (USMLE 4 options), MedMCQA."""

from __future__ import annotations

from collections.abc import Iterator

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import fetch_all
from medhelm.benchmarks.loaders.instances import choice_instance
from medhelm.benchmarks.loaders.readers import read_arrow_table, read_csv, read_jsonl
from medhelm.errors import ConfigError
from medhelm.specs import Instance

LETTERS = "ABCDE"


def load_head_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """English test split; questions that need an image are skipped (as upstream: text-only benchmark)."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for row in read_arrow_table(path, ("qid", "qtext", "ra", "answers", "category")):
        if row.get("image"):
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
    for line, row in enumerate(read_csv(path, columns), 2):
        letter = str(row["answer_idx"]).strip().upper()
        if letter not in LETTERS:
            raise ConfigError("column 'answer_idx' must be a letter A-E", path=path, line=line)
        options = [row[c] for c in ("opa", "opb", "opc", "opd", "ope")]
        yield choice_instance(f"medbullets-{line - 1}", row["question"], options, LETTERS.index(letter))


def load_med_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """USMLE 4-option test split only (upstream also sampled the dev split into the evaluation)."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for n, row in enumerate(read_jsonl(path, ("question", "options", "answer_idx"))):
        options = row["options"]
        if not isinstance(options, dict) or row["answer_idx"] not in options:
            raise ConfigError(f"record {n + 1}: 'answer_idx' must be a key of 'options'", path=path)
        keys = sorted(options)
        yield choice_instance(f"medqa-test-{n}", row["question"], [options[k] for k in keys],
                              keys.index(row["answer_idx"]))


def load_med_mcqa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """The dev file (``dev.json``, JSON Lines) is the evaluation split (``valid``), as upstream."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for n, row in enumerate(read_jsonl(path, ("id", "question", "opa", "opb", "opc", "opd", "cop"))):
        try:
            correct = int(row["cop"]) - 1  # 1-based in the data
        except (TypeError, ValueError):
            correct = -1
        if not 0 <= correct < 4:
            raise ConfigError(f"record {n + 1}: 'cop' must be 1-4", path=path)
        yield choice_instance(row["id"], row["question"], [row[c] for c in ("opa", "opb", "opc", "opd")], correct,
                              split="valid", extra={"subject": row.get("subject_name", "")})
