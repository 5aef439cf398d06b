"""asv: segment trees and prioritized replay (fastvec vs NumPy references)."""
import numpy as np

from fastvec import MinTree, PrioritizedReplayBuffer, SumTree
from fastvec.replay.segment_tree import update_pair


class TimeSegmentTree:
    """Batched update (sum + min) and prefix-sum search, batches of 4096."""

    params = ([1 << 16, 1 << 20], [4096])
    param_names = ["capacity", "batch"]

    def setup(self, capacity, batch):
        rng = np.random.default_rng(0)
        self.sum_tree, self.min_tree = SumTree(capacity), MinTree(capacity)
        init = rng.random(capacity)
        self.sum_tree.update(np.arange(capacity), init)
        self.min_tree.update(np.arange(capacity), init)
        self.idx = rng.integers(0, capacity, batch)
        self.prio = rng.random(batch)
        self.values = rng.random(batch) * self.sum_tree.total()
        self.leaves = init
        self.rng = np.random.default_rng(1)

    def time_update_sum_and_min(self, capacity, batch):
        self.sum_tree.update(self.idx, self.prio)
        self.min_tree.update(self.idx, self.prio)

    def time_update_pair(self, capacity, batch):
        update_pair(self.sum_tree, self.min_tree, self.idx, self.prio, self.prio)

    def time_find_prefixsum(self, capacity, batch):
        self.sum_tree.find_prefixsum(self.values)

    def time_sample_stratified(self, capacity, batch):
        self.sum_tree.sample(batch, self.rng)

    def time_numpy_cumsum_searchsorted(self, capacity, batch):
        np.searchsorted(np.cumsum(self.leaves), self.values, side="right")


class TimePrioritizedReplayBuffer:
    """The buffer end to end: CartPole-sized transitions."""

    params = ([1 << 16, 1 << 20],)
    param_names = ["capacity"]

    def setup(self, capacity):
        from gymnasium import spaces

        rng = np.random.default_rng(0)
        self.buffer = PrioritizedReplayBuffer(capacity, spaces.Box(-1, 1, (4,), np.float32),
                                              spaces.Discrete(2), alpha=0.6, beta=0.4, seed=0)
        n = 1024
        self.step = (rng.random((n, 4)).astype(np.float32), rng.integers(0, 2, n),
                     np.ones(n, np.float32), rng.random((n, 4)).astype(np.float32),
                     np.zeros(n, bool), np.zeros(n, bool))
        for _ in range(capacity // n):
            self.buffer.add(*self.step)
        self.indices = self.buffer.sample(4096).indices
        self.new_priorities = rng.random(4096)

    def time_add_1024(self, capacity):
        self.buffer.add(*self.step)

    def time_sample_4096(self, capacity):
        self.buffer.sample(4096)

    def time_update_priorities_4096(self, capacity):
        self.buffer.update_priorities(self.indices, self.new_priorities)
