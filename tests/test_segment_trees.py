"""SumTree and MinTree (fastvec/replay/sum_tree.py, min_tree.py, segment_tree.py and their kernel) against brute-force NumPy answers."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastvec
from fastvec import MinTree, SumTree
from fastvec.replay.segment_tree import update_pair

# --------------------------------------------------------------------------- references


def ref_find(leaves: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Brute force: searchsorted on the cumulative sum; at/beyond the total,
    the last positive leaf."""
    cum = np.cumsum(leaves)
    total = cum[-1]
    out = np.searchsorted(cum, values, side="right")
    last_positive = np.flatnonzero(leaves > 0)[-1]
    return np.where(values >= total, last_positive, out)


def tree_levels(capacity: int) -> list[tuple[int, int]]:
    """The 8-ary layout, derived here independently of the kernels: (offset in
    the heap, node count) of levels 1..top, each padded to a multiple of 8 and
    stored top-down (the root at offset 0)."""
    counts = [8 * ((capacity + 7) // 8)]
    while counts[-1] > 1:
        counts.append((counts[-1] + 7) // 8)
    offsets, off = {}, 0
    for k in range(len(counts) - 1, 0, -1):
        offsets[k] = off
        off += -(-counts[k] // 8) * 8
    return [(offsets[k], counts[k]) for k in range(1, len(counts))]


def check_tree_invariant(tree) -> None:
    """Every node combines its line of 8 children pairwise (level 0: the
    leaves); padding, in the leaves and in every level, is the identity."""
    leaves, heap = tree._leaf_buffer, tree._heap
    assert leaves.shape[0] == 8 * ((tree.capacity + 7) // 8)
    assert np.all(leaves[tree.capacity:] == tree._identity)
    levels = tree_levels(tree.capacity)
    offset, count = levels[-1]
    assert offset == 0 and count == 1
    assert heap.shape[0] == sum(-(-n // 8) * 8 for _, n in levels)
    op = np.minimum if tree._is_min else np.add
    below = leaves
    for offset, count in levels:
        padded = -(-count // 8) * 8
        assert below.shape[0] == 8 * count
        c = below.reshape(count, 8)
        combined = op(op(op(c[:, 0], c[:, 1]), op(c[:, 2], c[:, 3])), op(op(c[:, 4], c[:, 5]), op(c[:, 6], c[:, 7])))
        np.testing.assert_array_equal(heap[offset:offset + count], combined)
        assert np.all(heap[offset + count:offset + padded] == tree._identity)
        below = heap[offset:offset + padded]
    assert heap[0] == (tree.total() if not tree._is_min else tree.min())


def sequential_assign(leaves: np.ndarray, indices, priorities) -> None:
    for i, p in zip(np.ravel(indices), np.ravel(np.broadcast_to(priorities, np.shape(indices)))):
        leaves[i] = p


capacities = st.one_of(st.integers(1, 40), st.sampled_from([63, 64, 65, 127, 128, 129, 1000, 1025]))

# --------------------------------------------------------------------------- SumTree / MinTree


@settings(max_examples=120, deadline=None)
@given(capacity=capacities, data=st.data())
def test_sum_and_min_trees_match_numpy_over_update_sequences(capacity, data):
    """Integer-valued priorities make every partial sum exact, so the tree must
    agree with cumsum+searchsorted exactly. Includes zeros, duplicates, and
    batch sizes below, at and above the kernels' 8 lanes."""
    sum_tree, min_tree = SumTree(capacity), MinTree(capacity)
    leaves = np.zeros(capacity)
    min_leaves = np.full(capacity, np.inf)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(data.draw(st.integers(1, 4))):
        n = data.draw(st.integers(1, 3 * capacity + 20))
        idx = rng.integers(0, capacity, n)  # duplicates are common
        prio = rng.integers(0, 4, n).astype(np.float64) * rng.choice([1.0, 0.5, 1024.0])
        sum_tree.update(idx, prio)
        min_tree.update(idx, prio)
        sequential_assign(leaves, idx, prio)
        sequential_assign(min_leaves, idx, prio)
        np.testing.assert_array_equal(sum_tree[np.arange(capacity)], leaves)
        np.testing.assert_array_equal(min_tree[np.arange(capacity)], min_leaves)
        assert sum_tree.total() == leaves.sum()
        assert min_tree.min() == min_leaves.min()
        check_tree_invariant(sum_tree)
        check_tree_invariant(min_tree)
        if leaves.sum() > 0:
            total = leaves.sum()
            m = data.draw(st.integers(1, 70))
            values = rng.uniform(0, total, m)
            values[rng.random(m) < 0.2] = 0.0
            # exact boundaries (cumulative sums), the total itself, beyond it
            cum = np.cumsum(leaves)
            values = np.concatenate([values, cum, [total, total * 2, np.inf, 0.0]])
            # threads search contiguous chunks of at least 64 queries each
            num_threads = data.draw(st.sampled_from([1, 2, 3]))
            values = np.concatenate([values] * data.draw(st.sampled_from([1, 3])))
            got = sum_tree.find_prefixsum(values, num_threads=num_threads)
            np.testing.assert_array_equal(got, ref_find(leaves, values))
            assert np.all(leaves[got] > 0)
            # sorted batches take the merge path
            values = np.sort(values)
            np.testing.assert_array_equal(sum_tree.find_prefixsum(values, num_threads=num_threads),
                                          ref_find(leaves, values))


@settings(max_examples=60, deadline=None)
@given(capacity=capacities, seed=st.integers(0, 2**32 - 1), zero_fraction=st.sampled_from([0.0, 0.5, 0.95]),
       num_threads=st.sampled_from([1, 2, 3]))
def test_find_prefixsum_random_floats_within_rounding(capacity, seed, zero_fraction, num_threads):
    """With arbitrary floats the tree's partial sums round differently from
    cumsum: the answer must be a positive leaf whose cumulative interval holds
    the value up to that rounding, and equal the exact answer away from it."""
    rng = np.random.default_rng(seed)
    leaves = rng.random(capacity) * 10.0 ** rng.integers(-3, 4, capacity)
    leaves[rng.random(capacity) < zero_fraction] = 0.0
    if not leaves.any():
        leaves[rng.integers(capacity)] = 1.0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    total = leaves.sum()
    np.testing.assert_allclose(tree.total(), total, rtol=1e-12)
    values = np.concatenate([rng.uniform(0, total, 200), [0.0, total, np.nextafter(total, 0), 10 * total]])
    if seed % 2:
        values = np.sort(values)  # the merge path for sorted batches
    got = tree.find_prefixsum(values, num_threads=num_threads)
    assert np.all(leaves[got] > 0)
    cum = np.cumsum(leaves)
    lo = np.where(got > 0, cum[np.maximum(got - 1, 0)], 0.0)
    tol = 1e-12 * total
    inside = values < total * (1 - 1e-12)
    assert np.all(lo[inside] <= values[inside] + tol)
    assert np.all(values[inside] < cum[got][inside] + tol)
    # away from interval boundaries the answer is the exact one
    ref = ref_find(leaves, values)
    dist = np.min(np.abs(values[:, None] - cum[None, :]), axis=1)
    far = dist > 1e-9 * total
    np.testing.assert_array_equal(got[far], ref[far])


@settings(max_examples=80, deadline=None)
@given(capacity=st.integers(64, 20_000), batch=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1),
       shape=st.sampled_from(["uniform", "zero_blocks", "one_heavy", "sparse"]),
       num_threads=st.sampled_from([1, 2, 3]))
def test_stratified_sample_matches_numpy(capacity, batch, seed, shape, num_threads):
    """sample() finds the nodes of one level from the strata instead of a
    merge: the same leaves as searchsorted on the stratified prefixes, for
    priorities that leave whole subtrees empty or put most of the mass on
    one leaf (many prefixes in one node, many nodes between two prefixes)."""
    rng = np.random.default_rng(seed)
    leaves = rng.integers(1, 100, capacity).astype(np.float64)
    if shape == "zero_blocks":
        for start in rng.integers(0, capacity, 8):
            leaves[start:start + rng.integers(1, 2000)] = 0.0
    elif shape == "one_heavy":
        leaves[rng.integers(capacity)] = 1e9
    elif shape == "sparse":
        leaves[rng.random(capacity) < 0.97] = 0.0
    if not leaves.any():
        leaves[rng.integers(capacity)] = 3.0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    got = tree.sample(batch, np.random.default_rng(seed + 1), num_threads=num_threads)
    u = np.random.default_rng(seed + 1).random(batch)
    np.testing.assert_array_equal(got, ref_find(leaves, (np.arange(batch) + u) * (leaves.sum() / batch)))


def test_large_tree_matches_numpy_batched_and_one_by_one():
    rng = np.random.default_rng(7)
    capacity = 100_003  # not a power of two
    leaves = rng.integers(0, 1000, capacity).astype(np.float64)
    leaves[rng.random(capacity) < 0.2] = 0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    values = rng.uniform(0, leaves.sum(), 4099)
    got = tree.find_prefixsum(values)
    np.testing.assert_array_equal(got, ref_find(leaves, values))
    # the same values one at a time give the same leaves
    one_by_one = np.array([tree.find_prefixsum(v) for v in values[:64]])
    np.testing.assert_array_equal(one_by_one, got[:64])
    # updates of a batch with duplicates, then again
    idx = rng.integers(0, capacity, 5000)
    prio = rng.integers(0, 50, 5000).astype(np.float64)
    tree.update(idx, prio)
    sequential_assign(leaves, idx, prio)
    assert tree.total() == leaves.sum()
    check_tree_invariant(tree)
    np.testing.assert_array_equal(tree.find_prefixsum(values), ref_find(leaves, values))
    values = np.sort(values)
    np.testing.assert_array_equal(tree.find_prefixsum(values), ref_find(leaves, values))
    got = tree.sample(4096, np.random.default_rng(3))
    u = np.random.default_rng(3).random(4096)
    np.testing.assert_array_equal(got, ref_find(leaves, (np.arange(4096) + u) * (leaves.sum() / 4096)))
    # on threads: each chunk of the batch is searched on its own
    for num_threads in (2, 3, 64, 1000):
        np.testing.assert_array_equal(tree.sample(4096, np.random.default_rng(3), num_threads=num_threads), got)
        np.testing.assert_array_equal(tree.find_prefixsum(values[::-1], num_threads=num_threads),
                                      ref_find(leaves, values[::-1]))
        unsorted = tree.sample(4096, np.random.default_rng(4), stratified=False, num_threads=num_threads)
        u = np.random.default_rng(4).random(4096)
        np.testing.assert_array_equal(unsorted, ref_find(leaves, u * leaves.sum()))
        # the kernel also hands back each leaf's value (the replay buffer's weights use it)
        idx, values_at = tree._sample(4096, np.random.default_rng(5), False, num_threads)
        np.testing.assert_array_equal(values_at, leaves[idx])


def test_capacity_one():
    tree, mtree = SumTree(1), MinTree(1)
    assert tree.total() == 0.0 and mtree.min() == np.inf
    with pytest.raises(ValueError, match="total is 0"):
        tree.find_prefixsum([0.0])
    tree.update([0], [3.0])
    mtree.update(0, 3.0)
    assert tree.total() == 3.0 and mtree.min() == 3.0
    np.testing.assert_array_equal(tree.find_prefixsum([0.0, 1.0, 2.999, 3.0, 100.0]), [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(tree.sample(5, np.random.default_rng(0)), [0] * 5)
    assert tree[0] == 3.0 and len(tree) == 1


def assert_same_trees(a, b) -> None:
    np.testing.assert_array_equal(a._leaf_buffer, b._leaf_buffer)
    np.testing.assert_array_equal(a._heap, b._heap)


@settings(max_examples=80, deadline=None)
@given(capacity=st.one_of(st.just(1), capacities), data=st.data())
def test_update_pair_matches_separate_updates_and_numpy(capacity, data):
    """The fused sum+min kernel (used by the replay buffer) leaves both trees
    exactly as SumTree.update and MinTree.update do, and as sequential
    assignment: duplicates, the last write wins; different priorities per tree."""
    pair = SumTree(capacity), MinTree(capacity)
    separate = SumTree(capacity), MinTree(capacity)
    leaves, min_leaves = np.zeros(capacity), np.full(capacity, np.inf)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(data.draw(st.integers(1, 4))):
        n = data.draw(st.integers(1, 3 * capacity + 20))
        idx = rng.integers(0, capacity, n)  # duplicates are common
        prio = rng.integers(0, 4, n).astype(np.float64) * rng.choice([1.0, 0.5, 1024.0])
        min_prio = np.where(prio > 0, prio, np.inf)
        update_pair(*pair, idx, prio, min_prio)
        separate[0].update(idx, prio)
        separate[1].update(idx, min_prio)
        sequential_assign(leaves, idx, prio)
        sequential_assign(min_leaves, idx, min_prio)
        for tree, other in zip(pair, separate):
            assert_same_trees(tree, other)
            check_tree_invariant(tree)
        np.testing.assert_array_equal(pair[0][np.arange(capacity)], leaves)
        np.testing.assert_array_equal(pair[1][np.arange(capacity)], min_leaves)
        assert pair[0].total() == leaves.sum() and pair[1].min() == min_leaves.min()


def test_update_pair_large_batch_with_duplicates():
    rng = np.random.default_rng(11)
    capacity = 100_003  # not a power of two; batches below and above the dense levels
    pair = SumTree(capacity), MinTree(capacity)
    separate = SumTree(capacity), MinTree(capacity)
    for n in (capacity, 5000, 37, 200_000):
        idx = rng.integers(0, capacity, n) if n != capacity else np.arange(capacity)
        prio = rng.integers(0, 50, n).astype(np.float64)
        update_pair(*pair, idx, prio, prio + 1.0)
        separate[0].update(idx, prio)
        separate[1].update(idx, prio + 1.0)
        for tree, other in zip(pair, separate):
            assert_same_trees(tree, other)
    check_tree_invariant(pair[0])
    check_tree_invariant(pair[1])


def test_update_pair_validation_writes_nothing():
    sum_tree, min_tree = SumTree(8), MinTree(8)
    update_pair(sum_tree, min_tree, [1, 2], [1.0, 2.0], 3.0)  # a scalar is broadcast
    assert min_tree.min() == 3.0 and sum_tree.total() == 3.0
    update_pair(sum_tree, min_tree, [], [], [])  # no-op
    before = [(t._leaf_buffer.copy(), t._heap.copy()) for t in (sum_tree, min_tree)]
    with pytest.raises(ValueError, match=r"indices must be in \[0, 8\), got 8 at position 1"):
        update_pair(sum_tree, min_tree, [0, 8], [1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="finite and >= 0, got inf at position 1"):
        update_pair(sum_tree, min_tree, [0, 1, 2], [1.0, np.inf, 1.0], [1.0, 1.0, -1.0])
    with pytest.raises(ValueError, match="not NaN, got -1.0 at position 1"):
        update_pair(sum_tree, min_tree, [0, 1, 2], [1.0, 1.0, -1.0], [1.0, -1.0, np.inf])
    with pytest.raises(ValueError, match="shape of indices"):
        update_pair(sum_tree, min_tree, [0, 1], [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="a sum and a min tree of the same capacity"):
        update_pair(sum_tree, MinTree(9), [0], [1.0], [1.0])
    with pytest.raises(ValueError, match="a sum and a min tree of the same capacity"):
        update_pair(min_tree, sum_tree, [0], [1.0], [1.0])
    for tree, (leaves, heap) in zip((sum_tree, min_tree), before):
        np.testing.assert_array_equal(tree._leaf_buffer, leaves)
        np.testing.assert_array_equal(tree._heap, heap)
    update_pair(sum_tree, min_tree, [0], [1.0], [np.inf])  # +inf: "absent" in the min tree
    assert sum_tree.total() == 4.0 and min_tree[0] == np.inf


def test_zero_priority_leaves_are_never_returned():
    tree = SumTree(10)
    tree.update(np.arange(10), [0, 0, 1, 0, 0, 0, 2, 0, 0, 0])
    values = np.array([0.0, 0.5, 0.999, 1.0, 2.5, 2.999, 3.0, 3.5, 1e300, np.inf])
    np.testing.assert_array_equal(tree.find_prefixsum(values), [2, 2, 2, 6, 6, 6, 6, 6, 6, 6])
    np.testing.assert_array_equal(ref_find(tree[:], values), [2, 2, 2, 6, 6, 6, 6, 6, 6, 6])
    idx = tree.sample(1000, np.random.default_rng(1))
    assert set(np.unique(idx)) == {2, 6}


@pytest.mark.parametrize("capacity", [7, 8, 9, 15, 16, 17, 63, 64, 65, 71, 72, 511, 512, 513, 4095, 4096, 4097])
def test_capacities_around_line_and_level_sizes(capacity):
    """Capacities at and around multiples of 8 (a line), 64 and 512 (a line of
    lines): padding in the leaves and in every level. Integer priorities, so
    the answers are exact: prefixes exactly at every cumulative sum (the
    node boundaries among them), at and beyond the total, in random and in
    sorted (merge path) batches; the fused update as well."""
    rng = np.random.default_rng(capacity)
    leaves = rng.integers(0, 3, capacity).astype(np.float64)
    leaves[-1] = 1.0  # the last leaf, next to the padding, positive
    pair = SumTree(capacity), MinTree(capacity)
    update_pair(*pair, np.arange(capacity), leaves, leaves)
    for tree in pair:
        check_tree_invariant(tree)
    assert pair[0].total() == leaves.sum() and pair[1].min() == leaves.min()
    cum = np.cumsum(leaves)
    total = cum[-1]
    values = np.concatenate([cum, cum - 0.5, rng.uniform(0, total, 3 * capacity),
                             [0.0, total, np.nextafter(total, np.inf), 2 * total, np.inf]])
    values = values[values >= 0]
    for batch in (values, rng.permutation(values), np.sort(values)):
        got = pair[0].find_prefixsum(batch)
        np.testing.assert_array_equal(got, ref_find(leaves, batch))
        assert np.all(leaves[got] > 0)
    np.testing.assert_array_equal(pair[0].sample(2 * capacity, np.random.default_rng(0)),
                                  ref_find(leaves, (np.arange(2 * capacity) + np.random.default_rng(0).random(
                                      2 * capacity)) * (total / (2 * capacity))))


@pytest.mark.parametrize("capacity", [1, 8, 9, 64, 65, 100, 4097])
def test_all_zero_but_one_leaf(capacity):
    """Every prefix, even at or beyond the total, finds the only positive
    leaf, wherever it is (first, last next to the padding, in between), with
    float priorities that do not sum exactly."""
    for position in sorted({0, capacity // 2, capacity - 1}):
        tree = SumTree(capacity)
        tree.update(position, 0.1)
        values = np.array([0.0, 0.05, np.nextafter(0.1, 0), 0.1, 0.2, 1e300, np.inf])
        np.testing.assert_array_equal(tree.find_prefixsum(values), [position] * len(values))
        np.testing.assert_array_equal(tree.find_prefixsum(np.sort(values)), [position] * len(values))
        np.testing.assert_array_equal(tree.sample(64, np.random.default_rng(1)), [position] * 64)
        tree.update(position, 0.0)  # back to all zero: no search
        with pytest.raises(ValueError, match="total is 0"):
            tree.find_prefixsum([0.0])
        check_tree_invariant(tree)


@pytest.mark.parametrize("capacity", [9, 65, 513, 1000])
def test_rounding_near_the_total_stays_in_the_tree(capacity):
    """Float priorities whose tree sums round differently from a sequential
    sum: prefixes just below, at and above the total (where rounding can
    carry a query past a node's sum, towards padding) give a positive leaf,
    and the last positive leaf at or beyond the total."""
    rng = np.random.default_rng(capacity)
    leaves = rng.random(capacity) * 10.0 ** rng.integers(-8, 8, capacity)
    leaves[-3:] = [1e-9, 0.0, 0.0]  # zeros just before the padding
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    total = tree.total()
    below = [np.nextafter(total, 0), total * (1 - 1e-15), total * (1 - 1e-16)]
    values = np.array(below + [total, np.nextafter(total, np.inf), 2 * total])
    for batch in (values, np.sort(np.concatenate([rng.uniform(0, total, 64), values]))):
        got = tree.find_prefixsum(batch)
        assert np.all(leaves[got] > 0)
        np.testing.assert_array_equal(got[batch >= total], capacity - 3)


def test_find_prefixsum_shapes_and_scalars():
    tree = SumTree(4)
    tree.update([0, 1, 2, 3], [1, 1, 1, 1])
    assert tree.find_prefixsum(2.5) == 2 and isinstance(tree.find_prefixsum(2.5), int)
    np.testing.assert_array_equal(tree.find_prefixsum([[0.5, 1.5], [2.5, 3.5]]), [[0, 1], [2, 3]])
    assert tree.find_prefixsum(np.zeros(0)).shape == (0,)
    tree.update([], [])  # no-op
    tree.update(np.array([1, 2]), 5.0)  # scalar broadcast
    np.testing.assert_array_equal(tree[:], [1, 5, 5, 1])


def test_stratified_sampling_uses_one_uniform_per_segment():
    rng = np.random.default_rng(3)
    leaves = rng.integers(0, 5, 77).astype(np.float64)
    tree = SumTree(77)
    tree.update(np.arange(77), leaves)
    batch = 50
    got = tree.sample(batch, np.random.default_rng(11))
    u = np.random.default_rng(11).random(batch)
    total = leaves.sum()
    expected_values = (np.arange(batch) + u) * (total / batch)
    np.testing.assert_array_equal(got, ref_find(leaves, expected_values))
    # i.i.d. variant: prefix = u * total
    got = tree.sample(batch, np.random.default_rng(12), stratified=False)
    u = np.random.default_rng(12).random(batch)
    np.testing.assert_array_equal(got, ref_find(leaves, u * total))


def test_sampling_frequencies_are_proportional():
    leaves = np.array([1.0, 0.0, 3.0, 0.5, 5.5, 0.0, 2.0])
    tree = SumTree(len(leaves))
    tree.update(np.arange(len(leaves)), leaves)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(leaves))
    for _ in range(50):
        np.add.at(counts, tree.sample(4096, rng, stratified=False), 1)
    freq = counts / counts.sum()
    np.testing.assert_allclose(freq, leaves / leaves.sum(), atol=0.005)
    assert counts[1] == counts[5] == 0


def test_min_tree_inf_means_absent():
    tree = MinTree(5)
    tree.update([0, 1, 2], [3.0, 0.0, 2.0])
    assert tree.min() == 0.0
    tree.update(1, np.inf)
    assert tree.min() == 2.0
    tree.update([0, 2], [np.inf, np.inf])
    assert tree.min() == np.inf


def test_getitem_returns_copies():
    tree = SumTree(3)
    tree.update([0, 1, 2], [1.0, 2.0, 3.0])
    leaves = tree[:]
    leaves[:] = 0
    assert tree.total() == 6.0
    assert tree[-1] == 3.0 and isinstance(tree[1], float)


@pytest.mark.parametrize("cls", [SumTree, MinTree])
def test_tree_input_validation(cls):
    with pytest.raises(TypeError, match="positive int"):
        cls(2.5)
    with pytest.raises(TypeError, match="positive int"):
        cls(True)
    with pytest.raises(ValueError, match=">= 1"):
        cls(0)
    tree = cls(8)
    tree.update([1, 2], [1.0, 2.0])
    before = (tree._leaf_buffer.copy(), tree._heap.copy())
    with pytest.raises(ValueError, match=r"indices must be in \[0, 8\), got 8 at position 1"):
        tree.update([0, 8], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"got -1 at position 0"):
        tree.update([-1], [1.0])
    with pytest.raises(ValueError, match="priorities must be .* got -0.5 at position 2"):
        tree.update([0, 1, 2], [1.0, 1.0, -0.5])
    with pytest.raises(ValueError, match="priorities must be .* got nan"):
        tree.update([3], [np.nan])
    with pytest.raises(ValueError, match="shape of indices"):
        tree.update([0, 1], [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="indices must be integers"):
        tree.update([0.5], [1.0])
    with pytest.raises(TypeError, match="priorities must be real numbers"):
        tree.update([0], ["a"])
    # a failed update writes nothing
    np.testing.assert_array_equal(tree._leaf_buffer, before[0])
    np.testing.assert_array_equal(tree._heap, before[1])


def test_sum_tree_rejects_inf_priority_and_bad_prefixes():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="finite and >= 0, got inf"):
        tree.update([0], [np.inf])
    tree.update([0], [1.0])
    with pytest.raises(ValueError, match="prefix values must be >= 0 and not NaN, got -1.0 at position 1"):
        tree.find_prefixsum([0.5, -1.0])
    with pytest.raises(ValueError, match="got nan at position 0"):
        tree.find_prefixsum([np.nan])
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        tree.sample(0)
    with pytest.raises(ValueError, match="num_threads must be >= 1, got 0"):
        tree.find_prefixsum([0.5], num_threads=0)
    with pytest.raises(TypeError, match="num_threads must be a positive int"):
        tree.sample(4, num_threads=1.5)
    with pytest.raises(ValueError, match="prefix values must be >= 0 and not NaN, got nan at position 300"):
        tree.find_prefixsum(np.r_[np.zeros(300), np.nan], num_threads=2)


def test_float64_sums_at_large_capacity():
    """float64 partial sums: the same search as float64 cumsum on 2^20 leaves
    (a float32 tree misassigns a few percent here)."""
    rng = np.random.default_rng(5)
    capacity = 1 << 20
    leaves = rng.random(capacity)
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    values = rng.uniform(0, leaves.sum(), 4096)
    got = tree.find_prefixsum(values)
    assert np.mean(got == ref_find(leaves, values)) > 0.999


def test_public_names():
    for name in ("SumTree", "MinTree", "PrioritizedReplayBuffer"):
        assert name in fastvec.__all__ and getattr(fastvec, name) is not None
