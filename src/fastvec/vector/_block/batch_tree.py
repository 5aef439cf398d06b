"""Both sides: batches of observations as trees (arrays, nested in dicts and tuples), copied
and written row by row: what a restart puts back (:mod:`fastvec.vector._block.restarts`) and what
SB3's adapter hands out (:mod:`fastvec.integrations.sb3`).

Each function takes the single (one env's) observation space where the caller has it. A
batch of a Text, Graph, Sequence or custom leaf is a tuple of per-env values, as Gymnasium
batches them, and only the space tells such a tuple from a Tuple space's node; without a
space, every dict and tuple is a node.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["copy_batch", "put_rows", "row_of"]


def copy_batch(obs: Any, space: spaces.Space | None = None) -> Any:
    """A private copy of a batch of observations (``space``: one env's observation space).

    Example:
        >>> batch = {"x": np.zeros((2, 3))}
        >>> copy = copy_batch(batch)
        >>> copy["x"] is batch["x"], np.array_equal(copy["x"], batch["x"])
        (False, True)
        >>> copy_batch({"m": ("a", "b")}, spaces.Dict({"m": spaces.Text(5)}))
        {'m': ('a', 'b')}
    """
    kind = _node(obs, space)
    if kind is dict:
        return {k: copy_batch(v, _sub(space, k)) for k, v in obs.items()}
    if kind is tuple:
        return tuple(copy_batch(v, _sub(space, i)) for i, v in enumerate(obs))
    if isinstance(obs, np.ndarray) or space is None:
        return np.array(obs, copy=True)
    return tuple(obs)  # (per-env values: strings, graphs, ... are replaced, never written in place)


def put_rows(dst: Any, dst_rows: Any, src: Any, src_rows: Any, space: spaces.Space | None = None) -> Any:
    """``dst[dst_rows] = src[src_rows]`` at every leaf (rows: index lists or boolean masks).
    Arrays are written in place; returns ``dst`` with its tuple leaves of per-env values
    (which cannot be written in place) replaced.

    Example:
        >>> dst, src = (np.zeros(3),), (np.arange(3.0),)
        >>> _ = put_rows(dst, [0], src, [2])
        >>> dst[0].tolist()
        [2.0, 0.0, 0.0]
        >>> put_rows({"m": ("a", "b")}, [1], {"m": ("c",)}, [0], spaces.Dict({"m": spaces.Text(5)}))
        {'m': ('a', 'c')}
    """
    kind = _node(dst, space)
    if kind is dict:
        for k in dst:
            dst[k] = put_rows(dst[k], dst_rows, src[k], src_rows, _sub(space, k))
        return dst
    if kind is tuple:
        return tuple(put_rows(d, dst_rows, s, src_rows, _sub(space, i)) for i, (d, s) in enumerate(zip(dst, src)))
    if isinstance(dst, np.ndarray):
        dst[dst_rows] = src[src_rows]
        return dst
    values = list(dst)
    for d, s in zip(_indices(dst_rows, len(values)), _indices(src_rows, len(src))):
        values[d] = src[s]
    return tuple(values)


def row_of(batch: Any, k: int, space: spaces.Space | None = None) -> Any:
    """Row ``k`` of a batch of observations (one env's observation), copied.

    Example:
        >>> row_of({"x": np.arange(4).reshape(2, 2)}, 1)["x"].tolist()
        [2, 3]
        >>> row_of({"m": ("a", "b")}, 1, spaces.Dict({"m": spaces.Text(5)}))
        {'m': 'b'}
    """
    kind = _node(batch, space)
    if kind is dict:
        return {key: row_of(v, k, _sub(space, key)) for key, v in batch.items()}
    if kind is tuple:
        return tuple(row_of(v, k, _sub(space, i)) for i, v in enumerate(batch))
    return batch[k].copy() if isinstance(batch, np.ndarray) else batch[k]


def _node(obs: Any, space: spaces.Space | None) -> type | None:
    """``dict`` or ``tuple`` where the batch is a Dict or Tuple space's node, else None (a leaf)."""
    if space is None:
        return dict if isinstance(obs, dict) else tuple if isinstance(obs, tuple) else None
    return dict if isinstance(space, spaces.Dict) else tuple if isinstance(space, spaces.Tuple) else None


def _sub(space: spaces.Space | None, key: Any) -> spaces.Space | None:
    return None if space is None else space[key]


def _indices(rows: Any, n: int) -> list[int]:
    """Row positions from an index list or a boolean mask over ``n`` rows."""
    rows = np.asarray(rows)
    return np.flatnonzero(rows).tolist() if rows.dtype == bool else np.arange(n)[rows].tolist()
