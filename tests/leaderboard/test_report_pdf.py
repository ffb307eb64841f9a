"""`medhelm report --format pdf`: the same report as a tagged PDF (WeasyPrint), rendered to PNG pages with
poppler's `pdftoppm` (kept as the tests' artefacts: under the pytest tmp dir, and copied to
$MEDHELM_SCREENSHOT_DIR when set), its text read back with `pdftotext`: every section heading present, the
planted marker absent, suppressed groups absent, no external resource, figures drawn as vector with their
words as text, the structure tree present; then sealed, signed and verified like the HTML."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from tests.leaderboard.subgroup_helpers import MARKER, make_two_releases

try:
    import weasyprint  # noqa: F401
except (ImportError, OSError) as err:  # OSError: the package is there, the system's Pango is not
    pytest.skip(f"the report-pdf extra (weasyprint) cannot be imported: {err}", allow_module_level=True)
POPPLER = shutil.which("pdftoppm") and shutil.which("pdftotext")
needs_poppler = pytest.mark.skipif(not POPPLER, reason="poppler-utils (pdftoppm, pdftotext) not installed")

HEADINGS = ("MedHELM evaluation report", "Summary", "Leaderboard", "Scores per benchmark",
            "Performance by patient subgroup", "Change against the accepted release", "Provenance")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("report_pdf")
    s = make_two_releases(tmp)
    key = tmp / "report.key"
    key.write_text("5e" * 32 + "\n")
    s["key"], s["pdf"] = key, tmp / "report.pdf"
    assert cli(["report", "--release", "candidate", "--against", "accepted", "--format", "pdf", "--hmac-key", str(key),
                "--out", str(s["pdf"]), "--store", str(s["store"])]) == 0
    return s


def _streams(data: bytes) -> list[bytes]:
    """Every stream of the PDF, inflated where it is Flate-compressed (our own reading of the file)."""
    out = []
    for m in re.finditer(rb"stream\r?\n", data):
        end = data.find(b"endstream", m.end())
        raw = data[m.end():end]
        try:
            out.append(zlib.decompress(raw))
        except zlib.error:
            out.append(raw)
    return out


@needs_poppler
def test_pdf_pages_as_images_and_its_text(made: dict, tmp_path: Path) -> None:
    pdf = made["pdf"]
    assert pdf.read_bytes().startswith(b"%PDF-")
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True)
    assert text.stderr == ""  # poppler reads the sealed file without a syntax complaint
    words = text.stdout
    for heading in HEADINGS:
        assert heading in words, heading
    assert MARKER not in words and "patient 1" not in words
    # suppression: 'child' (6) is never shown alone, only pooled with 'young' (24), in the PDF as in the HTML
    alone = words.replace("young + child", "")
    assert "young" not in alone and "child" not in alone and "young + child" in words
    gaps = re.search(r"^ *SG +age_band +test/m +mock/m +(\d+) +(\d+)", words, re.M)  # the gap table's row
    assert gaps and gaps.groups() == ("2", "2")  # 'old' and the pool shown; two groups not shown alone
    assert "Groups suppressed" in words and re.search(r"^ *old +test/m +mock/m +30 +1\.000", words, re.M)
    assert "test/m" in words and re.search(r"\b[0-9a-f]{64}\b", words)  # provenance digests are text
    # the plots' words are text too (svg text drawn as text, not paths): an axis label of a figure
    assert "score" in words
    pages = tmp_path / "pages"
    pages.mkdir()
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(pages / "report")], check=True,
                   capture_output=True)
    pngs = sorted(pages.glob("report-*.png"))
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    n_pages = int(re.search(r"Pages:\s+(\d+)", info).group(1))
    assert len(pngs) == n_pages >= 3
    assert re.search(r"Tagged:\s+yes", info)
    assert all(p.read_bytes().startswith(b"\x89PNG") and p.stat().st_size > 2000 for p in pngs)
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):
        for p in pngs:
            shutil.copy(p, Path(os.environ["MEDHELM_SCREENSHOT_DIR"], f"pdf-{p.name}"))


def test_pdf_is_tagged_vector_and_fetches_nothing(made: dict) -> None:
    data = made["pdf"].read_bytes()
    assert MARKER.encode() not in data
    everything = data + b"".join(_streams(data))
    assert MARKER.encode() not in everything and b"young" not in everything.lower().replace(b"\x00", b"")
    assert b"/StructTreeRoot" in everything and b"/MarkInfo" in everything  # tagged
    assert re.search(rb"/S\s*/Table\b", everything) and re.search(rb"/S\s*/TH\b", everything)
    assert re.search(rb"/S\s*/H1\b", everything) and re.search(rb"/S\s*/H2\b", everything)
    assert b"/Lang" in everything
    # no external resource: no URI action, no remote file, no launch
    for token in (b"/URI", b"/Launch", b"/GoToR", b"/SubmitForm", b"/JavaScript", b"/JS "):
        assert token not in everything, token
    # the plots are vector: line segments in content streams, no raster image of a figure
    assert b"/Subtype /Image" not in everything and b"/Subtype/Image" not in everything
    assert any(re.search(rb"\d \d+(\.\d+)? l\b", s) for s in _streams(data))


def test_pdf_seal_verifies_and_a_changed_byte_fails(made: dict, tmp_path: Path, capsys) -> None:
    pdf, key = made["pdf"], str(made["key"])
    assert cli(["report", "verify", str(pdf), "--hmac-key", key, "--store", str(made["store"])]) == 0
    assert "verified (content, signature, inputs)" in capsys.readouterr().out
    data = pdf.read_bytes()
    assert data.endswith(b"%%EOF\n") and b"\n%medhelm-manifest {" in data and b"\n%medhelm-signature " in data
    at = data.index(b"/Type")
    changed = tmp_path / "changed.pdf"
    changed.write_bytes(data[:at] + b"/Typf" + data[at + 5:])
    assert cli(["report", "verify", str(changed), "--hmac-key", key]) == 3
    err = capsys.readouterr().err
    assert "content no longer matches" in err and len(err.strip().splitlines()) == 1


def test_missing_pdf_extra_is_one_line_naming_it(made: dict, tmp_path: Path) -> None:
    """Without WeasyPrint importable (blocked in a child interpreter), one line naming the extra, exit 2,
    nothing written."""
    out = tmp_path / "x.pdf"
    code = ("import sys; sys.modules['weasyprint'] = None\n"
            "from medhelm.cli import main\n"
            f"sys.exit(main(['report', '--format', 'pdf', '--out', {str(out)!r}, '--store', {str(made['store'])!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "medhelm-k8s[report-pdf]" in lines[0] and not out.exists()


def test_the_pdf_writer_fetches_nothing_even_when_a_page_names_a_url() -> None:
    """render.py names no URL; should a page ever name one, pdf.py's fetcher refuses it: a listening socket
    that the page points at receives no connection (checked after the synchronous render)."""
    import socket

    from medhelm.report.pdf import to_pdf

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        page = (f'<!DOCTYPE html><html lang="en"><head><title>t</title><link rel="stylesheet" href="{url}/s.css">'
                f'<style>@import url("{url}/i.css");@font-face{{font-family:x;src:url("{url}/f.woff")}}</style>'
                f'</head><body><h1>t</h1><img src="{url}/a.png" alt="a"><svg><image href="{url}/b.png"/></svg>'
                "</body></html>")
        data = to_pdf(page.encode())
        assert data.startswith(b"%PDF-")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()


@needs_poppler
def test_a_many_model_report_splits_long_plots_and_tables_across_pages(small_output: Path, tmp_path: Path) -> None:
    """4 models x 6 benchmarks: the 24-row plot is drawn as two figures on one axis, the long tables continue
    on the next page under their repeated header; every page is kept as a PNG artefact."""
    pdf = tmp_path / "many.pdf"
    assert cli(["report", "-o", str(small_output), "--format", "pdf", "--out", str(pdf)]) == 0
    words = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                           check=True).stdout
    assert "Main metric per benchmark and model (1 of 2)" in words and "(2 of 2)" in words and "(3 of" not in words
    pages = words.split("\f")
    headed = [p for p in pages if re.search(r"Run +Suite +Model +Deployment", p)]
    assert len(headed) >= 2  # the runs table (24 rows) continues on a second page with its header again
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(tmp_path / "many")], check=True,
                   capture_output=True)
    pngs = sorted(tmp_path.glob("many-*.png"))
    assert len(pngs) == len([p for p in pages if p.strip()])
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):
        for p in pngs:
            shutil.copy(p, Path(os.environ["MEDHELM_SCREENSHOT_DIR"], f"pdf-{p.name}"))
