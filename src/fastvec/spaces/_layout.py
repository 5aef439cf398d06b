"""How a Gymnasium space is laid out as fixed-size leaves: :class:`Leaf` and :class:`Layout`.

A :class:`Layout` walks a (possibly nested) ``Dict``/``Tuple`` space once and records its
leaves in a fixed order (the order ``gymnasium.spaces.flatten`` uses), with where each
leaf's values go in the flat vector and the flat dtype. Each leaf knows the shape and dtype
one sample of it takes, so a vector backend can give every leaf its own slab of shared
memory, and the flatten front end (``_flatten_api.py``) can copy leaves into one flat
buffer without walking the space again. Which spaces are leaves, and how each kind
flattens, is ``_leaf_kinds.py``'s.

Example:
    >>> from gymnasium import spaces
    >>> from fastvec.spaces import Layout
    >>> layout = Layout(spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,)))))
    >>> [(leaf.path, leaf.kind, leaf.flat_size) for leaf in layout.leaves]
    [((0,), 'discrete', 3), ((1,), 'box', 2)]
    >>> layout.flat_offsets, layout.flat_dim
    ((0, 3), 5)
    >>> layout.split((2, [0.5, 0.5])), layout.join([2, [0.5, 0.5]])
    ([2, [0.5, 0.5]], (2, [0.5, 0.5]))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
from gymnasium import spaces as gspaces

from fastvec.spaces._leaf_kinds import LEAF_SPACE_NAMES, LEAF_SPACES, flat_size, leaf_kind

__all__ = ["Leaf", "Layout"]


@dataclass(frozen=True)
class Leaf:
    """One array-valued part of a space.

    Attributes:
        path: keys (Dict) and indices (Tuple) from the root space to this leaf.
        space: the leaf space (Box, Discrete, MultiDiscrete or MultiBinary; or, in a
            ``Layout(space, objects=True)``, any other space: an object leaf).
        shape: shape of one sample of this leaf (``()`` for an object leaf).
        dtype: dtype of one sample, the space's own dtype (``object`` for an object leaf).

    Example:
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout
        >>> leaf = Layout(spaces.MultiDiscrete([2, 3])).leaves[0]
        >>> leaf.shape, leaf.size, leaf.nbytes, leaf.flat_size, leaf.is_object
        ((2,), 2, 16, 5, False)
    """

    path: tuple
    space: gspaces.Space
    shape: tuple
    dtype: np.dtype

    @property
    def is_object(self) -> bool:
        """A leaf without a fixed-size array form (Text, Graph, Sequence, OneOf, a custom
        space): its samples are Python objects, one per env in a batch."""
        return self.dtype == object

    @property
    def size(self) -> int:
        """Number of scalar values in one sample."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes one sample of this leaf takes."""
        return self.size * self.dtype.itemsize

    @property
    def kind(self) -> str:
        """How the leaf flattens: ``"box"``, ``"multibinary"`` (copied, cast), ``"discrete"``
        or ``"multidiscrete"`` (one-hot, as ``gymnasium.spaces.flatten``)."""
        return leaf_kind(self.space)

    @property
    def flat_size(self) -> int:
        """Number of values one sample takes once flattened (``gymnasium.spaces.flatdim``)."""
        return flat_size(self)


