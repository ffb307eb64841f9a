"""Providers are mirrored (docs/architecture.md, "Where to add", a provider): every native kind of
``backend_kinds.KINDS`` has its client ``inference/<kind>.py`` (the row's client class defined there), its fake
``devtools/fakes/<kind>.py`` (one ``FakeServer`` subclass named for the kind: what ``python -m
medhelm.devtools.fakes`` serves) opening with a docstring of at most 15 lines, and its tests
``tests/providers/test_<kind>.py``, which drive that fake with the provider's official client (imported, or
run from a venv of its own: ``tests/helm_venv.py``'s ``venv_python``); every fake
module is a native kind's or one of the named helpers'. The options that change a kind's answers are declared
on its row, and their union is ``specs.ANSWER_OPTIONS`` (part of every cache key), unchanged."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from medhelm.backend_kinds import KINDS
from medhelm.devtools.fakes import fake_class, fake_kinds
from medhelm.devtools.fakes.server import FakeServer
from medhelm.specs import ANSWER_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "services" / "medhelm"
NATIVE = tuple(row for row in KINDS if row.native)
# fakes/ modules that are no kind's: the shared server, AWS's signature check, Google's token endpoint, and
# Stanford Health Care's gateway (a platform of kinds anthropic and gemini)
HELPER_FAKES = {"server", "sigv4", "google_oauth", "google_sts", "shc"}


def test_the_native_kinds_are_marked():
    assert {"anthropic", "gemini", "bedrock", "azure_openai", "mistral", "vertex_text"} <= {r.kind for r in NATIVE}
    assert not {"openai", "llamacpp", "kserve_v2", "baseline"} & {r.kind for r in NATIVE}


@pytest.mark.parametrize("row", NATIVE, ids=lambda row: row.kind)
def test_each_native_kind_has_its_client_its_fake_and_its_tests(row):
    module, _, name = row.client.partition(":")
    assert module == f"medhelm.inference.{row.kind}" and (PACKAGE / "inference" / f"{row.kind}.py").is_file()
    assert isinstance(getattr(importlib.import_module(module), name), type)

    fake_file = PACKAGE / "devtools" / "fakes" / f"{row.kind}.py"
    assert fake_file.is_file()
    fake = fake_class(row.kind)  # exactly one FakeServer subclass named for the kind
    assert issubclass(fake, FakeServer) and fake.__module__ == f"medhelm.devtools.fakes.{row.kind}"

    test_file = ROOT / "tests" / "providers" / f"test_{row.kind}.py"
    assert test_file.is_file()
    text = test_file.read_text(encoding="utf-8")
    assert f'make_fake("{row.kind}"' in text or f"medhelm.devtools.fakes.{row.kind} import" in text, \
        f"{test_file.name} does not start the {row.kind} fake"
    # an official client: imported here, or run from a venv of its own (its pins clash with the product's)
    clients = set(re.findall(r'importorskip\("([\w.]+)"', text)) - {"cryptography"}
    assert clients or "venv_python(" in text, f"{test_file.name} drives its fake with no official client"


def test_every_fake_module_is_a_native_kind_or_a_named_helper():
    modules = {p.stem for p in (PACKAGE / "devtools" / "fakes").glob("*.py") if not p.stem.startswith("__")}
    native = {row.kind for row in NATIVE}
    assert modules - HELPER_FAKES == native
    assert set(fake_kinds()) == native  # what `python -m medhelm.devtools.fakes` offers


@pytest.mark.parametrize("path", sorted((PACKAGE / "devtools" / "fakes").glob("*.py")), ids=lambda p: p.name)
def test_each_fake_module_opens_with_a_short_docstring(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    assert doc and len(doc.strip().splitlines()) <= 15, path.name


def test_answer_options_are_the_rows_and_unchanged():
    declared = {option for row in KINDS for option in row.answer_options}
    assert set(ANSWER_OPTIONS) == declared and len(ANSWER_OPTIONS) == len(declared)
    # the cache keys of existing deployments depend on this set: a change is a new key for every request
    assert declared == {"api", "reasoning_effort", "thinking_budget", "max_tokens_param", "sampling", "extra_body",
                        "request_shape", "platform", "region", "project", "additional_model_request_fields",
                        "anthropic_version", "thinking_config", "safety_settings", "bedrock_invoke"}


@pytest.mark.parametrize("kind,option,value,other", [
    ("gemini", "thinking_config", {"thinking_budget": 1024}, {"thinking_budget": 0}),
    ("gemini", "safety_settings", [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}], []),
    ("bedrock", "bedrock_invoke", "llama", "mistral"),
])
def test_an_option_that_changes_the_answer_changes_the_cache_identity(kind, option, value, other):
    from medhelm.specs import Deployment
    def identity(options):
        return Deployment(name="d", model_name="org/m", kind=kind, options=options).identity()
    assert identity({option: value}) != identity({option: other}) != identity({})
