"""Checks of the arguments every fastvec vector env takes the way SyncVectorEnv does."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def seeds_per_env(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """``None`` → no seeds; an int ``s`` → ``s + i`` for env i; a list → one per env (checked)."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={num_envs} but got length={len(seeds)}."
        )
    return seeds


def split_reset_options(options: dict[str, Any] | None, num_envs: int) -> tuple[dict[str, Any] | None, np.ndarray | None]:
    """A copy of ``options`` without ``reset_mask``, and the checked mask (or None).

    The caller's dict is left as it was (Gymnasium's vector envs pop from it).
    """
    if options is None or "reset_mask" not in options:
        return (dict(options) if options is not None else None), None
    options = dict(options)
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,):
        raise ValueError(f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not np.any(mask):
        raise ValueError(
            f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}"
        )
    return options, mask
