"""Adapters from fastvec (or any Gymnasium ``VectorEnv``) to other RL libraries.

Each adapter lives in its own module and imports its library only when that module is
imported, so ``import fastvec`` and ``import fastvec.integrations`` never import
Stable-Baselines3:

    >>> from fastvec.integrations import to_sb3   # imports stable_baselines3 here, on access
"""
from __future__ import annotations

from typing import Any

__all__ = ["FastVecEnv", "SB3VecEnv", "to_sb3"]


def __getattr__(name: str) -> Any:
    # Lazy: SB3 is an optional dependency (the ``sb3`` extra).
    if name in __all__:
        from fastvec.integrations import sb3

        return getattr(sb3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
