"""docs/benchmarks.md is shared: each bench script rewrites only its own section, between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``, and appends it the first time."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nEach section is rewritten by its script in `bench/`; numbers come from one run of that script.\n"


def write_section(name: str, title: str, body: str, doc: Path = DOC) -> None:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n## {title}\n\n{body}\n{end}"
    text = doc.read_text() if doc.exists() else HEADER
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)
