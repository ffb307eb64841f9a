"""Review fixtures: a summarised store whose candidate models carry a planted, distinctive name (the
blinding tests look for it everywhere a clinician's session could receive it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm.store.synthetic import SyntheticModel, catalogue, write_suite
from tests.leaderboard.conftest import postgres_url  # noqa: F401 - the shared scratch PostgreSQL fixture
from tests.leaderboard.helpers import run_cli

PLANTED = "ZEPHYRQX"  # in every candidate model and deployment name: a clinician must never receive it
MODELS = [SyntheticModel(f"acme/{PLANTED}-large", f"acme/{PLANTED}-large-vllm", 0.8),
          SyntheticModel(f"acme/{PLANTED}-small", f"acme/{PLANTED}-small-vllm", 0.3)]
JURY_BENCH = "mtsamples_replicate"  # open-ended: three synthetic judges, criterion accuracy 1-5
BENCHES = [JURY_BENCH, "medcalc_bench"]
INSTANCES = 6

ACCESS_YAML = """\
groups_claim: groups
roles:
  viewer: [medhelm-viewers]
  analyst: [medhelm-analysts]
  admin: [medhelm-admins]
  clinician: [clinical-reviewers]
default_role: none
"""


def write_output(out: Path, *, store: str | None = None) -> Path:
    write_suite(out, "local", MODELS, catalogue(names=BENCHES), INSTANCES)
    args = ["summarize", "--suites", "local", "-o", str(out), "--bootstrap", "20"]
    code, _, err = run_cli(*args, *(["--store", store] if store else []))
    assert code == 0, err
    return out


@pytest.fixture
def review_output(tmp_path: Path) -> Path:
    """A fresh store per test (ratings are written): 2 models x (1 jury + 1 exact-match benchmark) x 6."""
    return write_output(tmp_path / "out")
