"""Property-based fuzzing (Hypothesis) of the six input kinds of issue #18, through the real CLI.

Every generated input must end in exit 0 (it happened to be valid) or a clean failure: exit 2, one line
naming the file, no traceback, no patient marker, within 120 s (a hang bound) and 1 GiB, the output folder
unchanged.
CI runs a small seeded budget (``CI_EXAMPLES`` per kind); ``pytest -m fuzz_long tests/boundary`` runs
``LONG_EXAMPLES`` per kind (``MEDHELM_FUZZ_EXAMPLES``, default 150) with fresh randomness.
``MEDHELM_FUZZ_LOG=<file>`` appends one JSON line per case (kind, exit code, traceback seen, seconds): the
counts in docs/benchmarks.md come from it (``bench/bench_boundary.py``; ``python -m tests.boundary.fuzz_report
<file>`` prints the table of any log).

Kinds: the six of the issue (run entries and .conf, benchmark YAML/CSV/prompt, deployments/jury/prices
as bytes, run folders, import-helm, CLI flags), plus every config generated from its schema's keys
(deployments, jury, prices, access.yaml, benchmark YAML) and damaged results stores read by export,
audit and summarize.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medhelm.devtools.fixtures import write_configurable_benchmark
from tests.boundary.conftest import MARKER, Result, assert_bad_input, entry, run_cli, snapshot
from tests.conftest import refusing_port

NOBODY_PORT = refusing_port()  # refuses every connection while this process runs
NOBODY = f"127.0.0.1:{NOBODY_PORT}"

CI_EXAMPLES = 5
LONG_EXAMPLES = int(os.environ.get("MEDHELM_FUZZ_EXAMPLES", "150"))

# ------------------------------------------------------------------------------------------ strategies

# text a careless or hostile user might type: shell metacharacters, control bytes, unicode, huge numbers
NASTY = st.sampled_from(["", " ", "../", "/", "..", "~", "$(id)", "`id`", ";rm -rf x", "|", "&&", "\x00", "\n",
                         "\r\n", "\t", "\u2028", "é", "🙂", "{", "}", "{note}", "{note!x}", "{note:>99999999}", "%s",
                         "*a", "&a", "!!python/object:os.system", "9" * 5000, "-1", "1e999", "nan", ".inf", "null",
                         "[", "]", ",", ":", "=", "'", '"', "\\", "#", "//", MARKER])
TEXT = st.one_of(st.text(max_size=40), NASTY, st.lists(NASTY, max_size=4).map("".join))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                   st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSONISH = st.recursive(SCALAR, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(TEXT, kids, max_size=4)), max_leaves=12)


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """A structured mutation of a valid file: truncation, a spliced value, bytes in other encodings, nesting."""
    how = draw(st.sampled_from(["truncate", "splice", "insert", "encode", "nest", "empty", "repeat", "nul"]))
    n = len(original)
    at = draw(st.integers(min_value=0, max_value=max(n - 1, 0)))
    if how == "truncate":
        return original[:at]
    if how == "splice":
        end = draw(st.integers(min_value=at, max_value=n))
        return original[:at] + draw(TEXT).encode("utf-8", "surrogatepass") + original[end:]
    if how == "insert":
        return original[:at] + draw(st.binary(min_size=1, max_size=30)) + original[at:]
    if how == "encode":
        enc = draw(st.sampled_from(["utf-16", "latin-1", "utf-32", "cp1252"]))
        return original.decode("utf-8", "surrogateescape").replace("e", "é").encode(enc, "replace")
    if how == "nest":
        depth = draw(st.integers(min_value=50, max_value=3000))
        return original[:at] + b"[" * depth + b"]" * depth + original[at:]
    if how == "repeat":
        return original * draw(st.integers(min_value=2, max_value=50))
    if how == "nul":
        return original[:at] + b"\x00" + original[at:]
    return b""


JURY_METRIC = "  - name: jury_score\n    rubric: aci_bench\n"  # the benchmark scored by the jury the case gives
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)


def _budget(long: bool) -> settings:
    return settings(FUZZ, max_examples=LONG_EXAMPLES if long else CI_EXAMPLES, derandomize=not long)


FUZZ_LOG = os.environ.get("MEDHELM_FUZZ_LOG")
_KIND = {"name": "?"}


def _log(r: Result) -> None:
    if FUZZ_LOG:
        with open(FUZZ_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": _KIND["name"], "code": r.code, "traceback": "Traceback" in r.stderr,
                                "lines": len([ln for ln in r.stderr.splitlines() if ln.startswith("medhelm")]),
                                "error": next((ln[:160] for ln in r.stderr.splitlines() if ln.startswith("medhelm")),
                                              ""),
                                "seconds": round(r.seconds, 2)}) + "\n")


def _clean(r: Result, *, names: str | Path | None, out: Path | None = None, before: dict | None = None,
           codes: tuple[int, ...] = (2,)) -> None:
    _log(r)
    if r.code == 0:
        return  # the mutation happened to be valid input
    assert_bad_input(r, names=names, out=out, before=before, codes=codes)


def _workspace() -> tuple[Path, Path, Callable[[], None]]:
    tmp = Path(tempfile.mkdtemp(prefix="medhelm-fuzz-"))
    cfg = write_configurable_benchmark(tmp / "bench", 4, name="MARKED")
    csv = tmp / "bench" / "dataset.csv"
    csv.write_text(csv.read_text().replace("Synthetic note", f"{MARKER} note"))
    return tmp, cfg, lambda: shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------- 1. run entries + .conf


def _run_entries(long: bool):
    @_budget(long)
    @given(conf=st.one_of(st.just(None), mutated(b'entries: [\n  {description: "medhelm_configurable_benchmark:'
                                                 b'config_path=bench/bench.yaml", priority: 1}\n]\n')),
           extra=st.lists(st.tuples(TEXT, TEXT), max_size=3))
    def check(conf, extra):
        tmp, cfg, done = _workspace()
        try:
            out = tmp / "out"
            args = ["validate", "--output-path", out]
            if conf is None:
                typed = "".join(f",{k}={v}" for k, v in extra).replace(MARKER, "m")  # typed, not patient data
                args += ["--run-entries", entry(cfg) + typed]
                names = None
            else:
                (tmp / "x.conf").write_bytes(conf)
                args += ["--conf-paths", tmp / "x.conf"]
                names = None  # an error may be about the benchmark the entry names, or the .conf itself
            _clean(run_cli(args, cwd=tmp), names=names, out=out)
        finally:
            done()
    return check


# ---------------------------------------------------------------------- 2. benchmark YAML / CSV / prompt

BENCH_FILES = ("bench.yaml", "dataset.csv", "prompt.txt")


def _benchmark_files(long: bool):
    @_budget(long)
    @given(which=st.sampled_from(BENCH_FILES), data=st.data())
    def check(which, data):
        tmp, cfg, done = _workspace()
        try:
            target = cfg.parent / which
            target.write_bytes(data.draw(mutated(target.read_bytes())))
            out = tmp / "out"
            r = run_cli(["run", "--run-entries", entry(cfg), "--output-path", out, "--dry-run"], cwd=tmp)
            _clean(r, names=None, out=out)
        finally:
            done()
    return check


# --------------------------------------------------------------------- 3. deployments, jury config, prices

VALID_DEPLOYMENTS = (b"model_deployments:\n  - name: mine/model\n    model_name: test/model\n    kind: openai\n"
                     b"    base_url: http://" + NOBODY.encode() + b"/v1\n    max_sequence_length: 4096\n")
VALID_JURY = b"judges:\n  - name: local/smollm2-135m-instruct\n    weight: 1\nmax_tokens: 64\n"
VALID_PRICES = b"prices:\n  - deployment: mine/model\n    input_per_million: 1.5\n    output_per_million: 2\n"


def _configs(long: bool):
    @_budget(long)
    @given(kind=st.sampled_from(["deployments", "jury", "prices"]), data=st.data())
    def check(kind, data):
        tmp, cfg, done = _workspace()
        try:
            local = tmp / "prod_env"
            local.mkdir()
            out = tmp / "out"
            if data.draw(st.booleans()):
                import yaml
                doc = data.draw(st.fixed_dictionaries({}, optional={
                    "model_deployments": st.lists(st.dictionaries(st.sampled_from(
                        ["name", "model_name", "kind", "base_url", "timeout_s", "options", "api_key_env", "x"]),
                        JSONISH, max_size=6), max_size=3),
                    "judges": st.lists(st.dictionaries(st.sampled_from(["name", "weight", "model_name"]), JSONISH),
                                       max_size=3),
                    "prices": st.lists(st.dictionaries(st.sampled_from(["deployment", "gpu_hour", "gpus"]), JSONISH),
                                       max_size=3)}))
                try:
                    content = yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
                except (yaml.YAMLError, UnicodeEncodeError):
                    content = b"{"
            else:
                content = data.draw(mutated({"deployments": VALID_DEPLOYMENTS, "jury": VALID_JURY,
                                             "prices": VALID_PRICES}[kind]))
            if kind == "deployments":
                path = local / "model_deployments.yaml"
                path.write_bytes(content)
                r = run_cli(["run", "--run-entries", entry(cfg, "mine/model"), "--local-path", local,
                             "--output-path", out, "--max-eval-instances", "1"], cwd=tmp)
                if r.code not in (0,) and NOBODY in r.stderr:
                    _log(r)
                    return  # valid config, unreachable server: a clean stop, checked elsewhere
                about_file = "model_deployments" in r.stderr and "unknown model" not in r.stderr  # not: "add it to"
                _clean(r, names=path if r.code == 2 and about_file else None, out=out)
            elif kind == "jury":
                path = tmp / "jury.yaml"
                path.write_bytes(content)
                cfg.write_text(cfg.read_text().replace("  - name: exact_match\n", JURY_METRIC))
                r = run_cli(["validate", "--run-entries", entry(cfg, extra=f",jury_config_path={path}")], cwd=tmp)
                _clean(r, names=None, out=out)
            else:
                path = tmp / "prices.yaml"
                path.write_bytes(content)
                (out / "runs" / "s").mkdir(parents=True)
                before = snapshot(out)
                r = run_cli(["summarize", "--suites", "s", "--output-path", out, "--prices", path], cwd=tmp)
                _clean(r, names=None, out=out, before=before)
        finally:
            done()
    return check


# ---------------------------------------------------------------------------- 4. run folders and stores


def _run_folders(long: bool):
    @_budget(long)
    @given(files=st.dictionaries(st.sampled_from(["run_spec.json", "run.json", "stats.json", "instances.jsonl",
                                                  "selection.json"]),
                                 st.one_of(JSONISH.map(lambda v: json.dumps(v).encode()),
                                           st.binary(max_size=200)), min_size=1),
           store=st.one_of(st.none(), st.binary(max_size=300)))
    def check(files, store):
        tmp, _, done = _workspace()
        try:
            out = tmp / "out"
            run = out / "runs" / "s" / "bench:model=m"
            run.mkdir(parents=True)
            for name, content in files.items():
                (run / name).write_bytes(content)
            args = ["summarize", "--suites", "s", "--output-path", out, "--bootstrap", "5"]
            if store is not None:
                (out / "results.sqlite").write_bytes(b"SQLite format 3\x00" + store)
            before = snapshot(out)
            r = run_cli(args, cwd=tmp)
            _clean(r, names=None, out=out, before=before)
        finally:
            done()
    return check


# ------------------------------------------------------------------------------------------ 5. import-helm


def _import_helm(long: bool):
    @_budget(long)
    @given(files=st.dictionaries(st.sampled_from(["run_spec.json", "stats.json", "per_instance_stats.json",
                                                  "scenario_state.json", "scenario.json"]),
                                 st.one_of(JSONISH.map(lambda v: json.dumps(v).encode()), st.binary(max_size=100)),
                                 min_size=1))
    def check(files):
        tmp, _, done = _workspace()
        try:
            suite = tmp / "helm" / "runs" / "v1"
            run = suite / "med_qa:model=x_y"
            run.mkdir(parents=True)
            for name, content in files.items():
                (run / name).write_bytes(content)
            out = tmp / "out"
            out.mkdir()
            r = run_cli(["import-helm", suite, "--output-path", out, "--bootstrap", "5"], cwd=tmp)
            # import-helm's own messages belong to issue #19; here: never a traceback, one line, exit 2 or 70
            _clean(r, names=None, codes=(2, 70))
        finally:
            done()
    return check


# ------------------------------------------------------------------------------------------- 6. CLI flags

FLAGS = {
    "run": ["--suite", "--max-eval-instances", "--num-output-tokens", "--seed", "--priority", "--num-threads",
            "--output-path", "--local-path", "--data-dir", "--models-to-run"],
    "summarize": ["--suites", "--release", "--bootstrap", "--seed", "--store", "--prices", "--local-path"],
    "serve": ["--port", "--metrics-port", "--max-message-mb", "--grace-s", "--max-concurrency"],
    "export": ["--release", "--store"],
    "jury": [],
}


def _cli_flags(long: bool):
    @_budget(long)
    @given(command=st.sampled_from(sorted(FLAGS)), data=st.data())
    def check(command, data):
        tmp, cfg, done = _workspace()
        try:
            flags = data.draw(st.lists(st.tuples(st.sampled_from(FLAGS[command] or ["--help-me"]), TEXT), max_size=3))
            args = [command]
            if command in ("run",):
                args += ["--run-entries", entry(cfg), "--dry-run"]
            for flag, value in flags:
                args += [flag, value.replace(MARKER, "m")]  # what the user typed is not patient data
            if command == "serve":
                args += ["scenarios", "--port", "-5"]  # never actually listen: the last --port is refused
            out = tmp / "out"
            r = run_cli(args, cwd=tmp)
            _clean(r, names=None, out=out if not any(f == "--output-path" for f, _ in flags) else None)
        finally:
            done()
    return check



# ------------------------------------------------------------- 7. every config, generated from its schema

def _maybe(keys: dict[str, st.SearchStrategy], extra: bool = True) -> st.SearchStrategy:
    """A mapping with some of the schema's keys (values of the right type, or not) and now and then a stray key."""
    optional = {k: st.one_of(v, JSONISH) for k, v in keys.items()}
    base = st.fixed_dictionaries({}, optional=optional)
    if not extra:
        return base
    return st.tuples(base, st.dictionaries(TEXT, JSONISH, max_size=1)).map(lambda t: {**t[1], **t[0]})


