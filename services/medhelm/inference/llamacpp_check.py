"""Does the embedded runtime run on this CPU? One short prompt answered in a child process, before any model
is loaded in ours.

A llama.cpp library compiled for instructions this CPU cannot execute (``-march=native`` on another host, an
AMX kernel on a host that advertises AMX but traps it) does not raise: the process dies by SIGILL at the
first prompt, mid-run, with nothing said. So before the embedded model is first loaded — at planning (the
run, ``validate``, the jury) and in ``LlamaCppClient.load`` — a child process loads the same library and
model and answers a fixed prompt (no instance text ever reaches it) with a few greedy tokens.

Failure semantics:
* the child dies by a signal: ``RuntimeUnusable`` (exit 69), one line naming the signal, the library's
  version, this CPU and the exact command that rebuilds the library portably (``llamacpp_build``); raised at
  planning, so nothing of the run is written.
* the child exits non-zero because llama.cpp cannot read the model file: a ``ConfigError`` naming the file
  (exit 2), as loading it in-process would say; with any other error it could state: ``RuntimeUnusable`` with
  that line.
* llama-cpp-python is not installed: no check (loading the model then says how to install it).
* a check that passed is remembered by a marker file keyed by the library's files (name, size, mtime), its
  version and this CPU's identity (``/proc/cpuinfo``'s vendor, model and flags): the next process on the
  same library and CPU pays nothing; a rebuilt library or another CPU is checked again. Failures are not
  remembered. The marker folder is ``$MEDHELM_CACHE_DIR`` or ``$XDG_CACHE_HOME/medhelm`` (``~/.cache``);
  where it cannot be written (a read-only container) the check simply runs once per process.
* ``fresh=True`` (``medhelm validate``) ignores the marker and checks again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from medhelm.errors import ConfigError, MedhelmError
from medhelm.inference import llamacpp_build

PROMPT = "Answer with one word: is aspirin a medicine?"
MAX_TOKENS = 4
CHILD_TIMEOUT_S = 900.0  # a loaded 2-core machine, or an emulated CPU, is slow; a hang is still bounded


class RuntimeUnusable(MedhelmError):
    """The embedded model's runtime cannot run here: not the user's input, and a retry will not help."""

    exit_code = 69  # EX_UNAVAILABLE


@dataclass(frozen=True)
class CheckResult:
    answer: str
    cached: bool  # found in a marker (or earlier in this process), not run now
    cpu: str

    @property
    def version(self) -> str:
        return _version()


_passed: set[str] = set()  # keys checked in this process (the marker may not be writable)
_results: list[CheckResult] = []  # what this process's checks found, for `validate` to print
_fresh = False  # `validate`: every check of this process runs the child, markers or not
_lock = threading.Lock()


def check_fresh() -> None:
    """Make this process's checks run the child whatever the markers say (``medhelm validate``)."""
    global _fresh
    with _lock:
        _fresh = True
        _passed.clear()


def results() -> list[CheckResult]:
    """The checks this process ran (or found remembered), in order."""
    with _lock:
        return list(_results)


