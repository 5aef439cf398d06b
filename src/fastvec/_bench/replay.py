"""Bench section ``replay``: segment trees and prioritized replay.

fastvec's SumTree/MinTree side by side with
- a classic pure-Python segment tree (one index at a time, as in OpenAI baselines),
- vectorised NumPy references: the heap updated level by level with fancy
  indexing (tianshou's NumPy approach), prefix search by a level-by-level
  NumPy descent, and by ``cumsum`` + ``searchsorted`` (O(capacity) per batch),
- tianshou / cpprb / torchrl, only if they happen to be importable.

Ratio columns: reference time / fastvec time (> 1: fastvec is faster).

    python -m fastvec.bench replay [--quick]
"""
from __future__ import annotations

import numpy as np

from fastvec.bench import fmt_time, median_time, print_table
from fastvec.replay import MinTree, PrioritizedReplayBuffer, SumTree
from fastvec.replay.segment_tree import update_pair


class PythonSegmentTree:
    """The classic pure-Python tree: one leaf at a time, climbing to the root."""

    def __init__(self, capacity: int, op, identity: float):
        self.size = 1 << (capacity - 1).bit_length()
        self.op = op
        self.tree = [identity] * (2 * self.size)

    def update(self, indices, priorities) -> None:
        tree, op = self.tree, self.op
        for i, p in zip(indices, priorities):
            node = self.size + i
            tree[node] = p
            node >>= 1
            while node >= 1:
                tree[node] = op(tree[2 * node], tree[2 * node + 1])
                node >>= 1

    def find_prefixsum(self, values):
        tree, size = self.tree, self.size
        out = []
        for v in values:
            node = 1
            while node < size:
                left = tree[2 * node]
                if v >= left and tree[2 * node + 1] > 0:
                    v -= left
                    node = 2 * node + 1
                else:
                    node = 2 * node
            out.append(node - size)
        return out


class NumpySegmentTree:
    """Vectorised NumPy heap: level-by-level fancy indexing."""

    def __init__(self, capacity: int, is_min: bool):
        self.size = 1 << (capacity - 1).bit_length()
        self.is_min = is_min
        self.tree = np.full(2 * self.size, np.inf if is_min else 0.0)

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        node = indices + self.size
        self.tree[node] = priorities
        t = self.tree
        while node[0] > 1:
            node = node >> 1  # duplicates just assign the same value twice
            if self.is_min:
                t[node] = np.minimum(t[2 * node], t[2 * node + 1])
            else:
                t[node] = t[2 * node] + t[2 * node + 1]

    def find_prefixsum(self, values: np.ndarray) -> np.ndarray:
        t = self.tree
        node = np.ones(values.shape[0], dtype=np.int64)
        v = values.copy()
        while node[0] < self.size:
            left = t[2 * node]
            go = (v >= left) & (t[2 * node + 1] > 0)
            v -= np.where(go, left, 0.0)
            node = 2 * node + go
        return node - self.size


def _optional_rows(capacity, idx_pool, prio_pool, values_pool, batch, repeats, cycling):
    """tianshou / cpprb / torchrl, when importable (never installed by fastvec)."""
    rows = []
    try:
        from tianshou.data import SegmentTree as TianshouTree  # type: ignore

        tree = TianshouTree(capacity)
        tree[np.arange(capacity)] = np.random.default_rng(0).random(capacity)

        def ts_update(i, p):
            tree[i] = p

        rows.append(("tianshou SegmentTree (sum only)",
                     median_time(cycling(ts_update, idx_pool, prio_pool), repeats),
                     median_time(cycling(tree.get_prefix_sum_idx, values_pool), repeats)))
    except Exception as exc:  # noqa: BLE001 - optional, report and go on
        rows.append(("tianshou", None, None, f"not available ({type(exc).__name__})"))
    try:
        from torchrl.data.replay_buffers.segment_tree import (  # type: ignore
            MinSegmentTreeFp64, SumSegmentTreeFp64)

        s, m = SumSegmentTreeFp64(capacity), MinSegmentTreeFp64(capacity)
        init = np.random.default_rng(0).random(capacity)
        s.update(np.arange(capacity), init)
        m.update(np.arange(capacity), init)

        def trl_update(i, p):
            s.update(i, p)
            m.update(i, p)

        rows.append(("torchrl Sum/MinSegmentTreeFp64",
                     median_time(cycling(trl_update, idx_pool, prio_pool), repeats),
                     median_time(cycling(s.scan_lower_bound, values_pool), repeats)))
    except Exception as exc:  # noqa: BLE001
        rows.append(("torchrl", None, None, f"not available ({type(exc).__name__})"))
    try:
        import cpprb  # type: ignore

        rb = cpprb.PrioritizedReplayBuffer(capacity, {"obs": {"shape": 1}}, alpha=0.6)
        rb.add(obs=np.zeros((capacity, 1)))
        # the same fresh random indices as fastvec's row, and (second row) the
        # indices as cpprb's own stratified sample returns them (sorted)
        sampled_pool = [rb.sample(batch)["indexes"].astype(np.int64) for _ in idx_pool]
        rows.append(("cpprb PrioritizedReplayBuffer",
                     median_time(cycling(rb.update_priorities, idx_pool, prio_pool), repeats),
                     median_time(lambda: rb.sample(batch), repeats)))
        rows.append(("  (update at indices from its stratified sample: sorted)",
                     median_time(cycling(rb.update_priorities, sampled_pool, prio_pool), repeats), None))
    except Exception as exc:  # noqa: BLE001
        rows.append(("cpprb", None, None, f"not available ({type(exc).__name__})"))
    return rows


