"""`medhelm report`: one self-contained HTML file from the store's aggregates (no script, no outside request,
table headers with scope, a planted marker in instance text never in it), suppressed subgroups stay
suppressed, the change against an accepted release, the signed manifest and `medhelm report verify` (a changed
byte fails with one line saying what no longer matches), and the audit row."""

from __future__ import annotations

import json
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from tests.leaderboard.subgroup_helpers import MARKER, make_two_releases


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs) -> None:  # noqa: ANN001
        self.tags.append((tag, dict(attrs)))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """Two releases: 'accepted' (right for old patients only) and 'candidate' (right for old and young), in a
    store that keeps instance text (not redacted), and a signing key."""
    tmp = tmp_path_factory.mktemp("report")
    s = make_two_releases(tmp)
    key = tmp / "report.key"
    key.write_text("9f" * 32 + "\n")
    s["key"] = key
    s["html"] = tmp / "report.html"
    assert cli(["report", "--release", "candidate", "--against", "accepted", "--hmac-key", str(key), "--out",
                str(s["html"]), "--store", str(s["store"])]) == 0
    return s


def test_the_report_is_self_contained_and_from_aggregates_only(made: dict) -> None:
    data = made["html"].read_bytes()
    text = data.decode("utf-8")
    con = sqlite3.connect(made["store"])
    kept = con.execute("SELECT COUNT(*) FROM instances WHERE record_json LIKE ?", (f"%{MARKER}%",)).fetchone()[0]
    con.close()
    assert kept == 120  # the store holds the instance text with the marker ...
    assert MARKER not in text and "patient 1" not in text  # ... and the report none of it
    tags = _Tags()
    tags.feed(text)
    names = {t for t, _ in tags.tags}
    assert "script" not in names and "link" not in names and "img" not in names and "iframe" not in names
    for _, attrs in tags.tags:  # no attribute makes the viewer fetch anything
        for name in ("src", "href", "action", "data"):
            assert name not in attrs, (name, attrs)
    assert not re.search(r"url\((?!#)", text) and "@import" not in text  # url(#clip) points inside the page
    assert "<svg" in text and text.count("<figure>") >= 2  # plots inline, as SVG
    assert "<text" in text  # svg.fonttype none: the plots' words are text, selectable and searchable
    heads = [a.get("scope") for t, a in tags.tags if t == "th"]
    assert heads and all(scope in ("col", "row") for scope in heads)


def test_the_report_shows_scores_subgroups_change_and_provenance(made: dict) -> None:
    text = made["html"].read_text()
    assert "Leaderboard" in text and "test/m" in text and "mock/m" in text
    # subgroups: old 30 (all right) shown; child (6), the only small cell, is pooled with young (24)
    sub = text[text.index("Performance by patient subgroup"):text.index("Change against")]
    assert "by age_band" in sub and "by sex" in sub and ">old<" in sub and ">young + child<" in sub
    assert ">young<" not in text and ">child<" not in text
    assert "Groups suppressed" in sub
    # the change: the candidate answers the 24 young patients right, 1 -> 24/60 more: a significant gain
    change = text[text.index("Change against"):text.index("Provenance")]
    assert "accepted" in change and "gain" in change and "0.400" in change
    prov = text[text.index("Provenance"):]
    assert "medhelm_configurable_benchmark" in prov and re.search(r"<code>[0-9a-f]{64}</code>", prov)


