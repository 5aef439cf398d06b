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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces as gspaces

__all__ = ["Leaf", "Layout", "flatten", "unflatten", "flatten_sample", "unflatten_sample"]


@dataclass(frozen=True)
class Leaf:
    """One array-valued part of a space.

    Attributes:
        path: keys (Dict) and indices (Tuple) from the root space to this leaf.
        space: the leaf space (Box, Discrete, MultiDiscrete or MultiBinary; or, in a
            ``Layout(space, objects=True)``, any other space: an object leaf).
        shape: shape of one sample of this leaf (``()`` for an object leaf).
        dtype: dtype of one sample, the space's own dtype (``object`` for an object leaf).
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
        if isinstance(self.space, gspaces.Discrete):
            return "discrete"
        if isinstance(self.space, gspaces.MultiDiscrete):
            return "multidiscrete"
        if isinstance(self.space, gspaces.MultiBinary):
            return "multibinary"
        return "box"

    @property
    def flat_size(self) -> int:
        """Number of values one sample takes once flattened (``gymnasium.spaces.flatdim``)."""
        if isinstance(self.space, gspaces.Discrete):
            return int(self.space.n)
        if isinstance(self.space, gspaces.MultiDiscrete):
            return int(np.sum(self.space.nvec, dtype=np.int64))
        return self.size


_LEAF_TYPES = (gspaces.Box, gspaces.Discrete, gspaces.MultiDiscrete, gspaces.MultiBinary)


def _collect(space: gspaces.Space, path: tuple, out: list, objects: bool) -> None:
    if isinstance(space, gspaces.Dict):
        for key, sub in space.spaces.items():
            _collect(sub, path + (key,), out, objects)
    elif isinstance(space, gspaces.Tuple):
        for index, sub in enumerate(space.spaces):
            _collect(sub, path + (index,), out, objects)
    elif isinstance(space, _LEAF_TYPES):
        out.append(Leaf(path, space, tuple(int(s) for s in space.shape), np.dtype(space.dtype)))
    elif objects and isinstance(space, gspaces.Space):
        out.append(Leaf(path, space, (), np.dtype(object)))
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
        objects: also accept spaces without a fixed-size array form (Text, Graph,
            Sequence, OneOf, custom spaces), anywhere in the nesting, as object leaves
            (what a vector env sends through pipes). Such a layout splits and joins
            but does not flatten.

    Raises:
        ValueError: for spaces without a fixed-size array form (Text, Graph,
            Sequence, OneOf, ...), unless ``objects=True``.
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


def _build(space: gspaces.Space, it) -> Any:
    if isinstance(space, gspaces.Dict):
        return {key: _build(sub, it) for key, sub in space.spaces.items()}
    if isinstance(space, gspaces.Tuple):
        return tuple(_build(sub, it) for sub in space.spaces)
    return next(it)


# ---------------------------------------------------------------------------
# flatten / unflatten
# ---------------------------------------------------------------------------


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


def _exact(src: np.dtype, dst: np.dtype) -> bool:
    """Whether every value of dtype ``src`` is represented exactly in ``dst``."""
    if src == dst or src.kind == "b":
        return True
    if dst.kind == "b":
        return False
    if src.kind in "iu" and dst.kind in "iu":
        return bool(np.can_cast(src, dst, "safe"))
    if src.kind in "iu" and dst.kind == "f":
        bits = 8 * src.itemsize - (src.kind == "i")
        return bits <= np.finfo(dst).nmant + 1
    if src.kind == "f" and dst.kind == "f":
        return bool(np.can_cast(src, dst, "safe"))
    return False


def _precasts(leaf_dtype: np.dtype, chain: tuple, target: np.dtype) -> tuple:
    """The casts gymnasium's nested concatenation applies that a direct cast would not equal.

    A value goes leaf dtype -> each container dtype -> ``target``. An intermediate dtype that
    holds the current values exactly changes nothing and is skipped; a lossy one (int64 ->
    float64 before float32, say) must be applied as is, so it is returned to be applied first.
    """
    steps = [d for d in chain if d is not None] + [target]
    while len(steps) >= 2 and steps[-2] == steps[-1]:
        steps.pop(-2)
    out = []
    cur = leaf_dtype
    for d in steps[:-1]:
        if not _exact(cur, d):
            out.append(d)
            cur = d
    return tuple(out)


_KERNEL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Leaf kinds of fastvec.spaces._flatten.LeafPlan.
_COPY, _ONEHOT, _MULTI_ONEHOT, _NONZERO, _PYTHON = range(5)


# NumPy versions of the kernels: used for leaves and flat dtypes no kernel covers (float16,
# integer or bool flat buffers, ...). `out`/`flat` are [B, F]; leaves [B, width] or [B].

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


def _u64(value) -> int:
    """An integer's two's-complement bits as an unsigned 64-bit value."""
    return int(value) % (1 << 64)


class _LeafStep:
    """One leaf's plan for one flat dtype and direction: the kernel's LeafPlan and the NumPy
    fallback with its arguments."""

    __slots__ = ("leaf", "kplan", "np_fn", "np_args", "precast", "flat2d", "width")

    def __init__(self, leaf: Leaf, offset: int, precast: tuple, flat_dtype: np.dtype,
                 direction: str):
        from fastvec.spaces._flatten import LeafPlan

        self.leaf = leaf
        self.precast = precast
        space = leaf.space
        kind = leaf.kind
        # The dtype of the array the kernel reads (flatten) or writes (unflatten).
        dtype = precast[-1] if precast else leaf.dtype
        if kind == "discrete":
            start = _u64(space.start)
            self.kplan = LeafPlan(_ONEHOT, dtype, leaf.shape, offset, leaf.flat_size, start)
            self.np_args = (offset, int(space.n), start)
            name = "onehot"
        elif kind == "multidiscrete":
            nvec = space.nvec.reshape(-1).astype(np.int64)
            seg = np.cumsum(nvec) - nvec
            starts = np.array([_u64(s) for s in space.start.reshape(-1)], dtype=np.uint64)
            self.kplan = LeafPlan(_MULTI_ONEHOT, dtype, leaf.shape, offset, leaf.flat_size,
                                  0, seg, nvec, starts)
            self.np_args = ((offset, leaf.flat_size, seg, nvec, starts) if direction == "in"
                            else (offset, seg, nvec, starts))
            name = "multi_onehot"
        else:
            bool_out = direction == "out" and dtype == np.bool_
            self.kplan = LeafPlan(_NONZERO if bool_out else _COPY, dtype, leaf.shape, offset,
                                  leaf.flat_size)
            self.np_args = (offset,)
            name = "copy"
        if flat_dtype not in _KERNEL_FLOATS:
            self.kplan = LeafPlan(_PYTHON, dtype, leaf.shape, offset, leaf.flat_size)
        self.np_fn = _NUMPY_KERNELS[name, direction]
        self.flat2d = kind != "discrete"
        self.width = leaf.size

    def path_str(self) -> str:
        return "/".join(map(str, self.leaf.path)) or "<root>"

    def coerce(self, value, batch: int | None) -> np.ndarray:
        """``value`` as a C-contiguous array the kernel reads, or a clear error.

        ``batch`` None means one sample. Values of another dtype are cast to the leaf's dtype
        first (as gymnasium's ``np.asarray(x, dtype=space.dtype)``): bool, integer and float
        values for float leaves, bool and integer values (that fit) for the others; floats for
        integer leaves and non-numbers are refused.
        """
        leaf = self.leaf
        a = value if isinstance(value, np.ndarray) else np.asarray(value)
        if a.dtype != leaf.dtype:
            if a.dtype.kind not in ("biuf" if leaf.dtype.kind == "f" else "biu"):
                raise TypeError(f"leaf {self.path_str()} ({leaf.space}): expected values castable "
                                f"to {leaf.dtype}, got an array of dtype {a.dtype}")
            if (a.dtype.kind in "iu" and leaf.dtype.kind in "iu" and a.size
                    and not np.can_cast(a.dtype, leaf.dtype, "safe")):
                # A narrowing integer cast would wrap silently: refuse values it cannot hold.
                info = np.iinfo(leaf.dtype)
                lo, hi = a.min(), a.max()
                if lo < info.min or hi > info.max:
                    bad = lo if lo < info.min else hi
                    raise ValueError(f"leaf {self.path_str()} ({leaf.space}): value {bad} does "
                                     f"not fit the space's dtype {leaf.dtype}")
            a = a.astype(leaf.dtype)
        expected = leaf.shape if batch is None else (batch,) + leaf.shape
        if a.shape != expected:
            what = "one sample" if batch is None else f"a batch of {batch}"
            hint = ("; for one sample use flatten_sample"
                    if batch is not None and a.shape == leaf.shape else "")
            raise ValueError(f"leaf {self.path_str()} ({leaf.space}): expected shape {expected} "
                             f"for {what}, got {a.shape}{hint}")
        for d in self.precast:
            a = a.astype(d)
        if not (a.flags.c_contiguous and a.flags.aligned):
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        return a


class _Plan:
    """All leaves' steps for one direction and one flat dtype, cached in the Layout."""

    __slots__ = ("steps", "kplans", "python", "kernel", "coerce_batch", "run", "alloc",
                 "scalars")

    def __init__(self, layout: "Layout", dtype: np.dtype, direction: str):
        from fastvec.spaces import _flatten

        self.run = _flatten.flatten_into if direction == "in" else _flatten.unflatten_into
        self.steps = []
        for leaf, off, chain in zip(layout.leaves, layout.flat_offsets, layout._chains):
            precast = ()
            if direction == "in" and leaf.kind in ("box", "multibinary"):
                precast = _precasts(leaf.dtype, chain, dtype)
            self.steps.append(_LeafStep(leaf, off, precast, dtype, direction))
        self.kplans = [s.kplan for s in self.steps]
        # Unflatten: each leaf's sample shape and dtype; the Discrete leaves (NumPy scalars).
        self.alloc = [(s.leaf.shape, s.leaf.dtype) for s in self.steps]
        self.scalars = [i for i, s in enumerate(self.steps) if s.leaf.kind == "discrete"]
        # Leaves the NumPy fallback writes (no kernel for their dtype or for the flat dtype).
        self.python = [i for i, s in enumerate(self.steps) if s.kplan.kind == _PYTHON]
        self.kernel = len(self.python) < len(self.steps)
        steps = self.steps
        self.coerce_batch = lambda i, v, rows, single: steps[i].coerce(v, None if single else rows)


def _plan(layout: Layout, dtype: np.dtype, direction: str) -> _Plan:
    key = (dtype, direction)
    plan = layout._plans.get(key)
    if plan is None:
        plan = layout._plans[key] = _Plan(layout, dtype, direction)
    return plan


def _check_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise TypeError(f"flat dtype must be a numeric (bool, integer or float) dtype, got {dtype}")
    return dtype


def _require_flat(layout: Layout) -> None:
    if layout.has_objects:
        kinds = sorted({type(leaf.space).__name__ for leaf in layout.leaves if leaf.is_object})
        raise ValueError(f"cannot flatten {layout.space!r}: its {', '.join(kinds)} parts have no "
                         "fixed-size array form")


def _out_dtype(layout: Layout, out, dtype) -> np.dtype:
    _require_flat(layout)
    if layout.flat_dtype is None:
        raise ValueError(f"cannot flatten {layout.space!r}: it has no Box, Discrete, MultiDiscrete "
                         "or MultiBinary leaf")
    if dtype is not None:
        dtype = _check_dtype(dtype)
        if out is not None and getattr(out, "dtype", None) != dtype:
            raise TypeError(f"out has dtype {getattr(out, 'dtype', None)} but dtype={dtype} "
                            "was asked for")
        return dtype
    if out is not None:
        dtype = out.dtype
        return dtype if dtype in _KERNEL_FLOATS else _check_dtype(dtype)
    return layout.flat_dtype


def _literal(key) -> str | None:
    """``repr(key)`` when it evaluates back to an equal key of the same type, else None."""
    import ast

    text = repr(key)
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text if type(back) is type(key) and back == key else None


def _codegen(layout: Layout) -> tuple:
    """Compile the layout's split and join into two small lambdas (one subscript chain per
    leaf, one nested dict/tuple display), equal to ``Layout.split``/``Layout.join`` but ~5x
    cheaper per call. Falls back to those methods for keys that are not plain literals."""
    cached = layout._plans.get("codegen")
    if cached is not None:
        return cached
    if layout.is_leaf:
        cached = (lambda x: [x], lambda v: v[0])
    else:
        gets, ok = [], True
        for leaf in layout.leaves:
            keys = [_literal(k) for k in leaf.path]
            ok = ok and all(k is not None for k in keys)
            gets.append("x" + "".join(f"[{k}]" for k in keys))
        counter = iter(range(len(layout.leaves)))

        def build(space) -> str:
            nonlocal ok
            if isinstance(space, gspaces.Dict):
                items = []
                for key, sub in space.spaces.items():
                    lit = _literal(key)
                    ok = ok and lit is not None
                    items.append(f"{lit}: {build(sub)}")
                return "{" + ", ".join(items) + "}"
            if isinstance(space, gspaces.Tuple):
                return "(" + "".join(f"{build(sub)}, " for sub in space.spaces) + ")"
            return f"v[{next(counter)}]"

        body = build(layout.space)
        if ok:
            cached = (eval("lambda x: [" + ", ".join(gets) + "]"), eval(f"lambda v: {body}"))
        else:
            cached = (layout.split, layout.join)
    layout._plans["codegen"] = cached
    return cached


def _split(layout: Layout, value, what: str) -> list:
    split = layout._plans.get("codegen", (None,))[0] or _codegen(layout)[0]
    try:
        return split(value)
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"expected {what} structured like {layout.space!r}; looking up a leaf "
                         f"failed with {type(exc).__name__}: {exc}") from None


