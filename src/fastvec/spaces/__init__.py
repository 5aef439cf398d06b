"""Layouts compiled once from a Gymnasium space, and batches flattened through them.

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

The same Layout flattens batches (what a vector env returns: a leading batch axis on every
leaf) into ``[B, layout.flat_dim]`` rows equal to ``gymnasium.spaces.flatten`` per sample,
and back, through the Cython kernels of ``fastvec.spaces._flatten``:

    >>> from fastvec.spaces import flatten, unflatten
    >>> batch = {"id": np.array([3, 0]), "pos": np.zeros((2, 3), np.float32)}
    >>> flat = flatten(layout, batch, dtype=np.float32)
    >>> flat.shape, layout.flat_dim, layout.flat_dtype
    ((2, 7), 7, dtype('float64'))
    >>> unflatten(layout, flat)["id"]
    array([3, 0])

This package is the face; the parts live in one module each:

- ``_layout.py``: :class:`Leaf` and :class:`Layout` (a space's leaves, their flat offsets
  and dtype, split and join);
- ``_leaf_kinds.py``: which spaces are fixed-size leaves (``LEAF_SPACES``) and how each kind
  flattens (its kernel plan, its NumPy fallback). A new space kind is this module and its
  kernel in ``_flatten.pyx``;
- ``_flatten_api.py``: :func:`flatten`, :func:`unflatten` and their one-sample forms, the
  Python side of the kernels;
- ``_flatten.pyx``: the compiled kernels.
"""
from __future__ import annotations

from fastvec.spaces._flatten_api import flatten, flatten_sample, unflatten, unflatten_sample
from fastvec.spaces._layout import Layout, Leaf

# Not public: tests compare the compiled split/join with Layout.split/join through this name.

__all__ = ["Leaf", "Layout", "flatten", "unflatten", "flatten_sample", "unflatten_sample"]
