"""The committee's page (`medhelm report --about report.yaml`): an executive summary in sentences (no average
across metrics), the sign-off inside the signed bytes, intended use / limitations / risks / data from the
hospital's file (schema-checked: one line naming the file, line and field, nothing written), what each benchmark
measures with its reference standard, prompt digest and n, each model's endpoint, version and access window
with time zones, cost / tokens / latency equal to the store's own numbers, the code commit and image digest, and
no absolute path anywhere (HTML, PDF text). The PDF stays tagged, every page rendered with pdftoppm."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from tests.leaderboard.subgroup_helpers import make_two_releases

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "examples" / "report" / "report.yaml"
ABOUT = """intended_use: |
  Flag discharge notes that need a follow-up call, for a nurse to confirm.
out_of_scope: Paediatric wards.
limitations:
  - Sixty patients of one ward.
risks:
  - A missed follow-up call.
data:
  source: EHR extract of discharge notes
  time_window: {from: 2025-07-01, to: 2025-09-30}
  population: Adults discharged from medicine wards
  missing_labels: none missing
benchmarks:
  SG:
    measures: Whether the note needs a follow-up call
    reference_standard: Two nurses' adjudicated decision
models:
  - model: test/m
    endpoint: https://llm.internal.example/v1
    version: mock-m build 7
    access_window: {from: 2026-11-20T08:00:00+01:00, to: 2026-11-21T18:30:00-05:00}
sign_off:
  ran_by: {name: Ada Analyst, role: Data scientist, date: 2026-11-22}
  reviewed_by: {name: Rui Reviewer, date: 2026-11-24}
  approved_by: {name: Chen Chair, role: "Chair, AI committee", date: 2026-11-28}
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("report_committee")
    s = make_two_releases(tmp)
    s["tmp"] = tmp
    s["about"] = tmp / "report.yaml"
    s["about"].write_text(ABOUT)
    s["html"] = tmp / "committee.html"
    assert cli(["report", "--release", "candidate", "--against", "accepted", "--about", str(s["about"]), "--out",
                str(s["html"]), "--store", str(s["store"])]) == 0
    return s


def _text(html: str) -> str:
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'")


def _section(text: str, head: str, nxt: str) -> str:
    return text[text.index(head):text.index(nxt, text.index(head))]


def test_executive_summary_in_plain_words(made: dict) -> None:
    text = _text(made["html"].read_text())
    summary = _section(text, "Executive summary", "Sign-off")
    assert "evaluates 1 model (test/m [mock/m]) on 1 benchmark with 60 scored instances" in summary
    assert "scores of different benchmarks are not averaged" in summary
    con = sqlite3.connect(made["store"])
    value, low, high, n = con.execute("SELECT value, ci_low, ci_high, n_instances FROM cells WHERE release = "
                                      "'candidate'").fetchone()
    con.close()
    assert f"SG (exact_match, higher is better): test/m scored {value:.3f} [{low:.3f}, {high:.3f}] on {n} " \
           "instances" in summary
    assert re.search(r"Against accepted : 0 significant drop\(s\) ?; 1 significant gain\(s\)", summary), summary
    assert "Approved by Chen Chair (Chair, AI committee) on 2026-11-28" in summary
    assert "Mean score" not in text and "mean score" not in text.lower()


def test_sign_off_is_signed_with_the_report(made: dict, tmp_path: Path) -> None:
    html = made["html"].read_text()
    text = _text(html)
    sign = _section(text, "Sign-off", "Intended use, limitations and risks")
    for words in ("Ran by Ada Analyst Data scientist 2026-11-22", "Reviewed by Rui Reviewer 2026-11-24",
                  "Approved by Chen Chair Chair, AI committee 2026-11-28"):
        assert words in sign
    digest = hashlib.sha256(made["about"].read_bytes()).hexdigest()
    manifest = json.loads(html.rsplit("<!-- medhelm-manifest ", 1)[1].split(" -->")[0])
    assert manifest["about_sha256"] == digest and digest in sign
    assert {"code_commit", "image_digest"} <= set(manifest)
    # the approver's name changed in the page: the content no longer matches
    forged = tmp_path / "forged.html"
    forged.write_text(html.replace("Chen Chair", "Eve Forger", 1))
    assert cli(["report", "verify", str(forged)]) == 3


