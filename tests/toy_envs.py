"""Small envs for the vector-env tests: every space kind, varying infos and episode lengths.

They draw everything from ``self.np_random``, so two copies seeded alike
produce identical trajectories in any backend.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

DICT_OBS = spaces.Dict(
    {
        "pos": spaces.Box(-1.0, 1.0, (3,), np.float32),
        "grid": spaces.Box(0, 255, (2, 3), np.uint8),
        "id": spaces.Discrete(5, start=2),
        "inner": spaces.Dict({"md": spaces.MultiDiscrete([3, 4]), "mb": spaces.MultiBinary(3)}),
    }
)
TUPLE_OBS = spaces.Tuple(
    (spaces.Box(-np.inf, np.inf, (2,), np.float64), spaces.Discrete(3), spaces.Tuple((spaces.MultiBinary(2),)))
)

SPACES = {
    "box": spaces.Box(-2.0, 2.0, (4,), np.float32),
    "box_int": spaces.Box(-5, 5, (2, 2), np.int32),
    "discrete": spaces.Discrete(7),
    "multidiscrete": spaces.MultiDiscrete([2, 5, 3]),
    "multibinary": spaces.MultiBinary(4),
    "dict": DICT_OBS,
    "tuple": TUPLE_OBS,
}


class ToyEnv(gym.Env):
    """Random observations from ``obs_space``; episodes of random length; varied infos.

    Args:
        obs_space / act_space: names from :data:`SPACES`.
        max_len: episodes last 1..max_len steps (termination), and are truncated
            with probability ``trunc_prob`` per step.
        info_prob: probability that a step returns a non-empty info (varied keys/types).
        step_sleep: seconds to sleep in each step (uneven step times when random).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, obs_space="box", act_space="discrete", max_len=12, trunc_prob=0.05,
                 info_prob=0.3, render_mode=None, step_sleep=0.0):
        self.observation_space = SPACES[obs_space]
        self.action_space = SPACES[act_space]
        self.max_len = max_len
        self.trunc_prob = trunc_prob
        self.info_prob = info_prob
        self.render_mode = render_mode
        self.step_sleep = step_sleep
        self.t = 0
        self.length = 1
        self.last_action = None

    def _obs(self):
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(1, self.max_len + 1))
        info = {}
        if options and "tag" in options:
            info["tag"] = options["tag"]
        if self.np_random.random() < 0.5:
            info["start"] = int(self.np_random.integers(100))
        return self._obs(), info

    def step(self, action):
        assert self.action_space.contains(action), f"{action!r} not in {self.action_space}"
        if self.step_sleep:
            time.sleep(self.step_sleep)
        self.t += 1
        self.last_action = action
        terminated = self.t >= self.length
        truncated = (not terminated) and bool(self.np_random.random() < self.trunc_prob)
        reward = float(self.np_random.normal()) + float(np.sum(np.asarray(_leaves(action)[0], dtype=np.float64)))
        info = {}
        u = self.np_random.random()
        if u < self.info_prob:
            kind = int(self.np_random.integers(4))
            if kind == 0:
                info["count"] = self.t
            elif kind == 1:
                info["value"] = float(self.np_random.normal())
                info["vec"] = self.np_random.normal(size=2).astype(np.float32)
            elif kind == 2:
                info["nested"] = {"flag": bool(self.np_random.random() < 0.5), "name": f"t{self.t}"}
            else:
                info["count"] = self.t
                info["obj"] = ("tuple", self.t)
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "rgb_array":
            return np.full((4, 4, 3), self.t % 256, dtype=np.uint8)
        return None


def _leaves(x):
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, tuple):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


