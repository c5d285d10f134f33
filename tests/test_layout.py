"""The package's layout is its architecture, and these tests keep it so, from the folders alone:
    ga3c/         the data path and the run plumbing: imports neither ga3c.algos nor ga3c.tools
    ga3c/algos/   one module per `algo=` option (NAME.py, helpers NAME_*.py), siblings that import no other
                  option's modules; only the dispatch (ga3c/algos/__init__.py) imports them; no ga3c.tools
    ga3c/tools/   the study tools, over both
and no import cycle. The import graph is read from the source with `ast`."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "ga3c"
DISPATCH = "ga3c.algos"
OPTIONS = sorted(path.stem for path in (REPO / "conf" / "algo").glob("*.yaml"))


def algo_of(module: str) -> str | None:
    """The `algo=` option a module of ga3c/algos belongs to (ga3c.algos.a3c_agent -> a3c), else None."""
    if not module.startswith("ga3c.algos."):
        return None
    stem = module.rsplit(".", 1)[1]
    return next((o for o in sorted(OPTIONS, key=len, reverse=True) if stem == o or stem.startswith(o + "_")), stem)


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or module in ("ga3c.algos", "ga3c.tools") else "top"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
            # `from ga3c import config` names a module; `from ga3c.tools.suite import main` names the module ga3c.tools.suite
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
    paths = sorted(PACKAGE.rglob("*.py"))
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
    assert "ga3c.runtime" in graph["ga3c.algos.ga3c"]   # module level
    assert "ga3c.algos.a3c" in graph[DISPATCH]          # inside train(): the dispatch
    assert "ga3c.config" in graph["ga3c"]               # `from ga3c import config`
    assert "ga3c.tools.learncurve" in graph["ga3c.tools.suite"]   # `from ga3c.tools import learncurve`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert (layer("ga3c.env"), layer("ga3c.algos"), layer("ga3c.algos.a3c_agent"), layer("ga3c.tools.bench")) == (
        "top", "algos", "algos", "tools")
    assert (algo_of("ga3c.algos.a3c_agent"), algo_of("ga3c.algos.ga3c"), algo_of("ga3c.env")) == ("a3c", "ga3c", None)


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_algo_option_has_its_module_and_the_dispatch_knows_it():
    modules = set(import_graph())
    assert {f"ga3c.algos.{o}" for o in OPTIONS} <= modules, OPTIONS
    stray = [m for m in modules if m.startswith("ga3c.algos.") and algo_of(m) not in OPTIONS]
    assert not stray, f"modules of ga3c/algos that belong to no algo= option: {stray}"
    from ga3c.algos import ALGOS

    assert sorted(ALGOS) == OPTIONS


def test_the_top_level_imports_neither_algos_nor_tools():
    for module, imports in import_graph().items():
        if layer(module) == "top":
            above = sorted(i for i in imports if layer(i) != "top")
            assert not above, f"{module} (data path / plumbing) imports {above}"


def test_algos_import_no_tools_and_are_siblings():
    """An algo's modules import the top level and their own option's modules, never another option's, a tool,
    or the dispatch; outside ga3c/algos only the dispatch itself imports an algo module."""
    graph = import_graph()
    for module, imports in graph.items():
        algo = algo_of(module)
        if algo is not None:
            for imported in imports:
                assert layer(imported) != "tools", f"{module} (algo={algo}) imports the tool {imported}"
                assert imported != DISPATCH, f"{module} imports the dispatch"
                assert algo_of(imported) in (None, algo), f"{module} (algo={algo}) imports {imported}"
        elif module != DISPATCH:
            algo_imports = sorted(i for i in imports if algo_of(i) is not None)
            assert not algo_imports, f"{module} imports algo modules {algo_imports}; only {DISPATCH} may"


def test_every_results_folder_names_where_its_figures_came_from():
    """Each folder of results/ that holds files (a study's runs/ aside) has its manifest.json (command, commit,
    date, host), and no committed result names a path of the machine that made it."""
    results = REPO / "results"
    lacking, machine_paths = [], []
    for folder in sorted(p for p in results.rglob("*") if p.is_dir() and "runs" not in p.relative_to(results).parts):
        if any(f.is_file() for f in folder.iterdir()) and not (folder / "manifest.json").exists():
            lacking.append(str(folder.relative_to(REPO)))
    for path in results.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".csv", ".jsonl", ".yaml"):
            text = path.read_text(errors="replace")
            if any(f'{q}{root}' in text for q in ('"', "'", " ", "=") for root in ("/work/", "/root/", "/home/")):
                machine_paths.append(str(path.relative_to(REPO)))
    assert not lacking, f"results folders without manifest.json: {lacking}"
    assert not machine_paths, f"results naming an absolute path of their machine: {machine_paths[:10]}"
