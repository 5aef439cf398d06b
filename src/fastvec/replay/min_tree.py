"""MinTree: the minimum of float64 priorities in O(1)."""
from __future__ import annotations

from fastvec.replay.segment_tree import SegmentTree

__all__ = ["MinTree"]


class MinTree(SegmentTree):
    """Min segment tree: batched ``update``, ``min()`` in O(1).

    Leaves start at +inf ("absent"); ``min()`` of a tree with no finite leaf
    is +inf. Priorities must be >= 0 and not NaN; +inf is allowed and marks a
    leaf as absent.

    Example:
        >>> from fastvec import MinTree
        >>> tree = MinTree(6)
        >>> tree.min()
        inf
        >>> tree.update([0, 3, 5], [4.0, 0.5, 2.0])
        >>> tree.min()
        0.5
        >>> tree.update(3, float("inf"))
        >>> tree.min(), tree[3]
        (2.0, inf)
    """

    _is_min = True
    _identity = float("inf")

    def min(self) -> float:
        """Minimum over all leaves (O(1): the root)."""
        return float(self._heap[0])
