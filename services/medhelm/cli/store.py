"""`medhelm store status|migrate`: the results store's schema version, and its migration to this medhelm's.

``status`` prints the store's schema version and this medhelm's (exit 0 when they are equal, 3 when the store
needs ``migrate``; a newer store is the one-line refusal, exit 2). ``migrate`` brings the store forward in one
exclusive transaction (store/opening.py ``migrate_store``; the steps are store/migrate.py's): a no-op on a
current store, refused on a newer one, all or nothing otherwise; a current store whose audit guard triggers are missing gets them. Both refuse a
store holding triggers, rules, views or indexes the schema does not define (``_check_objects``). The chart runs it as a pre-install/pre-upgrade hook Job for a PostgreSQL store
(docs/kubernetes.md "Upgrades"). Errors are one line naming the store (its URL without the password), exit 2.
"""

from __future__ import annotations

import argparse

from medhelm.cli import summarize  # not its add_store_arguments by name: the CLI would take it for this command's

NEEDS_MIGRATION = 3  # `status`: the store is older than this medhelm


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    for name, text in (("status", "the store's schema version and this medhelm's (exit 3: migrate needed)"),
                       ("migrate", "bring the store to this medhelm's schema (one transaction; a no-op when current)")):
        summarize.add_store_arguments(sub.add_parser(name, help=text, description=text))


def main(args: argparse.Namespace) -> int:
    from medhelm.errors import without_password
    from medhelm.store import opening
    from medhelm.store.schema import SCHEMA_VERSION, VERSIONS

    location = summarize.store_location(args)
    shown = without_password(location)
    if args.store_action == "migrate":
        before, after = opening.migrate_store(location)
        if before is None:
            print(f"{shown}: new store created at schema v{after}")
        elif before == -1:
            print(f"{shown}: at schema v{after}; the audit trail's append-only guard made again")
        elif before == after:
            print(f"{shown}: already at schema v{after}; nothing to do")
        else:
            print(f"{shown}: migrated from schema v{before} to v{after} ({VERSIONS[after]})")
        return 0
    version = opening.store_version(location)  # a newer, foreign or damaged store: the one-line refusal
    if version is None:
        print(f"{shown}: no store yet (`medhelm store migrate` or `medhelm summarize` makes one at schema "
              f"v{SCHEMA_VERSION})")
        return NEEDS_MIGRATION
    if version == -1:
        print(f"{shown}: schema v{SCHEMA_VERSION}, without the audit trail's append-only guard (run `medhelm store "
              "migrate`)")
        return NEEDS_MIGRATION
    print(f"{shown}: schema v{version}; this medhelm: v{SCHEMA_VERSION}"
          + ("" if version == SCHEMA_VERSION else " (run `medhelm store migrate`)"))
    return 0 if version == SCHEMA_VERSION else NEEDS_MIGRATION
