"""`subgroups=` on a catalogue benchmark reading private data: shc_ptbm_med (upstream's PTBM file layout:
prompt, context, label, plus the hospital's demographic columns) run against the mock server with
`subgroups=age_band+sex`; the per-subgroup scores in the store match pandas on the same rows, small groups are
suppressed, the report shows them; a column missing from the file's header stops the run at planning with one
line naming the file and the column, before anything is written."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from medhelm.devtools.mock_openai import MockOpenAIServer
from medhelm.store import open_store
from medhelm.store.subgroups import read_subgroups
from tests.leaderboard.subgroup_helpers import MARKER

pd = pytest.importorskip("pandas")

# (age band, rows): 30 + 24 shown; the 4 blank cells ('not recorded') are pooled with '0-5' (12), the next smallest
BANDS = (("6-11", 30), ("12-17", 24), ("0-5", 12), ("", 4))


def _write_ptbm(path: Path) -> None:
    """Rows shaped like upstream's medhelm-PTBM-dataset_filtered.csv, with two demographic columns and an
    identifier column the benchmark does not read."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["patient_id", "prompt", "context", "label", "age_band", "sex"])
        i = 0
        for band, n in BANDS:
            for _ in range(n):
                note = (f"{MARKER} Visit note of patient {i}. Band {band or 'unknown'}. Parent reports inattention "
                        "at school; clinician discussed behavioral strategies.")
                w.writerow([f"MRN{i:05d}", "Was parent training in behavior management recommended?", note,
                            "A" if i % 3 else "B", band, "F" if i % 2 else "M"])
                i += 1


def _answer(body: dict) -> str:
    """Right for the 6-11 band (the label), wrong for every other patient."""
    text = json.dumps(body.get("messages"))
    m = re.search(r"patient (\d+)\.", text)
    i = int(m.group(1))
    right = "A" if i % 3 else "B"
    return right if "Band 6-11" in text else ("B" if right == "A" else "A")


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("cat_sub")
    data = tmp / "ptbm.csv"
    _write_ptbm(data)
    local, out = tmp / "prod", tmp / "out"
    local.mkdir()
    with MockOpenAIServer(responder=_answer) as srv:
        (local / "model_deployments.yaml").write_text(
            "model_deployments:\n  - name: mock/m\n    model_name: test/m\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: m\n    max_sequence_length: 4096\n")
        entry = f"shc_ptbm_med:data_path={data},subgroups=age_band+sex,model=test/m,model_deployment=mock/m"
        assert cli(["run", "--run-entries", entry, "--suite", "sg", "-o", str(out), "--local-path", str(local),
                    "--disable-cache", "-q"]) == 0
    store = tmp / "store.sqlite"
    assert cli(["summarize", "--suite", "sg", "--release", "r1", "-o", str(out), "--local-path", str(local),
                "--store", str(store), "--bootstrap", "300"]) == 0
    return {"tmp": tmp, "data": data, "out": out, "local": local, "store": store}


def test_instances_carry_their_labels_and_scores_match_pandas(ran: dict) -> None:
    records = [json.loads(line) for p in ran["out"].rglob("*.jsonl") for line in p.read_text().splitlines()
               if line.strip() and '"instance"' in line]
    labelled = [r["instance"]["subgroups"] for r in records if "subgroups" in r.get("instance", {})]
    assert len(labelled) == 70 and {"age_band": "(blank)", "sex": "M"} in labelled
    frame = pd.read_csv(ran["data"], keep_default_na=False)
    frame["right"] = (frame["age_band"] == "6-11").astype(float)  # what the mock answers right
    # one small cell (not recorded, 4) is pooled with the next smallest (0-5, 12): shown as one group of 16
    frame["age_band"] = frame["age_band"].replace({"": "0-5 + not recorded", "0-5": "0-5 + not recorded"})
    with open_store(str(ran["store"])) as store:
        scores, gaps = read_subgroups(store, "r1")
    got = {(s["attribute"], s["grp"]): (s["n"], s["value"]) for s in scores}
    for attribute in ("age_band", "sex"):
        shown = frame.groupby(attribute)["right"].agg(["count", "mean"])
        assert {g for a, g in got if a == attribute} == set(shown.index)
        for group, row in shown.iterrows():
            n, value = got[(attribute, group)]
            assert n == row["count"] and value == pytest.approx(row["mean"])
    gap = {g["attribute"]: g for g in gaps}
    assert gap["age_band"]["gap"] == pytest.approx(1.0) and gap["age_band"]["n_suppressed"] == 2
    assert gap["age_band"]["n_groups"] == 3
    assert gap["age_band"]["high_group"] == "6-11" and gap["age_band"]["low_group"] == "0-5 + not recorded"
    assert gap["age_band"]["p_holm"] < 0.05


