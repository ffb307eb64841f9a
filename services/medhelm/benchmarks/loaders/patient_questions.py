"""Consumer-health QA (MedicationQA, MEDIQA), MedDialog summaries, and RaceBias (race-based medicine)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import RemoteFile, fetch_all
from medhelm.benchmarks.loaders.instances import choice_instance, text_instance
from medhelm.benchmarks.loaders.readers import (is_missing, note_skipped, read_arrow_table, read_docx_paragraphs,
                                                read_json, read_xlsx)
from medhelm.errors import ConfigError
from medhelm.specs import Instance


def load_medication_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Questions without an answer have no reference and are not part of the benchmark. "Without an answer"
    is what upstream's ``pandas.read_excel`` reads as missing: empty, and the NA spellings (the sheet has
    one ``n/a`` answer), which gives upstream's 689 instances. Question and answer are the cells' text as
    upstream reads them, spaces around them and ``\r\n`` kept: the question is the prompt's input and the judges'
    question, the answer their gold response."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for line, row in read_xlsx(path, ("Question", "Answer"), keep_cr=True).numbered():
        if is_missing(row["Answer"]):
            continue
        if is_missing(row["Question"]):
            raise ConfigError("an answer without a question", path=path, line=line, field="Question")
        yield text_instance(f"medicationqa-{line - 1}", str(row["Answer"]), question=str(row["Question"]))


def load_medi_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    """MEDIQA 2019 QA test questions; the reference is the answer ranked first by the experts. A question with
    no rank-1 answer (or an empty one) has no reference: skipped and counted. (Upstream kept it with an empty
    reference, which the judges then compared every answer with.)"""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    skipped = 0
    for row in read_arrow_table(path, ("QUESTION",)):
        q = row["QUESTION"] or {}
        answers = [a.get("Answer", a) for a in q.get("AnswerList") or []]
        best = [a for a in answers if str(a.get("ReferenceRank")) == "1"]
        if not best or not str(best[0].get("AnswerText") or "").strip():
            skipped += 1
            continue
        yield text_instance(str(q.get("QID")), best[0]["AnswerText"], question=str(q.get("QuestionText", "")))
    note_skipped(path, skipped, "question", "no answer ranked first: no reference")


def med_dialog_files(entry, subset: str) -> tuple[RemoteFile, ...]:
    return tuple(f for f in entry.remote if f"/{subset}/" in f.url)


def load_med_dialog(ctx: LoadContext, entry) -> Iterator[Instance]:
    subset = ctx.args["subset"]
    (path,) = fetch_all(ctx, f"{entry.folder}/{subset}", med_dialog_files(entry, subset))
    doc = read_json(path)
    records = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise ConfigError("expected {\"data\": [{\"src\", \"tgt\"}, ...]}", path=path)
    for n, rec in enumerate(records):
        if not isinstance(rec, dict) or "src" not in rec or "tgt" not in rec:
            raise ConfigError(f"record {n}: expected 'src' and 'tgt'", path=path)
        yield text_instance(f"{subset}-{rec.get('id', n)}", rec["tgt"], context=rec["src"])


# RaceBias: the supplement lists "Run N: <question>" paragraphs, each followed by a model's response;
# reviewers coloured problematic (harmful, inaccurate or race-based) content red. Parsed as upstream does:
# a paragraph starting "Run " with ": " opens a pair; every following paragraph (empty ones too) up to the
# next "Run " is the response, and the pair is labelled "yes" when any of its runs is pure red.


def load_race_based_med(ctx: LoadContext, entry) -> Iterator[Instance]:
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    blocks: list[dict[str, Any]] = []
    for para in read_docx_paragraphs(path):
        text = para.text.strip()
        if text.startswith("Run ") and ":" in text:
            question = text.split(": ", 1)
            blocks.append({"question": question[1].strip() if len(question) == 2 else None, "response": [],
                           "red": False})
        elif blocks:
            blocks[-1]["response"].append(text)
            blocks[-1]["red"] = blocks[-1]["red"] or para.has_red
    blocks = [b for b in blocks if b["question"] is not None]  # "Run 3:x" (no space) is not a pair upstream
    if not blocks:
        raise ConfigError("no 'Run N: <question>' paragraphs found", path=path)
    pairs = [(b["question"], "\n".join(b["response"]).strip(), b["red"]) for b in blocks]
    kept: dict[object, tuple[int, bool]] = {}  # key -> (first position, label)
    for n, (question, response, red) in enumerate(pairs, 1):
        # leaderboard: upstream keyed its pairs by their prompt (question + response), so a repeated pair counts
        # once, at its first position, with the label of its last occurrence; all: every pair of the supplement
        key = (question, response) if ctx.args.get("instance_set") == "leaderboard" else n
        kept[key] = (kept[key][0] if key in kept else n, red)
    note_skipped(path, len(pairs) - len(kept), "repeated question-response pair",
                 "counted once, as on MedHELM's leaderboard; instance_set=all keeps them")
    for n, red in kept.values():
        question, response, _ = pairs[n - 1]
        yield choice_instance(f"run-{n}", "", RACE_OPTIONS, 0 if red else 1,
                              context=f"Question: {question}\nResponse: {response}")


RACE_OPTIONS = ("yes", "no")