def _join(layout: Layout, leaves: list):
    join = layout._plans.get("codegen", (None, None))[1] or _codegen(layout)[1]
    return join(leaves)


def _bad_value(step: _LeafStep, value, batch: int, row: int, single: bool) -> ValueError:
    if single:
        shown = np.asarray(value).tolist()  # (may be an int the leaf dtype cannot hold)
    else:
        shown = step.coerce(value, batch)[row].tolist()
    where = "" if single else f" at batch index {row}"
    return ValueError(f"leaf {step.path_str()} ({step.leaf.space}): value {shown}{where} is "
                      "outside the space")


def _flatten_into(plan: _Plan, values: list, batch: int, out2: np.ndarray, single: bool) -> None:
    """Write every leaf of ``values`` into the C-contiguous ``out2[batch, flat_dim]``."""
    if len(values) != len(plan.steps):
        raise ValueError(f"expected {len(plan.steps)} leaf values, got {len(values)}")
    if plan.kernel:
        bad = plan.run(plan.kplans, values, out2, plan.coerce_batch, single)
        if bad is not None:
            i, row = bad
            raise _bad_value(plan.steps[i], values[i], batch, row, single)
    for i in plan.python:
        step = plan.steps[i]
        v = step.coerce(values[i], None if single else batch)
        v = v.reshape(batch, step.width) if step.flat2d else v.reshape(batch)
        row = step.np_fn(v, out2, *step.np_args)
        if row >= 0:
            raise _bad_value(step, values[i], batch, row, single)


