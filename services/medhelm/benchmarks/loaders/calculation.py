"""MedCalc-Bench (test split; ``version=`` v1.0/v1.1/v1.2 as upstream) and EHRSQL (eICU): the two public
computation benchmarks. Malformed rows raise ``ConfigError`` naming file, line and field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import RemoteFile, fetch_all
from medhelm.benchmarks.loaders.instances import helm_draw, text_instance
from medhelm.benchmarks.loaders.readers import clean_text, is_missing, read_json, read_table
from medhelm.errors import ConfigError
from medhelm.scoring.medcalc import CATEGORIES
from medhelm.specs import Instance

MEDCALC_COLUMNS = ("Row Number", "Category", "Patient Note", "Question", "Ground Truth Answer",
                   "Lower Limit", "Upper Limit")

# Every spelling MedCalc-Bench has shipped, mapped to the scorer's category set: the Hugging Face v1.0 test
# file and the 2024 GitHub CSVs say "lab test"/"dosage conversion" or "lab"/"dosage" for the same calculators.
CATEGORY_SPELLINGS = {
    "lab": "lab test", "lab test": "lab test", "lab tests": "lab test",
    "dosage": "dosage", "dosage conversion": "dosage",
    "physical": "physical", "risk": "risk", "severity": "severity", "diagnosis": "diagnosis", "date": "date",
}
VERSIONS = ("v1.0", "v1.1", "v1.2")


def medcalc_files(entry, version: str | None) -> tuple[str, tuple[RemoteFile, ...]]:
    """(mirror/cache folder, files) for a ``version=`` (upstream: ``ncbi/MedCalc-Bench-<version>``)."""
    if version in (None, "", "v1.0"):
        return entry.folder, entry.remote
    hf = "https://huggingface.co/datasets"
    return f"{entry.folder}/{version}", (
        RemoteFile(f"{hf}/ncbi/MedCalc-Bench-{version}/resolve/refs%2Fconvert%2Fparquet/default/test/0000.parquet",
                   "test_data.parquet", alt_names=("test_data.csv",)),)


def normalize_version(raw: str | None) -> str | None:
    if raw in (None, "", "None"):
        return None
    v = str(raw).strip().lower()
    v = v if v.startswith("v") else f"v{v}"
    if v not in VERSIONS:
        raise ConfigError(f"benchmark 'medcalc_bench': version={raw} is not one of {', '.join(VERSIONS)}",
                          field="version")
    return v


def load_medcalc_bench(ctx: LoadContext, entry) -> Iterator[Instance]:
    folder, files = medcalc_files(entry, normalize_version(ctx.args.get("version")))
    (path,) = fetch_all(ctx, folder, files)
    table = read_table(path, MEDCALC_COLUMNS)
    for line, row in table.numbered():
        published = str(row["Category"]).strip()
        category = CATEGORY_SPELLINGS.get(published.lower())
        if category is None or category not in CATEGORIES:
            # a category the scorer does not know would silently score 0: refuse instead
            raise ConfigError(f"unknown MedCalc-Bench category (known: {', '.join(sorted(CATEGORY_SPELLINGS))})",
                              path=path, line=line, field="Category")
        for column in ("Row Number", "Patient Note", "Question", "Ground Truth Answer"):
            if is_missing(row[column]):
                raise ConfigError("empty value", path=path, line=line, field=column)
        yield text_instance(
            str(row["Row Number"]).strip(), str(row["Ground Truth Answer"]).strip(),
            context=clean_text(row["Patient Note"]), question=clean_text(row["Question"]),
            extra={"category": category, "category_as_published": published,
                   "lower_limit": str(row["Lower Limit"]).strip(), "upper_limit": str(row["Upper Limit"]).strip(),
                   "calculator": str(row.get("Calculator Name", "")), "output_type": str(row.get("Output Type", ""))},
        )


def create_table_statements(schema_sql: str) -> str:
    """Only the ``CREATE TABLE`` statements of ``eicu.sql`` (what the model needs to write queries)."""
    out, current = [], []
    for raw in schema_sql.splitlines():
        line = raw.strip()
        if line.upper().startswith("CREATE TABLE"):
            current = [line]
        elif current:
            current.append(line)
        if current and line.endswith(";"):
            out.append("\n".join(current))
            current = []
    return "\n\n".join(out)


def load_ehr_sql(ctx: LoadContext, entry) -> Iterator[Instance]:
    """eICU questions of the *test* split (``instance_set=test``, the default), or MedHELM's leaderboard set
    (``instance_set=leaderboard``): upstream mapped the valid and test splits both to its test split, and HELM's
    runner drew 1,000 of them (seed 0, ``loaders.instances.helm_draw``). Ids are the dataset's own."""
    splits = ("valid.json", "test.json") if ctx.args.get("instance_set") == "leaderboard" else ("test.json",)
    wanted = [f for f in entry.remote if f.name in splits or not f.name.endswith(".json")]
    *question_files, schema, db = fetch_all(ctx, entry.folder, wanted)
    schema_text = create_table_statements(Path(schema).read_text(encoding="utf-8"))
    if not schema_text:
        raise ConfigError("no CREATE TABLE statements found", path=schema)
    instances = [i for questions in question_files for i in _ehr_sql_questions(questions, schema_text, db)]
    if ctx.args.get("instance_set") == "leaderboard":  # HELM's seeded draw of 1,000 from valid + test
        instances = [instances[k] for k in helm_draw(len(instances))]
    yield from instances


def _ehr_sql_questions(questions: Path, schema_text: str, db: Path) -> Iterator[Instance]:
    data = read_json(questions)
    if not isinstance(data, list):
        raise ConfigError("expected a JSON list of {id, question, query, ...}", path=questions)
    for n, item in enumerate(data):
        if not isinstance(item, dict) or "question" not in item or "query" not in item:
            raise ConfigError(f"record {n}: expected 'question' and 'query'", path=questions)
        impossible = bool(item.get("is_impossible", False))
        # the gold as published (``null`` for an unanswerable question), as HELM's reference
        yield text_instance(
            str(item.get("id", n)), str(item["query"]), context=schema_text, question=str(item["question"]),
            extra={"db_path": str(Path(db).resolve()), "is_impossible": impossible,
                   "value": json.dumps(item.get("value", {}), sort_keys=True)},
        )
