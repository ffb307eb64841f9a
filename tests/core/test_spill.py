"""medhelm/spill.py: sorted runs written to one unlinked temporary file come back whole and in order."""

import heapq
import random
from array import array

import pytest

from medhelm import spill
from medhelm.spill import RunFile


@pytest.mark.parametrize("merge_bytes", [spill.MERGE_BYTES, 1])  # blocks of 4,096 rows; of 64 (several a run)
def test_runs_merge_back_to_every_row_in_order(tmp_path, monkeypatch, merge_bytes):
    monkeypatch.setattr(spill, "MERGE_BYTES", merge_bytes)
    rng = random.Random(5)
    runs = RunFile("qQI", tmp_path)
    rows = []
    for _ in range(30):
        run = sorted((rng.randrange(-2**40, 2**40), rng.randrange(2**63), rng.randrange(2**32))
                     for _ in range(rng.randrange(1, 300)))
        rows.extend(run)
        runs.append([array(t, (r[i] for r in run)) for i, t in enumerate("qQI")])
    assert len(runs) == 30 and len(list(tmp_path.iterdir())) == 0  # unlinked: nothing left in the folder
    assert list(heapq.merge(*runs.runs())) == sorted(rows)
    runs.close()


def test_one_column_comes_back_as_plain_values_and_a_failed_run_is_not_listed(tmp_path):
    runs = RunFile("Q", tmp_path)
    runs.append([array("Q", [1, 5, 9])])
    runs.append([array("Q", [2, 3])])
    assert list(heapq.merge(*runs.runs())) == [1, 2, 3, 5, 9]
    runs.close()
    nowhere = RunFile("Q", tmp_path / "missing")
    with pytest.raises(OSError):
        nowhere.append([array("Q", [1])])
    assert len(nowhere) == 0 and nowhere.runs() == []
