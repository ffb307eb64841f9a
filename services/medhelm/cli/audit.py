"""`medhelm audit`: list and filter the audit trail (who saw instance text, every export), newest first.

Reads the ``audit`` table of the results store (SQLite or PostgreSQL). Prints ids, never text. Bad
filters (a date that is not ISO 8601) are one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from medhelm.cli.summarize import add_store_arguments, store_location
from medhelm.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    f = p.add_argument_group("filters")
    f.add_argument("--since", help="from this UTC date/time on (ISO 8601, e.g. 2026-11-01 or 2026-11-01T08:00)")
    f.add_argument("--until", help="before this UTC date/time (ISO 8601)")
    f.add_argument("--actor", help="one user (the subject the identity provider gave, e.g. an e-mail)")
    f.add_argument("--release", help="one release")
    f.add_argument("--action", choices=("view-instances", "view-paired", "export", "export-redacted", "denied",
                                              "view-review", "rate"))
    f.add_argument("--run-id", type=int, help="events touching this run id")
    f.add_argument("--limit", type=int, default=200, help="at most this many rows (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    add_store_arguments(p)


def main(args: argparse.Namespace) -> int:
    from medhelm.access import audit
    from medhelm.store import open_store

    since, until = _when(args.since, "--since"), _when(args.until, "--until")
    with open_store(store_location(args)) as store:
        rows = audit.events(store, since=since, until=until, actor=args.actor, release=args.release,
                            action=args.action, run_id=args.run_id, limit=args.limit)
    if args.json:
        for e in rows:
            print(json.dumps({"at": e.at, "actor": e.actor, "role": e.role, "source": e.source, "action": e.action,
                              "release": e.release, "run_ids": list(e.run_ids), "instance_ids": list(e.instance_ids),
                              "detail": e.detail}))
        return 0
    if not rows:
        print("no audit events match")
        return 0
    print(f"{'at (UTC)':<27} {'actor':<28} {'role':<8} {'action':<16} {'release':<16} {'runs':<10} "
          f"{'instances':>9}  detail")
    from medhelm.errors import escape

    for e in rows:  # an actor is what the identity provider said: its control characters never reach the terminal
        runs = ",".join(str(r) for r in e.run_ids)
        print(f"{e.at[:26]:<27} {escape(e.actor, 28):<28} "
              f"{escape(e.role, 8):<8} {escape(e.action, 16):<16} {escape(e.release or '', 16):<16} "
              f"{runs[:10]:<10} {len(e.instance_ids):>9}  {escape(e.detail or '', 200)}")
    return 0


def _when(text: str | None, flag: str) -> str | None:
    """An ISO date/time as the sortable UTC text the trail stores."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"not an ISO 8601 date or time: '{text}'", field=flag) from None
    if value.tzinfo is not None:
        from datetime import timezone

        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "+00:00"
