"""Imports point down only: no two modules of `medhelm` import each other, directly or through others —
counting imports inside functions too (a lazy import is still a dependency; it only moves the failure to
run time). The check is on the source (ast), so it sees every module, including ones no test imports."""

from __future__ import annotations

import ast
from pathlib import Path

import medhelm

ROOT = Path(medhelm.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = package[:len(package) - node.level + 1]
                base = ".".join(prefix + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_medhelm_is_in_an_import_cycle():
    modules = _modules()
    assert len(modules) > 100 and "medhelm.scoring.registry" in modules
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    assert "medhelm.scoring.factory" in graph["medhelm.scoring.registry"]  # the graph sees real edges
    assert _cycles(graph) == []


# The floors of docs/architecture.md, lowest first. A module may import its own package and any package on a
# lower floor, never a sibling on its own floor nor anything above. Every top-level module (specs.py,
# errors.py, backend_kinds.py, cards.py, manifests.py, tokens.py, ...) is the base floor; the base-level
# packages (the generated stubs, the run folder's owner) stand on it.
FLOORS: dict[str, int] = {
    "base": 0,
    "v1": 1, "oip": 1, "rundir": 1,
    "inference": 2, "access": 2, "devtools": 2,
    "scoring": 3,
    "benchmarks": 4, "store": 4,
    "pipeline": 5, "report": 5,
    "rpc": 6,
    "cli": 7,
    "__main__": 8,
}


def _package(name: str, modules: dict[str, Path]) -> str:
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and modules[name].name != "__init__.py" and parts[1] != "__main__"):
        return "base"
    return parts[1]


def test_every_package_has_a_floor():
    modules = _modules()
    assert {_package(name, modules) for name in modules} <= set(FLOORS), "add the new package to FLOORS"
    assert _package("medhelm.specs", modules) == "base" and _package("medhelm.store.ingest", modules) == "store"


def test_imports_point_down_a_floor_never_sideways_or_up():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        here = _package(name, modules)
        for target in _imports(name, path, set(modules)):
            there = _package(target, modules)
            if there != here and not (FLOORS[there] < FLOORS[here] or there == here == "base"):
                wrong.append(f"{name} ({here}) -> {target} ({there})")
    assert sorted(wrong) == []


def test_no_module_imports_a_private_name_of_another_package():
    """``_name`` is its package's own (a base module's own: each base module is its own owner)."""
    modules = _modules()

    def owner(module: str) -> str:
        return module if _package(module, modules) == "base" else _package(module, modules)

    leaks = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.module in modules) or node.level:
                continue
            if owner(node.module) != owner(name):
                leaks += [f"{name} imports {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert leaks == []


def test_the_value_types_import_what_their_docstrings_say():
    """specs.py: json_text and backend_kinds only; records.py: those and specs; json_text.py: nothing of ours
    (``medhelm`` itself, the package a ``from medhelm import x`` runs, imports only its version string)."""
    modules = _modules()
    known = set(modules) - {"medhelm"}
    assert _imports("medhelm", modules["medhelm"], set(modules)) == {"medhelm.version"}
    assert _imports("medhelm.specs", modules["medhelm.specs"], known) == {"medhelm.json_text", "medhelm.backend_kinds"}
    assert _imports("medhelm.records", modules["medhelm.records"], known) <= {"medhelm.json_text", "medhelm.specs"}
    assert _imports("medhelm.json_text", modules["medhelm.json_text"], known) == set()
    assert _imports("medhelm.backend_kinds", modules["medhelm.backend_kinds"], known) == set()


def test_the_json_helpers_are_imported_from_their_owner():
    """One owner per format: ``json_text``'s spellings (``canonical_json``, ``compact_json``, ``loads_json``, ...)
    are imported from ``json_text``, never through a module that imports them itself (``specs``, ``records``)."""
    modules = _modules()
    tree = ast.parse(modules["medhelm.json_text"].read_text(encoding="utf-8"))
    owned = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    owned |= {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
              for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
              if isinstance(target, ast.Name)}
    assert {"canonical_json", "compact_json", "loads_json", "scalar_json", "JSON"} <= owned
    through = [f"{name} imports {alias.name} from {node.module}" for name, path in modules.items()
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ImportFrom) and node.module in modules and node.module != "medhelm.json_text"
               for alias in node.names if alias.name in owned]
    assert through == []