def test_use_data_benchmarks_and_models_from_the_hospitals_file(made: dict) -> None:
    text = _text(made["html"].read_text())
    use = _section(text, "Intended use, limitations and risks", "What this release holds")
    assert "Flag discharge notes" in use and "Paediatric wards." in use and "Sixty patients of one ward." in use
    assert "A missed follow-up call." in use
    measures = _section(text, "What each benchmark measures", "Scores per benchmark")
    assert "Whether the note needs a follow-up call" in measures and "Two nurses' adjudicated decision" in measures
    assert re.search(r"user files sha256:[0-9a-f]{12} 60 0", measures)  # prompt+data digest, n, unscored
    data = _section(text, "The data, as the hospital describes it", "Performance by patient subgroup")
    assert "2025-07-01 to 2025-09-30" in data and "none missing" in data
    assert "age_band: old 30, young + child 30 (2 small group(s) pooled); sex: F 30, M 30" in data
    models = _section(text, "Models evaluated", "Cost, tokens and latency")
    # what report.yaml states, beside what the runs recorded (the mock server on this machine, today), flagged
    assert "report.yaml: https://llm.internal.example/v1" in models and "report.yaml: mock-m build 7" in models
    assert "report.yaml: 2026-11-20 08:00 UTC+01:00 to 2026-11-21 18:30 UTC-05:00" in models  # time zones kept
    assert re.search(r"recorded: http://127\.0\.0\.1:\d+/v1 ", models)
    assert re.search(r"recorded: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC to \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", models)
    assert "disagrees with report.yaml: endpoint, access window, version (listed below)" in models
    assert "test/m [mock/m]: report.yaml names the endpoint https://llm.internal.example/v1; the runs called" in \
        _section(text, "The runs' record and report.yaml disagree", "Cost, tokens and latency")
    assert re.search(r"Made \d{4}-\d\d-\d\d \d\d:\d\d UTC by medhelm", text)


def test_cost_tokens_and_latency_are_the_stores(made: dict) -> None:
    text = _text(made["html"].read_text())
    usage = _section(text, "Cost, tokens and latency", "Provenance")
    con = sqlite3.connect(made["store"])
    prompt, completion, inference_s = con.execute("SELECT prompt_tokens, completion_tokens, inference_s FROM models "
                                                  "WHERE release = 'candidate'").fetchone()
    stats = dict(((stat, (count, total)) for stat, count, total in con.execute(
        "SELECT s.stat, SUM(s.count), SUM(s.sum) FROM run_stats s JOIN runs r ON r.release = s.release AND "
        "r.suite = s.suite AND r.run_name = s.run_name WHERE s.release = 'candidate' GROUP BY s.stat")))
    con.close()
    assert prompt == 480 and completion == 60  # 60 requests: 8 prompt tokens and 1 answer token each (mock)
    assert f"test/m mock/m – 0.0000 {prompt} {completion} 0 {inference_s:.1f}" in usage
    requests, runtime = stats["inference_runtime"]
    assert f"SG test/m mock/m {requests} {int(stats['num_prompt_tokens'][1])} " \
           f"{int(stats['num_completion_tokens'][1])} {runtime / requests:.3f} {runtime:.1f}" in usage


def test_no_absolute_path_anywhere(made: dict) -> None:
    html = made["html"].read_text()
    assert str(made["tmp"]) not in html and "config_path=/" not in html and "/tmp/" not in html
    assert "config_path=sg.yaml" in html
    code = _text(html)[_text(html).index("Code commit"):]
    assert re.search(r"Code commit [0-9a-f]{40}|Code commit not recorded", code)


@pytest.mark.parametrize("change, words", [
    (("sign_off:\n", "sign_off_typo:\n"), "unknown key"),
    (("access_window: {from: 2026-11-20T08:00:00+01:00", "access_window: {from: 2026-11-20T08:00:00"),
     "must be a date and time with a time zone"),
    (("https://llm.internal", "https://user:pw@llm.internal"), "must not hold a user or password"),
    (("  - model: test/m\n", "  - model: test/other\n"), "model 'test/other' is not in the release"),
    (("  SG:\n", "  SGX:\n"), "benchmark 'SGX' is not in the release"),
    (("limitations:\n  - Sixty patients of one ward.\n", ""), "field 'limitations': is required"),
])
def test_a_bad_report_yaml_is_one_line_naming_file_and_field(made: dict, tmp_path: Path, capsys, change: tuple,
                                                             words: str) -> None:
    bad = tmp_path / "report.yaml"
    assert change[0] in ABOUT
    bad.write_text(ABOUT.replace(*change))
    out = tmp_path / "x.html"
    assert cli(["report", "--release", "candidate", "--about", str(bad), "--out", str(out), "--store",
                str(made["store"])]) == 2
    err = capsys.readouterr().err
    assert words in err and str(bad) in err and len(err.strip().splitlines()) == 1 and not out.exists()
    assert re.search(r"report\.yaml:(\d+:)? field '", err), err  # the field, and its line where it has one


def test_the_template_is_valid() -> None:
    from medhelm.report.about import load

    about = load(TEMPLATE).about
    assert about.sign_off.approved_by is not None and about.models[0].access_window.start.utcoffset() is not None


def test_without_report_yaml_the_page_says_what_is_missing(made: dict, tmp_path: Path) -> None:
    out = tmp_path / "bare.html"
    assert cli(["report", "--release", "candidate", "--out", str(out), "--store", str(made["store"])]) == 0
    text = _text(out.read_text())
    assert "No report.yaml was given" in text and "Not signed off" in text
    assert "Source, time window and population not stated" in text and "not stated (report.yaml: benchmarks)" in text


