"""The registry's static name table against the scorer modules' own FACTORIES, and the lazy import it buys."""

import importlib
import pkgutil
import subprocess
import sys

import medhelm.scoring
from medhelm.scoring import registry


def test_the_name_table_is_exactly_what_the_scorer_modules_define():
    defined = {}
    for info in pkgutil.walk_packages(medhelm.scoring.__path__, "medhelm.scoring."):
        module = importlib.import_module(info.name)
        for name in getattr(module, "FACTORIES", {}):
            defined.setdefault(name, set()).add(module.__name__)
    assert set(defined) == set(registry.MODULE_OF)
    for name, module in registry.MODULE_OF.items():
        assert defined[name] == {module}, name  # one owner per metric name
        assert registry.lookup(registry.MetricSpec(name)) is importlib.import_module(module).FACTORIES[name]


def test_an_exact_match_plan_imports_no_other_scorer():
    code = ("import sys; from medhelm.scoring import registry; from medhelm.specs import MetricSpec; "
            "registry.validate([MetricSpec('exact_match')]); "
            "print(sorted(m for m in sys.modules if m.startswith('medhelm.scoring.')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    loaded = eval(out)  # noqa: S307 - our own printed list
    assert "medhelm.scoring.exact" in loaded
    assert not {"medhelm.scoring.jury", "medhelm.scoring.overlap", "medhelm.scoring.bertscore",
                "medhelm.scoring.ehrsql", "medhelm.scoring.choice", "medhelm.scoring.medcalc"} & set(loaded)
