"""The CLI keeps a benchmark YAML's files under its folder (or --data-root) unless --allow-any-data-path,
and never prints a file's content in an error (`medhelm validate`, in-process, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm.confine import confined
from medhelm.devtools.fixtures import write_configurable_benchmark, write_openai_deployment
from medhelm.errors import ConfigError
from tests.leaderboard.helpers import run_cli

SECRET = "SECRET-FIRST-LINE:root:x:0:0"


@pytest.fixture
def layout(tmp_path: Path, refused_url: str) -> dict:
    bench = tmp_path / "bench"
    cfg = write_configurable_benchmark(bench, 6)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "passwd").write_text(SECRET + "\nsecond line\n")
    (outside / "prompt.txt").write_text("Outside prompt {note} {question}")
    write_configurable_benchmark(outside / "data", 6)
    local = tmp_path / "prod_env"
    write_openai_deployment(local, f"{refused_url}/v1", name="mock/m", model_name="test/m")
    return {"bench": bench, "cfg": cfg, "outside": outside, "local": local, "tmp": tmp_path}


def _validate(layout: dict, *extra: str) -> tuple[int, str]:
    code, out, err = run_cli("validate", "-r", f"medhelm_configurable_benchmark:model=mock/m,config_path={layout['cfg']}",
                             "--local-path", str(layout["local"]), "-o", str(layout["tmp"] / "out"), *extra)
    return code, out + err


def _set(cfg: Path, key: str, value: str) -> None:
    lines = [f"{key}: {value}" if line.startswith(f"{key}:") else line for line in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")


def test_yaml_files_stay_under_the_benchmark_folder(layout):
    assert _validate(layout)[0] == 0
    rel = "../elsewhere/passwd"
    for key, value in (("dataset_file", rel), ("dataset_file", str(layout["outside"] / "passwd")),
                       ("dataset_file", "../" * 12 + "etc/passwd"), ("prompt_file", "../elsewhere/prompt.txt")):
        original = layout["cfg"].read_text()
        _set(layout["cfg"], key, value)
        code, text = _validate(layout)
        assert code == 2, text
        assert "outside the benchmark's folder" in text and key in text and str(layout["cfg"]) in text
        assert SECRET not in text and "Traceback" not in text and len(text.strip().splitlines()) == 1
        layout["cfg"].write_text(original)
    # a symlink inside the folder that leads out is outside too
    (layout["bench"] / "link.csv").symlink_to(layout["outside"] / "data" / "dataset.csv")
    _set(layout["cfg"], "dataset_file", "link.csv")
    code, text = _validate(layout)
    assert code == 2 and "outside the benchmark's folder" in text


def test_data_root_and_explicit_flag_allow_other_folders(layout):
    _set(layout["cfg"], "dataset_file", str(layout["outside"] / "data" / "dataset.csv"))
    assert _validate(layout)[0] == 2
    assert _validate(layout, "--data-root", str(layout["outside"]))[0] == 0
    assert _validate(layout, "--allow-any-data-path")[0] == 0
    # allowed, but not a dataset: the error names the file and never prints its first line
    _set(layout["cfg"], "dataset_file", str(layout["outside"] / "passwd"))
    code, text = _validate(layout, "--allow-any-data-path")
    assert code == 2 and "passwd" in text and SECRET not in text and "root:x" not in text


def test_confined_refuses_escapes(tmp_path):
    root = tmp_path / "r"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.yaml").write_text("x")
    (tmp_path / "out.yaml").write_text("x")
    (root / "ln").symlink_to(tmp_path / "out.yaml")
    assert confined("a/f.yaml", [root], field="config_path") == (root / "a" / "f.yaml").resolve()
    assert confined(str(root / "a" / "f.yaml"), [root], field="config_path") == (root / "a" / "f.yaml").resolve()
    for bad in ("../out.yaml", str(tmp_path / "out.yaml"), "ln", "~/x", "a/../../out.yaml", "", "a\x00b"):
        with pytest.raises(ConfigError):
            confined(bad, [root], field="config_path")
    with pytest.raises(ConfigError, match="allowed no roots"):
        confined("a/f.yaml", [], field="config_path")