def test_the_committee_pdf_every_page_tagged_and_selectable(made: dict, tmp_path: Path) -> None:
    try:
        import weasyprint  # noqa: F401
    except (ImportError, OSError) as err:
        pytest.skip(f"the report-pdf extra (weasyprint) cannot be imported: {err}")
    if not shutil.which("pdftoppm"):
        pytest.skip("poppler-utils (pdftoppm, pdftotext) not installed")
    pdf = tmp_path / "committee.pdf"
    assert cli(["report", "--release", "candidate", "--against", "accepted", "--about", str(made["about"]),
                "--format", "pdf", "--out", str(pdf), "--store", str(made["store"])]) == 0
    words = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                           check=True).stdout
    for heading in ("Executive summary", "Sign-off", "Intended use, limitations and risks", "What each benchmark "
                    "measures", "Data", "Models", "Cost, tokens and latency", "Provenance"):
        assert heading in words, heading
    assert "Chen Chair" in words and "UTC+01:00" in words and str(made["tmp"]) not in words
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Tagged:\s+yes", info)
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(tmp_path / "page")], check=True)
    pngs = sorted(tmp_path.glob("page-*.png"))
    assert len(pngs) == int(re.search(r"Pages:\s+(\d+)", info).group(1)) >= 5
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):
        for p in pngs:
            shutil.copy(p, Path(os.environ["MEDHELM_SCREENSHOT_DIR"], f"committee-{p.name}"))


def test_postgresql_gives_the_same_page_and_trust_list(made: dict, tmp_path: Path, postgres_url: str) -> None:
    """The same release summarised into PostgreSQL: the committee's sections read the same numbers (PostgreSQL
    sums BIGINTs to NUMERIC), and the store's trust list works there too."""
    s = made
    assert cli(["summarize", "--suite", "cand", "--release", "committee-pg", "-o", str(s["out"]), "--local-path",
                str(s["local"]), "--store", postgres_url, "--bootstrap", "400"]) == 0
    assert cli(["summarize", "--suite", "cand", "--release", "committee-pg", "-o", str(s["out"]), "--local-path",
                str(s["local"]), "--store", str(s["store"]), "--bootstrap", "400"]) == 0
    pages = {}
    for name, store in (("sqlite", str(s["store"])), ("pg", postgres_url)):
        out = tmp_path / f"{name}.html"
        assert cli(["report", "--release", "committee-pg", "--about", str(s["about"]), "--out", str(out), "--store",
                    store]) == 0
        text = _text(out.read_text())
        pages[name] = [_section(text, head, nxt) for head, nxt in (
            ("Executive summary", "Sign-off"), ("What each benchmark measures", "Scores per benchmark"),
            ("Instances and patient subgroups", "Performance by patient subgroup"),
            ("Cost, tokens and latency", "Provenance"))]
    assert pages["sqlite"] == pages["pg"]
    if shutil.which("openssl") is None:
        return
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    assert subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)]).returncode == 0
    assert subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)]).returncode == 0
    signed = tmp_path / "signed.html"
    assert cli(["report", "--release", "committee-pg", "--sign", str(key), "--out", str(signed), "--store",
                postgres_url]) == 0
    assert cli(["report", "verify", str(signed), "--store", postgres_url]) == 4
    assert cli(["report", "trust", "add", str(pub), "--store", postgres_url]) == 0
    assert cli(["report", "verify", str(signed), "--store", postgres_url]) == 0


def test_an_unapproved_report_and_an_undescribed_model_are_said_first(made: dict, tmp_path: Path) -> None:
    about = tmp_path / "report.yaml"
    about.write_text(ABOUT.replace("  approved_by: {name: Chen Chair, role: \"Chair, AI committee\", date: 2026-11-28}\n",
                                   "").replace("models:\n  - model: test/m\n", "models:\n  - model: test/m\n"
                                                                                 "    deployment: other/dep\n"))
    out = tmp_path / "unapproved.html"
    assert cli(["report", "--release", "candidate", "--about", str(about), "--out", str(out), "--store",
                str(made["store"])]) == 2  # a deployment the release does not hold is named
    about.write_text(ABOUT.replace("  approved_by: {name: Chen Chair, role: \"Chair, AI committee\", date: 2026-11-28}\n",
                                   "").replace(ABOUT[ABOUT.index("models:"):ABOUT.index("sign_off:")], ""))
    assert cli(["report", "--release", "candidate", "--about", str(about), "--out", str(out), "--store",
                str(made["store"])]) == 0
    summary = _section(_text(out.read_text()), "Executive summary", "Sign-off")
    assert "Not approved: the sign-off names no approver." in summary
    assert ("No endpoint, version or access window stated in report.yaml for test/m [mock/m]: what the runs "
            "recorded is shown alone") in summary
    assert "Approved by" not in summary


def test_the_hospitals_text_is_text(made: dict, tmp_path: Path) -> None:
    about = tmp_path / "report.yaml"
    hostile = "<script>alert(1)</script> & <img src=x>"
    about.write_text(ABOUT.replace("  - A missed follow-up call.\n", f"  - \"{hostile}\"\n"))
    out = tmp_path / "hostile.html"
    assert cli(["report", "--release", "candidate", "--about", str(about), "--out", str(out), "--store",
                str(made["store"])]) == 0
    page = out.read_text()
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;img src=x&gt;" in page
