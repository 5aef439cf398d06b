"""``python -m fastvec.bench``'s sections: each one's module imports where its extras are installed.

``main`` skips a section whose optional dependency (torch, Ray, SB3, ...) is missing; a section
whose own code is broken must not hide behind that skip.
"""
from __future__ import annotations

import importlib
import sys

import pytest

from fastvec import bench

# Section -> the third-party modules it needs beyond fastvec's own dependencies.
_EXTRAS = {
    "torch": ["torch"],
    "real": ["ale_py", "mujoco"],
    "ray": ["ray"],
    "train": ["torch"],
    "multiagent": ["pettingzoo"],
}


@pytest.mark.parametrize("section", list(bench.SECTIONS))
def test_each_sections_module_imports_where_its_extras_are_installed(section):
    for extra in _EXTRAS.get(section, []):
        pytest.importorskip(extra, reason=f"the {section} section needs {extra}")
    module = importlib.import_module(f"fastvec._bench.{bench._MODULES.get(section, section)}")
    assert callable(module.run)


def test_main_raises_when_fastvecs_own_module_is_missing_and_skips_a_missing_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fastvec._bench.flatten", None)  # import raises ModuleNotFoundError
    with pytest.raises(ModuleNotFoundError, match="fastvec._bench.flatten"):
        bench.main(["flatten"])
    monkeypatch.setitem(sys.modules, "an_extra_left_out", None)
    real_import = importlib.import_module

    def import_needing_an_extra(name, *args):
        if name == "fastvec._bench.gae":
            return real_import("an_extra_left_out")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", import_needing_an_extra)
    bench.main(["gae"])
    assert "skipped: import of an_extra_left_out halted" in capsys.readouterr().out
