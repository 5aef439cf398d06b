"""Envs used by the benchmarks (importable in worker processes)."""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class BusyEnv(gym.Env):
    """Busy-waits ``step_us`` microseconds per step, like a Python env of that cost.

    With ``slow_prob > 0`` a step takes ``slow_factor`` times longer with that
    probability (uneven step times, for the async benchmark).
    """

    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, step_us: float = 50.0, slow_prob: float = 0.0, slow_factor: float = 10.0, seed: int = 0):
        self.step_s = step_us * 1e-6
        self.slow_prob = slow_prob
        self.slow_factor = slow_factor
        self._rng = np.random.default_rng(seed)
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        cost = self.step_s
        if self.slow_prob and self._rng.random() < self.slow_prob:
            cost *= self.slow_factor
        end = time.perf_counter() + cost
        while time.perf_counter() < end:
            pass
        return self._obs, 1.0, False, False, {}
