"""SumTree: prefix-sum search over float64 priorities."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastvec.replay import _segment_tree as _kernels
from fastvec.replay._validate import as_capacity, as_float64
from fastvec.replay.segment_tree import SegmentTree

__all__ = ["SumTree"]


class SumTree(SegmentTree):
    """Sum segment tree: ``total()`` in O(1), batched prefix-sum search.

    Leaves start at 0. Sums are float64 (float32 trees of 2^20 leaves send a
    few percent of samples to a different leaf than exact arithmetic would).

    Prefix-sum search: for a prefix value ``v`` in ``[0, total())`` the answer
    is the leaf ``i`` with ``sum(leaves[:i]) <= v < sum(leaves[:i+1])``
    (``np.searchsorted(np.cumsum(leaves), v, side="right")``, up to the
    rounding of the tree's partial sums), so a leaf of priority 0 is never
    returned. A value at or beyond ``total()`` (including +inf) returns the
    last leaf with a positive priority. Negative or NaN values raise
    ``ValueError``, as does a search in a tree whose total is 0.

    Example:
        >>> import numpy as np
        >>> from fastvec import SumTree
        >>> tree = SumTree(5)
        >>> tree.update([0, 1, 2, 3, 4], [1.0, 0.0, 2.0, 1.0, 0.0])
        >>> tree.total()
        4.0
        >>> tree.find_prefixsum([0.0, 0.5, 1.0, 2.9, 3.0, 3.99, 10.0]).tolist()
        [0, 0, 2, 2, 3, 3, 3]
        >>> tree[[0, 2]].tolist()
        [1.0, 2.0]
        >>> tree.update([4, 4], [5.0, 3.0])  # duplicates: the last write wins
        >>> tree[4], tree.total()
        (3.0, 7.0)
        >>> idx = tree.sample(4, np.random.default_rng(0))  # stratified
        >>> idx.shape, bool(np.all(tree[idx] > 0))
        ((4,), True)
    """

    _is_min = False
    _identity = 0.0

    def total(self) -> float:
        """Sum of all leaves (O(1): the root)."""
        return float(self._heap[0])

    def _search(self, values: np.ndarray, scale: float, mode: int,
                num_threads: int) -> tuple[np.ndarray, np.ndarray]:
        """Leaf indices and their values (the kernel reads both)."""
        num_threads = as_capacity(num_threads, "num_threads")
        if not self._heap[0] > 0.0:
            raise ValueError(
                "cannot search a SumTree whose total is 0 (every priority is 0); "
                "update some leaves with positive priorities first"
            )
        n = values.shape[0]
        out = np.empty(n, dtype=np.int64)
        if n == 0:
            return out, np.empty(0)
        work = np.empty(n, dtype=np.float64)
        bad = _kernels.find_prefixsum(self._leaf_buffer, self._heap, values, scale, mode, out, work,
                                      num_threads)
        if bad >= 0:
            raise ValueError(f"prefix values must be >= 0 and not NaN, got {values[bad]} at position {bad}")
        return out, work

    def find_prefixsum(self, prefix_values: Any, *, num_threads: int = 1) -> np.ndarray | int:
        """Leaf index for each prefix value (see the class docstring).

        Args:
            prefix_values: a number or an array of any shape, each >= 0.
            num_threads: search the batch in this many contiguous chunks on
                OpenMP threads (1: in the calling thread only). Threads pay
                for batches of thousands (docs/replay.md); they spin a little
                after each call (OpenMP's wait policy), which costs whoever
                shares the cores.

        Returns:
            int64 indices with the shape of ``prefix_values`` (an ``int`` for a
            scalar).
        """
        values = as_float64(prefix_values, "prefix_values")
        flat = np.ascontiguousarray(values.reshape(-1))
        out, _ = self._search(flat, 1.0, 0, num_threads)
        if values.ndim == 0:
            return int(out[0])
        return out.reshape(values.shape)

    def sample(self, batch_size: int, rng: np.random.Generator | None = None, *,
               stratified: bool = True, num_threads: int = 1) -> np.ndarray:
        """Draw ``batch_size`` leaf indices with probability proportional to their value.

        Stratified (default): the range ``[0, total())`` is cut into
        ``batch_size`` equal segments and one uniform prefix is drawn in each
        (as in the PER paper); otherwise the prefixes are i.i.d. uniform. The
        prefixes are computed inside the kernel from ``rng.random(batch_size)``.
        ``num_threads`` as in :meth:`find_prefixsum`.
        """
        return self._sample(batch_size, rng, stratified, num_threads)[0]

    def _sample(self, batch_size: int, rng: np.random.Generator | None, stratified: bool,
                num_threads: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sample`'s indices and their leaf values."""
        batch_size = as_capacity(batch_size, "batch_size")
        rng = np.random.default_rng() if rng is None else rng
        u = rng.random(batch_size)
        total = self.total()
        if stratified:
            return self._search(u, total / batch_size, 2, num_threads)
        return self._search(u, total, 1, num_threads)
