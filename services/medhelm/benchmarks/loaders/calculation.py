"""MedCalc-Bench (test split) and EHRSQL (eICU): the two public computation benchmarks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.loaders.fetch import fetch_all
from medhelm.benchmarks.loaders.instances import text_instance
from medhelm.benchmarks.loaders.readers import read_json, read_table
from medhelm.errors import ConfigError
from medhelm.scoring.medcalc import CATEGORIES
from medhelm.specs import Instance

MEDCALC_COLUMNS = ("Row Number", "Category", "Patient Note", "Question", "Ground Truth Answer",
                   "Lower Limit", "Upper Limit")


def load_medcalc_bench(ctx: LoadContext, entry) -> Iterator[Instance]:
    (path,) = fetch_all(ctx, entry.folder, entry.remote)
    for line, row in enumerate(read_table(path, MEDCALC_COLUMNS), 2):
        category = str(row["Category"]).strip()
        if category.lower() not in CATEGORIES:
            # a category the scorer does not know would silently score 0: refuse instead
            raise ConfigError(f"unknown MedCalc-Bench category in column 'Category' (known: {sorted(CATEGORIES)})",
                              path=path, line=line)
        yield text_instance(
            str(row["Row Number"]), str(row["Ground Truth Answer"]).strip(),
            context=str(row["Patient Note"]).strip(), question=str(row["Question"]).strip(),
            extra={"category": category, "lower_limit": str(row["Lower Limit"]).strip(),
                   "upper_limit": str(row["Upper Limit"]).strip(),
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
    """eICU questions of the *test* split only (upstream also mixed the validation split into test)."""
    questions, schema, db = fetch_all(ctx, entry.folder, entry.remote)
    schema_text = create_table_statements(Path(schema).read_text(encoding="utf-8"))
    if not schema_text:
        raise ConfigError("no CREATE TABLE statements found", path=schema)
    data = read_json(questions)
    if not isinstance(data, list):
        raise ConfigError("expected a JSON list of {id, question, query, ...}", path=questions)
    for n, item in enumerate(data):
        if not isinstance(item, dict) or "question" not in item or "query" not in item:
            raise ConfigError(f"record {n}: expected 'question' and 'query'", path=questions)
        impossible = bool(item.get("is_impossible", False))
        gold = "" if impossible or str(item["query"]).strip().lower() in ("", "null", "none") else str(item["query"])
        yield text_instance(
            str(item.get("id", n)), gold, context=schema_text, question=str(item["question"]),
            extra={"db_path": str(Path(db).resolve()), "is_impossible": impossible,
                   "value": json.dumps(item.get("value", {}), sort_keys=True)},
        )
