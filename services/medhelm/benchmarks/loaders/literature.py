"""PubMedQA (PQA-L), MedHallu and MEDEC: public files, pinned."""

from __future__ import annotations

from collections.abc import Iterator

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import fetch_all
from medhelm.benchmarks.loaders.instances import choice_instance, text_instance
from medhelm.benchmarks.loaders.readers import read_arrow_table, read_csv, read_json
from medhelm.errors import ConfigError
from medhelm.specs import Instance

PUBMEDQA_ANSWERS = ("yes", "no", "maybe")


def load_pubmed_qa(ctx: LoadContext, entry) -> Iterator[Instance]:
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    data = read_json(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object keyed by PubMed id", path=path)
    for pmid, item in data.items():
        try:
            contexts, labels = item["CONTEXTS"], item["LABELS"]
            answer = item["final_decision"]
            question = item["QUESTION"]
        except (KeyError, TypeError):
            raise ConfigError(f"item {pmid}: expected QUESTION, CONTEXTS, LABELS, final_decision", path=path) from None
        if answer not in PUBMEDQA_ANSWERS or len(contexts) != len(labels):
            raise ConfigError(f"item {pmid}: bad final_decision or CONTEXTS/LABELS length", path=path)
        # "<Label>. <context>" per abstract section, as Liévin et al. and upstream HELM
        context = "\n".join(f"{lab.title()}. {txt}" for lab, txt in zip(labels, contexts))
        yield choice_instance(pmid, question, PUBMEDQA_ANSWERS, PUBMEDQA_ANSWERS.index(answer), context=context,
                              extra={"long_answer": item.get("LONG_ANSWER", "")})


MEDHALLU_COLUMNS = ("Question", "Knowledge", "Ground Truth", "Hallucinated Answer")


def load_medhallu(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Each row gives two instances: the ground-truth answer (label 0) and the hallucinated one (label 1).
    The input is upstream's: ``World Knowledge: ...``, ``Question: ...``, ``Answer: ...``, the knowledge (a list
    of passages in the dataset) written as upstream's f-string writes it, Python's ``str`` of the list."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for i, row in enumerate(read_arrow_table(path, MEDHALLU_COLUMNS)):
        knowledge = row["Knowledge"]
        if isinstance(knowledge, tuple):
            knowledge = list(knowledge)
        for kind, answer, label in (("truth", row["Ground Truth"], "0"), ("hallucinated", row["Hallucinated Answer"], "1")):
            yield text_instance(f"{i}-{kind}", label, context=str(knowledge),
                                question=f"Question: {row['Question']}\n\nAnswer: {answer}")


MEDEC_COLUMNS = ("Text ID", "Sentences", "Error Flag", "Error Sentence ID", "Corrected Sentence")


def load_medec(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Reference: ``CORRECT`` or ``"<sentence id> <corrected sentence>"``; the parts are kept in extra too.
    The official test file ends with 328 rows of empty fields and uses CRLF: the reader skips (and counts)
    the former and turns the latter into ``\\n``, as upstream (pandas) did (597 instances)."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for line, row in read_csv(path, MEDEC_COLUMNS).numbered():
        sentences = row["Sentences"].strip()
        flag = row["Error Flag"].strip()
        sid = row["Error Sentence ID"].strip()
        if not sentences:
            raise ConfigError("empty value", path=path, line=line, field="Sentences")
        if flag not in ("0", "1"):
            raise ConfigError("must be 0 or 1", path=path, line=line, field="Error Flag")
        if flag == "1" and not sid.lstrip("-").isdigit():
            raise ConfigError("must be an integer when 'Error Flag' is 1", path=path, line=line,
                              field="Error Sentence ID")
        corrected = row["Corrected Sentence"].strip()
        reference = f"{sid} {corrected}" if flag == "1" else "CORRECT"
        yield text_instance(row["Text ID"].strip(), reference, context=sentences, extra={
            "error_flag": int(flag), "error_sentence_id": int(sid) if flag == "1" else -1,
            "corrected_sentence": corrected if flag == "1" else "", "error_type": row.get("Error Type", ""),
        })