def flatten(layout: Layout, batch, out: np.ndarray | None = None, *, dtype=None) -> np.ndarray:
    """Flatten a batch of samples into ``[B, layout.flat_dim]``, as gymnasium does per sample.

    Row ``b`` equals ``gymnasium.spaces.flatten(layout.space, sample_b)`` (cast to ``dtype``
    when one is given): Box and MultiBinary values copied in order, Discrete and
    MultiDiscrete values one-hot encoded (``start`` honoured), Dict leaves in
    ``space.spaces`` order, Tuple leaves by index.

    Args:
        layout: the :class:`Layout` of the space.
        batch: what a vector env returns for the space: an array ``[B, *shape]`` per leaf,
            in Dicts/Tuples nested as the space is.
        out: optional preallocated ``[B, flat_dim]`` array to write into (a CPU torch
            tensor works too; it is returned as given). A non-C-contiguous ``out`` costs one
            extra copy.
        dtype: output dtype; by default ``out.dtype`` or gymnasium's flat dtype
            (``layout.flat_dtype``, NumPy's promotion of the leaf dtypes). float32 and
            float64 outputs run the Cython kernels, others run NumPy.

    Returns:
        ``out`` (or a new array) of shape ``[B, flat_dim]``.

    Raises:
        ValueError: a leaf is missing or has the wrong shape, the batch sizes differ, a
            Discrete/MultiDiscrete value is outside the space, an integer does not fit the
            leaf's dtype, or ``out`` has the wrong shape or is read-only.
        TypeError: a leaf holds values the leaf's dtype does not take (floats for an integer
            leaf, non-numbers), or ``out``/``dtype`` disagree or are not numeric.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout, flatten
        >>> layout = Layout(spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "id": spaces.Discrete(3)}))
        >>> flatten(layout, {"id": np.array([2, 0]), "pos": np.zeros((2, 2), np.float32)},
        ...         dtype=np.float32)
        array([[0., 0., 1., 0., 0.],
               [1., 0., 0., 0., 0.]], dtype=float32)
    """
    result, out = out, _as_array_out(out)
    dtype = _out_dtype(layout, out, dtype)
    values = _split(layout, batch, "a batch")
    first = values[0]
    shape = getattr(first, "shape", None)
    if shape is None:
        shape = np.shape(first)
    if not shape:
        raise ValueError(f"expected a batch (leading axis = batch) for {layout.space!r}, got a "
                         f"leaf of shape {tuple(shape)}; use flatten_sample for one sample")
    n = int(shape[0])
    plan = layout._plans.get((dtype, "in")) or _plan(layout, dtype, "in")
    if out is None:
        out = target = np.empty((n, layout.flat_dim), dtype)
        scratch = False
    else:
        target, scratch = _check_out(out, (n, layout.flat_dim))
    _flatten_into(plan, values, n, target, False)
    if scratch:
        out[...] = target
    return out if result is None else result