def cpu_identity() -> tuple[str, frozenset[str] | None]:
    """A short description of this CPU and its flags (None where /proc/cpuinfo is not there)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part") \
                        and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break  # the first processor's block is enough
    except OSError:
        return f"{platform.machine()} {platform.processor()}".strip(), None
    flags = frozenset((fields.get("flags") or fields.get("Features") or "").split()) or None
    name = fields.get("model name") or fields.get("CPU part") or platform.processor() or "unknown CPU"
    return f"{name} ({platform.machine()})", flags


def library_dir() -> Path | None:
    """Where ``llama_cpp`` loads its shared libraries from (as it decides: ``LLAMA_CPP_LIB_PATH``, else its
    package's ``lib``), or None when llama-cpp-python is not installed."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    env = os.environ.get("LLAMA_CPP_LIB_PATH")
    return Path(env) if env else Path(list(spec.submodule_search_locations)[0]) / "lib"


def _version() -> str:
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _key(lib: Path, cpu: str, flags: frozenset[str] | None) -> str:
    h = hashlib.sha256()
    h.update(f"{_version()}\0{lib}\0{cpu}\0{' '.join(sorted(flags or ()))}\0".encode())
    try:
        entries = sorted(lib.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if any(part in entry.name for part in (".so", ".dylib", ".dll")):
            st = entry.stat()
            h.update(f"{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


def _marker_dir() -> Path:
    base = os.environ.get("MEDHELM_CACHE_DIR") or \
        os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "medhelm")
    return Path(base) / "runtime-checks"


def check_runtime(gguf: Path, *, n_threads: int = 1, fresh: bool = False,
                  launcher: tuple[str, ...] = (), timeout_s: float = CHILD_TIMEOUT_S) -> CheckResult | None:
    """Check that the installed llama.cpp answers a prompt with the model ``gguf`` on this CPU (see the module
    docstring). ``launcher`` prefixes the child's command (e.g. an emulator of another CPU). None when
    llama-cpp-python is not installed."""
    lib = library_dir()
    if lib is None:
        return None
    cpu, flags = cpu_identity()
    key = _key(lib, cpu, flags)
    marker = _marker_dir() / f"llama-{key}.ok"
    if not (fresh or _fresh) and not launcher:
        with _lock:
            if key in _passed:
                return CheckResult(answer="", cached=True, cpu=cpu)
        try:
            answer = json.loads(marker.read_text(encoding="utf-8"))["answer"]
            result = CheckResult(answer=answer, cached=True, cpu=cpu)
            with _lock:
                _passed.add(key)
                _results.append(result)
            return result
        except (OSError, ValueError, KeyError, TypeError):
            pass
    command = [*launcher, sys.executable, "-c", _CHILD, str(gguf), str(n_threads), PROMPT, str(MAX_TOKENS)]
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeUnusable(f"the embedded model runtime (llama-cpp-python {_version()}) did not answer a "
                              f"{MAX_TOKENS}-token test prompt within {timeout_s:g} s on this CPU ({cpu})") from None
    answer = _answer(child.stdout)
    if child.returncode == 0 and answer is not None:
        result = CheckResult(answer=answer, cached=False, cpu=cpu)
        if not launcher:
            with _lock:
                _passed.add(key)
                _results.append(result)
            _remember(marker, answer, cpu)
        return result
    error = _error(child.stdout)
    if child.returncode > 0 and error.startswith("ValueError"):  # llama.cpp could not read the model file
        raise ConfigError(f"cannot load GGUF model ({error.partition(': ')[2][:200] or 'unreadable'})", path=gguf)
    raise RuntimeUnusable(_failure(child.returncode, error, cpu, flags))


def _remember(marker: Path, answer: str, cpu: str) -> None:
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(f".{marker.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"answer": answer, "cpu": cpu, "version": _version()}), encoding="utf-8")
        os.replace(tmp, marker)
    except OSError:
        pass  # read-only home: checked once per process instead


def _answer(stdout: str) -> str | None:
    last = stdout.strip().rpartition("\n")[2]
    try:
        value = json.loads(last)
    except ValueError:
        return None
    return value.get("answer") if isinstance(value, dict) and isinstance(value.get("answer"), str) else None


def _error(stdout: str) -> str:
    last = stdout.strip().rpartition("\n")[2]
    try:
        value = json.loads(last)
    except ValueError:
        return ""
    return str(value.get("error") or "")[:300] if isinstance(value, dict) else ""


def _failure(code: int, error: str, cpu: str, flags: frozenset[str] | None) -> str:
    version = _version()
    fix = llamacpp_build.rebuild_command(sys.executable, version, llamacpp_build.args_for_cpu(flags))
    what = f"the embedded model runtime (llama-cpp-python {version})"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGILL:
            return (f"{what} died with SIGILL (illegal instruction) answering a test prompt: it was compiled for "
                    f"instructions this CPU ({cpu}) cannot run. Rebuild it portably: {fix}")
        return f"{what} died with {name} answering a test prompt on this CPU ({cpu}). Rebuild it portably: {fix}"
    detail = error.replace("\n", " ").strip() or f"exit status {code}"
    return f"{what} could not answer a test prompt on this CPU ({cpu}): {detail}"


# The child, run as ``python -c``: it imports nothing of medhelm (a fast start, also under an emulated CPU),
# prints {"answer": ...} or {"error": ...} as its last line; only a signal ends it without one.
_CHILD = r"""
import json, sys
try:
    from llama_cpp import Llama
    n = int(sys.argv[2])
    llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=n, n_threads_batch=n, seed=0, verbose=False)
    out = llm.create_chat_completion([{"role": "user", "content": sys.argv[3]}], max_tokens=int(sys.argv[4]),
                                     temperature=0.0, seed=0)
    print(json.dumps({"answer": out["choices"][0]["message"].get("content") or ""}), flush=True)
except Exception as err:
    print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
    sys.exit(3)
"""
