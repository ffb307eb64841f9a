"""``python -m medhelm.devtools.fakes <kind> [--port N]``: serve one provider's fake on 127.0.0.1 until
interrupted (demos, benchmarks in another process). The kinds offered are the rows of
``backend_kinds.KINDS`` that have a module here (``<kind>.py``), whose ``FakeServer`` subclass named for the
kind is served (``fake_kinds``, ``fake_class`` in the package): a new provider's fake is found without a table
to edit. An unknown kind is argparse's one-line usage error (exit 2)."""

from __future__ import annotations

import argparse
import threading

from medhelm.devtools.fakes import fake_class, fake_kinds


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
