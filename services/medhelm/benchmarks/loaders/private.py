"""Private (organisation-held) data read from the user's ``data_path=``: the ten SHC classifiers (one
loader, ten catalogue rows), CLEAR, NoteExtract (CHW care plans), PatientInstruct and MentalHealth.

The CSV benchmarks (all but CLEAR) accept ``subgroups=age_band+sex``: those columns of the same file give each
instance its ``subgroups`` labels (a category of at most 64 characters; an empty cell is ``(blank)``: the rule
of configurable benchmarks, ``user_dataset.subgroup_label``). The registry checks the columns are in the header
at planning (``data_file``).

Failure semantics: a missing file or column, a bad label or an over-long subgroup cell is a ``ConfigError``
naming the file, line and column, never the cell's text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.benchmarks.entry import subgroup_columns
from medhelm.benchmarks.loaders.fetch import require_files, user_path
from medhelm.benchmarks.loaders.instances import choice_instance, label_index, text_instance
from medhelm.benchmarks.loaders.readers import is_missing, note_skipped, read_csv, read_table
from medhelm.benchmarks.user_dataset import subgroup_label
from medhelm.errors import ConfigError
from medhelm.specs import FrozenMap, Instance


def data_file(ctx: LoadContext, entry) -> Path:
    """``data_path=`` names the file, or a folder holding it under its upstream name."""
    path = user_path(ctx, entry.name, entry.expected, entry.access_note)
    if path.is_dir():
        (path,) = require_files(entry.name, path, (str(entry.options["file"]),), entry.access_note)
    elif not path.is_file():
        raise ConfigError(f"not found (expected {entry.expected}); {entry.access_note}", path=path)
    return path


def _rows(ctx: LoadContext, path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict, FrozenMap]]:
    """``(line, row, subgroup labels)`` of the CSV ``path``; the labels are empty without ``subgroups=``."""
    columns = subgroup_columns(ctx.args)
    for line, row in read_csv(path, tuple(dict.fromkeys((*required, *columns)))).numbered():
        yield line, row, FrozenMap({c: subgroup_label(row[c], path, line, c) for c in columns})


def _in_groups(instance: Instance, groups: FrozenMap) -> Instance:
    return dataclasses.replace(instance, subgroups=groups) if groups else instance


def load_shc(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Columns: the question (``prompt``, or ``question`` for sequoia), ``context``, ``label`` (A/B[/C]).
    Options are the labels' meanings, listed once. Duplicate questions are kept (upstream collapsed them)."""
    path = data_file(ctx, entry)
    qcol = str(entry.options.get("question_column", "prompt"))
    meanings = tuple(entry.options["choices"])
    letters = tuple("ABC"[: len(meanings)])
    skip_unlabelled = ctx.args.get("skip_unlabelled", "false") == "true"
    skipped = 0
    for line, row, groups in _rows(ctx, path, (qcol, "context", "label")):
        if skip_unlabelled and is_missing(row["label"]):
            skipped += 1
            continue
        correct = label_index(row["label"], letters, path=path, line=line, column="label")
        yield _in_groups(choice_instance(f"{entry.name}-{line - 1}", row[qcol].strip(), meanings, correct,
                                         context=row["context"].strip()), groups)
    note_skipped(path, skipped, "row", "empty label (skip_unlabelled=true)")


CLEAR_CONDITIONS = (
    "alcohol_dependence", "attention_deficit_hyperactivity_disorder", "bipolar_disorder", "chronic_pain",
    "homelessness", "liver_disease", "major_depression", "personality_disorder", "post_traumatic_stress_disorder",
    "substance_use_disorder", "suicidal_behavior", "tobacco_dependence", "unemployment",
)


def clear_file(ctx: LoadContext, entry) -> Path:
    """CLEAR's one spreadsheet per condition: ``<data_path>/<condition>.xlsx``."""
    root = user_path(ctx, entry.name, entry.expected, entry.access_note)
    (path,) = require_files(entry.name, root, (f"{ctx.args['condition']}.xlsx",), entry.access_note)
    return path


