"""What the classic-control envs' bindings share: Gymnasium's reset options and ``state``."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from gymnasium.envs.classic_control import utils


def uniform_reset(low: float, high: float) -> Callable[[dict | None], dict[str, float]]:
    """``reset_options`` of an env whose reset draws from ``uniform(reset_low, reset_high)``:
    ``options["low"]`` / ``["high"]`` parsed as Gymnasium's classic-control envs parse them."""
    def reset_options(options: dict | None) -> dict[str, float]:
        lo, hi = utils.maybe_parse_reset_bounds(options, low, high)
        check_uniform_range(lo, hi)
        return {"reset_low": lo, "reset_high": hi}

    return reset_options


def check_uniform_range(low: float, high: float, arrays: bool = False) -> None:
    """Raise OverflowError, as the Gymnasium env's ``np_random.uniform(low, high)`` would,
    when ``high - low`` is not finite (an infinite or NaN bound); ``arrays``: the env draws
    with array bounds, for which NumPy words it otherwise."""
    if not np.isfinite(float(high) - float(low)):
        raise OverflowError("Range exceeds valid bounds" if arrays else "high - low range exceeds valid bounds")


def gym_state(*names: str) -> Callable[[dict, int], dict[str, Any]]:
    """``reference_state`` of an env whose Gymnasium twin holds these fields as ``env.state``."""
    def reference_state(fields: dict[str, np.ndarray], i: int) -> dict[str, Any]:
        return {"state": np.array([fields[name][i] for name in names])}

    return reference_state
