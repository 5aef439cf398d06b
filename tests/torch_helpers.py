"""Helpers shared by the tests of the torch path (examples/ppo.py, TorchCartPole)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PPO_PATH = ROOT / "examples" / "ppo.py"


def load_ppo_example(module_name: str):
    """examples/ppo.py imported as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(module_name, PPO_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def package_root() -> str:
    """Where the fastvec under test lives (installed, or built in place): not the source tree,
    which has no compiled extensions when the package was installed with pip."""
    import fastvec

    return os.path.dirname(os.path.dirname(os.path.abspath(fastvec.__file__)))
