"""Local fakes of the cloud model APIs, strict as the real services, for tests and benchmarks: one module per
provider kind of ``backend_kinds.KINDS`` (``<kind>.py``, mirroring ``inference/<kind>.py``; its test
``tests/providers/test_<kind>.py`` drives it with the provider's official client), ``server.py`` (the server
and bookkeeping they share), ``sigv4.py`` (AWS's signature check), ``google_oauth.py`` (Google's token
endpoint), ``shc.py`` (Stanford Health Care's gateway routes).

    with FakeAnthropic(api_key="k") as srv:
        srv.base_url; srv.requests; srv.fail_next(2, "overloaded"); srv.kill(); srv.restart()

In ``medhelm.devtools``, not ``tests/``: bench/bench_native_clients.py measures our clients against them, and
a developer can point a deployment at one: ``python -m medhelm.devtools.fakes anthropic --port 8000``.
``fake_kinds``/``fake_class`` find them from the table of kinds (no list here); a fake's ``test_environment``,
``test_entry`` and ``accepting`` say how a deployment reaches it (tests/providers/conftest.py reads them).
"""

from __future__ import annotations

import importlib
import importlib.util

from medhelm.backend_kinds import KIND_NAMES
from medhelm.devtools.fakes.server import FakeServer


def fake_kinds() -> tuple[str, ...]:
    """The kinds with a fake module (``devtools/fakes/<kind>.py``)."""
    return tuple(k for k in KIND_NAMES if importlib.util.find_spec(f"{__package__}.{k}") is not None)


def fake_class(kind: str) -> type[FakeServer]:
    """The ``FakeServer`` subclass of ``devtools/fakes/<kind>.py`` whose ``name`` is ``kind``."""
    module = importlib.import_module(f"{__package__}.{kind}")
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, FakeServer) and v.name == kind]
    if len(found) != 1:
        raise LookupError(f"devtools/fakes/{kind}.py must define one FakeServer subclass named {kind!r}")
    return found[0]