def _as_array_out(out):
    """``out`` as a NumPy array sharing its memory (a CPU torch tensor works too)."""
    if out is None or isinstance(out, np.ndarray):
        return out
    if type(out).__module__.split(".")[0] == "torch":
        if out.device.type != "cpu":
            raise TypeError(f"out must be a NumPy array or a CPU torch tensor, got a tensor on "
                            f"{out.device}")
        try:
            return out.numpy()
        except RuntimeError as exc:
            raise TypeError(f"out cannot be written through NumPy: {exc}") from None
    raise TypeError(f"out must be a numpy.ndarray or a CPU torch tensor, got {type(out).__name__}")


def _check_out(out, shape: tuple) -> tuple[np.ndarray, bool]:
    """Validate ``out``; return the 2-D C-contiguous array the kernels write and whether it is
    a scratch buffer to copy back into ``out`` (when ``out`` is not C-contiguous)."""
    if out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    flags = out.flags
    if not flags.writeable:
        raise ValueError("out is read-only")
    if len(shape) == 2:
        return (out, False) if flags.c_contiguous else (np.empty(shape, out.dtype), True)
    return (out.reshape(1, -1), False) if flags.c_contiguous else (
        np.empty((1, shape[0]), out.dtype), True)


def flatten_sample(layout: Layout, sample, out: np.ndarray | None = None, *,
                   dtype=None) -> np.ndarray:
    """Flatten one sample into ``[flat_dim]``: equals ``gymnasium.spaces.flatten``.

    Same arguments as :func:`flatten`, for a single sample (``out`` is 1-D).

    Example:
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout, flatten_sample
        >>> space = spaces.Tuple((spaces.Discrete(3, start=1), spaces.MultiBinary(2)))
        >>> flatten_sample(Layout(space), (3, [1, 0]))
        array([0, 0, 1, 1, 0])
    """
    values = _split(layout, sample, "a sample")
    result, out = out, _as_array_out(out)
    dtype = _out_dtype(layout, out, dtype)
    plan = layout._plans.get((dtype, "in")) or _plan(layout, dtype, "in")
    if out is None:
        target = np.empty((1, layout.flat_dim), dtype)
        out = target[0]
        scratch = False
    else:
        target, scratch = _check_out(out, (layout.flat_dim,))
    _flatten_into(plan, values, 1, target, True)
    if scratch:
        out[...] = target[0]
    return out if result is None else result


