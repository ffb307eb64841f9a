"""No machine paths in the project's text: docs, comments, scripts and recorded results name paths relative to
the repository, never where a build or a developer's machine kept them.

What counts as a machine path (``MACHINE_PATH``), at the start of a path (not inside a URL, after ``~`` or a
``$VAR``/``${VAR}``): the build machine's workspace (``/work/...``), a home folder (``/root/...``,
``/home/<user>/...``, ``/Users/<user>/...``, ``C:\\Users\\...``), macOS's per-user temporary folders
(``/var/folders/...``), and a scratch folder's contents in ``/tmp`` (``/tmp/<folder>/...``: a venv, a clone or
an output folder made for one session). Not machine paths, so not matched by design:

* paths inside the image and the cluster's pods (``/app``, ``/etc``, ``/usr``, ``/var``, ``/opt``, ``/data``,
  ``/mnt/models``, ``/dev/shm``): the same on every host that runs the image or chart;
* ``/tmp`` itself and one file directly in it (``/tmp/requirements.txt`` while the image builds, a pod's
  ``/tmp/b.tgz``), ``mktemp`` templates (``/tmp/helm-fixtures.XXXXXX``) and ``${TMPDIR:-/tmp}/medhelm-...``:
  names the code chooses at run time on whatever host runs it, not a folder of the machine it was written on;
* upstream's own paths quoted as upstream wrote them (``/dbfs/mnt/...`` in upstream MedHELM's run entries).

Files checked: every tracked text file the project writes (``git ls-files``): docs, code, scripts, charts,
configs. Excluded, each for a reason (``EXCLUDED``): this file (it must name what it forbids), and recorded
outputs of other programs kept byte for byte as test oracles (``tests/data/**.json``/``.csv``: HELM's own run
folders carry the data_path of the machine HELM ran on; rewriting them would make them no longer HELM's).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MACHINE_PATH = re.compile(
    r"(?:(?<![\w.~/$}-])|(?<=file://))"  # a path's start: not inside a URL, a word, ~/... or $VAR/...
    r"(?:/(?:work|root)/|/(?:home|Users)/[^/\s'\"`]+/|/tmp/[^/\s'\"`]+/|/(?:private/)?var/folders/)"
    r"[^\s'\"`)\]>,;:|]*"
    r"|\b[A-Za-z]:\\Users\\[^\s'\"`]+")

TEXT = {".md", ".py", ".pyi", ".sh", ".yaml", ".yml", ".toml", ".conf", ".tpl", ".txt", ".js", ".proto",
        ".cmake", ".json", ".csv", ".gitignore", ".dockerignore", ""}
EXCLUDED = (
    (lambda path: path == "tests/core/test_no_machine_paths.py", "names what it forbids"),
    (lambda path: path.startswith("tests/data/") and path.endswith((".json", ".csv")),
     "other programs' recorded outputs, kept byte for byte as oracles"),
)


def _tracked() -> list[str]:
    try:
        done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an sdist or an installed copy): nothing tracked to check")
    return [p for p in done.stdout.decode().split("\0") if p]


# The examples' machine folders are spelt "/" + name, so this file holds no machine path itself (a grep of the
# repository, like the pattern below, finds none here).
W, T, R, H = "/" + "work", "/" + "tmp", "/" + "root", "/" + "home"


@pytest.mark.parametrize("text, found", [
    (f"python {W}/wt/i27-speed/scripts/x.py", [f"{W}/wt/i27-speed/scripts/x.py"]),
    (f"`{T}/i27s/vref/bin/python`", [f"{T}/i27s/vref/bin/python"]),
    (f"cloned into `{W}/ci18`, then", [f"{W}/ci18"]),
    (f"PATH={R}/.local/bin:{H}/alice/bin", [f"{R}/.local/bin", f"{H}/alice/bin"]),
    ("see file:///Users/bob/notes.md", ["/Users/bob/notes.md"]),
    ("C:\\Users\\carol\\medhelm", ["C:\\Users\\carol\\medhelm"]),
    ("/private/var/folders/x1/T/pytest-of-me/out", ["/private/var/folders/x1/T/pytest-of-me/out"]),
    # not machine paths
    ("WORKDIR /app; COPY x /etc/medhelm/conf/nightly.conf; /usr/bin/env; /opt/venv; /var/lib/medhelm", []),
    ("--model=/mnt/models -o /data/benchmark_output /tmp/b.tgz >/tmp/requirements.txt", []),
    ("mktemp -d /tmp/helm-fixtures.XXXXXX; ${TMPDIR:-/tmp}/medhelm-engines-build.log; ~/work/x; $HOME/work/y", []),
    ("https://github.com/org/repo/work/root/x and ../shared/data and scripts/_env.sh", []),
])
def test_the_pattern(text: str, found: list[str]) -> None:
    assert MACHINE_PATH.findall(text) == found


def test_no_machine_paths_in_tracked_text() -> None:
    offenders = []
    for path in _tracked():
        name = Path(path)
        if (name.suffix or (name.name if name.name.startswith(".") else "")) not in TEXT:  # "": Dockerfile, ...
            continue
        if any(rule(path) for rule, _ in EXCLUDED):
            continue
        try:
            text = (REPO / path).read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):  # deleted in the work tree, or not text
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            offenders += [f"{path}:{lineno}: {m.group(0)}" for m in MACHINE_PATH.finditer(line)]
    assert not offenders, "absolute paths of a build or developer machine (name them relative to the " \
                          "repository):\n" + "\n".join(offenders)


def test_bench_sections_record_checkout_paths_relative(tmp_path: Path) -> None:
    """bench/doc_sections.py, which writes every recorded result into docs/benchmarks.md, writes a path under
    the checkout the bench ran from relative to it (a bench passing its own cmake include, say)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("doc_sections", REPO / "bench" / "doc_sections.py")
    sections = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sections)
    doc = tmp_path / "benchmarks.md"
    sections.write_section("x", "X", f"`-DINCLUDE={REPO / 'scripts' / 'llama_cpp_minimal.cmake'}`", doc=doc)
    text = doc.read_text()
    assert "`-DINCLUDE=scripts/llama_cpp_minimal.cmake`" in text and str(REPO) not in text
