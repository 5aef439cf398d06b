"""The SB3 adapter's per-step cost: to_sb3(SyncVectorEnv) next to SB3's DummyVecEnv and raw Sync.

Skipped (NotImplementedError in setup) where Stable-Baselines3 is not installed.
"""
import gymnasium as gym
import numpy as np

STEPS = 200


def _fns(n):
    return [lambda: gym.make("CartPole-v1") for _ in range(n)]


class TimeVecEnvStep:
    """``STEPS`` vector steps of CartPole-v1 with random actions."""

    params = (["raw_sync", "to_sb3_sync", "sb3_dummy"], [8, 64])
    param_names = ["path", "num_envs"]

    def setup(self, path, num_envs):
        try:
            from stable_baselines3.common.vec_env import DummyVecEnv

            from fastvec.integrations.sb3 import to_sb3
        except ImportError as e:
            raise NotImplementedError(f"needs stable-baselines3: {e}")
        same_step = gym.vector.AutoresetMode.SAME_STEP
        if path == "raw_sync":
            self.env = gym.vector.SyncVectorEnv(_fns(num_envs), autoreset_mode=same_step)
            self.env.reset(seed=0)
        elif path == "to_sb3_sync":
            self.env = to_sb3(gym.vector.SyncVectorEnv(_fns(num_envs), autoreset_mode=same_step))
            self.env.reset()
        else:
            self.env = DummyVecEnv(_fns(num_envs))
            self.env.reset()
        self.actions = np.random.default_rng(0).integers(0, 2, size=(STEPS, num_envs))

    def teardown(self, path, num_envs):
        self.env.close()

    def time_steps(self, path, num_envs):
        step = self.env.step
        for a in self.actions:
            step(a)
