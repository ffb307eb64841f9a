"""`medhelm list` / `medhelm describe` and the shipped run-entry confs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.benchmarks.catalogue import all_entries, get_entry
from medhelm.cli import main
from medhelm.runentries import read_conf
from medhelm.taxonomy import SUBCATEGORIES

CONF_DIR = Path(__file__).resolve().parents[2] / "services/medhelm/config/run_entries"


def test_list_groups_by_taxonomy_and_shows_where_data_comes_from(mirror, capsys):
    assert main(["list", "--data-dir", str(mirror)]) == 0
    out = capsys.readouterr().out
    for sub in SUBCATEGORIES:
        assert f"  {sub}\n" in out
    line = next(l for l in out.splitlines() if l.strip().startswith("pubmed_qa "))
    assert "public" in line and line.rstrip().endswith("mirror")
    assert next(l for l in out.splitlines() if l.strip().startswith("head_qa ")).rstrip().endswith("download")
    assert next(l for l in out.splitlines() if l.strip().startswith("mimic_rrs ")).rstrip().endswith("data_path")
    entries = all_entries()
    by_access = {a: sum(e.access.value == a for e in entries) for a in ("public", "gated", "private")}
    assert (f"{len(entries)} benchmarks ({by_access['public']} public, {by_access['gated']} gated, "
            f"{by_access['private']} private)") in out


def test_list_json_filters_by_access(capsys):
    assert main(["list", "--access", "gated", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 7 and {r["access"] for r in rows} == {"gated"}


def test_describe_shows_data_expectations(capsys):
    assert main(["describe", "dischargeme"]) == 0
    out = capsys.readouterr().out
    assert "discharge_target.csv.gz" in out and "physionet.org" in out and "jury_score" in out
    assert main(["describe", "medec"]) == 0
    assert "<data-dir>/medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv" in capsys.readouterr().out


def test_describe_unknown_is_exit_2_with_a_suggestion():
    proc = subprocess.run([sys.executable, "-m", "medhelm", "describe", "pubmedqa"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("medhelm: error: unknown benchmark 'pubmedqa'; did you mean 'pubmed_qa'")
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("conf,count,access", [
    ("run_entries_medhelm_public.conf", 17, "public"),
    ("run_entries_medhelm_gated.conf", 11, "gated"),
    ("run_entries_medhelm_private_template.conf", 26, "private"),
])
def test_shipped_confs_parse_and_name_valid_benchmarks_and_args(conf, count, access):
    entries = read_conf(CONF_DIR / conf)
    assert len(entries) == count
    for e in entries:
        entry = get_entry(e.name)
        assert entry.access.value == access
        entry.check_args(e.benchmark_args)  # every argument accepted, required ones present
    assert {e.name for e in entries} == {x.name for x in all_entries() if x.access.value == access}


def test_validate_plans_the_public_conf_offline_from_the_mirror(mirror, tmp_path):
    """`medhelm validate --conf-paths` on the shipped public conf: the mirrored benchmarks plan; the others
    fail offline with the files to copy (one line, exit 2)."""
    proc = subprocess.run([sys.executable, "-m", "medhelm", "validate", "--conf-paths",
                           str(CONF_DIR / "run_entries_medhelm_public.conf"), "--data-dir", str(mirror),
                           "--offline", "-o", str(tmp_path / "out"), "--local-path", str(tmp_path / "env")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("medhelm: error:") and "\n" not in err and "data not available offline" in err
