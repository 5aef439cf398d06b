"""asv: multiprocess FastVectorEnv against SyncVectorEnv / AsyncVectorEnv (time per vector step).

Compare ``time_step`` across ``backend`` for the same ``num_envs``: the ratio is
the speed-up. ``python -m fastvec.bench vector`` prints the same cases as a table.
"""
import gymnasium as gym
import numpy as np

from fastvec import FastVectorEnv
from fastvec._bench.envs import BusyEnv


def _make(backend, fns):
    if backend == "sync":
        return gym.vector.SyncVectorEnv(fns)
    if backend == "async":
        return gym.vector.AsyncVectorEnv(fns)
    # "fastvec": the default (no env in the caller); "fastvec_in_caller": the opt-in mode
    return FastVectorEnv(fns, num_workers=2, step_in_caller=backend == "fastvec_in_caller")


class CartPoleStep:
    params = (["sync", "async", "fastvec", "fastvec_in_caller"], [8, 64])
    param_names = ["backend", "num_envs"]
    timeout = 120

    def setup(self, backend, num_envs):
        self.env = _make(backend, [lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
        self.env.reset(seed=0)
        self.actions = np.random.default_rng(0).integers(0, 2, size=(64, num_envs))

    def teardown(self, backend, num_envs):
        self.env.close()

    def time_step(self, backend, num_envs):
        for a in self.actions:
            self.env.step(a)


class BusyEnv50usStep:
    params = (["sync", "async", "fastvec", "fastvec_in_caller"], [8, 16])
    param_names = ["backend", "num_envs"]
    timeout = 120

    def setup(self, backend, num_envs):
        self.env = _make(backend, [lambda: BusyEnv(50.0) for _ in range(num_envs)])
        self.env.reset(seed=0)
        self.actions = np.zeros((16, num_envs), np.int64)

    def teardown(self, backend, num_envs):
        self.env.close()

    def time_step(self, backend, num_envs):
        for a in self.actions:
            self.env.step(a)
