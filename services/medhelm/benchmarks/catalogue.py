"""The MedHELM catalogue: 37 benchmarks as data rows, looked up by run-entry name.

The rows live in ``catalogue_public.py``, ``catalogue_gated.py`` and ``catalogue_private.py`` (the access
level is the file, as upstream's run-entry confs); their type is ``entry.CatalogueEntry``. Unknown names
raise ``ConfigError`` with the closest matches.
"""

from __future__ import annotations

import difflib

from medhelm.benchmarks.catalogue_gated import GATED
from medhelm.benchmarks.catalogue_private import PRIVATE
from medhelm.benchmarks.catalogue_public import PUBLIC
from medhelm.benchmarks.entry import Arg, CatalogueEntry
from medhelm.errors import ConfigError

__all__ = ["Arg", "CatalogueEntry", "all_entries", "get_entry"]


def all_entries() -> tuple[CatalogueEntry, ...]:
    return PUBLIC + GATED + PRIVATE


def get_entry(name: str) -> CatalogueEntry:
    table = {e.name: e for e in all_entries()}
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "; see `medhelm list`"
    raise ConfigError(f"unknown benchmark '{name}'{hint}")
