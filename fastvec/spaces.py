"""Layouts compiled once from a Gymnasium space.

A :class:`Layout` walks a (possibly nested) ``Dict``/``Tuple`` space once and
records its leaves in a fixed order (the order ``gymnasium.spaces.flatten``
uses). Each leaf knows the shape and dtype one sample of it takes, so a
vector backend can give every leaf its own slab of shared memory, and the
flatten kernels can copy leaves into one flat buffer without walking the
space again.

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from fastvec.spaces import Layout
    >>> space = spaces.Dict({"pos": spaces.Box(-1, 1, (3,)), "id": spaces.Discrete(4)})
    >>> layout = Layout(space)
    >>> [(leaf.path, leaf.shape, leaf.dtype.name) for leaf in layout.leaves]
    [(('id',), (), 'int64'), (('pos',), (3,), 'float32')]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces as gspaces

__all__ = ["Leaf", "Layout"]


@dataclass(frozen=True)
class Leaf:
    """One array-valued part of a space.

    Attributes:
        path: keys (Dict) and indices (Tuple) from the root space to this leaf.
        space: the leaf space (Box, Discrete, MultiDiscrete or MultiBinary).
        shape: shape of one sample of this leaf.
        dtype: dtype of one sample, the space's own dtype.
    """

    path: tuple
    space: gspaces.Space
    shape: tuple
    dtype: np.dtype

    @property
    def size(self) -> int:
        """Number of scalar values in one sample."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes one sample of this leaf takes."""
        return self.size * self.dtype.itemsize


_LEAF_TYPES = (gspaces.Box, gspaces.Discrete, gspaces.MultiDiscrete, gspaces.MultiBinary)


def _collect(space: gspaces.Space, path: tuple, out: list) -> None:
    if isinstance(space, gspaces.Dict):
        for key, sub in space.spaces.items():
            _collect(sub, path + (key,), out)
    elif isinstance(space, gspaces.Tuple):
        for index, sub in enumerate(space.spaces):
            _collect(sub, path + (index,), out)
    elif isinstance(space, _LEAF_TYPES):
        out.append(Leaf(path, space, tuple(int(s) for s in space.shape), np.dtype(space.dtype)))
    else:
        raise ValueError(
            f"fastvec cannot lay out a space of type {type(space).__name__} ({space!r}) "
            "in fixed-size buffers; supported are Box, Discrete, MultiDiscrete, "
            "MultiBinary and Dict/Tuple nestings of them."
        )


class Layout:
    """The leaves of a space, in flatten order, compiled once.

    Args:
        space: a Box, Discrete, MultiDiscrete, MultiBinary, or a Dict/Tuple
            nesting of them.

    Raises:
        ValueError: for spaces without a fixed-size array form (Text, Graph,
            Sequence, OneOf, ...).
    """

    def __init__(self, space: gspaces.Space):
        self.space = space
        leaves: list[Leaf] = []
        _collect(space, (), leaves)
        self.leaves: tuple[Leaf, ...] = tuple(leaves)
        self.is_leaf = isinstance(space, _LEAF_TYPES)

    def __len__(self) -> int:
        return len(self.leaves)

    def __repr__(self) -> str:
        return f"Layout({self.space!r}, leaves={len(self.leaves)})"

    def split(self, value: Any) -> list:
        """Return the leaf values of a nested sample (or batch), in leaf order."""
        if self.is_leaf:
            return [value]
        out = []
        for leaf in self.leaves:
            v = value
            for key in leaf.path:
                v = v[key]
            out.append(v)
        return out

    def join(self, leaf_values: Sequence) -> Any:
        """Build the nested Dict/Tuple value from leaf values given in leaf order."""
        if self.is_leaf:
            return leaf_values[0]
        it = iter(leaf_values)
        return _build(self.space, it)


def _build(space: gspaces.Space, it) -> Any:
    if isinstance(space, gspaces.Dict):
        return {key: _build(sub, it) for key, sub in space.spaces.items()}
    if isinstance(space, gspaces.Tuple):
        return tuple(_build(sub, it) for sub in space.spaces)
    return next(it)
