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
    """Each row gives two instances: the ground-truth answer (label 0) and the hallucinated one (label 1)."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for i, row in enumerate(read_arrow_table(path, MEDHALLU_COLUMNS)):
        knowledge = row["Knowledge"]
        if isinstance(knowledge, (list, tuple)):
            knowledge = "\n".join(map(str, knowledge))
        for kind, answer, label in (("truth", row["Ground Truth"], "0"), ("hallucinated", row["Hallucinated Answer"], "1")):
            yield text_instance(f"{i}-{kind}", label, context=str(knowledge),
                                question=f"Question: {row['Question']}\nAnswer: {answer}")


MEDEC_COLUMNS = ("Text ID", "Sentences", "Error Flag", "Error Sentence ID", "Corrected Sentence")


def load_medec(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Reference: ``CORRECT`` or ``"<sentence id> <corrected sentence>"``; the parts are kept in extra too."""
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for line, row in enumerate(read_csv(path, MEDEC_COLUMNS), 2):
        sentences = (row["Sentences"] or "").strip()
        flag = (row["Error Flag"] or "").strip()
        sid = (row["Error Sentence ID"] or "").strip()
        if not sentences or flag not in ("0", "1"):
            raise ConfigError("empty 'Sentences' or 'Error Flag' not 0/1", path=path, line=line)
        if flag == "1" and not sid.lstrip("-").isdigit():
            raise ConfigError("'Error Sentence ID' must be an integer when 'Error Flag' is 1", path=path, line=line)
        corrected = (row["Corrected Sentence"] or "").strip()
        reference = f"{sid} {corrected}" if flag == "1" else "CORRECT"
        yield text_instance(row["Text ID"], reference, context=sentences, extra={
            "error_flag": int(flag), "error_sentence_id": int(sid) if flag == "1" else -1,
            "corrected_sentence": corrected if flag == "1" else "", "error_type": row.get("Error Type", ""),
        })
