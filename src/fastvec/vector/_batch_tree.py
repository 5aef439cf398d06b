"""Both sides: batches of observations as trees (arrays, nested in dicts and tuples), copied
and written row by row: what a restart puts back (:mod:`fastvec.vector._restarts`) and what
SB3's adapter hands out (:mod:`fastvec.integrations.sb3`)."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["copy_batch", "put_rows", "row_of"]


def copy_batch(obs: Any) -> Any:
    """A private copy of a batch of observations.

    Example:
        >>> batch = {"x": np.zeros((2, 3))}
        >>> copy = copy_batch(batch)
        >>> copy["x"] is batch["x"], np.array_equal(copy["x"], batch["x"])
        (False, True)
    """
    if isinstance(obs, dict):
        return {k: copy_batch(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(copy_batch(v) for v in obs)
    return np.array(obs, copy=True)


def put_rows(dst: Any, dst_rows: Any, src: Any, src_rows: Any) -> None:
    """``dst[dst_rows] = src[src_rows]`` at every leaf (rows: index lists or boolean masks).

    Example:
        >>> dst, src = (np.zeros(3),), (np.arange(3.0),)
        >>> put_rows(dst, [0], src, [2])
        >>> dst[0].tolist()
        [2.0, 0.0, 0.0]
    """
    if isinstance(dst, dict):
        for k in dst:
            put_rows(dst[k], dst_rows, src[k], src_rows)
    elif isinstance(dst, tuple):
        for d, s in zip(dst, src):
            put_rows(d, dst_rows, s, src_rows)
    else:
        dst[dst_rows] = src[src_rows]


def row_of(batch: Any, k: int) -> Any:
    """Row ``k`` of a batch of observations (one env's observation), copied.

    Example:
        >>> row_of({"x": np.arange(4).reshape(2, 2)}, 1)["x"].tolist()
        [2, 3]
    """
    if isinstance(batch, dict):
        return {key: row_of(v, k) for key, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(row_of(v, k) for v in batch)
    return batch[k].copy() if isinstance(batch, np.ndarray) else batch[k]
