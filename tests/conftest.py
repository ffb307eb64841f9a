"""Fixtures shared by every area's tests. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# Real public data slices live beside the project (never copied into it): ../shared/data
SHARED_DATA = Path(os.environ.get("MEDHELM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))

# Tests never reach the network.
os.environ.setdefault("MEDHELM_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The embedded model on one thread: the suite runs on two pytest-xdist workers on 2 cores (often beside other
# work), and llama.cpp's spinning threads stall each other on shared cores (inference/llamacpp.py). Every
# `medhelm` subprocess a test starts inherits it.
os.environ.setdefault("MEDHELM_LLAMA_THREADS", "1")


_REFUSING: socket.socket | None = None


def refusing_port() -> int:
    """A TCP port on 127.0.0.1 that refuses every connection for the rest of this process.

    A socket bound to port 0 (the kernel picks a free port) that never calls listen(): a connection to it is
    answered with RST (ECONNREFUSED), and nobody else can bind the port while the socket stays open, which it
    does until the process exits. Unlike a fixed port (9, "discard") it cannot be taken by a service on the
    machine, and unlike a port found free and closed again it cannot be picked up by a parallel test.
    For module-level strategies and helpers; tests take the ``refused_port``/``refused_url`` fixtures."""
    global _REFUSING
    if _REFUSING is None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        _REFUSING = s
    return _REFUSING.getsockname()[1]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (scripts/test.sh runs ``-n``), what must not run twice at once runs on one worker.

    ``--dist loadgroup`` keeps a group on one worker, in order. The groups: every test that drives podman
    (images, pods, one storage) is one group; every ``engines`` test is one (one vLLM and one KServe server per
    session, started once); every other file is a group of its own, so a module's fixtures are set up once.
    xdist carries the group in the node id, which pytest 9.2 no longer lets it change (hence pyproject's
    ``pytest<9.2``); tests/core/test_suite_groups.py proves on two real workers that the groups hold."""
    if not hasattr(config, "workerinput"):  # a worker's own config says dist "no": ask whether this is a worker
        return
    groups: dict[pytest.Item, str] = {}
    for item in items:
        if "engines" in item.keywords:
            group = "engines"
        elif "container" in item.keywords:
            group = "podman"
        else:
            group = item.nodeid.split("::", 1)[0]
        groups[item] = group
        item.add_marker(pytest.mark.xdist_group(group))
    # The order groups are handed out (scripts/test.sh: --no-loadscope-reorder): the podman group first (its image
    # builds and pods take ~20 min, one test after another: started last it was the run's tail), then the files
    # with a slow test, then the rest, the engines last (their venvs are built in the background meanwhile).
    slow = {g for item, g in groups.items() if "slow" in item.keywords}
    rank = {g: 0 if g == "podman" else 3 if g == "engines" else 1 if g in slow else 2 for g in groups.values()}
    items.sort(key=lambda item: rank[groups[item]])


@pytest.fixture(scope="session")
def refused_port() -> int:
    """A port on 127.0.0.1 guaranteed to refuse connections for the whole session (see ``refusing_port``)."""
    return refusing_port()


@pytest.fixture(scope="session")
def refused_url(refused_port) -> str:
    """``http://127.0.0.1:<refused_port>``: a server URL nobody answers, connections refused at once."""
    return f"http://127.0.0.1:{refused_port}"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real data slices not found at {SHARED_DATA} (set MEDHELM_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _main_module_restored():
    """Streamlit's AppTest sets ``__main__.__file__`` to the app script and leaves it so; a later test that
    starts ``spawn`` worker processes (scoring/cpu.py) would then run the app in each worker. Put it back."""
    import sys

    main = sys.modules.get("__main__")
    had = main is not None and "__file__" in vars(main)
    saved = vars(main).get("__file__") if main is not None else None
    yield
    if main is not None:
        sys.modules["__main__"] = main
        if had:
            main.__file__ = saved
        else:
            vars(main).pop("__file__", None)


# What the dashboard reads from the environment; AppTest tests set these in os.environ (the app runs in this
# process), and the ``dashboard_env`` fixture puts them back afterwards.
DASHBOARD_ENV = ("MEDHELM_STORE", "MEDHELM_RELEASE", "MEDHELM_REDACTED", "MEDHELM_AUTH", "MEDHELM_ACCESS_POLICY")


@pytest.fixture
def dashboard_env():
    saved = {k: os.environ.get(k) for k in DASHBOARD_ENV}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def helm_python() -> Path:
    """crfm-helm's own venv's interpreter (tests/helm_venv.py: built once, under a lock; skips when it cannot be)."""
    from tests import helm_venv

    return helm_venv.helm_python()


@pytest.fixture(scope="session", params=__import__("tests.helm_releases", fromlist=["VERSIONS"]).VERSIONS)
def helm_release(request) -> Path:
    """One crfm-helm release's own files (helm/config/*.yaml, helm/clients/*.py) from its PyPI wheel, cached
    under the tools folder (tests/helm_releases.py); a skip naming the fetch command when offline."""
    from tests.helm_releases import release

    return release(request.param)