class Layout:
    """The leaves of a space, in flatten order, compiled once.

    Args:
        space: a Box, Discrete, MultiDiscrete, MultiBinary, or a Dict/Tuple
            nesting of them.
        objects: also accept spaces without a fixed-size array form (Text, Graph,
            Sequence, OneOf, custom spaces), anywhere in the nesting, as object leaves
            (what a vector env sends through pipes). Such a layout splits and joins
            but does not flatten.

    Raises:
        ValueError: for spaces without a fixed-size array form (Text, Graph,
            Sequence, OneOf, ...), unless ``objects=True``.

    Example:
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout
        >>> cell, mode = spaces.MultiBinary(4), spaces.Tuple((spaces.Discrete(2),))
        >>> layout = Layout(spaces.Dict({"cell": cell, "mode": mode}))
        >>> [(leaf.path, leaf.kind) for leaf in layout.leaves]
        [(('cell',), 'multibinary'), (('mode', 0), 'discrete')]
        >>> len(layout), layout.flat_sizes, layout.flat_dtype
        (2, (4, 2), dtype('int64'))
        >>> layout.join(layout.split({"cell": [1, 0, 0, 1], "mode": (1,)}))
        {'cell': [1, 0, 0, 1], 'mode': (1,)}
        >>> Layout(spaces.Text(5))
        Traceback (most recent call last):
        ...
        ValueError: fastvec cannot lay out a space of type Text (...) in fixed-size buffers; ...
        >>> Layout(spaces.Dict({"name": spaces.Text(5)}), objects=True).has_objects
        True
    """

    def __init__(self, space: gspaces.Space, *, objects: bool = False):
        self.space = space
        leaves: list[Leaf] = []
        _collect(space, (), leaves, objects)
        self.leaves: tuple[Leaf, ...] = tuple(leaves)
        self.is_leaf = not isinstance(space, (gspaces.Dict, gspaces.Tuple))
        #: Whether some leaf is an object leaf (then the layout does not flatten).
        self.has_objects = any(leaf.is_object for leaf in leaves)
        if self.has_objects:
            self.flat_sizes = self.flat_offsets = ()
            self.flat_dim = None
            self.flat_dtype = None
            self._chains = ()
            self._plans = {}
            return
        # Where each leaf's values go in the flat vector gymnasium.spaces.flatten builds.
        sizes = [leaf.flat_size for leaf in self.leaves]
        self.flat_sizes: tuple[int, ...] = tuple(sizes)
        self.flat_offsets: tuple[int, ...] = tuple(int(o) for o in np.cumsum([0] + sizes[:-1]))
        self.flat_dim: int = int(sum(sizes))
        chains: list[list] = []
        #: dtype of gymnasium.spaces.flatten's result (np.concatenate's promotion, container by
        #: container); None for a space without leaves.
        self.flat_dtype: np.dtype | None = _flat_dtype(space, chains)
        # Per leaf: the dtypes its values pass through, innermost container first.
        self._chains: tuple[tuple, ...] = tuple(tuple(c) for c in chains)
        # The flatten front end's cache (_flatten_api.py): plans per (flat dtype, direction)
        # and the compiled split/join.
        self._plans: dict = {}

    def __len__(self) -> int:
        return len(self.leaves)

    def __getstate__(self) -> dict:
        # The cached flatten plans hold Cython objects and compiled lambdas: rebuilt on demand.
        state = self.__dict__.copy()
        state["_plans"] = {}
        return state

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


def _collect(space: gspaces.Space, path: tuple, out: list, objects: bool) -> None:
    """Append the leaves of ``space`` (at ``path`` from the root) to ``out``, in flatten order."""
    if isinstance(space, gspaces.Dict):
        for key, sub in space.spaces.items():
            _collect(sub, path + (key,), out, objects)
    elif isinstance(space, gspaces.Tuple):
        for index, sub in enumerate(space.spaces):
            _collect(sub, path + (index,), out, objects)
    elif isinstance(space, LEAF_SPACES):
        out.append(Leaf(path, space, tuple(int(s) for s in space.shape), np.dtype(space.dtype)))
    elif objects and isinstance(space, gspaces.Space):
        out.append(Leaf(path, space, (), np.dtype(object)))
    else:
        raise ValueError(
            f"fastvec cannot lay out a space of type {type(space).__name__} ({space!r}) "
            f"in fixed-size buffers; supported are {', '.join(LEAF_SPACE_NAMES)} and "
            "Dict/Tuple nestings of them."
        )


def _build(space: gspaces.Space, it: Iterator) -> Any:
    """The nested value of ``space`` with its leaves taken from ``it`` in leaf order."""
    if isinstance(space, gspaces.Dict):
        return {key: _build(sub, it) for key, sub in space.spaces.items()}
    if isinstance(space, gspaces.Tuple):
        return tuple(_build(sub, it) for sub in space.spaces)
    return next(it)


def _flat_dtype(space: gspaces.Space, chains: list) -> np.dtype | None:
    """gymnasium's flat dtype of ``space``; appends each leaf's container dtypes to ``chains``.

    ``gymnasium.spaces.flatten`` concatenates container by container, so a leaf's values are
    cast to each enclosing container's promoted dtype in turn (promotion is not associative:
    ``{{int8, uint8}, float16}`` flattens to float32, ``{int8, uint8, float16}`` too, but
    ``{{float16, int8}, uint8}`` to float16).
    """
    if isinstance(space, (gspaces.Dict, gspaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, gspaces.Dict) else space.spaces
        first = len(chains)
        dtypes = [d for d in (_flat_dtype(sub, chains) for sub in subs) if d is not None]
        dtype = np.result_type(*dtypes) if dtypes else None
        for chain in chains[first:]:
            chain.append(dtype)
        return dtype
    chains.append([])
    return np.dtype(space.dtype)