class CrashEnv(gym.Env):
    """Raises (or exits the process) at a chosen step, for the fault tests."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fail_at=3, how="raise", in_reset=False):
        self.fail_at = fail_at
        self.how = how
        self.in_reset = in_reset
        self.t = 0

    def _fail(self):
        import os
        import signal

        if self.how == "raise":
            raise ValueError(f"boom at step {self.t}")
        if self.how == "exit":
            os._exit(3)
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.how == "hang":
            time.sleep(3600)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        if self.in_reset:
            self._fail()
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.fail_at:
            self._fail()
        return np.zeros(2, np.float32), 1.0, False, False, {}



class FlakyEnv(gym.Env):
    """An env whose observations come from its seeded RNG (so a reset's seed shows), that
    fails once at step ``fail_at`` of an episode: the first instance (of all built with the
    same ``marker`` file) to get there does, by ``how``: "raise", "exit" (``os._exit``),
    "segv" (reads address 0), "hang" (sleeps for an hour). ``marker=None``: every instance
    fails there. ``build_fails``: the constructor raises once the marker exists (a rebuild
    that fails). ``reset_fails``: the first instance to reset fails there instead (once, by
    the marker), by ``reset_how``: "raise" or "exit" (``os._exit(4)``), in its reset number
    ``reset_fails_at`` (default 1: its first; 2: the first autoreset)."""

    observation_space = spaces.Box(-1, 1, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fail_at=None, how="raise", marker=None, build_fails=False, episode=30, reset_fails=False,
                 reset_how="raise", reset_fails_at=1):
        import os

        if build_fails and marker is not None and os.path.exists(marker):
            raise RuntimeError("cannot build the env again")
        self.fail_at, self.how, self.marker, self.episode = fail_at, how, marker, episode
        self.reset_fails, self.reset_how, self.reset_fails_at = reset_fails, reset_how, reset_fails_at
        self.t = self.resets = 0

    def reset(self, *, seed=None, options=None):
        import os

        self.resets += 1
        if self.reset_fails and self.resets == self.reset_fails_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if self.reset_how == "exit":
                os._exit(4)
            raise ValueError("boom in reset")
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {"t": 0}

    def step(self, action):
        import os

        self.t += 1
        if self.t == self.fail_at and (self.marker is None or not os.path.exists(self.marker)):
            if self.marker is not None:
                open(self.marker, "w").close()
            if self.how == "raise":
                raise ValueError(f"boom at step {self.t}")
            if self.how == "exit":
                os._exit(3)
            if self.how == "segv":
                import ctypes

                ctypes.string_at(0)
            if self.how == "hang":
                time.sleep(3600)
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(self.t) + float(action), self.t >= self.episode, False, {"t": self.t}


class Arena:
    """A PettingZoo-style ParallelEnv (its API, no PettingZoo needed) whose agents come and go:
    ``a2`` spawns at step 2, ``a1`` is terminated at step 4, and the episode is truncated for
    every agent left at step ``length`` (5 to 8, drawn at reset). Observations, rewards and
    the length come from the seeded RNG. ``dict_obs``: observations are
    ``{"observation": Box(3), "action_mask": MultiBinary(3)}``. ``spaces_differ``: ``a1``'s
    observation space is wider (for the error test). ``with_infos``: each agent's infos hold
    ``t`` (an int), a0's also ``score`` (a float), a1's at step 3 ``note`` (a string), and a
    reset's ``{"spawned": True}`` (else every agent's infos are empty)."""

    possible_agents = ["a0", "a1", "a2"]
    metadata = {"name": "arena"}

    def __init__(self, dict_obs=False, spaces_differ=False, with_infos=False):
        self.dict_obs = dict_obs
        self.spaces_differ = spaces_differ
        self.with_infos = with_infos
        self.np_random = np.random.default_rng()
        self.agents: list = []

    def observation_space(self, agent):
        box = spaces.Box(-1.0, 1.0, (4 if self.spaces_differ and agent == "a1" else 3,), np.float32)
        if self.dict_obs:
            return spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(3)})
        return box

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self, agent):
        x = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        if self.dict_obs:
            return {"observation": x, "action_mask": (self.np_random.random(3) < 0.7).astype(np.int8)}
        return x

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.t = 0
        self.length = int(self.np_random.integers(5, 9))
        self.agents = ["a0", "a1"]
        return {a: self._obs(a) for a in self.agents}, {a: {"spawned": True} if self.with_infos else {}
                                                         for a in self.agents}

    def step(self, actions):
        self.t += 1
        acting = list(self.agents)
        obs = {a: self._obs(a) for a in acting}
        rewards = {a: float(self.t + 0.1 * actions[a] + self.possible_agents.index(a)) for a in acting}
        terminations = {a: a == "a1" and self.t == 4 for a in acting}
        truncations = {a: self.t >= self.length for a in acting}
        infos = {a: self._infos(a) for a in acting}
        self.agents = [a for a in acting if not (terminations[a] or truncations[a])]
        if self.t == 2 and self.t < self.length:  # a2 spawns: its first observation comes now
            self.agents.append("a2")
            obs["a2"], rewards["a2"], terminations["a2"], truncations["a2"], infos["a2"] = \
                self._obs("a2"), 0.0, False, False, {}
        return obs, rewards, terminations, truncations, infos

    def _infos(self, agent):
        if not self.with_infos:
            return {}
        info = {"t": self.t}
        if agent == "a0":
            info["score"] = self.t * 0.5
        if agent == "a1" and self.t == 3:
            info["note"] = f"a1 at {self.t}"
        return info

    def render(self):
        return None

    def close(self):
        pass


class Mixed:
    """A PettingZoo-style ParallelEnv whose two agents have different spaces (for
    ``pad_spaces``): ``scout`` observes Box(3) and acts in Discrete(2) (or Box(2)), ``tank``
    observes Box(5) in [-2, 2] and acts in Discrete(4) (or Box(3)). Each reward is what the
    agent was given (the sum of a Box action), so a test sees which action reached it.
    ``dict_obs``: observations are ``{"observation": ..., "action_mask": MultiBinary(n)}``, the
    agent's own action count. Episodes are truncated at step 4."""

    possible_agents = ["scout", "tank"]
    metadata = {"name": "mixed"}
    SIZES = {"scout": (3, 2), "tank": (5, 4)}

    def __init__(self, continuous=False, dict_obs=False):
        self.continuous = continuous
        self.dict_obs = dict_obs
        self.np_random = np.random.default_rng()
        self.agents: list = []
        self.received: list = []

    def observation_space(self, agent):
        size, actions = self.SIZES[agent]
        box = spaces.Box(-1.0 if agent == "scout" else -2.0, 1.0 if agent == "scout" else 2.0, (size,), np.float32)
        if self.dict_obs:
            return spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(actions)})
        return box

    def action_space(self, agent):
        _, actions = self.SIZES[agent]
        if self.continuous:
            return spaces.Box(-1.0, 1.0, (actions - 1 if agent == "tank" else actions,), np.float32)
        return spaces.Discrete(actions)

    def _obs(self, agent):
        size, actions = self.SIZES[agent]
        x = self.np_random.uniform(-1, 1, size).astype(np.float32)
        if self.dict_obs:
            return {"observation": x, "action_mask": np.ones(actions, np.int8)}
        return x

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        for agent, action in actions.items():
            assert self.action_space(agent).contains(action), (agent, action)
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(np.sum(actions[a])) for a in self.agents}
        truncations = {a: self.t >= 4 for a in self.agents}
        terminations = {a: False for a in self.agents}
        if self.t >= 4:
            self.agents = []
        return obs, rewards, terminations, truncations, {a: {} for a in obs}

    def render(self):
        return None

    def close(self):
        pass


class TextObsEnv(gym.ObservationWrapper):
    """``env``'s Box observations as a Dict with a Text leaf, as MiniGrid's "mission" (drawn
    from the observation, so that it changes every step)."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = spaces.Dict({"x": env.observation_space, "mission": spaces.Text(20)})

    def observation(self, obs):
        return {"x": obs, "mission": f"go to {int(abs(obs[0]) * 99)}"}
