"""Every Gymnasium space as observation and action, against SyncVectorEnv.

Fixed-size leaves live in shared memory; Text, Graph, Sequence, OneOf and custom spaces
travel on the pipes, leaf by leaf, also inside a Dict or Tuple next to fixed leaves.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv
from helpers import assert_same


class Custom(gym.Space):
    """A user's own space: samples are small strings."""

    def sample(self, mask=None, probability=None):
        return "c" * int(self.np_random.integers(1, 4))

    def contains(self, x):
        return isinstance(x, str)

    def __eq__(self, other):
        return isinstance(other, Custom)


SPACES = {
    "text": spaces.Text(6, charset="abcdef"),
    "graph": spaces.Graph(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3)),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
    "sequence_stacked": spaces.Sequence(spaces.Box(0, 1, (2,), np.float32), stack=True),
    "oneof": spaces.OneOf((spaces.Discrete(3), spaces.Box(0, 1, (2,), np.float32))),
    "dict_mixed": spaces.Dict({"image": spaces.Box(0, 255, (3, 3), np.uint8), "direction": spaces.Discrete(4),
                               "mission": Custom()}),
    "tuple_mixed": spaces.Tuple((spaces.Graph(spaces.Discrete(3), None), spaces.Discrete(2),
                                 spaces.Dict({"t": spaces.Text(4), "b": spaces.Box(-1, 1, (2,))}))),
}


class SpaceEnv(gym.Env):
    """Observes samples of ``obs`` (seeded from its own np_random); episodes of 1-4 steps;
    reports in its info whether the action it got lies in its action space."""

    def __init__(self, obs="text", act="text"):
        self.observation_space = SPACES[obs]
        self.action_space = SPACES[act]
        self.t = self.length = 0

    def _obs(self):
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(1, 5))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= self.length, False, {"valid": bool(self.action_space.contains(action))}


def _actions(space, n, rng):
    """A batch of actions as the batched action space samples them."""
    batched = gym.vector.utils.batch_space(space, n)
    batched.seed(int(rng.integers(2**31)))
    return batched.sample()


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
@pytest.mark.parametrize("name", sorted(SPACES))
def test_observation_and_action_spaces_equal_sync(name, mode, shared_memory):
    fns = [lambda: SpaceEnv(name, name)] * 3
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode, shared_memory=shared_memory) as env:
        assert env.observation_space == ref.observation_space
        assert env.action_space == ref.action_space
        assert_same(ref.reset(seed=3), env.reset(seed=3), "reset")
        rng = np.random.default_rng(0)
        for t in range(12):
            actions = _actions(ref.single_action_space, 3, rng)
            expected = ref.step(actions)
            got = env.step(actions)
            assert_same(expected, got, f"step {t}")
            assert expected[0] in ref.observation_space
            if "valid" in got[4]:  # (not on a step where every env was reset instead)
                assert got[4]["valid"][got[4]["_valid"]].all()  # each env got an action of its space


@pytest.mark.parametrize("name", ["dict_mixed", "tuple_mixed", "text"])
def test_send_recv_with_object_leaves(name):
    fns = [lambda: SpaceEnv(name, name)] * 4
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, batch_size=2) as env:
        env.async_reset(seed=5)
        ref_obs, _ = ref.reset(seed=5)
        seen = 0
        rng = np.random.default_rng(1)
        for _ in range(6):
            obs, *_rest, infos = env.recv()
            ids = infos["env_id"]
            # Each recv returns whole workers' envs; their observations are theirs.
            actions = _actions(ref.single_action_space, 2, rng)
            env.send(actions, ids)
            seen += len(ids)
        assert seen == 12


def test_minigrid_works_by_default():
    minigrid = pytest.importorskip("minigrid")
    del minigrid
    fns = [lambda: gym.make("MiniGrid-Empty-8x8-v0")] * 4
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:  # shared_memory=True, the default
        # image and direction in shared memory, the mission string on the pipes
        layout = env._staging.obs_layout
        assert [leaf.path for leaf in layout.leaves if leaf.is_object] == [("mission",)]
        assert_same(ref.reset(seed=0), env.reset(seed=0), "reset")
        rng = np.random.default_rng(0)
        for t in range(300):  # several episodes (max 256 steps each)
            actions = rng.integers(0, 3, 4)
            assert_same(ref.step(actions), env.step(actions), f"step {t}")
