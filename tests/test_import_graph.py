"""The package's import graph, read from the source, has no cycle (function-level imports included)."""

import ast
from pathlib import Path

import segreconcat_aug

PACKAGE = Path(segreconcat_aug.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("segreconcat_aug", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The package's modules one import statement names (``from . import x`` names ``x`` when a module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        base = f"{base}.{node.module}" if node.level and node.module else base if node.level else node.module
        names = [base] + [f"{base}.{alias.name}" for alias in node.names]
    # A submodule's own enclosing packages are left out: Python runs them before the submodule
    # whatever it imports, so ``from . import AlignmentFailed`` in ``aligners/whisper.py`` adds nothing.
    return {name for name in names if name in modules and not module.startswith(name + ".")}


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of this package it imports}`` for every module under the package."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(node, module, is_package, set(files))
        graph[module] = edges - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first repeated last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_finder_sees_a_lazy_import_cycle():
    """The check can fail: a function-level import back to the importer is a cycle."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graph_reads_relative_and_lazy_imports():
    graph = import_graph()
    assert "segreconcat_aug.kaldi" in graph["segreconcat_aug.audio"]  # from .kaldi import PipeCommand
    assert "segreconcat_aug.alignment" in graph["segreconcat_aug.aligners.whisper"]  # from ..alignment
    assert "segreconcat_aug.aligners.whisper" in graph["segreconcat_aug.aligners"]  # lazy, in a function


def test_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
