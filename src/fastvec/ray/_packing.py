"""What a shard sends and receives on each step, as plain bytes.

A Ray actor call with a ``bytes`` argument and a ``bytes`` result costs about what a no-op
call costs; an ndarray argument adds a few hundred microseconds (Ray's own serializer
with out-of-band buffers), so both directions use bytes:

- **Actions** (driver to shard): a short header naming each leaf's dtype, then each
  leaf's rows for the shard, leaf after leaf (``encode_actions`` / ``decode_actions``).
  Batches that are not NumPy arrays of the batch shape (lists, Text actions, ...) travel
  as the Python objects they are, cut to the shard's rows (``take_rows``).
- **Results** (shard to driver): one record of a structured dtype
  (``result_dtype``): each fixed-size observation leaf as an ``(n, *shape)`` field, then
  ``rewards`` (float64), ``terminations`` and ``truncations`` (bool), for the shard's
  ``n`` envs. Infos and object observation leaves (Text, Graph, ...) travel next to it
  only on the steps that have them.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from fastvec.spaces import Layout

_DTYPE_WIDTH = 4  # bytes of a dtype's name in the action header ("<f4", "|b1", "<c16")


def result_dtype(layout: Layout, n: int) -> np.dtype:
    """The structured dtype of one shard's result record for ``n`` envs (aligned fields)."""
    fields = [(name, leaf.dtype, (n, *leaf.shape)) for name, leaf in zip(fixed_fields(layout), layout.leaves)
              if name is not None]
    fields += [("rewards", np.float64, (n,)), ("terminations", np.bool_, (n,)), ("truncations", np.bool_, (n,))]
    return np.dtype(fields, align=True)


def fixed_fields(layout: Layout) -> list[str | None]:
    """Per observation leaf: its field name in the result record, or None for an object leaf."""
    names, k = [], 0
    for leaf in layout.leaves:
        names.append(None if leaf.is_object else f"o{k}")
        k += not leaf.is_object
    return names


def _numeric(value: Any, count: int, leaf) -> bool:
    return (isinstance(value, np.ndarray) and value.shape == (count, *leaf.shape)
            and value.dtype.kind in "biufc" and value.dtype.isnative and len(value.dtype.str) <= _DTYPE_WIDTH)


def action_leaves(layout: Layout, actions: Any, count: int) -> list | None:
    """The batch's leaves if every one is a numeric ndarray of ``count`` rows of its leaf's
    shape (the case that travels as bytes), else None."""
    if layout.has_objects:
        return None
    if layout.is_leaf:
        values = [actions]
    else:
        try:
            values = layout.split(actions)
        except (KeyError, IndexError, TypeError):
            return None
    if all(_numeric(v, count, leaf) for leaf, v in zip(layout.leaves, values)):
        return values
    return None


def encode_actions(values: list, rows: slice | np.ndarray) -> bytes:
    """The action leaves ``values`` (from :func:`action_leaves`) of the envs ``rows``, as bytes."""
    header = b"".join(v.dtype.str.encode().ljust(_DTYPE_WIDTH) for v in values)
    return bytes([len(values)]) + header + b"".join(np.ascontiguousarray(v[rows]).tobytes() for v in values)


def decode_actions(layout: Layout, payload: bytes, n: int):
    """The batch :func:`encode_actions` packed, for ``n`` envs (read-only arrays on the bytes)."""
    count = payload[0]
    offset = 1 + count * _DTYPE_WIDTH
    leaves = []
    for k, leaf in enumerate(layout.leaves):
        dtype = np.dtype(payload[1 + k * _DTYPE_WIDTH:1 + (k + 1) * _DTYPE_WIDTH].rstrip().decode())
        size = n * leaf.size
        leaves.append(np.frombuffer(payload, dtype, size, offset).reshape(n, *leaf.shape))
        offset += size * dtype.itemsize
    return leaves[0] if layout.is_leaf else layout.join(leaves)


def batch_length(space: spaces.Space, actions: Any) -> int:
    """How many envs' actions the batch holds, as Gymnasium's ``iterate`` would count them
    (the first leaf's length). Raises ``TypeError`` for a scalar batch."""
    if isinstance(space, spaces.Dict):
        if not isinstance(actions, dict) or not space.spaces:
            raise TypeError(f"expected a dict of batches for {space}, got {type(actions).__name__}")
        key = next(iter(space.spaces))
        return batch_length(space.spaces[key], actions[key])
    if isinstance(space, spaces.Tuple):
        if not isinstance(actions, (tuple, list)) or not space.spaces:
            raise TypeError(f"expected a tuple of batches for {space}, got {type(actions).__name__}")
        return batch_length(space.spaces[0], actions[0])
    if isinstance(actions, np.ndarray) and actions.ndim == 0 or np.isscalar(actions):
        raise TypeError(f"actions must be a batch (one row per env), got the scalar {actions!r}")
    try:
        return len(actions)
    except TypeError:
        raise TypeError(f"actions must be a batch (one row per env), got {type(actions).__name__}") from None


def take_rows(space: spaces.Space, actions: Any, rows: slice | np.ndarray):
    """The rows ``rows`` of a batch of any form, keeping its form (ndarray, list, tuple, dict)."""
    if isinstance(space, spaces.Dict) and isinstance(actions, dict):
        return {key: take_rows(space.spaces[key], actions[key], rows) if key in space.spaces else actions[key]
                for key in actions}
    if isinstance(space, spaces.Tuple) and isinstance(actions, (tuple, list)) and len(actions) == len(space.spaces):
        return type(actions)(take_rows(sub, value, rows) for sub, value in zip(space.spaces, actions))
    if isinstance(actions, np.ndarray):
        return actions[rows]
    if isinstance(rows, slice):
        return actions[rows]
    items = list(actions)
    return type(actions)(items[i] for i in rows.tolist()) if isinstance(actions, tuple) else [items[i] for i in rows.tolist()]
