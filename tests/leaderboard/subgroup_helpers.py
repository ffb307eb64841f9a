"""A suite whose benchmark names patient subgroups, run against the mock OpenAI server (tests of
store/subgroups.py and of `medhelm report`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from medhelm.cli import main as cli
from medhelm.devtools.mock_openai import MockOpenAIServer

MARKER = "PLANTED-MARKER-7f3a"  # in every instance's text: must never reach an aggregate-only output


def make_subgroup_suite(tmp: Path, *, subgroups: bool = True, suite: str = "s", right: tuple[str, ...] = ("old",),
                        ) -> dict:
    """A configurable benchmark of 60 patients: 30 'old', 24 'young', 6 'child' (a small cell) and a sex column,
    run against the mock server into ``suite``: the model answers right for the age bands in ``right`` only.
    Called again with another suite, the same files are reused."""
    data = tmp / "data.csv"
    if not data.exists():
        with open(data, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "note", "age_band", "sex", "correct_answer"])
            for i in range(60):
                band = "old" if i < 30 else "young" if i < 54 else "child"
                w.writerow([f"p{i}", f"{MARKER} {band} patient {i}", band, "F" if i % 2 else "M", "Yes"])
        (tmp / "prompt.txt").write_text("Answer Yes or No. {note}\n")
        (tmp / "prod").mkdir()
    cfg = tmp / "sg.yaml"
    cfg.write_text("name: SG\nprompt_file: prompt.txt\ndataset_file: data.csv\nmax_tokens: 2\n"
                   "metrics:\n  - name: exact_match\n" + ("subgroups: [age_band, sex]\n" if subgroups else ""))
    local, out = tmp / "prod", tmp / "out"

    def answer(body: dict) -> str:
        text = json.dumps(body.get("messages"))
        return "Yes" if any(f" {band} patient" in text for band in right) else "No"

    with MockOpenAIServer(responder=answer) as srv:
        (local / "model_deployments.yaml").write_text(
            "model_deployments:\n  - name: mock/m\n    model_name: test/m\n    kind: openai\n"
            f"    base_url: {srv.base_url}\n    served_model_name: m\n    max_sequence_length: 4096\n")
        entry = f"medhelm_configurable_benchmark:model=test/m,model_deployment=mock/m,config_path={cfg}"
        assert cli(["run", "--run-entries", entry, "--suite", suite, "-o", str(out), "--local-path", str(local),
                    "--disable-cache", "-q"]) == 0
    return {"out": out, "local": local, "store": tmp / "store.sqlite", "cfg": cfg}


def make_two_releases(tmp: Path) -> dict:
    """Two releases of the suite above in one store that keeps instance text (not redacted): 'accepted' (right
    for old patients only) and 'candidate' (right for old and young)."""
    s = make_subgroup_suite(tmp, suite="acc", right=("old",))
    make_subgroup_suite(tmp, suite="cand", right=("old", "young"))
    for suite, release in (("acc", "accepted"), ("cand", "candidate")):
        assert cli(["summarize", "--suite", suite, "--release", release, "-o", str(s["out"]), "--local-path",
                    str(s["local"]), "--store", str(s["store"]), "--bootstrap", "400"]) == 0
    return s
