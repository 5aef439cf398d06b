"""The grid world in plain Python: the env gridworld.h reproduces, bit for bit."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

EMPTY, AGENT, GOAL, PIT = 0, 1, 2, 3
MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))  # up, right, down, left


class GridWorldEnv(gym.Env):
    """An agent walks on a ``size`` x ``size`` grid to a goal and must not step into a pit.

    Observation: the grid, uint8 (0 empty, 1 agent, 2 goal, 3 pit). Actions: 0 up,
    1 right, 2 down, 3 left; a move into the border stays put. Reward: ``goal_reward`` or
    ``pit_reward`` when the step ends on one of them (the episode terminates), else
    ``step_reward``.
    """

    metadata = {"render_modes": []}

    def __init__(self, size: int = 5, step_reward: float = -0.01, goal_reward: float = 1.0,
                 pit_reward: float = -1.0, render_mode: str | None = None) -> None:
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        self.size = size
        self.step_reward = step_reward
        self.goal_reward = goal_reward
        self.pit_reward = pit_reward
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0, PIT, shape=(size, size), dtype=np.uint8)
        self.action_space = spaces.Discrete(4)

    def _free_cell(self, *taken: tuple[int, int]) -> tuple[int, int]:
        while True:
            x, y = (int(v) for v in self.np_random.integers(0, self.size, size=2))
            if (x, y) not in taken:
                return x, y

    def _grid(self) -> np.ndarray:
        grid = np.zeros((self.size, self.size), dtype=np.uint8)
        grid[self.goal_y, self.goal_x] = GOAL
        grid[self.pit_y, self.pit_x] = PIT
        grid[self.agent_y, self.agent_x] = AGENT
        return grid

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.agent_x, self.agent_y = self._free_cell()
        self.goal_x, self.goal_y = self._free_cell((self.agent_x, self.agent_y))
        self.pit_x, self.pit_y = self._free_cell((self.agent_x, self.agent_y), (self.goal_x, self.goal_y))
        return self._grid(), {}

    def step(self, action):
        dx, dy = MOVES[int(action)]
        self.agent_x = min(max(self.agent_x + dx, 0), self.size - 1)
        self.agent_y = min(max(self.agent_y + dy, 0), self.size - 1)
        if (self.agent_x, self.agent_y) == (self.goal_x, self.goal_y):
            reward, terminated = self.goal_reward, True
        elif (self.agent_x, self.agent_y) == (self.pit_x, self.pit_y):
            reward, terminated = self.pit_reward, True
        else:
            reward, terminated = self.step_reward, False
        return self._grid(), reward, terminated, False, {}