NUMBER = st.one_of(st.integers(min_value=-10, max_value=10**12), st.floats(allow_nan=True, allow_infinity=True))
NAME = st.one_of(st.sampled_from(["local/smollm2-135m-instruct", "mine/model", "a/b", ""]), TEXT)
SCHEMA_DOCS = {
    "deployments": _maybe({"model_deployments": st.lists(_maybe({
        "name": NAME, "model_name": NAME, "kind": st.sampled_from(["openai", "llamacpp", "kserve_v2", "x"]),
        "base_url": st.sampled_from([f"http://{NOBODY}/v1", "ftp://x", NOBODY, ""]),
        "api_key_env": st.sampled_from(["ZQX_API_KEY", "ZQX_UNSET", "sk-123 4", ""]), "timeout_s": NUMBER,
        "max_sequence_length": NUMBER, "max_concurrency": NUMBER, "gguf_path": TEXT, "options": JSONISH,
        "redacted": st.booleans()}), max_size=3)}),
    "jury": _maybe({"judges": st.lists(_maybe({"name": NAME, "model_name": NAME, "model": NAME,
                                               "model_deployment": NAME, "weight": NUMBER}), max_size=3),
                    "max_tokens": NUMBER, "structured_output": st.booleans(), "description": TEXT}),
    "prices": _maybe({"prices": st.lists(_maybe({"deployment": NAME, "model": NAME, "input_per_million": NUMBER,
                                                 "output_per_million": NUMBER, "gpu_hour": NUMBER, "gpus": NUMBER}),
                                         max_size=3)}),
    "access": _maybe({"groups_claim": TEXT, "subject_claim": TEXT, "default_role": st.sampled_from(
        ["none", "viewer", "Analyst", "ADMIN", "root", ""]), "roles": st.dictionaries(
        st.sampled_from(["viewer", "analyst", "admin", "root"]), st.one_of(TEXT, st.lists(TEXT, max_size=3))),
        "releases": st.dictionaries(TEXT, st.one_of(TEXT, st.lists(TEXT, max_size=3)), max_size=2)}),
    "benchmark": _maybe({"name": NAME, "description": TEXT, "prompt_file": st.sampled_from(
        ["prompt.txt", "nope.txt", "/dev/zero", "/proc/self/environ", "..", ""]),
        "dataset_file": st.sampled_from(["dataset.csv", "prompt.txt", "/etc/passwd", ""]), "max_tokens": NUMBER,
        "metrics": st.lists(st.one_of(st.sampled_from(["exact_match", "rouge_l", "jury_score", "nope"]), _maybe({
            "name": st.sampled_from(["exact_match", "jury_score", "BERTScore-F", "x"]), "judges": st.lists(_maybe({
                "name": NAME, "model_name": NAME}), max_size=2), "prompt_file": TEXT})), max_size=3),
        "category": TEXT, "subcategory": TEXT, "access": st.sampled_from(["public", "Private", "secret", ""])}),
}


