"""The space kinds fastvec lays out as fixed-size leaves, and how each kind flattens.

Everything the Python side knows per kind of leaf lives here: which Gymnasium spaces are
leaves (:data:`LEAF_SPACES`), a leaf's kind and flat size (what
:class:`fastvec.spaces.Leaf` reports), and the plan each kind gets from the compiled
kernels of ``fastvec.spaces._flatten`` with the NumPy version of those kernels for the
dtypes they do not cover. The Layout (``_layout.py``), the flatten front end
(``_flatten_api.py``) and the vector backends (``vector/_staging.py``) ask here instead of
testing space types themselves, so a new space kind is this module plus its kernel in
``_flatten.pyx``.

Example:
    >>> from gymnasium import spaces
    >>> from fastvec.spaces._leaf_kinds import LEAF_SPACES, leaf_kind
    >>> isinstance(spaces.Discrete(4), LEAF_SPACES), isinstance(spaces.Text(5), LEAF_SPACES)
    (True, False)
    >>> leaf_kind(spaces.MultiDiscrete([2, 3]))
    'multidiscrete'
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from gymnasium import spaces as gspaces

from fastvec.spaces._flatten import LeafKind

if TYPE_CHECKING:
    from fastvec.spaces._layout import Leaf

__all__ = ["LEAF_SPACES", "LEAF_SPACE_NAMES", "COPIED_KINDS", "SCALAR_KINDS", "KERNEL_FLOATS",
           "PYTHON", "leaf_kind", "flat_size", "leaf_plan"]

#: The spaces with a fixed-size array form: the leaves a Layout lays out (every other space
#: is an error, or an object leaf in a ``Layout(space, objects=True)``).
LEAF_SPACES = (gspaces.Box, gspaces.Discrete, gspaces.MultiDiscrete, gspaces.MultiBinary)

#: Their names, for the errors that say what is supported.
LEAF_SPACE_NAMES = tuple(space_type.__name__ for space_type in LEAF_SPACES)

#: Kinds whose values are copied (cast) into the flat buffer, so the casts gymnasium's nested
#: concatenation applies reach them; one-hot values are 0 and 1, exact in every dtype.
COPIED_KINDS = ("box", "multibinary")

#: Kinds one sample of which unflattens to a NumPy scalar (as ``gymnasium.spaces.unflatten``
#: gives), not a 0-d array.
SCALAR_KINDS = ("discrete",)

#: Flat dtypes the compiled kernels write and read; other flat dtypes run the NumPy kernels.
KERNEL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# The kinds of fastvec.spaces._flatten.LeafPlan (its LeafKind enum), as plain ints.
# PYTHON: no kernel covers the leaf, the front end runs its NumPy version.
_COPY, _ONEHOT, _MULTI_ONEHOT, _NONZERO, PYTHON = (int(kind) for kind in (
    LeafKind.COPY, LeafKind.ONEHOT, LeafKind.MULTI_ONEHOT, LeafKind.NONZERO, LeafKind.PYTHON))


def leaf_kind(space: gspaces.Space) -> str:
    """How a leaf of ``space`` flattens.

    Args:
        space: one of :data:`LEAF_SPACES`.

    Returns:
        ``"discrete"`` or ``"multidiscrete"`` (one-hot, as ``gymnasium.spaces.flatten``),
        ``"multibinary"`` or ``"box"`` (copied, cast).

    Example:
        >>> from gymnasium import spaces
        >>> leaf_kind(spaces.Discrete(3)), leaf_kind(spaces.Box(0, 1, (2,)))
        ('discrete', 'box')
    """
    if isinstance(space, gspaces.Discrete):
        return "discrete"
    if isinstance(space, gspaces.MultiDiscrete):
        return "multidiscrete"
    if isinstance(space, gspaces.MultiBinary):
        return "multibinary"
    return "box"


def flat_size(leaf: Leaf) -> int:
    """Number of values one sample of ``leaf`` takes once flattened.

    Args:
        leaf: a fixed-size leaf (its space one of :data:`LEAF_SPACES`).

    Returns:
        ``gymnasium.spaces.flatdim(leaf.space)``: ``n`` for a Discrete, the sum of ``nvec``
        for a MultiDiscrete, ``leaf.size`` (the values of one sample) otherwise.

    Example:
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout
        >>> layout = Layout(spaces.Tuple((spaces.MultiDiscrete([2, 3]), spaces.Box(0, 1, (2, 4)))))
        >>> [flat_size(leaf) for leaf in layout.leaves]
        [5, 8]
    """
    space = leaf.space
    if isinstance(space, gspaces.Discrete):
        return int(space.n)
    if isinstance(space, gspaces.MultiDiscrete):
        return int(np.sum(space.nvec, dtype=np.int64))
    return leaf.size


def leaf_plan(leaf: Leaf, offset: int, dtype: np.dtype, flat_dtype: np.dtype,
              direction: str) -> tuple[Any, Callable, tuple, bool]:
    """How one leaf is flattened (``direction="in"``) or unflattened (``"out"``).

    Args:
        leaf: a fixed-size leaf of a Layout.
        offset: the column of the leaf's first flat value.
        dtype: dtype of the leaf array the kernel reads (flatten) or writes (unflatten).
        flat_dtype: dtype of the flat buffer.
        direction: ``"in"`` (leaves into the flat buffer) or ``"out"`` (back).

    Returns:
        ``(kplan, np_fn, np_args, flat2d)``: the kernel's ``LeafPlan`` (of kind
        :data:`PYTHON` when no kernel covers ``dtype`` or ``flat_dtype``); the NumPy kernel
        run instead then, called as ``np_fn(leaf_values, flat, *np_args)`` to flatten and
        ``np_fn(flat, *np_args, leaf_values)`` to unflatten, with the flat buffer
        ``[B, F]``; and whether that function takes the leaf's values as ``[B, width]``
        (else ``[B]``).

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout
        >>> leaf = Layout(spaces.Discrete(3, start=1)).leaves[0]
        >>> kplan, np_fn, np_args, flat2d = leaf_plan(leaf, 0, leaf.dtype, np.dtype(np.int8), "in")
        >>> kplan.kind == PYTHON, np_args, flat2d
        (True, (0, 3, 1), False)
        >>> flat = np.zeros((2, 3), np.int8)
        >>> np_fn(np.array([3, 1]), flat, *np_args), flat.tolist()
        (-1, [[0, 0, 1], [1, 0, 0]])
    """
    from fastvec.spaces._flatten import LeafPlan

    space = leaf.space
    kind = leaf.kind
    if kind == "discrete":
        start = _u64(space.start)
        kplan = LeafPlan(_ONEHOT, dtype, leaf.shape, offset, leaf.flat_size, start)
        np_args = (offset, int(space.n), start)
        name = "onehot"
    elif kind == "multidiscrete":
        nvec = space.nvec.reshape(-1).astype(np.int64)
        seg = np.cumsum(nvec) - nvec
        starts = np.array([_u64(s) for s in space.start.reshape(-1)], dtype=np.uint64)
        kplan = LeafPlan(_MULTI_ONEHOT, dtype, leaf.shape, offset, leaf.flat_size,
                         0, seg, nvec, starts)
        np_args = ((offset, leaf.flat_size, seg, nvec, starts) if direction == "in"
                   else (offset, seg, nvec, starts))
        name = "multi_onehot"
    else:
        bool_out = direction == "out" and dtype == np.bool_
        kplan = LeafPlan(_NONZERO if bool_out else _COPY, dtype, leaf.shape, offset,
                         leaf.flat_size)
        np_args = (offset,)
        name = "copy"
    if flat_dtype not in KERNEL_FLOATS:
        kplan = LeafPlan(PYTHON, dtype, leaf.shape, offset, leaf.flat_size)
    # A Discrete sample is one value, the others a row of ``leaf.size`` values.
    return kplan, _NUMPY_KERNELS[name, direction], np_args, kind != "discrete"


def _u64(value) -> int:
    """An integer's two's-complement bits as an unsigned 64-bit value."""
    return int(value) % (1 << 64)


# NumPy versions of the kernels: used for leaves and flat dtypes no kernel covers (float16,
# integer or bool flat buffers, ...). `out`/`flat` are [B, F]; leaves [B, width] or [B].
# Each returns -1, or the first batch row whose value is outside the space (flatten) or
# whose one-hot segment has no nonzero (unflatten).

def _np_copy_in(src, out, off):
    out[:, off:off + src.shape[1]] = src
    return -1


def _np_onehot_in(src, out, off, n, start):
    k = src.astype(np.uint64) - np.uint64(start)
    bad = np.flatnonzero(k >= n)
    if bad.size:
        return int(bad[0])
    seg = out[:, off:off + n]
    seg[...] = 0
    seg[np.arange(src.shape[0]), k.astype(np.intp)] = 1
    return -1


def _np_multi_onehot_in(src, out, off, width, seg, nvec, start):
    k = src.astype(np.uint64) - start
    bad = np.flatnonzero((k >= nvec.astype(np.uint64)).any(axis=1))
    if bad.size:
        return int(bad[0])
    out[:, off:off + width] = 0
    rows = np.arange(src.shape[0])[:, None]
    out[rows, off + seg + k.astype(np.intp)] = 1
    return -1


def _np_copy_out(flat, off, dst):
    dst[...] = flat[:, off:off + dst.shape[1]]
    return -1


def _np_onehot_out(flat, off, n, start, dst):
    nz = flat[:, off:off + n] != 0
    has = nz.any(axis=1)
    if not has.all():
        return int(np.argmin(has))
    dst[...] = (nz.argmax(axis=1).astype(np.uint64) + np.uint64(start)).astype(dst.dtype)
    return -1


def _np_multi_onehot_out(flat, off, seg, nvec, start, dst):
    for c in range(dst.shape[1]):
        bad = _np_onehot_out(flat, off + int(seg[c]), int(nvec[c]), int(start[c]), dst[:, c])
        if bad >= 0:
            return bad
    return -1


_NUMPY_KERNELS = {
    ("copy", "in"): _np_copy_in, ("onehot", "in"): _np_onehot_in,
    ("multi_onehot", "in"): _np_multi_onehot_in, ("copy", "out"): _np_copy_out,
    ("onehot", "out"): _np_onehot_out, ("multi_onehot", "out"): _np_multi_onehot_out,
}