def _flat_input(layout: Layout, flat, single: bool) -> np.ndarray:
    _require_flat(layout)
    a = flat if isinstance(flat, np.ndarray) else np.asarray(flat)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"expected a numeric flat array, got dtype {a.dtype}")
    expected = "[flat_dim]" if single else "[B, flat_dim]"
    if a.ndim != (1 if single else 2) or a.shape[-1] != layout.flat_dim:
        hint = "" if single or a.ndim != 1 else "; use unflatten_sample for one sample"
        raise ValueError(f"expected a flat array of shape {expected} with flat_dim="
                         f"{layout.flat_dim} for {layout.space!r}, got shape {a.shape}{hint}")
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a.reshape(1, -1) if single else a


def _unflatten_from(layout: Layout, flat2: np.ndarray, single: bool) -> list:
    """The leaves of ``flat2[B, flat_dim]`` (C-contiguous), in layout order; for ``single``
    (B = 1) the leaves of the one sample, Discrete ones as NumPy scalars (as gymnasium)."""
    plan = layout._plans.get((flat2.dtype, "out")) or _plan(layout, flat2.dtype, "out")
    n = flat2.shape[0]
    if single:
        results = [np.empty(shape, dtype) for shape, dtype in plan.alloc]
    else:
        results = [np.empty((n,) + shape, dtype) for shape, dtype in plan.alloc]
    bad = None
    if plan.kernel:
        bad = plan.run(plan.kplans, flat2, results, single)
    for i in plan.python:
        if bad is not None:
            break
        step = plan.steps[i]
        res = results[i]
        dst = res.reshape(n, step.width) if step.flat2d else res.reshape(n)
        row = step.np_fn(flat2, *step.np_args, dst)
        if row >= 0:
            bad = (i, row)
    if bad is not None:
        i, row = bad
        step = plan.steps[i]
        where = "" if single else f" at batch index {row}"
        raise ValueError(
            f"leaf {step.path_str()} ({step.leaf.space}): the flat values{where} are not a "
            "one-hot encoding (a segment has no nonzero), so they cannot be unflattened")
    if single:
        for i in plan.scalars:
            results[i] = results[i][()]
    return results