def _schema_configs(long: bool):
    @_budget(long)
    @given(kind=st.sampled_from(sorted(SCHEMA_DOCS)), data=st.data())
    def check(kind, data):
        import yaml

        tmp, cfg, done = _workspace()
        try:
            doc = data.draw(SCHEMA_DOCS[kind])
            try:
                content = yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
            except (yaml.YAMLError, UnicodeEncodeError):
                content = b"{"
            # a config's own keys and names are the user's typing, not patient data: an error may quote them
            content = content.replace(MARKER.encode(), b"m")
            out = tmp / "out"
            local = tmp / "prod_env"
            local.mkdir()
            if kind == "deployments":
                path = local / "model_deployments.yaml"
                path.write_bytes(content)
                r = run_cli(["validate", "--run-entries", entry(cfg, "mine/model"), "--local-path", local], cwd=tmp)
            elif kind == "jury":
                path = tmp / "jury.yaml"
                path.write_bytes(content)
                cfg.write_text(cfg.read_text().replace("  - name: exact_match\n", JURY_METRIC))
                r = run_cli(["validate", "--run-entries", entry(cfg, extra=f",jury_config_path={path}")], cwd=tmp)
            elif kind == "prices":
                path = tmp / "prices.yaml"
                path.write_bytes(content)
                (out / "runs" / "s").mkdir(parents=True)
                before = snapshot(out)
                r = run_cli(["summarize", "--suites", "s", "--output-path", out, "--prices", path], cwd=tmp)
                _clean(r, names=None, out=out, before=before)
                return
            elif kind == "access":
                path = tmp / "access.yaml"
                path.write_bytes(content)
                r = run_cli(["serve", "dashboard", "--oidc-issuer", f"http://{NOBODY}", "--oidc-client-id", "x",
                             "--access-policy", path, "--store", tmp / "no-store.sqlite", "--port", str(NOBODY_PORT)],
                            cwd=tmp,
                            env={"MEDHELM_OIDC_CLIENT_SECRET": "s" * 32, "MEDHELM_OIDC_COOKIE_SECRET": "c" * 32})
                if r.code == 2 and "no-store.sqlite" in r.stderr:
                    _log(r)
                    return  # the policy was valid: the launcher went on to the (missing) store
            else:
                path = cfg
                path.write_bytes(content)
                r = run_cli(["run", "--run-entries", entry(cfg), "--output-path", out, "--dry-run"], cwd=tmp)
            _clean(r, names=None, out=out)
        finally:
            done()
    return check


