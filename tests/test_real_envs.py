"""MuJoCo and Atari through FastVectorEnv equal SyncVectorEnv, bit for bit, infos included.

These envs return an info dict on every step (MuJoCo: ``x_position``, ``reward_ctrl``, ...;
Atari: ``lives``, ``frame_number``, ...), which fastvec carries through shared memory.
Needs the ``real`` extra (``pip install "fastvec[real]"``): skipped without it.
"""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv
from helpers import run_side_by_side

pytest.importorskip("mujoco", reason="MuJoCo envs need the `real` extra")


def _mujoco(env_id):
    from fastvec._bench.envs import make_mujoco

    return lambda: make_mujoco(env_id)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED],
                         ids=lambda m: m.value)
@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5"])
def test_mujoco_parity(env_id, mode):
    fns = [_mujoco(env_id)] * 4
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode) as env:
        episodes = run_side_by_side(ref, env, seed=11, steps=300)
    if env_id == "Hopper-v5":
        assert episodes > 4  # random actions end Hopper's episodes: autoreset is exercised


def test_mujoco_float64_actions_reach_the_env_unrounded():
    # A float64 batch for the float32 Box: SyncVectorEnv hands the envs float64 rows, and
    # MuJoCo's physics sees the difference; fastvec must hand over the same values.
    fns = [_mujoco("HalfCheetah-v5")] * 2
    ref = SyncVectorEnv(fns)
    rng = np.random.default_rng(0)
    with FastVectorEnv(fns, num_workers=2) as env:
        ref.reset(seed=0)
        env.reset(seed=0)
        for _ in range(50):
            actions = rng.uniform(-1, 1, (2, 6))  # float64
            expected, got = ref.step(actions), env.step(actions)
            np.testing.assert_array_equal(expected[0], got[0])
            np.testing.assert_array_equal(expected[1], got[1])


def test_pong_parity():
    pytest.importorskip("ale_py", reason="Atari needs the `real` extra")
    from fastvec._bench.envs import make_pong

    fns = [make_pong] * 4
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        run_side_by_side(ref, env, seed=3, steps=200)