def test_compare_flags_a_drop_within_a_subgroup(made: dict, capsys) -> None:
    # reversed: the "candidate" here is the accepted release, which gets the 24 young patients wrong
    code = cli(["compare", "--release", "candidate", "--release", "accepted", "--subgroups", "--json", "--store",
                str(made["store"]), "--bootstrap", "300"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 3  # the overall drop fails the gate, as before
    sub = doc["subgroups"]
    by = {(r["attribute"], r["group"]): r for r in sub["results"]}
    # age band: child (6 patients) is pooled with young (24), which drops by 24 of 30; old has no change.
    # Sex: 12 of each sex's 30 patients are young, so both drop by 0.4, flagged after Holm over all groups
    assert sorted(by) == [("age_band", "old"), ("age_band", "young + child"), ("sex", "F"), ("sex", "M")]
    assert sub["suppressed_groups"] == 2
    assert by[("age_band", "old")]["change"] == "no change"
    assert by[("age_band", "young + child")]["diff"] == pytest.approx(-0.8)
    for g in ("F", "M"):
        assert by[("sex", g)]["change"] == "drop" and by[("sex", g)]["diff"] == pytest.approx(-0.4)
        assert by[("sex", g)]["n_pairs"] == 30 and by[("sex", g)]["p_adjusted"] < 0.05
    assert '"young"' not in json.dumps(doc) and '"child"' not in json.dumps(doc)
    assert cli(["compare", "--release", "candidate", "--release", "accepted", "--subgroups", "--store",
                str(made["store"])]) == 3
    text = capsys.readouterr().out
    assert "by patient subgroup: 4 model x benchmark x group pairs" in text and "sex=F" in text


def test_the_report_lists_changes_within_subgroups(made: dict) -> None:
    text = made["html"].read_text()
    change = text[text.index("Change against"):text.index("Provenance")]
    assert "Changes within each patient subgroup" in change
    assert "3 significant; 2 small group(s) suppressed" in change and "Holm-adjusted" in change
    # every group's change is listed, significant or not (old: the same answers in both releases)
    table = change[change.index("Changes within each patient subgroup"):]
    table = table[:table.index("</table>")]  # that table alone (the models' and costs' sections follow it)
    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]
    assert len(rows) == 4 and sum("no change" in r for r in rows) == 1
    assert all(re.search(r"\[-?[0-9.]+, -?[0-9.]+\]", r) for r in rows)  # each with its interval


def test_verify_passes_then_fails_on_a_changed_byte(made: dict, tmp_path: Path, capsys) -> None:
    html, key = made["html"], str(made["key"])
    assert cli(["report", "verify", str(html), "--hmac-key", key, "--store", str(made["store"])]) == 0
    assert "verified (content, signature, inputs)" in capsys.readouterr().out
    data = html.read_bytes()

    def check(name: str, changed: bytes, *extra: str) -> str:
        path = tmp_path / name
        path.write_bytes(changed)
        code = cli(["report", "verify", str(path), *extra])
        err = capsys.readouterr().err
        assert code == 3 and len(err.strip().splitlines()) == 1, err
        return err

    at = data.index(b"Leaderboard")
    body_changed = data[:at] + b"l" + data[at + 1:]
    assert "content no longer matches" in check("body.html", body_changed)
    assert "content no longer matches" in check("body2.html", body_changed, "--hmac-key", key)
    marker = data.rindex(b"medhelm-manifest")
    manifest_changed = data[:marker] + data[marker:].replace(b"candidate", b"candidatX", 1)
    assert "signature does not match" in check("manifest.html", manifest_changed, "--hmac-key", key)
    other = tmp_path / "other.key"
    other.write_text("ab" * 32)
    assert "not with this key" in check("key.html", data, "--hmac-key", str(other))
    # nothing changed in the file, but the store's release was re-summarised from other runs
    s = made
    assert cli(["summarize", "--suite", "acc", "--release", "candidate", "-o", str(s["out"]), "--local-path",
                str(s["local"]), "--store", str(s["store"]), "--bootstrap", "400"]) == 0
    capsys.readouterr()
    assert "no longer matches what the report was built from" in check("same.html", data, "--store",
                                                                          str(s["store"]))
    assert "end of the report was changed" in check("cut.html", data[:-5])
    assert "end of the report was changed" in check("added.html", data + b"<p>added</p>\n")
    plain = tmp_path / "plain.html"
    plain.write_bytes(b"<!DOCTYPE html><p>not a report</p>\n")
    assert cli(["report", "verify", str(plain)]) == 2
    assert "no medhelm manifest" in capsys.readouterr().err


def test_writing_a_report_is_audited_and_checks_before_writing(made: dict, tmp_path: Path, capsys) -> None:
    con = sqlite3.connect(made["store"])
    rows = con.execute("SELECT action, release, detail FROM audit WHERE action = 'report'").fetchall()
    con.close()
    key_id = [d for _, _, d in rows if d.startswith("report report.html signed HMAC-SHA256 key ")]
    assert len(key_id) == 1 and key_id[0].endswith(" against accepted")
    short = tmp_path / "short.key"
    short.write_text("abc")
    out = tmp_path / "x.html"
    assert cli(["report", "--release", "candidate", "--hmac-key", str(short), "--out", str(out), "--store",
                str(made["store"])]) == 2
    assert "HMAC secret has 3 bytes" in capsys.readouterr().err and not out.exists()
    assert cli(["report", "--release", "nope", "--out", str(out), "--store", str(made["store"])]) == 2
    assert not out.exists()
    assert cli(["report", "--release", "candidate", "--out", str(made["html"]), "--store", str(made["store"])]) == 2
    assert "exists already" in capsys.readouterr().err


def test_hostile_names_are_text_in_the_page_and_its_plots(made: dict) -> None:
    from medhelm.report.content import read_content
    from medhelm.report.render import render
    from medhelm.store import open_store

    hostile = "<script>alert(1)</script>$x_{2} & \"q\" $unbalanced"
    with open_store(made["store"]) as store:
        content = read_content(store, "accepted")
    for part in ("leaderboard", "cells", "models", "runs", "subgroup_scores", "subgroup_gaps"):
        for row in content.parts[part]:
            row["model"] = hostile
    for row in content.parts["subgroup_scores"]:
        row["grp"] = hostile
    page = render(content, "2026-11-27T00:00:00+00:00").decode("utf-8")
    assert "<script" not in page and "alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;$x_{2} &amp; &quot;q&quot; $unbalanced" in page
    tags = _Tags()
    tags.feed(page)
    assert "script" not in {t for t, _ in tags.tags}


def test_the_default_path_is_under_the_output_folder(made: dict, capsys) -> None:
    out = made["out"]
    assert cli(["report", "--release", "accepted", "-o", str(out), "--store", str(made["store"])]) == 0
    assert (out / "reports" / "accepted.html").is_file()
    assert cli(["report", "verify", str(out / "reports" / "accepted.html")]) == 4  # the signature NOT checked
    assert "the signature was NOT checked (it is not signed;" in capsys.readouterr().out