# ------------------------------------------------------------------------------------ 8. damaged stores

_STORE: dict[str, bytes] = {}


def _template_store() -> bytes:
    """A real small results store (summarize over a synthetic suite), built once per session."""
    if "bytes" not in _STORE:
        from medhelm.store.synthetic import catalogue, default_models, write_suite

        tmp = Path(tempfile.mkdtemp(prefix="medhelm-fuzz-store-"))
        try:
            write_suite(tmp, "s", default_models(2), catalogue(2), 6)
            proc = subprocess.run([sys.executable, "-m", "medhelm", "summarize", "--suites", "s", "--output-path",
                                   str(tmp), "--bootstrap", "5"], capture_output=True, timeout=120)
            assert proc.returncode == 0, proc.stderr[-1000:]
            _STORE["bytes"] = (tmp / "results.sqlite").read_bytes()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _STORE["bytes"]


SQL_DAMAGE = st.sampled_from([
    "DROP TABLE cells", "DROP TABLE meta", "DROP TABLE runs", "ALTER TABLE runs DROP COLUMN value_blob",
    "ALTER TABLE models DROP COLUMN jury_cost_usd", "UPDATE meta SET value = '999' WHERE key = 'schema_version'",
    "UPDATE meta SET value = '-1' WHERE key = 'schema_version'", "UPDATE meta SET value = NULL",
    "UPDATE meta SET value = 'x' WHERE key = 'created_at'", "DELETE FROM meta", "DELETE FROM runs",
    "UPDATE runs SET value_blob = x'00'", "UPDATE runs SET value_ids = '[[['", "UPDATE runs SET spec_json = '{'",
    "UPDATE instances SET record_json = '[1]'", "UPDATE instances SET stats_json = 'nan'",
    "UPDATE cells SET boot = x'0102'", "UPDATE cells SET value = 'text'", "UPDATE leaderboard SET rank = 'x'",
    "UPDATE models SET cost_usd = 'x'", "UPDATE runs SET wall_time_s = 'x'", "UPDATE benchmarks SET access = NULL",
    "CREATE TABLE patients (id INTEGER)", "UPDATE runs SET release = NULL", "PRAGMA user_version = 99",
])


