"""The package's import graph, read from the source (function-level imports included): no cycle,
and each wing imports only the wings below it (docs/design.md, "Wings and what each may import")."""

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
    assert (
        "segreconcat_aug.data.kaldi" in graph["segreconcat_aug.data.audio"]
    )  # from .kaldi import PipeCommand
    assert (
        "segreconcat_aug.data.kaldi" in graph["segreconcat_aug.data.audio"]
    )  # from .kaldi import PipeCommand
    assert (
        "segreconcat_aug.align.cache" in graph["segreconcat_aug.align.aligners.whisper"]
    )  # from ...align.cache
    assert "segreconcat_aug.align.aligners.whisper" in graph["segreconcat_aug.align.aligners"]  # lazy


def test_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: Wing -> the wings it may import ("core": errors and seeding, which import nothing of the package).
#: The top-level modules (options, cli, testing, grid, the package itself) may import anything; no wing
#: imports them.
WING_RULES = {
    "core": set(),
    "data": {"core"},
    "align": {"core", "data"},
    "method": {"core", "data", "align"},
    "anonymizers": {"core", "data"},
    "models": {"core", "data"},
    "training": {"core", "data", "align", "method", "models"},
    "evaluation": {"core", "data", "models"},
}
CORE = {"errors", "seeding"}
TOP = {"options", "cli", "testing", "grid", ""}  # "": segreconcat_aug/__init__.py


def wing_of(module: str) -> str:
    """``segreconcat_aug.method.orders`` -> ``method``; ``segreconcat_aug.errors`` -> ``core``."""
    head = module.split(".")[1] if "." in module else ""
    if head in CORE:
        return "core"
    if head in TOP:
        return "top"
    assert head in WING_RULES, f"{module}: not in a wing; add its wing to WING_RULES and docs/design.md"
    return head


def rule_breaks(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a wing the importer's wing may not import, as ``importer -> imported``."""
    breaks = []
    for module, imported in sorted(graph.items()):
        wing = wing_of(module)
        if wing == "top":
            continue
        for target in sorted(imported):
            other = wing_of(target)
            if other != wing and other not in WING_RULES[wing]:
                breaks.append(f"{module} ({wing}) -> {target} ({other})")
    return breaks


def test_wings_import_only_what_their_rules_allow():
    breaks = rule_breaks(import_graph())
    assert not breaks, (
        "imports against the wing rules (tests/test_import_graph.py, docs/design.md):\n" + "\n".join(breaks)
    )


def test_rule_check_can_fail():
    """A method module importing evaluation, data importing method, a wing importing the CLI, or the models
    wing importing evaluation (which imports it) breaks a rule."""
    graph = {
        "segreconcat_aug.method.orders": {"segreconcat_aug.evaluation.metrics", "segreconcat_aug.data.jobs"},
        "segreconcat_aug.data.kaldi": {"segreconcat_aug.method.segments", "segreconcat_aug.errors"},
        "segreconcat_aug.evaluation.system": {"segreconcat_aug.options"},
        "segreconcat_aug.cli": {"segreconcat_aug.training.data_prep"},
        "segreconcat_aug.models.folder": {"segreconcat_aug.evaluation.metrics", "segreconcat_aug.data.audio"},
    }
    assert rule_breaks(graph) == [
        "segreconcat_aug.data.kaldi (data) -> segreconcat_aug.method.segments (method)",
        "segreconcat_aug.evaluation.system (evaluation) -> segreconcat_aug.options (top)",
        "segreconcat_aug.method.orders (method) -> segreconcat_aug.evaluation.metrics (evaluation)",
        "segreconcat_aug.models.folder (models) -> segreconcat_aug.evaluation.metrics (evaluation)",
    ]


def test_every_module_is_in_a_wing():
    wings = {wing_of(module) for module in import_graph()}
    assert wings == {*WING_RULES, "top"}


#: evaluation/privacy/: module -> the package's modules it may import. A metric family imports only the
#: helpers (PAV fits, the score matrix, the settings); calibration.py combines cllr and zebra on shared
#: fits; list_privacy.py (and the package's __init__) may import every family; no family imports them.
PRIVACY = "segreconcat_aug.evaluation.privacy"
PRIVACY_RULES = {
    "settings": set(),
    "pav": set(),
    "structure": set(),
    "linkability": set(),
    "cllr": {"pav"},
    "zebra": {"pav"},
    "calibration": {"pav", "cllr", "zebra"},
    "identification": {"structure"},
    "pi_link": {"settings", "structure"},
    "singling_out": {"settings", "structure"},
    "speaker_risk": {"structure"},
    "list_privacy": "any",
}


def privacy_rule_breaks(graph: dict[str, set[str]]) -> list[str]:
    """Imports inside evaluation/privacy/ against :data:`PRIVACY_RULES`, as ``importer -> imported``."""
    breaks = []
    for module, imported in sorted(graph.items()):
        if not module.startswith(PRIVACY + "."):
            continue
        name = module[len(PRIVACY) + 1 :]
        allowed = PRIVACY_RULES.get(name)
        assert allowed is not None, f"{module}: add it to PRIVACY_RULES (tests/test_import_graph.py)"
        for target in sorted(imported):
            if target == PRIVACY or target.startswith(PRIVACY + "."):
                sibling = target[len(PRIVACY) + 1 :]
                if allowed != "any" and sibling not in allowed:
                    breaks.append(f"{module} -> {target}")
    return breaks


def test_privacy_families_import_only_their_helpers():
    graph = import_graph()
    assert {m for m in graph if m.startswith(PRIVACY + ".")} == {
        f"{PRIVACY}.{name}" for name in PRIVACY_RULES
    }
    assert not privacy_rule_breaks(graph)
    # The check can fail: a family importing another family, or the package that re-exports it.
    assert privacy_rule_breaks(
        {f"{PRIVACY}.zebra": {f"{PRIVACY}.cllr", f"{PRIVACY}.pav"}, f"{PRIVACY}.pi_link": {PRIVACY}}
    ) == [f"{PRIVACY}.pi_link -> {PRIVACY}", f"{PRIVACY}.zebra -> {PRIVACY}.cllr"]
