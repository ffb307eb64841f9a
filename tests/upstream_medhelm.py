"""Upstream MedHELM's benchmark list, read from its one copy (tests/data/upstream_medhelm.json): the run-entry
names by access level, HELM's schema name where it differs, the jury-scored ones. Tests of the catalogue, the
cards and the rubrics compare our tables against these, never against a list of their own."""

from __future__ import annotations

import json
from pathlib import Path

_DATA = json.loads((Path(__file__).parent / "data" / "upstream_medhelm.json").read_text(encoding="utf-8"))

BY_ACCESS: dict[str, frozenset[str]] = {access: frozenset(names) for access, names in _DATA["benchmarks"].items()}
NAMES: frozenset[str] = frozenset().union(*BY_ACCESS.values())
SCHEMA_NAMES: dict[str, str] = {name: _DATA["schema_names"].get(name, name) for name in NAMES}
JURY_SCORED: frozenset[str] = frozenset(_DATA["jury_scored"])
