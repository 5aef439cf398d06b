"""Multiprocess FastVectorEnv against SyncVectorEnv and AsyncVectorEnv on Python envs.

SPS = env transitions per second, random actions drawn before timing. Each
backend runs the same steps in this one process, one after the other.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fastvec._bench.envs import BusyEnv
from fastvec.bench import fmt_rate, print_table
from fastvec.vector.shared import FastVectorEnv


def measure_sps(env, actions: np.ndarray, warmup: int = 20, repeats: int = 3) -> float:
    """Median SPS of ``env`` stepping through ``actions`` ([steps, num_envs])."""
    env.reset(seed=0)
    for a in actions[:warmup]:
        env.step(a)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for a in actions:
            env.step(a)
        rates.append(actions.size / (time.perf_counter() - start))
    return float(np.median(rates))


def _case(label: str, make_fn, num_envs: int, steps: int, num_workers: int, async_too: bool = True) -> list:
    fns = [make_fn for _ in range(num_envs)]
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, num_envs))
    results = {}
    env = gym.vector.SyncVectorEnv(fns)
    results["sync"] = measure_sps(env, actions)
    env.close()
    if async_too:
        env = gym.vector.AsyncVectorEnv(fns)
        results["async"] = measure_sps(env, actions[: max(steps // 8, 50)])
        env.close()
    env = FastVectorEnv(fns, num_workers=num_workers)
    results["fastvec"] = measure_sps(env, actions)
    env.close()
    row = [label, num_envs, num_workers, fmt_rate(results["sync"]),
           fmt_rate(results["async"]) if async_too else "-", fmt_rate(results["fastvec"]),
           f"{results['fastvec'] / results['sync']:.2f}x"]
    row.append(f"{results['fastvec'] / results['async']:.1f}x" if async_too else "-")
    return row


def run(quick: bool = False) -> None:
    steps = 300 if quick else 1500
    rows = [
        _case("CartPole-v1", lambda: gym.make("CartPole-v1"), 8, steps * 2, 2),
        _case("CartPole-v1", lambda: gym.make("CartPole-v1"), 64, steps, 2),
        _case("BusyEnv 50 µs", lambda: BusyEnv(50.0), 8, steps // 2, 2),
        _case("BusyEnv 50 µs", lambda: BusyEnv(50.0), 16, steps // 2, 2),
    ]
    print_table(
        "Python envs, SPS (env transitions/s), fastvec.FastVectorEnv vs gymnasium",
        ["env", "num_envs", "workers", "SyncVectorEnv", "AsyncVectorEnv", "FastVectorEnv", "vs Sync", "vs Async"],
        rows,
    )
    print("Ideal for the 50 µs env on 2 cores: 40k SPS (2 x 20k).")
