"""Input conversion shared by the segment trees and the replay buffer."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np


def as_capacity(capacity: Any, name: str = "capacity") -> int:
    """Return ``capacity`` as a positive int, or raise TypeError/ValueError."""
    if isinstance(capacity, (bool, np.bool_)):
        raise TypeError(f"{name} must be a positive int, got {capacity!r}")
    try:
        value = operator.index(capacity)
    except TypeError:
        raise TypeError(f"{name} must be a positive int, got {type(capacity).__name__} {capacity!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def as_indices(indices: Any) -> np.ndarray:
    """Integer array (any shape) from ``indices``; TypeError for non-integers."""
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            return arr.astype(np.int64)  # np.asarray([]) is float64
        raise TypeError(f"indices must be integers, got an array of dtype {arr.dtype}")
    return arr


def as_float64(values: Any, name: str) -> np.ndarray:
    """float64 array from real numbers; TypeError for anything else."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf" and not (arr.size == 0 and arr.dtype.kind in "O"):
        raise TypeError(f"{name} must be real numbers, got an array of dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)
