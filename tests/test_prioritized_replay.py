"""PrioritizedReplayBuffer (fastvec/replay/prioritized_replay_buffer.py) against a plain-Python model buffer."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from fastvec import PrioritizedReplayBuffer

# --------------------------------------------------------------------------- PrioritizedReplayBuffer


def box_buffer(capacity=8, **kwargs):
    obs_space = spaces.Box(-10, 10, (3,), np.float32)
    act_space = spaces.Discrete(4)
    return PrioritizedReplayBuffer(capacity, obs_space, act_space, **kwargs)


def make_batch(rng, n, start):
    obs = (np.arange(start, start + n, dtype=np.float32)[:, None] * np.ones(3, np.float32))
    actions = rng.integers(0, 4, n)
    rewards = np.arange(start, start + n, dtype=np.float32) / 10
    next_obs = obs + 0.5
    term = rng.random(n) < 0.3
    trunc = rng.random(n) < 0.3
    return obs, actions, rewards, next_obs, term, trunc


class ModelBuffer:
    """Brute-force ring buffer of (transition, priority) for comparison."""

    def __init__(self, capacity, alpha, eps):
        self.capacity, self.alpha, self.eps = capacity, alpha, eps
        self.rows = [None] * capacity
        self.prio = np.zeros(capacity)
        self.pos = 0
        self.len = 0
        self.max_p = 1.0

    def add(self, *row):
        self.rows[self.pos] = row
        self.prio[self.pos] = self.max_p
        self.pos = (self.pos + 1) % self.capacity
        self.len = min(self.len + 1, self.capacity)

    def update(self, idx, prio):
        for i, p in zip(idx, prio):
            self.prio[i] = (p + self.eps) ** self.alpha
            self.max_p = max(self.max_p, self.prio[i])

    def weights(self, idx, beta):
        n = self.len
        p = self.prio[:n] / self.prio[:n].sum()
        w_all = (n * p[p > 0]) ** (-beta)
        return (n * p[idx]) ** (-beta) / w_all.max()


def assert_matches_model(buffer, model):
    n = len(buffer)
    assert n == model.len
    for i in range(n):
        o, a, r, no, te, tr = model.rows[i]
        np.testing.assert_array_equal(buffer._obs[0][i], o)
        assert buffer._actions[0][i] == a
        assert buffer._rewards[i] == np.float32(r)
        np.testing.assert_array_equal(buffer._next_obs[0][i], no)
        assert buffer._terminations[i] == te and buffer._truncations[i] == tr
    np.testing.assert_allclose(buffer._sum_tree[np.arange(n)], model.prio[:n], rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 13), seed=st.integers(0, 2**32 - 1),
       batches=st.lists(st.integers(0, 20), min_size=1, max_size=6),
       alpha=st.sampled_from([0.0, 0.6, 1.0]), beta=st.sampled_from([0.0, 0.4, 1.0]))
def test_buffer_matches_model_with_wraparound(capacity, seed, batches, alpha, beta):
    rng = np.random.default_rng(seed)
    buffer = box_buffer(capacity, alpha=alpha, beta=beta, eps=1e-3, seed=seed)
    model = ModelBuffer(capacity, alpha, 1e-3)
    start = 0
    for n in batches:
        batch = make_batch(rng, n, start)
        start += n
        if n == 1 and rng.random() < 0.5:  # a single transition
            single = [x[0] for x in batch]
            buffer.add(*single)
            model.add(*single)
        else:
            buffer.add(*batch)
            for row in zip(*batch):
                model.add(*row)
        assert_matches_model(buffer, model)
        if len(buffer) == 0:
            continue
        sample = buffer.sample(32)
        idx = sample.indices
        assert np.all((idx >= 0) & (idx < len(buffer)))
        # the batch is the stored rows
        np.testing.assert_array_equal(sample.batch.observations, buffer._obs[0][idx])
        np.testing.assert_array_equal(sample.batch.rewards, buffer._rewards[idx])
        np.testing.assert_allclose(sample.weights, model.weights(idx, beta), rtol=1e-6)
        assert sample.weights.max() <= 1.0 + 1e-6
        new_p = rng.exponential(size=idx.shape) * (rng.random(idx.shape) < 0.8)
        buffer.update_priorities(idx, new_p)
        model.update(idx, new_p)
        assert_matches_model(buffer, model)
        assert buffer.max_priority == pytest.approx(model.max_p)


def test_new_transitions_get_max_priority():
    rng = np.random.default_rng(0)
    buffer = box_buffer(10, alpha=1.0, eps=0.0)
    buffer.add(*make_batch(rng, 3, 0))
    np.testing.assert_array_equal(buffer._sum_tree[:3], [1.0, 1.0, 1.0])
    buffer.update_priorities([0, 1, 2], [0.5, 7.0, 2.0])
    buffer.add(*make_batch(rng, 2, 3))
    np.testing.assert_array_equal(buffer._sum_tree[:5], [0.5, 7.0, 2.0, 7.0, 7.0])
    buffer.update_priorities([1], [0.1])  # the max seen so far stays
    buffer.add(*[x[0] for x in make_batch(rng, 1, 5)])
    assert buffer._sum_tree[5] == 7.0


def test_sampling_probabilities_and_weights():
    rng = np.random.default_rng(1)
    buffer = box_buffer(6, alpha=0.5, beta=0.7, eps=0.0, seed=3)
    buffer.add(*make_batch(rng, 6, 0))
    td = np.array([1.0, 4.0, 0.0, 9.0, 0.25, 2.0])
    buffer.update_priorities(np.arange(6), td)
    p = td ** 0.5
    probs = p / p.sum()
    counts = np.zeros(6)
    for _ in range(40):
        s = buffer.sample(1000)
        np.add.at(counts, s.indices, 1)
        expected_w = (6 * probs[s.indices]) ** -0.7 / ((6 * probs[probs > 0]) ** -0.7).max()
        np.testing.assert_allclose(s.weights, expected_w, rtol=1e-6)
    np.testing.assert_allclose(counts / counts.sum(), probs, atol=0.005)
    assert counts[2] == 0  # zero priority: never sampled
    # beta override
    s = buffer.sample(10, beta=0.0)
    np.testing.assert_array_equal(s.weights, np.ones(10, np.float32))
    # every priority zero (possible only with eps=0): a clear error
    buffer.update_priorities(np.arange(6), np.zeros(6))
    with pytest.raises(ValueError, match="every stored transition has priority 0"):
        buffer.sample(4)


def test_buffer_sample_on_threads_is_the_same_sample():
    rng = np.random.default_rng(4)
    one, two = box_buffer(5000, seed=9), box_buffer(5000, seed=9, num_threads=2)
    for start in range(0, 6000, 500):
        batch = make_batch(rng, 500, start)
        one.add(*batch)
        two.add(*batch)
    for buffer in (one, two):
        buffer.update_priorities(np.arange(5000), np.arange(5000) % 17)
    for _ in range(3):
        a, b = one.sample(1024), two.sample(1024)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.weights, b.weights)
        np.testing.assert_array_equal(a.batch.observations, b.batch.observations)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        box_buffer(8, num_threads=0)


def test_buffer_larger_batch_than_capacity_keeps_newest():
    rng = np.random.default_rng(2)
    buffer = box_buffer(4)
    buffer.add(*make_batch(rng, 3, 0))
    obs, *rest = make_batch(rng, 10, 100)
    buffer.add(obs, *rest)
    assert len(buffer) == 4
    # the newest 4 rows (106..109) wrap around from position 3 + 6 = 9 -> 1
    assert sorted(buffer._obs[0][:, 0].tolist()) == [106.0, 107.0, 108.0, 109.0]
    assert buffer._obs[0][1, 0] == 106.0 and buffer._obs[0][0, 0] == 109.0


def test_buffer_mask_skips_rows():
    rng = np.random.default_rng(4)
    buffer = box_buffer(8)
    batch = make_batch(rng, 4, 0)
    buffer.add(*batch, mask=np.array([True, False, True, False]))
    assert len(buffer) == 2
    np.testing.assert_array_equal(buffer._obs[0][:2, 0], [0.0, 2.0])


def test_buffer_dict_and_tuple_spaces():
    obs_space = spaces.Dict({
        "pos": spaces.Box(-1, 1, (2,), np.float32),
        "grid": spaces.Box(0, 255, (3, 3), np.uint8),
        "inner": spaces.Tuple((spaces.Discrete(5), spaces.MultiBinary(3))),
    })
    act_space = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)))
    buffer = PrioritizedReplayBuffer(5, obs_space, act_space, alpha=0.6, beta=0.4, seed=0)
    obs_space.seed(0)
    act_space.seed(0)
    stored = []
    for step in range(7):  # wraps around
        n = 2
        obs = [obs_space.sample() for _ in range(n)]
        nxt = [obs_space.sample() for _ in range(n)]
        act = [act_space.sample() for _ in range(n)]
        stack = lambda items, layout: layout.join(
            [np.stack(col) for col in zip(*[layout.split(x) for x in items])])
        buffer.add(stack(obs, buffer._obs_layout), stack(act, buffer._act_layout),
                   np.ones(n), stack(nxt, buffer._obs_layout), np.zeros(n, bool), np.zeros(n, bool))
        stored += list(zip(obs, act, nxt))
    assert len(buffer) == 5
    batch, idx, w = buffer.sample(16)
    assert set(batch.observations) == {"pos", "grid", "inner"}
    assert batch.observations["grid"].dtype == np.uint8 and batch.observations["grid"].shape == (16, 3, 3)
    assert isinstance(batch.actions, tuple) and batch.actions[1].shape == (16, 2)
    # ring: position p holds the transition number k with k % 5 == p among the last 5
    for j, i in enumerate(idx):
        k = [t for t in range(len(stored) - 5, len(stored)) if t % 5 == i][0]
        o, a, nx = stored[k]
        np.testing.assert_array_equal(batch.observations["grid"][j], o["grid"])
        assert batch.observations["inner"][0][j] == o["inner"][0]
        np.testing.assert_array_equal(batch.observations["inner"][1][j], o["inner"][1])
        np.testing.assert_array_equal(batch.next_observations["pos"][j], nx["pos"])
        assert batch.actions[0][j] == a[0]


def test_buffer_from_vector_env_step():
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    buffer = PrioritizedReplayBuffer(50, envs.single_observation_space, envs.single_action_space,
                                     alpha=0.6, beta=0.4, seed=0)
    obs, _ = envs.reset(seed=1)
    envs.action_space.seed(1)
    rows = []
    for _ in range(20):
        act = envs.action_space.sample()
        nxt, rew, term, trunc, _ = envs.step(act)
        buffer.add(obs, act, rew, nxt, term, trunc)
        rows += list(zip(obs, act, rew, nxt, term, trunc))
        obs = nxt
    envs.close()
    assert len(buffer) == 50
    kept = rows[-50:]
    pos0 = 60 % 50  # rows 10..59 live at positions (10..59) % 50
    for k, (o, a, r, n, te, tr) in enumerate(kept):
        p = (10 + k) % 50
        np.testing.assert_array_equal(buffer._obs[0][p], o)
        assert buffer._actions[0][p] == a and buffer._rewards[p] == r
        np.testing.assert_array_equal(buffer._next_obs[0][p], n)
        assert buffer._terminations[p] == te and buffer._truncations[p] == tr
    assert pos0 == buffer._pos


def test_buffer_input_validation():
    rng = np.random.default_rng(0)
    buffer = box_buffer(8)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4)
    obs, act, rew, nxt, te, tr = make_batch(rng, 3, 0)
    with pytest.raises(ValueError, match=r"obs: expected shape \(3, 3\) for a batch of 3, got \(2, 3\)"):
        buffer.add(obs[:2], act, rew, nxt, te, tr)
    with pytest.raises(ValueError, match=r"action: expected shape \(3,\)"):
        buffer.add(obs, act[:1], rew, nxt, te, tr)
    with pytest.raises(ValueError, match="terminated must have the shape of reward"):
        buffer.add(obs, act, rew, nxt, te[:2], tr)
    with pytest.raises(ValueError, match="reward must be a scalar or a 1-D batch"):
        buffer.add(obs, act, rew[:, None], nxt, te, tr)
    with pytest.raises(ValueError, match="mask must be a bool array"):
        buffer.add(obs, act, rew, nxt, te, tr, mask=[1, 0, 1])
    assert len(buffer) == 0
    buffer.add(obs, act, rew, nxt, te, tr)
    with pytest.raises(ValueError, match=r"indices must be in \[0, 3\)"):
        buffer.update_priorities([0, 3], [1.0, 1.0])
    with pytest.raises(ValueError, match="finite and >= 0, got -1.0"):
        buffer.update_priorities([0], [-1.0])
    with pytest.raises(ValueError, match="finite and >= 0, got nan"):
        buffer.update_priorities([0], [np.nan])
    with pytest.raises(ValueError, match="must match indices"):
        buffer.update_priorities([0, 1], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="alpha must be"):
        box_buffer(8, alpha=-1)
    with pytest.raises(TypeError, match="observation_space must be a gymnasium Space"):
        PrioritizedReplayBuffer(8, (3,), spaces.Discrete(2))
    with pytest.raises(ValueError, match="cannot lay out"):
        PrioritizedReplayBuffer(8, spaces.Text(5), spaces.Discrete(2))
    with pytest.raises(ValueError, match="beta must be"):
        buffer.sample(4, beta=np.nan)
