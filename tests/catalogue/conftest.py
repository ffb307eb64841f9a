"""Catalogue fixtures: an air-gapped mirror made of symlinks to the real data slices (never copies)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from medhelm.benchmarks import LoadContext, resolve
from medhelm.specs import FrozenMap

# mirror path (benchmark folder / upstream file name) -> real slice under ../shared/data
MIRROR_LINKS = {
    "pubmed_qa/ori_pqal.json": "pubmedqa/ori_pqal_sample.json",
    "medcalc_bench/test_data.csv": "medcalc_bench/one_shot_data.csv",
    "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv": "medec/MEDEC-MS-TestSet-sample.csv",
    "aci_bench/clinicalnlp_taskB_test1_full.json": "aci_bench/clinicalnlp_taskB_test1_full.json",
}


@pytest.fixture(scope="session")
def mirror(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    for link, target in MIRROR_LINKS.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(shared_data / target)
    return root


@pytest.fixture
def load(mirror: Path, tmp_path: Path):
    """load(name, **args) -> (benchmark, instances) read offline through the mirror."""

    def _load(name: str, data_dir: Path | None = mirror, **args: str):
        ctx = LoadContext(args=FrozenMap(args), data_dir=data_dir, cache_dir=tmp_path / "cache", offline=True,
                          base_dir=tmp_path)
        bench = resolve(name, ctx)
        return bench, list(bench.instances())

    return _load


@pytest.fixture
def write_csv():
    """write_csv(path, rows) -> path: a CSV with the first row's keys as header, as the data's owners export it."""

    def _write(path: Path, rows: list[dict]) -> Path:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        return path

    return _write
