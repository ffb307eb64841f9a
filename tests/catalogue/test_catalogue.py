"""Catalogue invariants: one row per benchmark card (upstream's names), the whole taxonomy, access counts,
metrics the registry knows."""

from __future__ import annotations


import pytest
import yaml

from medhelm.benchmarks import LoadContext, resolve
from medhelm.benchmarks.catalogue import all_entries
from medhelm.cards import BY_HELM_NAME, CARDS
from medhelm.errors import ConfigError
from medhelm.scoring import registry
from medhelm.specs import Access, FrozenMap, TaskType
from medhelm.taxonomy import SUBCATEGORIES, TAXONOMY, check
from tests import upstream_medhelm as upstream
from tests.helm_venv import site_packages

ENTRIES = all_entries()


def test_the_upstream_benchmarks_under_their_run_entry_names():
    assert len(ENTRIES) == len(upstream.NAMES) == len({e.name for e in ENTRIES}) == 37
    assert {e.name for e in ENTRIES} == upstream.NAMES


def test_the_reference_list_is_helms_own_leaf_run_groups(helm_python):
    """The one reference list (tests/data/upstream_medhelm.json) against upstream's file itself (crfm-helm's
    schema_medhelm.yaml, from its venv: tests/helm_venv.py)."""
    HELM_SCHEMA = site_packages(helm_python) / "helm" / "benchmark" / "static" / "schema_medhelm.yaml"
    groups = yaml.safe_load(HELM_SCHEMA.read_text(encoding="utf-8"))["run_groups"]
    leaves = {g["name"] for g in groups if not g.get("subgroups")}
    assert set(upstream.SCHEMA_NAMES.values()) == leaves
    metrics = {m["name"] for m in yaml.safe_load(HELM_SCHEMA.read_text(encoding="utf-8"))["metrics"]}
    # every jury-scored benchmark has HELM's jury column
    assert {f"{upstream.SCHEMA_NAMES[n]}_accuracy" for n in upstream.JURY_SCORED} <= metrics


def test_the_catalogue_has_one_row_per_card_and_takes_the_card_s_fields():
    """Cards (medhelm/cards.py) are written once: the catalogue and the store's HELM import read them."""
    assert {c.name for c in CARDS} == {e.name for e in ENTRIES}
    by_name = {e.name: e for e in ENTRIES}
    for card in CARDS:
        e = by_name[card.name]
        assert (e.display_name, e.category, e.subcategory, e.access, e.main_metric, e.main_split) == (
            card.display_name, card.category, card.subcategory, card.access, card.main_metric, card.main_split)
        # a jury card is scored by the jury; its HELM column is the 1-5 mean <name>_accuracy
        assert card.jury == any(m.name == "jury_score" for m in e.metrics)
        assert card.helm_main_stat == (f"{card.name}_accuracy" if card.jury else e.main_metric)
        check(card.category, card.subcategory)
    assert BY_HELM_NAME["med_qa"].name == "medhelm_med_qa" and BY_HELM_NAME["med_mcqa"].main_split == "valid"
    assert [c.category for c in CARDS] == sorted((c.category for c in CARDS), key=list(TAXONOMY).index)


def test_every_subcategory_is_covered_and_every_pair_is_in_the_taxonomy():
    for e in ENTRIES:
        check(e.category, e.subcategory)
    assert {e.subcategory for e in ENTRIES} == set(SUBCATEGORIES)
    assert len(SUBCATEGORIES) == 22


def test_access_counts_match_upstream():
    assert {access: {e.name for e in ENTRIES if e.access.value == access} for access in upstream.BY_ACCESS} == \
        upstream.BY_ACCESS


def test_every_metric_is_known_and_emits_the_main_stat():
    known = registry.factories()
    for e in ENTRIES:
        for m in e.metrics:
            assert m.name in known, (e.name, m.name)
            known[m.name].validate(m)
        assert e.main_metric in registry.stat_names(e.metrics[0]), e.name


def test_the_13_open_ended_benchmarks_use_their_built_in_jury_rubric():
    jury = {e.name: e.metrics[0].args["rubric"] for e in ENTRIES if e.metrics[0].name == "jury_score"}
    assert jury == {n: n for n in upstream.JURY_SCORED}
    assert all(e.task_type is TaskType.GENERATION for e in ENTRIES if e.name in jury)


def test_rows_are_complete():
    for e in ENTRIES:
        assert len(e.description) > 80 and e.display_name and e.source, e.name
        assert e.max_tokens > 0
        if e.access is Access.PUBLIC:
            assert e.remote, e.name
        else:
            assert any(a.name == "data_path" and a.required for a in e.args), e.name
            assert e.expected and e.access_note, e.name


def _ctx(**args: str) -> LoadContext:
    return LoadContext(args=FrozenMap(args), offline=True)


def test_unknown_benchmark_suggests_close_names():
    with pytest.raises(ConfigError, match="did you mean 'medcalc_bench'"):
        resolve("medcalc", _ctx())


@pytest.mark.parametrize("name,args,message", [
    ("pubmed_qa", {"subset": "x"}, "does not accept 'subset='"),
    ("med_dialog", {}, "needs subset="),
    ("med_dialog", {"subset": "reddit"}, "not one of healthcaremagic, icliniq"),
    ("clear", {"data_path": "/x"}, "needs condition="),
    ("mimic_rrs", {}, "needs data_path="),
])
def test_bad_arguments_are_one_clear_error(name, args, message):
    with pytest.raises(ConfigError, match=message):
        resolve(name, _ctx(**args))


def test_bertscore_argument_adds_bertscore_metrics():
    names = [m.name for m in resolve("aci_bench", _ctx(bertscore="true")).spec.metrics]
    assert names[0] == "jury_score" and {"BERTScore-P", "BERTScore-R", "BERTScore-F"} <= set(names)


def test_tables_import_the_entry_type_not_the_lookup():
    """entry.py holds the row type; the tables import it, catalogue.py imports the tables (one direction)."""
    import subprocess
    import sys

    code = ("import sys, medhelm.benchmarks.catalogue_public, medhelm.benchmarks.catalogue_gated, "
            "medhelm.benchmarks.catalogue_private; "
            "assert 'medhelm.benchmarks.catalogue' not in sys.modules, 'a table imports the lookup'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