def _stores(long: bool):
    @_budget(long)
    @given(how=st.sampled_from(["bytes", "sql"]), command=st.sampled_from(["export", "audit", "summarize"]),
           data=st.data())
    def check(how, command, data):
        tmp, _, done = _workspace()
        try:
            store = tmp / "results.sqlite"
            if how == "bytes":
                store.write_bytes(data.draw(mutated(_template_store())))
            else:
                store.write_bytes(_template_store())
                con = sqlite3.connect(store)
                try:
                    for stmt in data.draw(st.lists(SQL_DAMAGE, min_size=1, max_size=3)):
                        try:
                            con.execute(stmt)
                        except sqlite3.Error:
                            pass  # e.g. the table was dropped by an earlier statement
                    con.commit()
                finally:
                    con.close()
            out = tmp / "out"
            (out / "runs" / "s").mkdir(parents=True)
            before_store = store.read_bytes()
            if command == "export":
                args = ["export", tmp / "bundle", "--store", store]
            elif command == "audit":
                args = ["audit", "--store", store]
            else:
                args = ["summarize", "--suites", "s", "--output-path", out, "--store", store, "--bootstrap", "5"]
            r = run_cli(args, cwd=tmp)
            _clean(r, names=None, out=out, before=snapshot(out) if r.code else None)
            if r.code == 2:
                assert store.read_bytes() == before_store, "a refused store was changed"
                assert not (tmp / "bundle").exists(), "a half-written bundle"
        finally:
            done()
    return check


# -------------------------------------------------------------------------------------- the test functions

KINDS = {"run_entries": _run_entries, "benchmark_files": _benchmark_files, "configs": _configs,
         "run_folders": _run_folders, "import_helm": _import_helm, "cli_flags": _cli_flags,
         "schema_configs": _schema_configs, "stores": _stores}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fuzz(kind: str) -> None:
    _KIND["name"] = kind
    KINDS[kind](long=False)()


@pytest.mark.fuzz_long
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fuzz_long(kind: str) -> None:
    _KIND["name"] = kind
    KINDS[kind](long=True)()
