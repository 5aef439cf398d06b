"""Envs used by the benchmarks (importable in worker processes)."""
from __future__ import annotations

import time
import warnings

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


# --- The `real` section's workloads -------------------------------------------------------
# Module-level constructors (not lambdas), so that worker processes started with any
# start method (fork, forkserver, spawn) can rebuild them by reference.


def _mujoco_warning(message: str) -> None:
    # MuJoCo 4.0 warns that the `settotalmass` attribute of Gymnasium's half_cheetah.xml is
    # deprecated: by default every process that builds the env prints it and appends it to
    # MUJOCO_LOG.TXT in the working directory. Other MuJoCo warnings become Python warnings.
    if "settotalmass" not in message:
        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def make_mujoco(env_id: str) -> gym.Env:
    """A Gymnasium MuJoCo env as ``gym.make`` builds it (needs ``gymnasium[mujoco]``)."""
    import mujoco

    if mujoco.get_mju_user_warning() is None:  # leave a handler someone else installed alone
        mujoco.set_mju_user_warning(_mujoco_warning)
    return gym.make(env_id)


def make_atari(game: str) -> gym.Env:
    """An Atari game with the usual DQN-style preprocessing (needs ale-py and OpenCV).

    ``<game>NoFrameskip-v4`` (every frame, no sticky actions), then Gymnasium's
    ``AtariPreprocessing`` (up to 30 no-ops on reset, 4 frames per step max-pooled
    over the last two, 84x84 grayscale, episodes end only at game over) and a stack
    of the last 4 frames: observations ``(4, 84, 84)`` uint8.
    """
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(f"{game}NoFrameskip-v4")
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False)
    return gym.wrappers.FrameStackObservation(env, 4)


class EmulatorOnly(gym.Env):
    """The emulator alone: the ceiling of :func:`make_atari`'s workload.

    ``<game>NoFrameskip-v4``'s ALE, driven as ``AtariPreprocessing`` drives it (``act``
    ``frame_skip`` times a step; on reset a game reset and 1-``noop_max`` no-ops from this
    env's generator), with no screen read, no preprocessing and no observation: ``step``
    and ``reset`` return None in its place. What is left between this and a preprocessed
    step is what the preprocessing, the wrappers and the vector env cost.

    Example:
        >>> env = EmulatorOnly("Pong")
        >>> _ = env.reset(seed=0)
        >>> _, reward, terminated, truncated, _ = env.step(0)
        >>> (reward, terminated, truncated)
        (0.0, False, False)
        >>> env.close()
    """

    observation_space = spaces.Box(0, 255, (0,), np.uint8)  # (no observation)

    def __init__(self, game: str, frame_skip: int = 4, noop_max: int = 30):
        import ale_py

        gym.register_envs(ale_py)
        self._env = gym.make(f"{game}NoFrameskip-v4")
        atari = self._env.unwrapped
        self._ale = atari.ale
        self._actions = list(atari._action_set)
        self.action_space = spaces.Discrete(len(self._actions))
        self.frame_skip, self.noop_max = frame_skip, noop_max

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._env.reset(seed=seed)
        noop = self._actions[0]
        for _ in range(int(self.np_random.integers(1, self.noop_max + 1))):
            self._ale.act(noop)
        return None, {}

    def step(self, action):
        act, a = self._ale.act, self._actions[int(action)]
        reward = 0.0
        for _ in range(self.frame_skip):
            reward += act(a)
        return None, reward, self._ale.game_over(), False, {}

    def close(self):
        self._env.close()


def make_emulator(game: str) -> gym.Env:
    """:class:`EmulatorOnly` for ``game``, as :func:`make_atari` configures the emulator."""
    return EmulatorOnly(game)


def make_pong() -> gym.Env:
    """Pong as :func:`make_atari` builds it: 6 actions."""
    return make_atari("Pong")