def unflatten(layout: Layout, flat) -> Any:
    """Rebuild a batch of samples from ``[B, flat_dim]``; the inverse of :func:`flatten`.

    Leaf ``b`` equals ``gymnasium.spaces.unflatten(layout.space, flat[b])`` in values and
    dtype, stacked along a leading batch axis (fresh arrays, never views of ``flat``). A
    Discrete/MultiDiscrete value is ``start`` plus the position of the first nonzero in its
    one-hot segment (gymnasium's rule for one-hot input).

    Raises:
        ValueError: ``flat`` is not ``[B, flat_dim]``, or a one-hot segment is all zeros.
        TypeError: ``flat`` is not numeric.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout, unflatten
        >>> layout = Layout(spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "id": spaces.Discrete(3)}))
        >>> unflatten(layout, np.array([[0., 0., 1., .5, -.5]], np.float32))
        {'id': array([2]), 'pos': array([[ 0.5, -0.5]], dtype=float32)}
    """
    return _join(layout, _unflatten_from(layout, _flat_input(layout, flat, False), False))


def unflatten_sample(layout: Layout, flat) -> Any:
    """Rebuild one sample from ``[flat_dim]``: equals ``gymnasium.spaces.unflatten``.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from fastvec.spaces import Layout, unflatten_sample
        >>> layout = Layout(spaces.Tuple((spaces.Discrete(3, start=1), spaces.MultiBinary(2))))
        >>> discrete, binary = unflatten_sample(layout, np.array([0, 0, 1, 1, 0]))
        >>> type(discrete).__name__, int(discrete), binary
        ('int64', 3, array([1, 0], dtype=int8))
    """
    return _join(layout, _unflatten_from(layout, _flat_input(layout, flat, True), True))
