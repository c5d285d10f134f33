"""The package's layout: no import cycle inside ga3c, and each `algo=` option its own module over the shared run
plumbing (ga3c/runtime.py), which imports none of them. The import graph is read from the source with `ast`."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "ga3c"
PLUMBING = "ga3c.runtime"
# The modules of each `algo=` option (conf/algo/*.yaml); run.py dispatches to them.
ALGO_MODULES = {
    "ga3c": {"ga3c.ga3c_run"},
    "a3c": {"ga3c.a3c", "ga3c.a3c_worker", "ga3c.a3c_shared", "ga3c.a3c_monitor"},
    "ceiling": {"ga3c.ceiling"},
}
ALGO_OF = {module: algo for algo, modules in ALGO_MODULES.items() for module in modules}


def module_name(path: Path) -> str:
    return "ga3c" if path.name == "__init__.py" else f"ga3c.{path.stem}"


def package_imports(path: Path, modules: set[str]) -> set[str]:
    """The ga3c modules `path` imports, at module level or inside functions (every Import/ImportFrom node)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = "ga3c" + (f".{node.module}" if node.module else "")
            else:
                base = node.module or ""
            # `from ga3c import config` names a module; `from ga3c.run import train` names the module ga3c.run
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # `import ga3c.x.y` -> ga3c.x
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.glob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): package_imports(p, modules) - {module_name(p)} for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_module_and_function_level_imports():
    graph = import_graph()
    assert "ga3c.runtime" in graph["ga3c.ga3c_run"]    # module level
    assert "ga3c.a3c" in graph["ga3c.run"]             # inside train(): the dispatch
    assert "ga3c.config" in graph["ga3c"]              # `from ga3c import config`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_algo_option_has_its_modules():
    options = {path.stem for path in (REPO / "conf" / "algo").glob("*.yaml")}
    assert options == set(ALGO_MODULES)
    modules = set(import_graph())
    for algo, names in ALGO_MODULES.items():
        assert names <= modules, f"algo={algo}: missing {names - modules}"
    from ga3c.run import ALGOS

    assert set(ALGOS) == options


def test_plumbing_imports_no_algo_module():
    graph = import_graph()
    below = reachable(graph, PLUMBING)
    assert not below & (set(ALGO_OF) | {"ga3c.run", "ga3c.bench"}), sorted(below)


def test_algo_modules_are_siblings():
    """An algo's modules import the plumbing and the shared pieces, never another algo's modules or the
    dispatch; only ga3c.run (the dispatch) imports an algo's entry module from outside."""
    graph = import_graph()
    for module, algo in ALGO_OF.items():
        for imported in graph[module]:
            assert ALGO_OF.get(imported, algo) == algo, f"{module} (algo={algo}) imports {imported}"
            assert imported != "ga3c.run", f"{module} imports the dispatch ga3c.run"
    for module, imports in graph.items():
        if module in ALGO_OF or module == "ga3c.run":
            continue
        assert not imports & set(ALGO_OF), f"{module} imports an algo module: {sorted(imports & set(ALGO_OF))}"
