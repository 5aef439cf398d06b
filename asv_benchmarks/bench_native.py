"""asv suites for fastvec.NativeVectorEnv: env-only steps with pre-drawn random actions.

Every suite times 20 vector steps of fastvec's native envs next to the references
on the same actions: gymnasium's NumPy CartPoleVectorEnv
(``vectorization_mode="vector_entry_point"``) and SyncVectorEnv of the Python env.
"""
import warnings

import gymnasium as gym
import numpy as np

warnings.filterwarnings("ignore", message=".*is out of date.*")

STEPS = 20
IDS = ["CartPole-v1", "CartPole-v0", "MountainCar-v0", "MountainCarContinuous-v0",
       "Acrobot-v1", "Pendulum-v1"]


def _actions(space, steps=STEPS):
    space.seed(0)
    return [space.sample() for _ in range(steps)]


class TimeNativeCartPole:
    """CartPole-v1: NativeVectorEnv (exact / fast, 1 / 2 threads) vs CartPoleVectorEnv."""

    params = [[8, 256, 4096, 16384], [1, 2]]
    param_names = ["num_envs", "threads"]

    def setup(self, num_envs, threads):
        from fastvec import NativeVectorEnv

        self.exact = NativeVectorEnv("CartPole-v1", num_envs, num_threads=threads, copy=False)
        self.fast = NativeVectorEnv("CartPole-v1", num_envs, num_threads=threads, copy=False,
                                    exact=False)
        self.copying = NativeVectorEnv("CartPole-v1", num_envs, num_threads=threads)
        self.numpy_env = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="vector_entry_point")
        self.acts = [a.astype(np.int64) for a in _actions(self.exact.action_space)]
        for env in (self.exact, self.fast, self.copying, self.numpy_env):
            env.reset(seed=0)

    def _run(self, env):
        step = env.step
        for a in self.acts:
            step(a)

    def time_native_exact(self, num_envs, threads):
        self._run(self.exact)

    def time_native_exact_copy(self, num_envs, threads):
        self._run(self.copying)

    def time_native_fast(self, num_envs, threads):
        self._run(self.fast)

    def time_gymnasium_cartpole_vector_env(self, num_envs, threads):
        if threads != 1:
            raise NotImplementedError  # single-threaded reference: timed once
        self._run(self.numpy_env)


class TimeNativeEnvs:
    """Every native env vs SyncVectorEnv of the Python env."""

    params = [IDS, [8, 256]]
    param_names = ["env_id", "num_envs"]

    def setup(self, env_id, num_envs):
        from fastvec import NativeVectorEnv

        self.native = NativeVectorEnv(env_id, num_envs, num_threads=1, copy=False)
        self.native2 = NativeVectorEnv(env_id, num_envs, num_threads=2, copy=False)
        self.sync = gym.make_vec(env_id, num_envs, vectorization_mode="sync")
        self.acts = _actions(self.native.action_space)
        for env in (self.native, self.native2, self.sync):
            env.reset(seed=0)

    def _run(self, env):
        step = env.step
        for a in self.acts:
            step(a)

    def time_native(self, env_id, num_envs):
        self._run(self.native)

    def time_native_2_threads(self, env_id, num_envs):
        self._run(self.native2)

    def time_sync_vector_env(self, env_id, num_envs):
        self._run(self.sync)
