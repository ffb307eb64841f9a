"""Small groups stay hidden across releases (issue 51, item 2), tested as the issue's attacker: one benchmark of
200 patients with a group of 3 aged 90+, two groups of close size (20 and 22) and 5 patients without a recorded
sex, run twice against the mock server; in the second release 4 requests of the 22-patient group fail. Which
groups are shown must be the same in both releases and on every surface a viewer can reach (the store's tables
that the dashboard and the report read, the report itself, a redacted export's CSVs, `medhelm compare
--subgroups`), every shown group must hold at least 11 patients of the data, and the shown groups must add up
to the benchmark's total, so that no subtraction (total minus shown, one release minus the other) isolates
fewer than 11 patients."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from medhelm.devtools.mock_openai import MockHTTPError, MockOpenAIServer
from medhelm.store import open_store
from medhelm.store.subgroups import NOT_RECORDED, read_subgroups

# (age band, patients): 90+ is the group an attacker wants; 0-17 (20) and 18-39 (22) are close in size, so a
# rule on scored counts picks a different complement when 4 of the 22 fail
BANDS = (("40-64", 95), ("65-89", 60), ("18-39", 22), ("0-17", 20), ("90+", 3))
FAILED = {f"p{i}" for i in range(155, 159)}  # four patients aged 18-39


def _write(tmp: Path) -> tuple[Path, dict[str, dict[str, str]]]:
    data, labels = tmp / "data.csv", {}
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "note", "age_band", "sex", "correct_answer"])
        i = 0
        for band, n in BANDS:
            for _ in range(n):
                sex = "" if i % 40 == 7 else "F" if i % 2 else "M"  # 5 patients without a recorded sex
                w.writerow([f"p{i}", f"patient {i} aged {band}", band, sex, "Yes" if i % 3 else "No"])
                labels[f"p{i}"] = {"age_band": band, "sex": sex or NOT_RECORDED}
                i += 1
    (tmp / "prompt.txt").write_text("Answer Yes or No. {note}\n")
    (tmp / "sg.yaml").write_text("name: SG\nprompt_file: prompt.txt\ndataset_file: data.csv\nmax_tokens: 2\n"
                                 "metrics:\n  - name: exact_match\nsubgroups: [age_band, sex]\n")
    return data, labels


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("disclosure")
    _, labels = _write(tmp)
    local, out, store = tmp / "prod", tmp / "out", tmp / "store.sqlite"
    local.mkdir()
    for suite, fail in (("r1", False), ("r2", True)):
        def answer(body: dict, fail: bool = fail) -> str:
            text = json.dumps(body.get("messages"))
            if fail and any(f"patient {p[1:]} aged" in text for p in FAILED):
                raise MockHTTPError(400, "refused")  # not retried: the instance is recorded as failed
            return "Yes"  # a model that always answers Yes: a group's accuracy is its share of Yes diagnoses

        with MockOpenAIServer(responder=answer) as srv:
            (local / "model_deployments.yaml").write_text(
                "model_deployments:\n  - name: mock/m\n    model_name: test/m\n    kind: openai\n"
                f"    base_url: {srv.base_url}\n    served_model_name: m\n    max_sequence_length: 4096\n")
            entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={tmp / 'sg.yaml'}"
            cli(["run", "--run-entries", entry, "--suite", suite, "-o", str(out), "--local-path", str(local),
                 "--disable-cache", "-q"])
        assert cli(["summarize", "--suite", suite, "--release", suite, "-o", str(out), "--local-path", str(local),
                    "--store", str(store), "--bootstrap", "200"]) == 0
    return {"tmp": tmp, "store": store, "labels": labels}


def _population(labels: dict, attribute: str, cell: str) -> int:
    members = set(cell.split(" + "))
    return sum(1 for v in labels.values() if v[attribute] in members)


def _check_cells(groups: dict[str, dict[str, int]], labels: dict, total: int) -> None:
    """attribute -> shown group -> scored n: every group holds >= 11 patients, and they add up to the total."""
    for attribute, shown in groups.items():
        assert all(_population(labels, attribute, g) >= 11 for g in shown), shown
        assert sum(shown.values()) == total, (attribute, shown, total)  # total minus shown: nothing left
        named = {m for g in shown for m in g.split(" + ")}
        assert named == {v[attribute] for v in labels.values()}  # every patient is in exactly one shown group


def test_the_failed_requests_changed_the_scored_counts(releases: dict) -> None:
    with open_store(str(releases["store"])) as store:
        cells = {r: store.query("SELECT n_instances, n_unscored FROM cells WHERE release = ?", (r,))[0]
                 for r in ("r1", "r2")}
    assert cells == {"r1": (200, 0), "r2": (196, 4)}


def test_every_release_shows_the_same_groups_and_they_add_up(releases: dict) -> None:
    shown = {}
    with open_store(str(releases["store"])) as store:
        for release, total in (("r1", 200), ("r2", 196)):
            scores, gaps = read_subgroups(store, release)  # what the dashboard's Equity page and the report read
            groups: dict[str, dict[str, int]] = {}
            for s in scores:
                groups.setdefault(s["attribute"], {})[s["grp"]] = s["n"]
            _check_cells(groups, releases["labels"], total)
            shown[release] = {a: sorted(g) for a, g in groups.items()}
    assert shown["r1"] == shown["r2"]
    assert shown["r1"]["age_band"] == ["0-17 + 90+", "18-39", "40-64", "65-89"]  # 90+ pooled with the next smallest
    # the 5 patients without a recorded sex do not hide the women: they are pooled with them
    assert shown["r1"]["sex"] == ["F + not recorded", "M"]


def test_compare_and_the_export_show_the_same_groups(releases: dict, tmp_path: Path, capsys) -> None:
    store = str(releases["store"])
    code = cli(["compare", "--release", "r1", "--release", "r2", "--subgroups", "--json", "--store", store,
                "--bootstrap", "200"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    pairs: dict[str, dict[str, int]] = {}
    for r in doc["subgroups"]["results"]:
        pairs.setdefault(r["attribute"], {})[r["group"]] = r["n_pairs"]
    _check_cells(pairs, releases["labels"], 196)  # the pairs both releases scored
    for release, total in (("r1", 200), ("r2", 196)):
        bundle = tmp_path / release
        assert cli(["export", str(bundle), "--redact", "--release", release, "--store", store]) == 0
        with open(bundle / "subgroup_scores.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        groups: dict[str, dict[str, int]] = {}
        for r in rows:
            groups.setdefault(r["attribute"], {})[r["grp"]] = int(r["n"])
        _check_cells(groups, releases["labels"], total)
        assert {a: sorted(g) for a, g in groups.items()} == {a: sorted(g) for a, g in pairs.items()}


def test_the_report_shows_only_the_pooled_groups(releases: dict, tmp_path: Path) -> None:
    html = tmp_path / "r2.html"
    assert cli(["report", "--release", "r2", "--against", "r1", "--out", str(html), "--store",
                str(releases["store"]), "--bootstrap", "200"]) == 0
    text = html.read_text()
    for cell in ("0-17 + 90+", "18-39", "40-64", "65-89", "F + not recorded", "M"):
        assert f">{cell}<" in text, cell
    for alone in ("90+", "0-17", "F", NOT_RECORDED, "(blank)"):
        assert f">{alone}<" not in text, alone
    counts = Counter(v["age_band"] for v in releases["labels"].values())
    assert counts["90+"] == 3 and counts["0-17"] + counts["90+"] >= 11
