"""docs/benchmarks.md is shared: each bench script rewrites only its own section, between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``, and appends it the first time.

Recorded results name paths relative to the repository (tests/core/test_no_machine_paths.py checks the
docs): a path under the checkout the script ran from (a script's own file, the cmake include it passed) is
written relative to it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nEach section is rewritten by its script in `bench/`; numbers come from one run of that script.\n"


def write_section(name: str, title: str, body: str, doc: Path = DOC) -> None:
    body = body.replace(f"{ROOT}/", "")
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n## {title}\n\n{body}\n{end}"
    text = doc.read_text() if doc.exists() else HEADER
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)


def cpu_described(shown: tuple[str, ...]) -> tuple[str, str, bool]:
    """This CPU's model name, and which of the instruction sets ``shown`` it advertises (with "no AMX" when it
    does not advertise amx_tile): what decides whether a llama.cpp build runs on it."""
    name, flags = "unknown", set()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == "unknown":
                name = value.strip()
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    found = [f for f in shown if f in flags]
    return name, " ".join(found) or "none of " + "/".join(shown), "amx_tile" in flags