def load_clear(ctx: LoadContext, entry) -> Iterator[Instance]:
    """``<data_path>/<condition>.xlsx`` with columns ``text`` and ``result_human`` (1 has, 0 has not,
    2 uncertain); ``subgroups=`` names more columns of the same sheet."""
    condition = ctx.args["condition"]
    path = clear_file(ctx, entry)
    shown = condition.replace("_", " ")
    options = (f"Has a history of {shown}", f"Does not have a history of {shown}", "Uncertain")
    by_label = {"1": 0, "0": 1, "2": 2}
    skipped = 0
    columns = subgroup_columns(ctx.args)
    for line, row in read_table(path, tuple(dict.fromkeys(("text", "result_human", *columns)))).numbered():
        # upstream meant to skip a row with no note or no label ("Skip the instance if any required field is
        # missing"), but pandas reads an empty cell as NaN and str(NaN) is "nan": it kept the row, with the note
        # "nan" or with no correct option (always scored wrong). Skipped here, as its comment says, and counted.
        if is_missing(row["text"]) or is_missing(row["result_human"]):
            skipped += 1
            continue
        label = str(row["result_human"]).strip()
        if label not in by_label:
            raise ConfigError("column 'result_human' must be 0, 1 or 2", path=path, line=line)
        groups = FrozenMap({c: subgroup_label(row[c], path, line, c) for c in columns})
        yield _in_groups(choice_instance(f"{condition}-{line - 1}", f"Does the patient have a history of {shown}?",
                                         options, by_label[label], context=str(row["text"]).strip()), groups)
    note_skipped(path, skipped, "row", "empty note or label")


def load_chw_care_plan(ctx: LoadContext, entry) -> Iterator[Instance]:
    """The note is both the input and the reference: the jury checks the structured rewrite against it."""
    path = data_file(ctx, entry)
    for line, row, groups in _rows(ctx, path, ("MO Note",)):
        if is_missing(row["MO Note"]):
            continue  # upstream skips NaN notes too (a row with other columns filled but no note)
        note = row["MO Note"].strip()
        yield _in_groups(text_instance(f"chw-{line - 1}", note, context=note), groups)


STARR_COLUMNS = ("QC", "Diagnosis", "ActualProcedure", "HistoryPhysicalNoteText", "OperativeNoteText",
                 "DischargeInstructionNoteText")


def load_starr_patient_instructions(ctx: LoadContext, entry) -> Iterator[Instance]:
    """Rows that passed quality control (``QC`` = TRUE) with all five case fields filled, as upstream: a
    QC=TRUE row with an empty field (after stripping spaces) is skipped, and counted."""
    path = data_file(ctx, entry)
    skipped = 0
    for line, row, groups in _rows(ctx, path, STARR_COLUMNS):
        if row["QC"].strip().upper() != "TRUE":
            continue
        if not all(row[c].strip() for c in STARR_COLUMNS[1:]):
            skipped += 1
            continue
        target = row["DischargeInstructionNoteText"].strip()
        context = (f"Diagnosis: {row['Diagnosis'].strip()}\nProcedure: {row['ActualProcedure'].strip()}\n"
                   f"History & Physical:\n{row['HistoryPhysicalNoteText'].strip()}\n"
                   f"Operative Report:\n{row['OperativeNoteText'].strip()}")
        yield _in_groups(text_instance(f"starr-{line - 1}", target, context=context), groups)
    note_skipped(path, skipped, "QC=TRUE row", "an empty case field")


MENTAL_HEALTH_CUE = "Generate an empathetic and appropriate counselor response:"


def load_mental_health(ctx: LoadContext, entry) -> Iterator[Instance]:
    """One instance per row: the dialogue's topic and type, the conversation so far, and the closing cue, as
    upstream builds it; the reference is the counselor's actual next turn."""
    path = data_file(ctx, entry)
    for line, row, groups in _rows(ctx, path, ("context", "gold_counselor_response", "topic", "dialogue_type")):
        for column in ("context", "gold_counselor_response"):
            if is_missing(row[column]):
                raise ConfigError("empty value", path=path, line=line, field=column)
        context = (f"Topic: {row['topic'].strip()}\nType: {row['dialogue_type'].strip()}\n\n"
                   f"Previous conversation:\n{row['context'].strip()}")
        yield _in_groups(text_instance(f"mh-{line - 1}", row["gold_counselor_response"].strip(), context=context,
                                       question=MENTAL_HEALTH_CUE,
                                       extra={"topic": row["topic"], "dialogue_type": row["dialogue_type"]}), groups)
