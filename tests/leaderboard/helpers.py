"""The leaderboard tests' helpers: `run_cli` (the real `medhelm` CLI in-process: exit code, stdout, stderr) and a
small configurable note-summary benchmark written to a folder (`note_summary_benchmark`)."""

from __future__ import annotations

import contextlib
import io

from medhelm.cli import main as cli_main


def run_cli(*argv: str) -> tuple[int, str, str]:
    """The real `medhelm` entry point in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


NOTE_SUMMARY_YAML = """name: {name}
description: one-sentence summaries of clinic notes (the summarization example's files, ROUGE-L only)
prompt_file: {examples}/summarization_demo/summarization_demo_prompt.txt
dataset_file: {examples}/summarization_demo/summarization_demo_dataset.csv
max_tokens: 20
category: Clinical Note Generation
subcategory: Documenting Patient Visits
metrics:
  - name: rouge_l
"""


def note_summary_benchmark(folder, name: str = "NOTE-SUMMARY"):
    """A generation benchmark placed in the taxonomy, scored without extras (ROUGE-L): its YAML's path."""
    from pathlib import Path

    path = Path(folder) / f"{name.lower()}.yaml"
    path.write_text(NOTE_SUMMARY_YAML.format(name=name, examples=Path(__file__).parents[2] / "examples"))
    return path
