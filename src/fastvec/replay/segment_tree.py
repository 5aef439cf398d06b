"""Base class of :class:`~fastvec.SumTree` and :class:`~fastvec.MinTree`."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastvec.replay import _segment_tree as _kernels
from fastvec.replay._validate import as_capacity, as_float64, as_indices

__all__ = ["SegmentTree"]


def _flat_batch(indices: Any, *priorities: Any) -> tuple[np.ndarray, ...]:
    """Contiguous 1-D int64 indices, then each priority batch as contiguous float64
    of the same length (a scalar priority is broadcast); TypeError/ValueError for bad input."""
    idx = as_indices(indices)
    flat = []
    for batch in priorities:
        prio = as_float64(batch, "priorities")
        if prio.shape != idx.shape:
            if prio.ndim == 0:
                prio = np.broadcast_to(prio, idx.shape)
            else:
                raise ValueError(
                    f"priorities must have the shape of indices {idx.shape} (or be a scalar), "
                    f"got shape {prio.shape}"
                )
        flat.append(np.ascontiguousarray(prio.reshape(-1)))
    return (np.ascontiguousarray(idx.reshape(-1), dtype=np.int64), *flat)


def update_pair(sum_tree: SegmentTree, min_tree: SegmentTree, indices: Any,
                sum_priorities: Any, min_priorities: Any) -> None:
    """``sum_tree.update(indices, sum_priorities)`` and
    ``min_tree.update(indices, min_priorities)`` in one kernel pass (cheaper
    than two). The trees must have the same capacity; on bad input neither is
    written."""
    if sum_tree._is_min or not min_tree._is_min or sum_tree.capacity != min_tree.capacity:
        raise ValueError(f"update_pair needs a sum and a min tree of the same capacity, "
                         f"got {sum_tree!r} and {min_tree!r}")
    idx, sum_prio, min_prio = _flat_batch(indices, sum_priorities, min_priorities)
    if idx.shape[0] == 0:
        return
    bad = _kernels.update_pair(sum_tree._leaf_buffer, sum_tree._heap, min_tree._leaf_buffer,
                               min_tree._heap, idx, sum_prio, min_prio, sum_tree.capacity,
                               idx.shape[0])
    if bad >= 0:  # a bad index, else the priority of the tree that rejects it
        if sum_tree._accepts(float(sum_prio[bad])):
            min_tree._raise_bad(idx, min_prio, bad)
        sum_tree._raise_bad(idx, sum_prio, bad)


def _aligned_full(n: int, value: float) -> np.ndarray:
    """float64 array of ``n`` values starting on a 64-byte boundary (a group of
    8 siblings is then exactly one cache line)."""
    raw = np.empty(n + 8, dtype=np.float64)
    offset = (-raw.ctypes.data % 64) // 8
    out = raw[offset : offset + n]
    out.fill(value)
    return out


class SegmentTree:
    """An 8-ary tree over ``capacity`` float64 leaves keeping an aggregate of them.

    Subclasses fix the operation (sum or min). Leaves are one float64 array
    (padded to a multiple of 8 with the operation's identity, 0 or +inf, so
    any capacity works); above them the tree's levels, top-down in one array
    ``_heap`` (the root at ``_heap[0]``), every group of 8 siblings one cache
    line. See ``fastvec/replay/_segment_tree.pyx`` for the layout and the kernels.
    """

    _is_min: bool = False
    _identity: float = 0.0

    def __init__(self, capacity: int):
        self.capacity: int = as_capacity(capacity)
        n_leaves = 8 * ((self.capacity + 7) // 8)
        self._leaf_buffer = _aligned_full(n_leaves, self._identity)
        self._heap = _aligned_full(_kernels.heap_size(n_leaves), self._identity)
        self._leaves = self._leaf_buffer[: self.capacity]

    def __len__(self) -> int:
        return self.capacity

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity})"

    def __getitem__(self, indices: Any) -> np.ndarray | float:
        """Leaf values (a copy) at ``indices``: an int, a slice, or an integer array."""
        out = self._leaves[indices]
        if isinstance(out, np.ndarray):
            return out.copy()
        return float(out)

    def update(self, indices: Any, priorities: Any) -> None:
        """Set the leaves at ``indices`` to ``priorities`` and update their ancestors.

        Args:
            indices: integer index or array of indices in ``[0, capacity)``.
                Duplicates are allowed: the **last** occurrence wins, as with
                sequential assignment (``leaves[i] = p`` in order).
            priorities: a number, or an array with the shape of ``indices``.
                Values must be >= 0 and not NaN (a sum tree also rejects +inf;
                a min tree accepts +inf, meaning "absent").

        Raises:
            TypeError: non-integer indices or non-numeric priorities.
            ValueError: mismatched shapes, an index out of range, a negative,
                NaN (or, for sums, infinite) priority. Nothing is written then.
        """
        idx, prio = _flat_batch(indices, priorities)
        if idx.shape[0] == 0:
            return
        bad = _kernels.update(self._leaf_buffer, self._heap, idx, prio, self.capacity,
                              self._is_min, idx.shape[0])
        if bad >= 0:
            self._raise_bad(idx, prio, bad)

    def _raise_bad(self, idx: np.ndarray, prio: np.ndarray, bad: int) -> None:
        """Raise the ValueError for position ``bad`` of a rejected batch."""
        i, p = int(idx[bad]), float(prio[bad])
        if not 0 <= i < self.capacity:
            raise ValueError(f"indices must be in [0, {self.capacity}), got {i} at position {bad}")
        allowed = ">= 0 and not NaN" if self._is_min else "finite and >= 0"
        raise ValueError(f"priorities must be {allowed}, got {p} at position {bad}")

    def _accepts(self, priority: float) -> bool:
        """Whether ``priority`` is a valid leaf value (the kernels' rule)."""
        return priority >= 0.0 and (self._is_min or priority != np.inf)
