"""Soak tests: no growth in file descriptors, children or shared memory over many
create/step/close cycles, and a long run whose episode counts match SyncVectorEnv.

CI runs them at a CI-sized default; scale them up with FASTVEC_SOAK_CYCLES
(1000 for the full soak) and FASTVEC_SOAK_STEPS (10_000_000 env steps).
"""
from __future__ import annotations

import multiprocessing
import os

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv

CYCLES = int(os.environ.get("FASTVEC_SOAK_CYCLES", "40"))
STEPS = int(os.environ.get("FASTVEC_SOAK_STEPS", "200000"))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shm() -> set:
    return {n for n in os.listdir("/dev/shm") if n.startswith("fastvec_")}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count descriptors")
def test_create_step_close_cycles_leak_nothing():
    def cycle():
        env = FastVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2)
        env.reset(seed=0)
        for _ in range(5):
            env.step(np.zeros(4, np.int64))
        env.close()

    for _ in range(3):  # warm up imports and caches
        cycle()
    fds, shm = _fds(), _shm()
    for _ in range(CYCLES):
        cycle()
    assert _fds() <= fds, f"file descriptors grew from {fds} to {_fds()} over {CYCLES} cycles"
    assert multiprocessing.active_children() == []
    assert _shm() == shm


@pytest.mark.slow
def test_long_run_episode_counts_match_sync():
    n = 8
    steps = max(STEPS // n, 1)
    fns = [lambda: gym.make("CartPole-v1") for _ in range(n)]
    ref = gym.vector.SyncVectorEnv(fns)
    env = FastVectorEnv(fns, num_workers=2)
    try:
        ref.reset(seed=11)
        env.reset(seed=11)
        rng = np.random.default_rng(0)
        episodes_ref = np.zeros(n, np.int64)
        episodes = np.zeros(n, np.int64)
        for start in range(0, steps, 10_000):
            actions = rng.integers(0, 2, size=(min(10_000, steps - start), n))
            for a in actions:
                obs_r, _, term_r, trunc_r, _ = ref.step(a)
                obs, _, term, trunc, _ = env.step(a)
                episodes_ref += term_r | trunc_r
                episodes += term | trunc
        np.testing.assert_array_equal(episodes, episodes_ref)
        np.testing.assert_array_equal(obs, obs_r)
        assert episodes.sum() > steps * n / 500
    finally:
        env.close()
        ref.close()