def test_the_report_shows_them_without_the_small_groups_or_the_marker(ran: dict) -> None:
    out = ran["tmp"] / "report.html"
    assert cli(["report", "--release", "r1", "--out", str(out), "--store", str(ran["store"])]) == 0
    page = out.read_text()
    section = page[page.index("Performance by patient subgroup"):page.index("Provenance")]
    assert "by age_band" in section and ">6-11<" in section and ">12-17<" in section
    assert ">0-5 + not recorded<" in section
    assert ">0-5<" not in page and ">not recorded<" not in page and "(blank)" not in page
    assert MARKER not in page and "MRN0" not in page


def test_a_missing_column_stops_the_run_at_planning(ran: dict, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    entry = f"shc_ptbm_med:data_path={ran['data']},subgroups=age_band+race,model=test/m,model_deployment=mock/m"
    assert cli(["run", "--run-entries", entry, "--suite", "x", "-o", str(out), "--local-path", str(ran["local"]),
                "--disable-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(ran["data"]) in err and "'race'" in err and "subgroups=" in err
    assert not out.exists() or not any(out.rglob("*.json*"))  # nothing written
    for bad, says in (("age_band+", "an empty column name"), ("sex+sex", "named twice")):
        entry = f"shc_ptbm_med:data_path={ran['data']},subgroups={bad},model=test/m,model_deployment=mock/m"
        assert cli(["run", "--run-entries", entry, "--suite", "x", "-o", str(out), "--local-path",
                    str(ran["local"]), "--disable-cache", "-q"]) == 2
        assert says in capsys.readouterr().err


def test_free_text_in_a_subgroup_column_is_refused_without_echoing_it(ran: dict, tmp_path: Path, capsys) -> None:
    data = tmp_path / "ptbm.csv"
    rows = ran["data"].read_text().splitlines()
    # the 'sex' column of line 3 holds a sentence (a patient's words, say): refused by line and column
    cells = next(csv.reader([rows[2]]))
    cells[5] = f"{MARKER} lives with grandmother since the divorce, mother visits on weekends only"
    rows[2] = ",".join(f'"{c}"' for c in cells)
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    entry = f"shc_ptbm_med:data_path={data},subgroups=sex,model=test/m,model_deployment=mock/m"
    assert cli(["run", "--run-entries", entry, "--suite", "x", "-o", str(out), "--local-path", str(ran["local"]),
                "--disable-cache", "-q"]) == 2
    err = capsys.readouterr().err
    assert "subgroup column 'sex'" in err and ":3" in err and MARKER not in err and "grandmother" not in err


def test_only_single_file_private_benchmarks_take_it(ran: dict, capsys) -> None:
    from medhelm.benchmarks.catalogue import all_entries
    from medhelm.benchmarks.entry import SUBGROUPS

    taking = sorted(e.name for e in all_entries() if SUBGROUPS in e.args)
    assert len(taking) == 14 and all(e.startswith(("shc_", "chw_", "starr_", "mental_", "clear")) for e in taking)
    entry = (f"mimic_bhc:data_path={ran['tmp']},subgroups=age_band,model=test/m,model_deployment=mock/m")
    assert cli(["run", "--run-entries", entry, "--suite", "x", "-o", str(ran["tmp"] / "o2"), "--local-path",
                str(ran["local"]), "--disable-cache", "-q"]) == 2
    assert "does not accept 'subgroups='" in capsys.readouterr().err


def test_clear_takes_subgroups_from_its_condition_sheet(ran: dict, tmp_path: Path, capsys) -> None:
    """CLEAR reads one spreadsheet per condition: the subgroup columns are that sheet's; a missing one stops the
    run at planning naming the sheet's file, before anything is written."""
    openpyxl = pytest.importorskip("openpyxl")
    from medhelm.benchmarks import LoadContext, resolve
    from medhelm.specs import FrozenMap

    wb = openpyxl.Workbook()
    wb.active.append(["text", "result_human", "sex", "site"])
    for i in range(6):
        wb.active.append([f"{MARKER} note {i}", i % 3, "F" if i % 2 else "M", "north"])
    wb.save(tmp_path / "homelessness.xlsx")
    args = {"data_path": str(tmp_path), "condition": "homelessness", "subgroups": "sex+site"}
    insts = list(resolve("clear", LoadContext(args=FrozenMap(args), offline=True, base_dir=tmp_path)).instances())
    assert [dict(i.subgroups) for i in insts] == [{"sex": "F" if i % 2 else "M", "site": "north"} for i in range(6)]
    out = tmp_path / "out"
    entry = (f"clear:condition=homelessness,data_path={tmp_path},subgroups=sex+age_band,model=test/m,"
             "model_deployment=mock/m")
    assert cli(["run", "--run-entries", entry, "--suite", "x", "-o", str(out), "--local-path", str(ran["local"]),
                "--disable-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "homelessness.xlsx" in err[0] and "'age_band'" in err[0] and MARKER not in err[0]
    assert not out.exists() or not any(out.rglob("*.jsonl"))
