"""Context limits as real vLLM enforces them (--max-model-len 1024), for the candidate AND the judges, and
the jury with vLLM judges: our json_schema response_format is accepted and yields parseable scores.

ACI-Bench dialogues (from ../shared/data) are longer than 1024 tokens. A deployment that does not state
max_sequence_length gets the limit from vLLM's /v1/models; the candidate prompt and every judge prompt
are fitted to it. A deployment that claims a larger window than the server has gets an HTTP 400 per
instance for prompts that cannot be cut (a configurable benchmark's template): each is recorded as a
clear error and the run is reported "failed", never "complete"."""

from __future__ import annotations

import json

import pytest

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.engines.conftest import MAX_MODEL_LEN, medhelm, only_run, records, vllm_deployment, write_deployments

pytestmark = [pytest.mark.engines, pytest.mark.slow]

JUDGE_MAX_TOKENS = 360


def _jury(path):
    path.write_text(f"judges:\n  - name: vllm/judge\nmax_tokens: {JUDGE_MAX_TOKENS}\nstructured_output: true\n")
    return path


def test_aci_bench_candidate_and_judges_fit_the_servers_window(vllm, shared_data, tmp_path):
    local = tmp_path / "env"
    write_deployments(local, [vllm_deployment(vllm), vllm_deployment(vllm, name="vllm/judge")])
    jury = _jury(tmp_path / "jury.yaml")
    entry = (f"aci_bench:model=huggingface/smollm2-135m-instruct,subset=clinicalnlp_taskB_test1,"
             f"jury_config_path={jury}")
    proc = medhelm("run", "-r", entry, "--data-dir", str(shared_data), "--offline", "-m", "3",
                   "--num-output-tokens", "96", "-o", str(tmp_path / "out"), "--local-path", str(local), "-q")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run(tmp_path / "out")
    status = json.loads((run_dir / "run.json").read_text())
    assert status["status"] == "complete" and status["errors"] == 0
    recs = records(run_dir)
    assert len(recs) == 3
    judgements = [j for r in recs for j in r["judgements"]]
    for r in recs:
        assert r["error"] is None and r["prompt"]["truncated"] is True  # the dialogue was cut to fit
        assert r["completion"]["usage"]["prompt_tokens"] + 96 <= MAX_MODEL_LEN
    # no judge call was refused (HTTP 400 for length or for the response_format), and every judgement
    # is a score or an 'unscored' with its reason
    assert not [j for j in judgements if j["status"] == "error"], judgements
    ok = [j for j in judgements if j["status"] == "ok"]
    for j in ok:
        assert isinstance(j["score"], int) and 1 <= j["score"] <= 5
    for j in judgements:
        if j["status"] != "ok":
            # under guided decoding the output is JSON: an unscored verdict says why, never "no JSON object"
            # unless the output was cut at max_tokens, and then it says that
            assert j["explanation"].startswith("unscored: ") and "no JSON object" not in j["explanation"], j
    parse_rate = len(ok) / len(judgements)
    print(f"\nvLLM judge (json_schema response_format) parse rate: {len(ok)}/{len(judgements)}")
    assert parse_rate >= 0.5
    assert sum(r["judge_usage"]["prompt_tokens"] for r in recs) > 0


def test_a_window_larger_than_the_servers_fails_per_instance_and_the_run_is_failed(vllm, tmp_path):
    # synthetic notes of ~1,700 tokens each (no patient text); the deployment claims 32k, the server has 1024
    cfg = write_configurable_benchmark(tmp_path / "bench", 3, name="LONG_NOTES", max_tokens=8,
                                       prompt="Note: {note}\nQuestion: {question}\nAnswer Yes or No.")
    csv_path = cfg.parent / "dataset.csv"
    lines = csv_path.read_text().splitlines()
    filler = " ".join(f"Day {d}: vitals stable, ambulating, tolerating diet, pain 2/10." for d in range(120))
    csv_path.write_text("\n".join([lines[0]] + [line.replace("Synthetic note", filler, 1) for line in lines[1:]])
                        + "\n")
    local = tmp_path / "env"
    write_deployments(local, [vllm_deployment(vllm, max_sequence_length=32768)])
    entry = f"medhelm_configurable_benchmark:model=huggingface/smollm2-135m-instruct,config_path={cfg}"
    proc = medhelm("run", "-r", entry, "-o", str(tmp_path / "out"), "--local-path", str(local), "-q")
    assert proc.returncode == 2, proc.stderr
    assert "every instance failed" in proc.stderr and "HTTP 400" in proc.stderr
    assert "Traceback" not in proc.stderr and "vitals stable" not in proc.stderr
    run_dir = only_run(tmp_path / "out")
    status = json.loads((run_dir / "run.json").read_text())
    assert status["status"] == "failed" and status["errors"] == 3 == status["instances_done"]
    for r in records(run_dir):
        assert r["completion"] is None and "HTTP 400" in r["error"] and "maximum context length" in r["error"]
