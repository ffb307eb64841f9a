"""``python -m medhelm.devtools.fakes <kind> [--port N]``: serve one provider's fake on 127.0.0.1 until
interrupted (demos, benchmarks in another process). The kinds offered are the rows of
``backend_kinds.KINDS`` that have a module here (``<kind>.py``), whose ``FakeServer`` subclass named for the
kind is served: a new provider's fake is found without a table to edit. An unknown kind is argparse's
one-line usage error (exit 2)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import threading

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m medhelm.devtools.fakes",
                                     description="Serve a local fake of a cloud model API (tests, demos).")
    parser.add_argument("provider", choices=fake_kinds())
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    srv = fake_class(args.provider)(port=args.port).start()
    print(f"{args.provider} fake listening on {srv.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