def run(quick: bool) -> None:
    capacity = 1 << (16 if quick else 20)
    batch = 4096
    repeats = 5 if quick else 21
    rng = np.random.default_rng(0)
    init = rng.random(capacity)
    # Fresh indices / prefix values at every call (cycled from a pool), so
    # that no implementation is timed on paths it has just brought into cache.
    pool = 16
    idx_pool = [rng.integers(0, capacity, batch).astype(np.int64) for _ in range(pool)]
    prio_pool = [rng.random(batch) for _ in range(pool)]
    idx, prio = idx_pool[0], prio_pool[0]

    def cycling(fn, *pools):
        state = [0]

        def call():
            k = state[0] = (state[0] + 1) % pool
            return fn(*(p[k] for p in pools))

        return call

    s_tree, m_tree = SumTree(capacity), MinTree(capacity)
    s_tree.update(np.arange(capacity), init)
    m_tree.update(np.arange(capacity), init)
    total = s_tree.total()
    values_pool = [rng.random(batch) * total for _ in range(pool)]
    sorted_pool = [(np.arange(batch) + rng.random(batch)) * (total / batch) for _ in range(pool)]  # stratified
    values = values_pool[0]

    def fv_update(i, p):
        s_tree.update(i, p)
        m_tree.update(i, p)

    def fv_update_pair(i, p):
        update_pair(s_tree, m_tree, i, p, p)

    sample_rng = np.random.default_rng(1)
    fv_upd = median_time(cycling(fv_update, idx_pool, prio_pool), repeats, number=pool)
    fv_pair = median_time(cycling(fv_update_pair, idx_pool, prio_pool), repeats, number=pool)
    sorted_idx_pool = [np.sort(i) for i in idx_pool]
    fv_upd_sorted = median_time(cycling(fv_update, sorted_idx_pool, prio_pool), repeats, number=pool)
    fv_find = median_time(cycling(s_tree.find_prefixsum, values_pool), repeats, number=pool)
    fv_find_sorted = median_time(cycling(s_tree.find_prefixsum, sorted_pool), repeats, number=pool)
    fv_sample = median_time(lambda: s_tree.sample(batch, sample_rng), repeats, number=pool)
    fv_find_sorted_2 = median_time(cycling(lambda v: s_tree.find_prefixsum(v, num_threads=2), sorted_pool),
                                   repeats, number=pool)
    fv_sample_2 = median_time(lambda: s_tree.sample(batch, sample_rng, num_threads=2), repeats, number=pool)

    np_s, np_m = NumpySegmentTree(capacity, False), NumpySegmentTree(capacity, True)
    np_s.tree[np_s.size:np_s.size + capacity] = init
    np_m.tree[np_m.size:np_m.size + capacity] = init
    np_s.update(np.arange(capacity), init)
    np_m.update(np.arange(capacity), init)

    def np_update(i, p):
        np_s.update(i, p)
        np_m.update(i, p)

    np_upd = median_time(cycling(np_update, idx_pool, prio_pool), repeats)
    np_find = median_time(cycling(np_s.find_prefixsum, values_pool), repeats)
    leaves = s_tree[:]
    cumsum_find = median_time(
        cycling(lambda v: np.searchsorted(np.cumsum(leaves), v, side="right"), values_pool), repeats)

    py_s = PythonSegmentTree(capacity, lambda a, b: a + b, 0.0)
    py_m = PythonSegmentTree(capacity, min, float("inf"))
    py_s.tree[py_s.size:py_s.size + capacity] = init.tolist()
    py_m.tree[py_m.size:py_m.size + capacity] = init.tolist()
    for node in range(py_s.size - 1, 0, -1):
        py_s.tree[node] = py_s.tree[2 * node] + py_s.tree[2 * node + 1]
        py_m.tree[node] = min(py_m.tree[2 * node], py_m.tree[2 * node + 1])
    idx_list, prio_list, values_list = idx.tolist(), prio.tolist(), values.tolist()
    py_repeats = 1 if quick else 3

    def py_update():
        py_s.update(idx_list, prio_list)
        py_m.update(idx_list, prio_list)

    py_upd = median_time(py_update, py_repeats)
    py_find = median_time(lambda: py_s.find_prefixsum(values_list), py_repeats)

    def ratio(t, ref):
        return "—" if t is None else f"{t / ref:.2f}×" if t < 10 * ref else f"{t / ref:.1f}×"

    rows = [
        ("fastvec SumTree + MinTree", fmt_time(fv_upd), "1.0×", fmt_time(fv_find), "1.0×", ""),
        ("  (update_pair: both trees in one pass, as the replay buffer does)", fmt_time(fv_pair),
         ratio(fv_pair, fv_upd), "", "", ""),
        ("  (sorted indices, as stratified sampling returns them)", fmt_time(fv_upd_sorted),
         ratio(fv_upd_sorted, fv_upd), "", "", ""),
        ("  (prefix values sorted, as stratified sampling makes them)", "", "",
         fmt_time(fv_find_sorted), ratio(fv_find_sorted, fv_find), "SumTree.find_prefixsum"),
        ("  (SumTree.sample: rng.random + stratified search)", "", "",
         fmt_time(fv_sample), ratio(fv_sample, fv_find), ""),
        ("  (sorted prefix values, num_threads=2)", "", "",
         fmt_time(fv_find_sorted_2), ratio(fv_find_sorted_2, fv_find), "2 OpenMP threads"),
        ("  (SumTree.sample, num_threads=2)", "", "",
         fmt_time(fv_sample_2), ratio(fv_sample_2, fv_find), "2 OpenMP threads"),
        ("classic pure-Python segment tree", fmt_time(py_upd), ratio(py_upd, fv_upd),
         fmt_time(py_find), ratio(py_find, fv_find), "one index at a time"),
        ("NumPy heap, level by level (fancy indexing)", fmt_time(np_upd), ratio(np_upd, fv_upd),
         fmt_time(np_find), ratio(np_find, fv_find), "tianshou-style NumPy"),
        ("NumPy cumsum + searchsorted", "—", "—", fmt_time(cumsum_find), ratio(cumsum_find, fv_find),
         "O(capacity) per batch"),
    ]
    for row in _optional_rows(capacity, idx_pool, prio_pool, values_pool, batch, max(3, repeats // 3), cycling):
        if len(row) == 4:
            rows.append((row[0], "—", "—", "—", "—", row[3]))
        else:
            name, upd, find = row
            rows.append((name, fmt_time(upd), ratio(upd, fv_upd), "—" if find is None else fmt_time(find),
                         ratio(find, fv_find), ""))
    print_table(
        f"Segment trees, capacity 2^{capacity.bit_length() - 1}, batches of {batch} (median; "
        "ratio = that time / fastvec's)",
        ["implementation", "update 4096 (sum+min)", "ratio", "prefix search 4096", "ratio", "note"],
        rows,
    )

    # End to end: the replay buffer (CartPole-sized transitions).
    from gymnasium import spaces

    buf_cap = capacity
    buffer = PrioritizedReplayBuffer(buf_cap, spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2),
                                     alpha=0.6, beta=0.4, seed=0)
    n_env = 64
    obs = rng.random((n_env, 4)).astype(np.float32)
    act = rng.integers(0, 2, n_env)
    rew = np.ones(n_env, np.float32)
    flags = np.zeros(n_env, bool)
    for _ in range(buf_cap // n_env):
        buffer.add(obs, act, rew, obs, flags, flags)
    add_t = median_time(lambda: buffer.add(obs, act, rew, obs, flags, flags), repeats, number=5)
    sample_t = median_time(lambda: buffer.sample(batch), repeats, number=5)
    buffer.num_threads = 2
    sample_t2 = median_time(lambda: buffer.sample(batch), repeats, number=5)
    buffer.num_threads = 1
    sampled_pool = [buffer.sample(batch).indices for _ in range(pool)]  # fresh indices at each call
    upd_t = median_time(cycling(buffer.update_priorities, sampled_pool, prio_pool), repeats, number=pool)
    print_table(
        f"PrioritizedReplayBuffer, capacity 2^{buf_cap.bit_length() - 1}, Box(4) obs, Discrete actions",
        ["operation", "time (median)"],
        [(f"add a vector-env step of {n_env} transitions", fmt_time(add_t)),
         (f"sample({batch}) (batch + indices + IS weights)", fmt_time(sample_t)),
         (f"sample({batch}), num_threads=2 (the tree search on 2 threads)", fmt_time(sample_t2)),
         (f"update_priorities({batch})", fmt_time(upd_t))],
    )
