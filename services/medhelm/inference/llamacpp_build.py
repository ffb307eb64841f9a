"""How llama-cpp-python is compiled for the embedded model: the one owner of its portable CMAKE_ARGS.

llama-cpp-python has no Linux wheel on PyPI, so every install compiles llama.cpp. llama.cpp's own default,
``GGML_NATIVE``, compiles ggml for ``-march=native``: every instruction the build host advertises, AMX and
AVX-512 included, with no dispatch at run time. Such a library dies by SIGILL on any CPU that lacks one of
them, and on a host that advertises AMX but does not run it; pip then caches that wheel for every later
install. So the embedded runtime is compiled for a fixed baseline instead:

* x86-64: x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2) — every x86 server CPU since 2013/2015 (Intel Haswell, AMD
  Excavator/Zen); no AVX-512, no AMX. What a 135M model on 2 cores gives up by it is measured in
  ``bench/bench_llama_build.py`` (docs/benchmarks.md, "llama-cpp-python build").
* any other architecture: ``GGML_NATIVE=OFF`` (the compiler's baseline for it, e.g. armv8-a with NEON).

A CPU below the baseline is caught at run time by ``llamacpp_check`` (the model answers one prompt in a child
process first), which prints the rebuild command from ``rebuild_command``. A user's own ``CMAKE_ARGS`` (e.g.
``-DGGML_CUDA=on``) replaces these in the scripts; the check still guards it.

Run as a script it prints the arguments for this machine (scripts/_env.sh reads them before medhelm is
installed), so it imports nothing but the standard library.
"""

from __future__ import annotations

import platform
import sys

_X86 = ("x86_64", "amd64", "i686", "i386")

# x86-64-v3, stated in full: llama.cpp's defaults for these options have changed between its releases.
X86_64_V3 = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
             "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF",
             "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")
# Below the baseline (an x86 CPU without AVX2): SSE 4.2 only.
X86_64_V2 = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF", "-DGGML_F16C=OFF",
             "-DGGML_BMI2=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF",
             "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")
# What x86-64-v3 needs, as /proc/cpuinfo names the flags.
V3_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})


def portable_args(machine: str | None = None) -> tuple[str, ...]:
    """The CMAKE_ARGS of the portable build for ``machine`` (default: this one's ``platform.machine()``)."""
    machine = (machine or platform.machine()).lower()
    return X86_64_V3 if machine in _X86 else ("-DGGML_NATIVE=OFF",)


def args_for_cpu(flags: frozenset[str] | None, machine: str | None = None) -> tuple[str, ...]:
    """The portable arguments, or SSE-only ones for an x86 CPU whose ``flags`` lack part of x86-64-v3."""
    args = portable_args(machine)
    if args is X86_64_V3 and flags is not None and not V3_FLAGS <= flags:
        return X86_64_V2
    return args


def rebuild_command(python: str, version: str, args: tuple[str, ...]) -> str:
    """The shell command that replaces the installed llama-cpp-python with a build made with ``args``
    (``--no-cache-dir``: pip's wheel cache is keyed by the source, not by CMAKE_ARGS, and would hand back
    the old build)."""
    return (f'CMAKE_ARGS="{" ".join(args)}" {python} -m pip install --force-reinstall --no-deps --no-cache-dir '
            f'"llama-cpp-python=={version}"')


if __name__ == "__main__":
    print(" ".join(portable_args(sys.argv[1] if len(sys.argv) > 1 else None)))
