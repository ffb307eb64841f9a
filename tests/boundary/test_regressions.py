"""One regression test per family of issue #18 (the fuzzing report), each through the real CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from medhelm.devtools.fixtures import write_openai_deployment
from medhelm.devtools.mock_openai import MockOpenAIServer
from tests.boundary.conftest import (MARKER, SECRET, assert_bad_input, entry, run_cli, snapshot)
from tests.conftest import refusing_port

SMOL = "local/smollm2-135m-instruct"
JURY_METRIC = "  - name: jury_score\n    rubric: aci_bench\n"


def deployments(tmp_path: Path, body: str) -> Path:
    local = tmp_path / "prod_env"
    local.mkdir(exist_ok=True)
    (local / "model_deployments.yaml").write_text(body)
    return local


def openai_item(name: str = "mine/model", **over: str) -> str:
    fields = {"name": name, "model_name": "test/model", "kind": "openai", "base_url": f"http://127.0.0.1:{refusing_port()}/v1",
              "max_sequence_length": "4096", **over}
    return "  - " + "\n    ".join(f"{k}: {v}" for k, v in fields.items()) + "\n"


# ---------------------------------------------------------------------------------------- 1. patient text


@pytest.mark.parametrize("command", ["validate", "run"])
def test_csv_without_header_row_never_echoes_the_row(tmp_path: Path, bench: Path, command: str) -> None:
    csv = bench.parent / "dataset.csv"
    csv.write_text("\n".join(csv.read_text().splitlines()[1:]) + "\n")  # drop the header: row 1 becomes it
    out = tmp_path / "out"
    r = run_cli([command, "--run-entries", entry(bench), "--output-path", out, "--max-eval-instances", "2"],
                cwd=tmp_path)
    line = assert_bad_input(r, names=csv, out=out)
    assert "header" in line and "column(s)" in line


def test_jury_only_benchmark_without_header_names_expected_columns(tmp_path: Path, bench: Path) -> None:
    bench.write_text(bench.read_text().replace("  - name: exact_match\n", JURY_METRIC))
    csv = bench.parent / "dataset.csv"
    csv.write_text("\n".join(csv.read_text().splitlines()[1:]) + "\n")
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=csv, contains="expected: note, question")


def test_dataset_file_in_proc_never_prints_the_environment(tmp_path: Path, bench: Path) -> None:
    bench.write_text(bench.read_text().replace("dataset_file: dataset.csv", "dataset_file: /proc/self/environ"))
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=None)
    assert "ZQX_API_KEY" not in r.stderr


def test_duplicate_header_names_are_not_echoed(tmp_path: Path, bench: Path) -> None:
    csv = bench.parent / "dataset.csv"
    csv.write_text(f"{MARKER},{MARKER},x\n1,2,3\n")
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=csv, contains="same name")


# ------------------------------------------------------------------------------------------ 2. data loss


def _mock_run(tmp_path: Path, bench: Path, instances: int):
    """``medhelm run -q`` of suite s1 against the mock OpenAI-compatible server answering Yes: (out, result)."""
    with MockOpenAIServer(responder=lambda body: "Yes") as server:
        local = tmp_path / "prod_env"
        write_openai_deployment(local, server.base_url, name="mock/yes", model_name="test/yes-model")
        out = tmp_path / "out"
        r = run_cli(["run", "--run-entries", entry(bench, "mock/yes"), "--suite", "s1", "--output-path", out,
                     "--local-path", local, "--max-eval-instances", str(instances), "--quiet"], cwd=tmp_path)
    assert r.code == 0, r.stderr
    return out, r


@pytest.fixture
def finished(tmp_path: Path, bench: Path) -> Path:
    """A real finished run (the CLI against the mock OpenAI-compatible server, 3 instances), summarized."""
    out, _ = _mock_run(tmp_path, bench, 3)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10"], cwd=tmp_path)
    assert r.code == 0, r.stderr
    return out


def test_summarize_never_replaces_a_release_with_an_empty_or_smaller_one(tmp_path: Path, finished: Path) -> None:
    out = finished
    run_dir = next((out / "runs" / "s1").iterdir())
    store = out / "results.sqlite"
    before = snapshot(out)
    # the suite's only run is damaged (run_spec.json gone): the release must stay as it was
    (run_dir / "run_spec.json").rename(run_dir / "run_spec.json.bak")
    after_rename = snapshot(out)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10"], cwd=tmp_path)
    line = assert_bad_input(r, names=None, out=out, before=after_rename, contains="left unchanged")
    assert "no complete run" in line
    assert run_dir.name[:20] in r.stderr  # the damaged run is named (in a note)
    (run_dir / "run_spec.json.bak").rename(run_dir / "run_spec.json")
    assert snapshot(out) == before
    con = sqlite3.connect(store)
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1


def test_empty_records_of_a_finished_run_are_named(tmp_path: Path, finished: Path) -> None:
    out = finished
    run_dir = next((out / "runs" / "s1").iterdir())
    (run_dir / "instances.jsonl").write_text("")
    before = snapshot(out)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10"], cwd=tmp_path)
    assert_bad_input(r, names=None, out=out, before=before, contains="instances.jsonl holds 0")


# ------------------------------------------------------------------------------------ 3. denial of service

BOMB = "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10) if i else 'a, a, a, a, a, a, a, a, a, a'}]\n"
               for i in range(9))


def test_yaml_alias_bomb_in_deployment_options(tmp_path: Path, bench: Path) -> None:
    local = deployments(tmp_path, BOMB + "model_deployments:\n" + openai_item() + "    options: {big: *x8}\n")
    r = run_cli(["validate", "--run-entries", entry(bench, "mine/model"), "--local-path", local], cwd=tmp_path)
    assert_bad_input(r, names=local / "model_deployments.yaml", contains="expands to more than")


def test_yaml_alias_bomb_in_metric_arguments(tmp_path: Path, bench: Path) -> None:
    bench.write_text(BOMB + bench.read_text().replace("  - name: exact_match\n", "  - name: exact_match\n    x: *x8\n"))
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=bench, contains="expands to more than")


def test_huge_format_width_in_a_prompt_is_refused(tmp_path: Path, bench: Path) -> None:
    prompt = bench.parent / "prompt.txt"
    prompt.write_text("Note: {note:>999999999}\nQuestion: {question}")
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=f"{prompt}:1", contains="width or precision")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "dir", "loop"])
def test_special_files_as_config_files(tmp_path: Path, bench: Path, special: str) -> None:
    target = tmp_path / "special.yaml"
    if special == "fifo":
        os.mkfifo(target)
    elif special == "dir":
        target.mkdir()
    elif special == "loop":
        os.symlink(tmp_path / "loop2", target)
        os.symlink(target, tmp_path / "loop2")
    else:
        target = Path(special)
    for args in (["validate", "--run-entries", entry(target)], ["validate", "--conf-paths", target],
                 ["summarize", "--suites", "x", "--prices", target, "--output-path", tmp_path]):
        if args[0] == "summarize":
            (tmp_path / "runs" / "x").mkdir(parents=True, exist_ok=True)
        r = run_cli(args, cwd=tmp_path)
        assert_bad_input(r, names=target)


def test_conf_with_20000_entries_reads_the_benchmark_once(tmp_path: Path, bench: Path) -> None:
    conf = tmp_path / "many.conf"
    conf.write_text("entries: [\n" + "".join(
        f'  {{description: "medhelm_configurable_benchmark:model={SMOL},config_path={bench}", priority: {1 + i % 3}}}\n'
        for i in range(20_000)) + "]\n")
    r = run_cli(["run", "--conf-paths", conf, "--output-path", tmp_path / "out", "--dry-run"], cwd=tmp_path)
    assert r.code == 0, r.stderr[-500:]  # within run_cli's hang bound
    # "once" counted, not timed: the same plan in this process, every benchmark load recorded
    from medhelm.benchmarks import configurable
    from medhelm.cli import main

    loads = []
    real = configurable.load_configurable
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(configurable, "load_configurable", lambda ctx: loads.append(ctx) or real(ctx))
        assert main(["run", "--conf-paths", str(conf), "--output-path", str(tmp_path / "out2"), "--dry-run",
                     "-q"]) == 0
    assert len(loads) == 1


# --------------------------------------------------------------------------- 4. writes outside the output


@pytest.mark.parametrize("suite", ["../x", "/abs/path", "a/b", "..", "~root", "x\ny"])
def test_suite_names_stay_under_the_output_folder(tmp_path: Path, bench: Path, suite: str) -> None:
    out = tmp_path / "out"
    r = run_cli(["run", "--run-entries", entry(bench), "--suite", suite, "--output-path", out], cwd=tmp_path)
    assert_bad_input(r, names=None, out=out, contains="--suite")
    assert not (tmp_path / "x").exists()
    r = run_cli(["summarize", "--suites", suite, "--output-path", out], cwd=tmp_path)
    assert_bad_input(r, names=None, out=out, contains="--suites")


# ------------------------------------------------------------------------------ 5. half-written results


@pytest.mark.parametrize("field,value,says", [
    ("base_url", "[1, 2]", "must be text"), ("served_model_name", "{a: 1}", "must be text"),
    ("api_key_env", "3", "must be text"), ("timeout_s", "'30'", "must be a number"),
    ("timeout_s", ".inf", "finite"), ("options", "[1]", "mapping"), ("base_url", "ftp://host/v1", "http"),
    ("base_url", "127.0.0.1:8000/v1", "http"), ("name", "123", "must be text"), ("max_concurrency", "0", "greater"),
    ("surprise", "1", "unknown key"), ("api_key_env", "'sk-abc def'", "NAME of an environment variable"),
])
def test_deployment_of_the_wrong_type_fails_before_writing(tmp_path: Path, bench: Path, field: str, value: str,
                                                           says: str) -> None:
    local = deployments(tmp_path, "model_deployments:\n" + openai_item(**{field: value}))
    out = tmp_path / "out"
    model = "123" if field == "name" else "mine/model"
    r = run_cli(["run", "--run-entries", entry(bench, model), "--local-path", local, "--output-path", out],
                cwd=tmp_path)
    line = assert_bad_input(r, names=f"{local / 'model_deployments.yaml'}:", out=out, contains=says)
    assert f"model_deployments[0].{field}" in line


def test_missing_key_variable_and_gguf_found_before_writing(tmp_path: Path, bench: Path) -> None:
    local = deployments(tmp_path, "model_deployments:\n" + openai_item(api_key_env="ZQX_NOT_SET")
                        + "  - name: mine/gguf\n    model_name: test/gguf\n    kind: llamacpp\n"
                          "    gguf_path: missing.gguf\n")
    out = tmp_path / "out"
    r = run_cli(["run", "--run-entries", entry(bench, "mine/model"), "--local-path", local, "--output-path", out],
                cwd=tmp_path)
    assert_bad_input(r, names=None, out=out, contains="ZQX_NOT_SET")
    r = run_cli(["run", "--run-entries", entry(bench, "mine/gguf"), "--local-path", local, "--output-path", out],
                cwd=tmp_path)
    assert_bad_input(r, names="missing.gguf", out=out, contains="GGUF")


def test_summarize_refuses_an_unrelated_sqlite_file(tmp_path: Path) -> None:
    (tmp_path / "runs" / "s").mkdir(parents=True)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE patients (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    before = snapshot(tmp_path)
    r = run_cli(["summarize", "--suites", "s", "--output-path", tmp_path, "--store", f"sqlite:///{other}"],
                cwd=tmp_path)
    assert_bad_input(r, names=other, out=tmp_path, before=before, contains="not a MedHELM results store")


# ----------------------------------------------------------------------------------- 6. silently wrong


def test_max_tokens_beyond_the_context_is_an_error(tmp_path: Path, bench: Path) -> None:
    r = run_cli(["validate", "--run-entries", entry(bench, extra=",max_tokens=1000000000")], cwd=tmp_path)
    assert_bad_input(r, names=None, contains="no room for the prompt")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400"])
def test_temperature_must_be_a_real_temperature(tmp_path: Path, bench: Path, value: str) -> None:
    r = run_cli(["validate", "--run-entries", entry(bench, extra=f",temperature={value}")], cwd=tmp_path)
    assert_bad_input(r, names=None, contains="temperature")


def test_infinite_judge_weight_is_an_error(tmp_path: Path, bench: Path) -> None:
    jury = tmp_path / "jury.yaml"
    jury.write_text(f"judges:\n  - name: {SMOL}\n    weight: .inf\n")
    bench.write_text(bench.read_text().replace("  - name: exact_match\n", JURY_METRIC))
    r = run_cli(["validate", "--run-entries", entry(bench, extra=f",jury_config_path={jury}")], cwd=tmp_path)
    assert_bad_input(r, names=jury, contains="weight")


def test_duplicate_yaml_keys_and_deployment_names_are_refused(tmp_path: Path, bench: Path) -> None:
    bench.write_text(bench.read_text() + "max_tokens: 3\n")
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=bench, contains="duplicate key 'max_tokens'")
    local = deployments(tmp_path, "model_deployments:\n" + openai_item() + openai_item())
    r = run_cli(["validate", "--run-entries", entry(bench, "mine/model"), "--local-path", local], cwd=tmp_path)
    assert_bad_input(r, names=local / "model_deployments.yaml", contains="defined twice")


@pytest.mark.parametrize("flags", [["serve", "scenarios", "--port", "-5"], ["serve", "scenarios", "--port", "70000"],
                                   ["summarize", "--suites", "s", "--bootstrap", "1000000000"],
                                   ["summarize", "--suites", "s", "--seed", "-1"], ["run", "--seed", "-1"],
                                   ["run", "--num-threads", "0"], ["nonsense"], ["run", "--no-such-flag"]])
def test_absurd_flags_are_one_usage_line(tmp_path: Path, flags: list[str]) -> None:
    r = run_cli(flags, cwd=tmp_path)
    assert_bad_input(r, names=None)
    assert "usage:" not in r.stderr


def test_local_path_that_is_a_file_or_missing(tmp_path: Path, bench: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_cli(["validate", "--run-entries", entry(bench, "mine/model"), "--local-path", afile], cwd=tmp_path)
    assert_bad_input(r, names=afile, contains="--local-path must be a folder")
    r = run_cli(["validate", "--run-entries", entry(bench, "mine/model"), "--local-path", tmp_path / "nope"],
                cwd=tmp_path)
    assert_bad_input(r, names=None, contains="does not exist")


# ------------------------------------------------------------------------------------------ 7. tracebacks


def _fake_run(out: Path, suite: str = "s") -> Path:
    run = out / "runs" / suite / "bench:model=m"
    run.mkdir(parents=True)
    return run


@pytest.mark.parametrize("name,content", [
    ("run_spec.json", "[1, 2]"), ("run_spec.json", '{"entry": 5}'), ("run_spec.json", "[" * 5000 + "]" * 5000),
    ("run_spec.json", "1" * 5000), ("run_spec.json", "\xff\xfe garbage"), ("run_spec.json", ""),
])
def test_corrupt_run_folders_are_one_line(tmp_path: Path, name: str, content: str) -> None:
    run = _fake_run(tmp_path)
    (run / name).write_bytes(content.encode("latin-1"))
    before = snapshot(tmp_path)
    r = run_cli(["summarize", "--suites", "s", "--output-path", tmp_path], cwd=tmp_path)
    assert_bad_input(r, names=run / name, out=tmp_path, before=before)


@pytest.mark.parametrize("name,content", [("run.json", "[]"), ("stats.json", '{"a": 1}'),
                                          ("instances.jsonl", '{"stats": 5}\n'), ("instances.jsonl", "[[[[\n")])
def test_wrong_shapes_in_a_finished_run(tmp_path: Path, finished: Path, name: str, content: str) -> None:
    out = finished
    run_dir = next((out / "runs" / "s1").iterdir())
    (run_dir / name).write_text(content)
    before = snapshot(out)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10"], cwd=tmp_path)
    assert_bad_input(r, names=run_dir / name, out=out, before=before)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "text"])
def test_corrupt_store_is_one_line(tmp_path: Path, damage: str) -> None:
    store = tmp_path / "results.sqlite"
    con = sqlite3.connect(store)
    con.execute("CREATE TABLE meta (release TEXT, key TEXT, value TEXT)")
    con.executemany("INSERT INTO meta VALUES (?, ?, ?)", [(str(i), "k", "v" * 500) for i in range(2000)])
    con.commit()
    con.close()
    data = store.read_bytes()
    if damage == "truncate":
        store.write_bytes(data[: len(data) // 3])
    elif damage == "garbage":
        store.write_bytes(data[:100] + os.urandom(4096) + data[4196:])
    else:
        store.write_text("not a database at all\n")
    before = snapshot(tmp_path)
    for args in (["export", tmp_path / "bundle", "--store", store],
                 ["summarize", "--suites", "s", "--output-path", tmp_path, "--store", store]):
        (tmp_path / "runs" / "s").mkdir(parents=True, exist_ok=True)
        before = snapshot(tmp_path)
        r = run_cli(args, cwd=tmp_path)
        assert_bad_input(r, names=store, out=tmp_path, before=before)


def test_unknown_conversion_in_a_prompt(tmp_path: Path, bench: Path) -> None:
    prompt = bench.parent / "prompt.txt"
    prompt.write_text("Note: {note!x}\nQuestion: {question}")
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=f"{prompt}:1", contains="unknown conversion")


def test_unreadable_tls_files(tmp_path: Path) -> None:
    r = run_cli(["serve", "scenarios", "--port", "0", "--metrics-port", "-1", "--tls-cert", tmp_path,
                 "--tls-key", tmp_path / "nokey.pem"], cwd=tmp_path)
    assert_bad_input(r, names=None, contains="--tls-")


def test_newline_in_a_path_does_not_split_the_line(tmp_path: Path) -> None:
    weird = tmp_path / "a\nb.conf"
    r = run_cli(["validate", "--conf-paths", weird], cwd=tmp_path)
    assert_bad_input(r, names="a\\nb.conf")


# ------------------------------------------------------------------------------------- the last resort


def test_a_bug_is_one_line_exit_70_and_a_log_without_instance_text(tmp_path: Path, monkeypatch, capsys) -> None:
    from medhelm import cli
    from medhelm.cli import run as run_module

    def broken(args):
        raise KeyError(f"{MARKER} note text")  # a bug whose message holds instance text

    monkeypatch.setattr(run_module, "main_validate", broken)
    monkeypatch.setenv("MEDHELM_LOG_DIR", str(tmp_path / "logs"))
    code = cli.main(["validate", "--run-entries", "x"])
    err = capsys.readouterr().err
    assert code == 70
    assert len(err.strip().splitlines()) == 1 and "internal error in `medhelm validate`" in err
    assert MARKER not in err and "Traceback" not in err
    logs = list((tmp_path / "logs").iterdir())
    assert len(logs) == 1 and str(logs[0]) in err
    text = logs[0].read_text()
    assert "KeyError" in text and "test_regressions.py" in text and MARKER not in text
    assert oct(logs[0].stat().st_mode & 0o777) == "0o600"


def test_the_cli_entry_point_uses_the_same_python(tmp_path: Path) -> None:
    r = run_cli(["--version"], cwd=tmp_path)
    assert r.code == 0 and "medhelm" in r.stdout, (sys.executable, r.stderr)


def test_control_characters_and_overlong_run_names_in_a_conf(tmp_path: Path, bench: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text('entries: [{description: "medhelm_configurable_benchmark:config_path=x\\u0000,a=\x00b", '
                    'priority: 1}]\n')
    r = run_cli(["validate", "--conf-paths", conf], cwd=tmp_path)
    assert_bad_input(r, names=conf)
    out = tmp_path / "out"
    long_name = "mine/" + "x" * 300
    local = deployments(tmp_path, "model_deployments:\n" + openai_item(long_name))
    r = run_cli(["run", "--run-entries", entry(bench, long_name), "--output-path", out, "--local-path", local],
                cwd=tmp_path)
    assert_bad_input(r, names=None, out=out, contains="255 bytes")


# ------------------------------------------------------------------------------------ a Job template file

JOB = ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
       "      containers:\n        - name: medhelm\n          image: medhelm:1\n          args: [job]\n")


@pytest.mark.parametrize("body,says", [
    (JOB.replace("      containers:\n        - name: medhelm\n          image: medhelm:1\n          args: [job]\n",
                 "      containers: []\n"), "containers"),
    (JOB.replace("args: [job]", "args: job"), "args"), (JOB.replace("args: [job]", "env: [{value: 1}]"), "env[0].name"),
    (JOB.replace("metadata: {name: x}", "metadata: 5"), "metadata"), (BOMB + JOB, "expands to more than"),
    (JOB + "---\n" + JOB, "no job template"), ("kind: Job\nspec: [\n", "invalid YAML"),
])
def test_a_job_template_of_another_shape_is_one_line(tmp_path: Path, body: str, says: str) -> None:
    template = tmp_path / "job.yaml"
    template.write_text(body)
    r = run_cli(["k8s", "submit", "--suite", "s", "--job-template", template, "-r", "pubmed_qa", "--dry-run"],
                cwd=tmp_path)
    assert_bad_input(r, names=template if says != "no job template" else None, contains=says)


@pytest.mark.parametrize("special", ["fifo", "dir"])
def test_prompt_path_and_token_files_go_through_the_one_reader(tmp_path: Path, special: str) -> None:
    target = tmp_path / "special.txt"
    if special == "fifo":
        os.mkfifo(target)  # read naively, this blocks forever
    else:
        target.mkdir()
    r = run_cli(["validate", "--run-entries", f"pubmed_qa:model={SMOL},prompt_path={target}"], cwd=tmp_path)
    assert_bad_input(r, names=target, contains="prompt file")
    r = run_cli(["serve", "scenarios", "--port", "0", "--metrics-port", "-1", "--caller-tokens", target],
                cwd=tmp_path)
    assert_bad_input(r, names=target, contains="caller-token file")


def test_a_name_too_long_for_the_file_system_is_one_line(tmp_path: Path) -> None:
    long_name = "a" * 300  # found by the fuzz: Path.exists() raises ENAMETOOLONG instead of answering
    r = run_cli(["validate", "--run-entries", f"medhelm_configurable_benchmark:config_path={long_name}"], cwd=tmp_path)
    assert_bad_input(r, names=long_name, contains="too long")
    r = run_cli(["validate", "--run-entries", f"pubmed_qa:model={SMOL}", "--local-path", long_name], cwd=tmp_path)
    assert_bad_input(r, names=long_name, contains="too long")


# ------------------------------------------------------------------- issue 30: every input bounded (A-D)


def _edit_first_record(run_dir: Path, edit) -> None:
    lines = (run_dir / "instances.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    edit(record)
    lines[0] = json.dumps(record)
    (run_dir / "instances.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("edit,says", [
    (lambda d: d["completion"]["usage"].update(prompt_tokens=-10 ** 30), "completion.usage.prompt_tokens"),
    (lambda d: d["completion"]["usage"].update(latency_s="slow"), "latency_s"),
    (lambda d: d.update(error=["a", "list"]), "'error'"),
    (lambda d: d["stats"].update({next(iter(d["stats"])): "high"}), "must be a number or null"),
    (lambda d: d.update(position=1.5), "'position'"),
])
def test_record_fields_of_the_wrong_type_are_one_line(tmp_path: Path, finished: Path, edit, says: str) -> None:
    run_dir = next((finished / "runs" / "s1").iterdir())
    _edit_first_record(run_dir, edit)
    before = snapshot(finished)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", finished, "--bootstrap", "10"], cwd=tmp_path)
    assert_bad_input(r, names=f"{run_dir / 'instances.jsonl'}:1", out=finished, before=before, contains=says)


@pytest.mark.parametrize("name,field,value", [("run_spec.json", "deployment", {"a": 1}),
                                              ("run_spec.json", "model", 5),
                                              ("run.json", "wall_time_s", "long"),
                                              ("run.json", "instances_done", -3)])
def test_run_files_fields_of_the_wrong_type_are_one_line(tmp_path: Path, finished: Path, name: str, field: str,
                                                         value: object) -> None:
    run_dir = next((finished / "runs" / "s1").iterdir())
    doc = json.loads((run_dir / name).read_text())
    doc[field] = value
    (run_dir / name).write_text(json.dumps(doc))
    before = snapshot(finished)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", finished, "--bootstrap", "10"], cwd=tmp_path)
    assert_bad_input(r, names=run_dir / name, out=finished, before=before, contains=field)


# explicit ids: the cell itself as an id (200,000 characters) exceeds what one environment string may hold
# (pytest puts the id in PYTEST_CURRENT_TEST, which every subprocess inherits: E2BIG)
@pytest.mark.parametrize("cell", ["[" + "1" * 5000 + "]", "[" * 100_000 + "]" * 100_000], ids=["long", "deep"])
def test_incorrect_answers_cell_too_deep_or_too_long_is_one_line(tmp_path: Path, bench: Path, cell: str) -> None:
    csv_path = bench.parent / "dataset.csv"
    lines = csv_path.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + f',"{cell}"'  # row 1's incorrect_answers (the last column)
    csv_path.write_text("\n".join(lines) + "\n")
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=csv_path, contains="incorrect_answers")


def test_rubric_criteria_json_too_deep_is_one_line(tmp_path: Path, bench: Path) -> None:
    judge_prompt = bench.parent / "judge.txt"
    judge_prompt.write_text("Q: {QUESTION}\nR: {RESPONSE}\nScore 0 to 5.\n<rubric_criteria>"
                            + "[" * 100_000 + "]" * 100_000 + "</rubric_criteria>\n")
    bench.write_text(bench.read_text().replace("  - name: exact_match\n",
                                               "  - name: jury_score\n    prompt_file: judge.txt\n"))
    r = run_cli(["validate", "--run-entries", entry(bench)], cwd=tmp_path)
    assert_bad_input(r, names=judge_prompt, contains="rubric_criteria")


def test_unclosed_ipv6_bracket_in_base_url_found_before_writing(tmp_path: Path, bench: Path) -> None:
    local = deployments(tmp_path, "model_deployments:\n" + openai_item(base_url="'http://[::1:8000/v1'"))
    out = tmp_path / "out"
    r = run_cli(["run", "--run-entries", entry(bench, "mine/model"), "--local-path", local, "--output-path", out],
                cwd=tmp_path)
    assert_bad_input(r, names=local / "model_deployments.yaml", out=out, contains="IPv6")


def test_store_url_of_another_scheme_is_refused_not_a_folder(tmp_path: Path, finished: Path) -> None:
    before = snapshot(tmp_path)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", finished, "--store", "mysql://x/y"], cwd=tmp_path)
    assert_bad_input(r, names=None, out=tmp_path, before=before, contains="mysql://")
    assert not (tmp_path / "mysql:").exists()


def test_refused_summarize_keeps_a_dangling_symlink_store_and_an_older_store_as_they_were(
        tmp_path: Path, finished: Path) -> None:
    (finished / "runs" / "empty").mkdir()
    link = tmp_path / "link.sqlite"
    os.symlink(tmp_path / "target.sqlite", link)
    r = run_cli(["summarize", "--suites", "empty", "--output-path", finished, "--store", link], cwd=tmp_path)
    assert_bad_input(r, names=None, contains="no complete run")
    assert link.is_symlink() and not (tmp_path / "target.sqlite").exists()
    # an older store (made before the ratings table existed): a refused summarize must not add it
    store = finished / "results.sqlite"
    con = sqlite3.connect(store)
    con.execute("DROP INDEX IF EXISTS review_by_benchmark")
    con.execute("DROP TABLE review_ratings")
    con.execute("UPDATE meta SET value = '1' WHERE release = '' AND key = 'schema_version'")  # (schema v1)
    con.commit()
    con.close()
    before = snapshot(finished)
    r = run_cli(["summarize", "--suites", "empty", "--output-path", finished], cwd=tmp_path)
    assert_bad_input(r, names=None, out=finished, before=before, contains="no complete run")
    r = run_cli(["summarize", "--suites", "s1", "--output-path", finished, "--bootstrap", "10"], cwd=tmp_path)
    assert r.code == 0, r.stderr  # a summarize that succeeds adds it, in its own transaction
    con = sqlite3.connect(store)
    assert con.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'review_ratings'").fetchone()[0] == 1


def test_a_cell_cut_to_fit_the_context_is_recorded_once(tmp_path: Path, bench: Path) -> None:
    import csv

    rows = list(csv.reader((bench.parent / "dataset.csv").open(newline="")))
    cell = " ".join(f"Visit {i}: {MARKER} BP {110 + i % 40}/70, creatinine {1 + i % 9}.{i % 10}."
                    for i in range(110_000))
    rows[1][1] = cell  # the note of the first row: ~5 MB, far past a 4,096-token window
    with (bench.parent / "dataset.csv").open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    out, r = _mock_run(tmp_path, bench, 6)
    assert "1 of 6 prompt(s) were cut to fit the context window" in r.stderr
    (run_dir,) = (out / "runs" / "s1").iterdir()
    lines = (run_dir / "instances.jsonl").read_text().splitlines()
    [big] = [line for line in lines if MARKER in line and len(line) > len(cell)]
    record = json.loads(big)
    assert record["instance"]["input"].count(cell) == 1 and record["instance"]["extra"] == {}
    assert record["prompt"]["truncated"] and len(record["prompt"]["messages"][0]["content"]) < 40_000
    assert len(big.encode()) < 1.01 * len(cell.encode())  # the cell once (it was 2 x: input and extra)
    small = [json.loads(line) for line in lines if line != big]
    assert all(d["instance"]["extra"] == {} and "Question: Is item" in d["instance"]["input"] for d in small)
    r = run_cli(["summarize", "--suites", "s1", "--output-path", out, "--bootstrap", "10"], cwd=tmp_path)
    assert r.code == 0, r.stderr
    con = sqlite3.connect(out / "results.sqlite")
    (stored,) = con.execute("SELECT MAX(LENGTH(CAST(record_json AS BLOB))) FROM instances").fetchone()
    assert stored < 1.01 * len(cell.encode())


@pytest.mark.parametrize("pragma,says", [("PRAGMA query_only = 1", "read-only"),
                                         ("PRAGMA max_page_count = 1", "no space")])
def test_a_store_that_cannot_be_written_says_so_not_damaged(tmp_path: Path, pragma: str, says: str) -> None:
    from medhelm.errors import OutputUnwritable
    from medhelm.store import open_store

    with open_store(tmp_path / "results.sqlite", create=True) as store:
        store._conn.execute(pragma)  # what a read-only folder or a full disk does to SQLite's writes
        with pytest.raises(OutputUnwritable) as err:
            with store.transaction():
                store.insert_many("meta", ("release", "key", "value"), [("r", "k", "v" * 100_000)])
    assert says in str(err.value) and "damaged" not in str(err.value) and err.value.exit_code == 74


# -------------------------------------------------------------------------------------- HELM imports


def _helm_suite(tmp_path: Path) -> Path:
    from tests.leaderboard.test_import_helm import _helm_run

    suite = tmp_path / "helm" / "runs" / "v1"
    _helm_run(suite, "pubmed_qa", "openai/gpt-4o", [1, 1, 0, 1], "exact_match", ["pubmed_qa"])
    _helm_run(suite, "med_dialog,subset=icliniq", "openai/gpt-4o", [5, 4, 3], "med_dialog_accuracy", ["med_dialog"])
    return suite


def _helm_file(suite: Path, head: str, name: str) -> Path:
    return next(d for d in suite.iterdir() if d.name.startswith(head)) / name


@pytest.mark.parametrize("damage,says", [
    ("fifo", "not a regular file"), ("devzero", "not a regular file"), ("dir", "is a folder"),
    ("empty", "lists no instance"),
])
def test_helm_per_instance_file_of_another_kind_is_named_not_dropped(tmp_path: Path, damage: str, says: str) -> None:
    suite = _helm_suite(tmp_path)
    target = _helm_file(suite, "pubmed_qa", "per_instance_stats.json")
    target.unlink()
    if damage == "fifo":
        os.mkfifo(target)
    elif damage == "devzero":
        os.symlink("/dev/zero", target)
    elif damage == "dir":
        target.mkdir()
    else:
        target.write_text("[]")
    out = tmp_path / "out"
    r = run_cli(["import-helm", suite, "--output-path", out], cwd=tmp_path)
    assert_bad_input(r, names=target, out=out, contains=says)


@pytest.mark.parametrize("edit,says", [
    (lambda s: s[0].update(sum=None), "'sum' is missing or null"), (lambda s: s[0].update(count="one"), "'count'"),
    (lambda s: s[0].update(count=1.5), "'count'"), (lambda s: s[0].update(mean=[1]), "'mean'"),
    (lambda s: s[0].update(count=10 ** 400), "'count'"), (lambda s: s[0].update(sum=-10 ** 400), "'sum'"),
])
def test_helm_stats_that_are_not_numbers_are_errors_not_zero(tmp_path: Path, edit, says: str) -> None:
    suite = _helm_suite(tmp_path)
    stats = _helm_file(suite, "pubmed_qa", "stats.json")
    doc = json.loads(stats.read_text())
    edit(doc)
    stats.write_text(json.dumps(doc))
    out = tmp_path / "out"
    r = run_cli(["import-helm", suite, "--output-path", out], cwd=tmp_path)
    assert_bad_input(r, names=stats, out=out, contains=says)


@pytest.mark.parametrize("value", ["'a lot'", "1.5", "-2", "[1]"])
def test_helm_max_tokens_not_a_whole_number(tmp_path: Path, value: str) -> None:
    suite = _helm_suite(tmp_path)
    spec_file = _helm_file(suite, "pubmed_qa", "run_spec.json")
    spec = json.loads(spec_file.read_text())
    spec["adapter_spec"]["max_tokens"] = json.loads(value.replace("'", '"'))
    spec_file.write_text(json.dumps(spec))
    out = tmp_path / "out"
    r = run_cli(["import-helm", suite, "--output-path", out], cwd=tmp_path)
    assert_bad_input(r, names=spec_file, out=out, contains="adapter_spec.max_tokens")


def test_helm_folder_without_run_spec_is_named_in_a_note(tmp_path: Path) -> None:
    suite = _helm_suite(tmp_path)
    (suite / "half_copied_run").mkdir()
    (suite / "half_copied_run" / "stats.json").write_text("[]")
    r = run_cli(["import-helm", suite, "--output-path", tmp_path / "out", "--bootstrap", "10"], cwd=tmp_path)
    assert r.code == 0, r.stderr
    assert "note: skipped half_copied_run: no run_spec.json" in r.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder whatever its mode")
def test_unreadable_helm_suite_folder_is_one_line(tmp_path: Path) -> None:
    suite = _helm_suite(tmp_path)
    suite.chmod(0)
    try:
        r = run_cli(["import-helm", suite, "--output-path", tmp_path / "out"], cwd=tmp_path)
        assert_bad_input(r, names=suite, contains="cannot read")
    finally:
        suite.chmod(0o755)


@pytest.mark.parametrize("where", ["/proc/self/medhelm-out", "/dev/null/out"])
def test_output_path_that_cannot_hold_files_is_one_line(tmp_path: Path, bench: Path, where: str) -> None:
    local = deployments(tmp_path, "model_deployments:\n" + openai_item())
    r = run_cli(["run", "--run-entries", entry(bench, "mine/model"), "--local-path", local, "--output-path", where],
                cwd=tmp_path)
    assert_bad_input(r, names=where, contains="--output-path")
    r = run_cli(["import-helm", _helm_suite(tmp_path), "--output-path", where], cwd=tmp_path)
    assert_bad_input(r, names=None, contains="cannot")


@pytest.mark.parametrize("name", ["per_instance_stats.json", "scenario_state.json"])
def test_helm_streamed_file_nested_100k_deep_is_one_line_within_the_memory_cap(tmp_path: Path, name: str) -> None:
    suite = _helm_suite(tmp_path)
    target = _helm_file(suite, "pubmed_qa", name)
    opener = '{"request_states": ' if name == "scenario_state.json" else ""
    target.write_text(opener + '[{"instance_id": "a", "stats": ' + "[" * 100_000 + "]" * 100_000 + "}]"
                      + ("}" if opener else ""))
    out = tmp_path / "out"
    r = run_cli(["import-helm", suite, "--output-path", out], cwd=tmp_path)  # under 1 GiB of address space
    assert_bad_input(r, names=target, out=out, contains="nested too deeply")


def test_json_depth_guard_skips_strings_and_escapes(tmp_path: Path) -> None:
    from medhelm.errors import ConfigError
    from medhelm.files import check_json_stream_depth

    cases = {'[["a"]]': 2, '["\\\\"]': 1, '["\\"[[[", 1]': 1, '[[["\\\\\\"["]]]': 3, '"[[["': 0,
             '{"k[": [{"v\\\\": "]]]"}]}': 3}
    for text, depth in cases.items():
        (tmp_path / "x.json").write_text(text)
        for chunk in (1, 2, 3, 4096):  # strings, escapes and brackets split across reads
            check_json_stream_depth(tmp_path / "x.json", limit=depth, chunk=chunk)
            if depth:
                with pytest.raises(ConfigError, match="nested too deeply"):
                    check_json_stream_depth(tmp_path / "x.json", limit=depth - 1, chunk=chunk)


@pytest.mark.parametrize("jury", ["default", "file", "no judges"])
def test_unreachable_or_missing_judges_found_before_the_candidate_runs(tmp_path: Path, bench: Path,
                                                                       jury: str) -> None:
    import socket

    closed = socket.socket()  # bound, never listening: a refused port that stays refused
    closed.bind(("127.0.0.1", 0))
    try:
        with MockOpenAIServer(responder=lambda body: "Yes") as server:
            local = tmp_path / "prod_env"
            write_openai_deployment(local, server.base_url, name="mock/yes", model_name="test/yes-model")
            with open(local / "model_deployments.yaml", "a") as f:
                f.write(openai_item("judge/down", base_url=f"http://127.0.0.1:{closed.getsockname()[1]}/v1"))
            if jury == "no judges":
                bench.write_text(bench.read_text().replace("  - name: exact_match\n",
                                                           JURY_METRIC + "    judges: []\n"))
                extra = ""
            else:
                bench.write_text(bench.read_text().replace("  - name: exact_match\n", JURY_METRIC))
                (tmp_path / "jury.yaml").write_text("judges:\n  - name: judge/down\n")
                extra = ",jury_config_path=" + ("default" if jury == "default" else str(tmp_path / "jury.yaml"))
            out = tmp_path / "out"
            r = run_cli(["run", "--run-entries", entry(bench, "mock/yes", extra), "--local-path", local,
                         "--output-path", out, "--max-eval-instances", "2"], cwd=tmp_path)
            says = "judges" if jury == "no judges" else "cannot be reached"
            assert_bad_input(r, names=None, out=out, contains=says)
            assert server.request_count == 0  # the candidate was never asked
    finally:
        closed.close()


@pytest.mark.parametrize("flag", ["--metrics-port", "--port", "--health-port"])
def test_serve_on_a_busy_port_names_the_port_and_the_flag(tmp_path: Path, flag: str) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        ports = {"--port": "0", "--metrics-port": "-1", flag: port}
        r = run_cli(["serve", "scenarios", *[x for kv in ports.items() for x in kv]], cwd=tmp_path)
    line = assert_bad_input(r, names=None, contains=f":{port}")
    assert f"with {flag}" in line


def test_leaderboard_on_a_busy_port_names_the_port_before_anything_is_written(tmp_path: Path) -> None:
    import socket

    store = tmp_path / "new" / "results.sqlite"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        r = run_cli(["serve", "--store", store, "--create-store", "--port", port], cwd=tmp_path)
    line = assert_bad_input(r, names=None, contains=f"127.0.0.1:{port}")
    assert "with --port" in line and not store.parent.exists()


def test_prompts_cut_to_fit_are_said_also_under_quiet(tmp_path: Path, bench: Path) -> None:
    csv_path = bench.parent / "dataset.csv"
    lines = csv_path.read_text().splitlines()
    lines[1] = lines[1].replace(f"{MARKER} note", f"{MARKER} note " + "word " * 20_000, 1)  # one long cell
    csv_path.write_text("\n".join(lines) + "\n")
    with MockOpenAIServer(responder=lambda body: "Yes") as server:
        local = tmp_path / "prod_env"
        write_openai_deployment(local, server.base_url, name="mock/yes", model_name="test/yes-model",
                                max_sequence_length=512)
        r = run_cli(["run", "--run-entries", entry(bench, "mock/yes"), "--output-path", tmp_path / "out",
                     "--local-path", local, "--max-eval-instances", "6", "--quiet"], cwd=tmp_path)
    assert r.code == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "cut to fit the context window" in ln]
    assert len(notes) == 1 and "1 of 6 prompt(s)" in notes[0] and MARKER not in r.stderr


def test_a_15_mb_run_entry_in_a_conf_is_refused_within_a_few_times_its_size(tmp_path: Path) -> None:
    """Issue 30 F: the tokenizer's string pattern kept a backtracking frame per character (4.1 GB peak for
    15 MB); now memory stays within a few times the file (traced allocations, deterministic)."""
    import tracemalloc

    from medhelm.errors import ConfigError
    from medhelm.runentries import read_conf

    conf = tmp_path / "big.conf"
    size = 15_000_000
    conf.write_text('entries: [{description: "medhelm_configurable_benchmark:config_path=' + "a" * size
                    + '", priority: 1}]\n')
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="more than 4000 characters"):
            read_conf(conf)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 6 * size, peak


def test_yaml_with_one_10_mb_line_parses_within_a_few_times_its_size(tmp_path: Path) -> None:
    import tracemalloc

    from medhelm.files import load_yaml

    size = 10_000_000
    (tmp_path / "big.yaml").write_text("name: " + "b" * size + "\n")
    tracemalloc.start()
    try:
        assert len(load_yaml(tmp_path / "big.yaml")["name"]) == size
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * size, peak


def test_helm_per_instance_file_read_within_a_few_times_its_size(tmp_path: Path) -> None:
    import tracemalloc

    from medhelm.store.helm_stats import per_instance

    stats = [{"name": {"name": f"m{j}", "split": "test"}, "count": 1, "sum": 0.5, "sum_squared": 0.25, "min": 0.5,
              "max": 0.5, "mean": 0.5} for j in range(4)]
    path = tmp_path / "per_instance_stats.json"
    path.write_text(json.dumps([{"instance_id": f"id{i}", "train_trial_index": 0, "stats": stats}
                                for i in range(40_000)]))
    size = path.stat().st_size  # 22 MB
    tracemalloc.start()
    try:
        merged = per_instance(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(merged) == 40_000 and merged["id7"] == {f"m{j}": 0.5 for j in range(4)}
    assert peak < 2 * size, peak
