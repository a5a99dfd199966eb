"""The package's import graph, read from the AST (imports at module level and inside functions alike, plus
``importlib.import_module("literal")``): no cycles, and the synthesis fingerprint covers what the search runs."""

from __future__ import annotations

import ast
from pathlib import Path

import morello_build
from morello_build import fingerprint

ROOT = Path(morello_build.__file__).resolve().parent
PKG = "morello_build"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts}


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Dotted names each import statement (or import_module call) of the module asks for."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (``from pkg import sub``: ``pkg`` and ``sub``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for n in _imported_names(tree, name, path.name == "__init__.py"):
            if n.startswith(PKG) and n in modules:
                targets.add(n)
            elif n.startswith(PKG) and n.rsplit(".", 1)[0] in modules:
                targets.add(n.rsplit(".", 1)[0])  # `from pkg.mod import obj`
        # A module's own packages are imported before it by Python in any case: no edge (this leaves
        # `from morello_build import __version__` and `from morello_build.db import encode` in db.store alone).
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "morello_build.tools.vendor" in graph["morello_build.tools.cli"]  # imported inside a function
    assert "morello_build.db.encode" in graph["morello_build.db.store"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def test_synthesis_fingerprint_covers_what_the_search_imports():
    """Every module the search and the DB run (transitively) is hashed by the synthesis fingerprint: a new
    package the search depends on must join fingerprint.SYNTHESIS_PACKAGES."""
    graph = import_graph()
    hashed = {_module_name(p) for p in fingerprint.synthesis_files()}
    used = _reachable(graph, "morello_build.synth.search") | _reachable(graph, "morello_build.db.store")
    exempt = {PKG, "morello_build.fingerprint"}  # __version__ is part of the DB namespace already
    assert used - hashed - exempt == set()


def test_the_generator_runs_without_numpy():
    """numpy is a test and Python-API dependency only (pyproject): synthesis and codegen, epilogues and
    the gated pair included, must not import it (a plain `pip install` has no numpy)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['numpy'] = None\n"  # any import of numpy now fails
        "from morello_build.tools.api import synthesize_header\n"
        "for s in ('gated 1x16x8 b=bf16:col bias act=silu', 'matmul 2x8x4 scale bias act=gelu residual'):\n"
        "    assert 'Spec:' in synthesize_header(s, isa='avx2', threads=1)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
