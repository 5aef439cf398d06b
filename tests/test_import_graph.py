"""fastvec's modules import each other one way: the graph of their imports has no cycle.

Every ``import`` and ``from ... import`` of a fastvec module counts, wherever it stands (the
module body, a class, a function): an import deferred into a function still ties the two
modules together, it only hides the tie until the function runs. Only the body of an
``if TYPE_CHECKING:`` is left out, as it never runs (type annotations only). Python modules
are read with :mod:`ast`; the import statements of Cython modules (``.pyx``) are read the same
way, one statement at a time (``cimport`` declares C names at build time and is left out).

A package counts as the module its ``__init__`` is: ``from fastvec.vector import FastVectorEnv``
leads to ``fastvec.vector``, ``from fastvec.vector import backend_choice`` to the submodule. Importing a
submodule also runs its packages' ``__init__``, but that is Python's doing, not an edge.
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
ROOT = "fastvec"

# One import statement of a .pyx file: ``import a.b`` or ``from a.b import (c, d)``, possibly over
# several lines inside parentheses (never ``cimport``).
_PYX_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]|import[ \t])")


def module_files(src: pathlib.Path = SRC) -> dict[str, pathlib.Path]:
    """Every module of the package under ``src``: its dotted name and its source file."""
    modules = {}
    for path in sorted((src / ROOT).rglob("*")):
        if path.suffix not in (".py", ".pyx") or "__pycache__" in path.parts:
            continue
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules.setdefault(name, path)  # a .py wins over a .pyx of the same name
    return modules


def _statements(path: pathlib.Path) -> list[ast.stmt]:
    """The import statements of a module, at any depth."""
    text = path.read_text()
    if path.suffix == ".py":
        return list(_python_imports(ast.parse(text, str(path))))
    statements, lines, k = [], text.splitlines(), 0
    while k < len(lines):
        if not _PYX_IMPORT.match(lines[k]):
            k += 1
            continue
        statement = lines[k].split("#")[0].strip()
        k += 1
        while statement.count("(") > statement.count(")") or statement.endswith("\\"):
            statement = statement.rstrip("\\") + " " + lines[k].split("#")[0].strip()
            k += 1
        statements.extend(ast.parse(statement).body)
    return statements


def _python_imports(node: ast.AST):
    """The import statements under ``node``, but for those in the body of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _python_imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _python_imports(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The fastvec modules that module ``name`` (its file ``path``) imports."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in _statements(path):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        for target in targets:
            while target and target not in modules:  # ``import a.b.c`` of a name inside a.b
                target = target.rpartition(".")[0]
            if target and target != name and target.split(".")[0] == ROOT:
                found.add(target)
    return found


def import_graph(src: pathlib.Path = SRC) -> dict[str, set[str]]:
    """Module name -> the fastvec modules it imports."""
    modules = module_files(src)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as [a, b, ..., a], or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert "fastvec.vector.fast_vector_env" in graph["fastvec.vector"]
    assert "fastvec.vector._block.protocol" in graph["fastvec.vector._caller.compiled_step"]  # a .pyx
    assert "fastvec.vector._caller.backend_choice" in graph["fastvec.ray._shard"]


def test_fastvec_imports_run_one_way():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("source, cycle", [
    ({"a.py": "import fastvec.b", "b.py": "def f():\n    from fastvec import a"}, ["fastvec.a", "fastvec.b", "fastvec.a"]),
    ({"a.py": "from . import b", "b.py": "from .a import x"}, ["fastvec.a", "fastvec.b", "fastvec.a"]),
    ({"a.py": "import fastvec.b", "b.py": "import os"}, None),
    ({"a.py": "import fastvec.b", "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fastvec.a"}, None),
    ({"a.py": "import fastvec.b", "b.py": "class B:\n    if x:\n        pass\n    else:\n        import fastvec.a"},
     ["fastvec.a", "fastvec.b", "fastvec.a"]),
    ({"__init__.py": "from fastvec.a import x", "a.py": "from fastvec import b", "b.py": ""}, None),
    ({"p/__init__.py": "from fastvec.p.q import x", "p/q.py": "from fastvec.p import y"},
     ["fastvec.p", "fastvec.p.q", "fastvec.p"]),
    ({"a.pyx": "from fastvec.b cimport x\nfrom fastvec.b import (\n    y,\n)", "b.py": "import fastvec.a"},
     ["fastvec.a", "fastvec.b", "fastvec.a"]),
])
def test_a_cycle_is_found(tmp_path, source, cycle):
    for relative, text in source.items():
        path = tmp_path / ROOT / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / ROOT / "__init__.py").touch()
    assert find_cycle(import_graph(tmp_path)) == cycle
