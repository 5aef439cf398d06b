"""No fastvec module uses another module's private names.

A name that starts with an underscore is its module's own: ``from fastvec.a import _helper``
(or ``fastvec.a._helper`` through an imported module) ties the two modules to something the
first one is free to change. What several modules need is a public name of one of them
(private *modules*, such as ``fastvec.vector._caller.pool``, are fine to import: their
public names are the package's internal interface).

Read with :mod:`ast` for Python modules and line by line for the import statements of Cython
modules (as the import-graph test reads them). ``__dunder__`` names are not private.
"""
from __future__ import annotations

import ast
import pathlib

from test_import_graph import SRC, _statements, module_files


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> list[str]:
    """Where module ``name`` (its file ``path``) uses a private name of another fastvec module."""
    found = []
    aliases = {}  # local name -> the fastvec module it is bound to
    for node in _statements(path):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fastvec") and not node.level:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in modules:  # (a submodule: importing a private module is fine)
                    aliases[alias.asname or alias.name] = target
                elif _private(alias.name) and node.module != name:
                    found.append(f"{name}:{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fastvec") and alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
    if path.suffix != ".py" or not aliases:
        return found
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != name):
            found.append(f"{name}:{node.lineno}: {aliases[node.value.id]}.{node.attr} (as {node.value.id}.{node.attr})")
    return found


def test_the_check_sees_a_private_import_and_a_private_attribute(tmp_path):
    """The check itself: a module that imports another's private name, and one that reads a
    private attribute of a module it imported, are both found."""
    package = tmp_path / "fastvec"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def _helper():\n    pass\n")
    (package / "b.py").write_text("from fastvec.a import _helper\n")
    (package / "c.py").write_text("from fastvec import a\n\na._helper()\nx = a.__name__\n")
    modules = module_files(tmp_path)
    assert private_uses("fastvec.b", package / "b.py", modules) == ["fastvec.b:1: from fastvec.a import _helper"]
    assert private_uses("fastvec.c", package / "c.py", modules) == ["fastvec.c:3: fastvec.a._helper (as a._helper)"]


def test_no_module_uses_another_modules_private_names():
    modules = module_files(SRC)
    found = [use for name, path in sorted(modules.items()) for use in private_uses(name, path, modules)]
    assert not found, "private names used from another module:\n" + "\n".join(found)
