"""Multiprocess FastVectorEnv against SyncVectorEnv and AsyncVectorEnv on Python envs.

SPS = env transitions per second, random actions drawn before timing. The
backends run the same steps in this one process, taking turns round by round.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fastvec._bench.envs import BusyEnv
from fastvec.bench import fmt_rate, print_table
from fastvec.vector.shared import FastVectorEnv


def interleaved_sps(envs: dict, actions: np.ndarray, rounds: int, slow: dict | None = None) -> dict:
    """Median SPS per backend, the backends taking turns round after round.

    Taking turns keeps a drift in the machine's speed (shared, noisy cores) from
    landing on one backend only, so the ratios of one run compare like with like.
    ``slow`` maps a backend to a smaller number of steps per round (AsyncVectorEnv).
    """
    slow = slow or {}
    for name, env in envs.items():
        env.reset(seed=0)
        for a in actions[:10]:
            env.step(a)
    rates = {name: [] for name in envs}
    for _ in range(rounds):
        for name, env in envs.items():
            steps = actions[: slow.get(name, len(actions))]
            start = time.perf_counter()
            for a in steps:
                env.step(a)
            rates[name].append(steps.size / (time.perf_counter() - start))
    return {name: float(np.median(r)) for name, r in rates.items()}


def _case(label: str, make_fn, num_envs: int, steps: int, num_workers: int, rounds: int) -> list:
    fns = [make_fn for _ in range(num_envs)]
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, num_envs))
    envs = {
        "sync": gym.vector.SyncVectorEnv(fns),
        "async": gym.vector.AsyncVectorEnv(fns),
        "fastvec": FastVectorEnv(fns, num_workers=num_workers),
    }
    try:
        results = interleaved_sps(envs, actions, rounds, slow={"async": max(steps // 8, 20)})
    finally:
        for env in envs.values():
            env.close()
    return [label, num_envs, num_workers, fmt_rate(results["sync"]), fmt_rate(results["async"]),
            fmt_rate(results["fastvec"]), f"{results['fastvec'] / results['sync']:.2f}x",
            f"{results['fastvec'] / results['async']:.1f}x"]


def run(quick: bool = False) -> None:
    steps, rounds = (100, 3) if quick else (200, 7)
    rows = [
        _case("CartPole-v1", lambda: gym.make("CartPole-v1"), 8, steps * 4, 2, rounds),
        _case("CartPole-v1", lambda: gym.make("CartPole-v1"), 64, steps, 2, rounds),
        _case("BusyEnv 50 µs", lambda: BusyEnv(50.0), 8, steps, 2, rounds),
        _case("BusyEnv 50 µs", lambda: BusyEnv(50.0), 16, steps, 2, rounds),
    ]
    print_table(
        "Python envs, SPS (env transitions/s), fastvec.FastVectorEnv vs gymnasium",
        ["env", "num_envs", "workers", "SyncVectorEnv", "AsyncVectorEnv", "FastVectorEnv", "vs Sync", "vs Async"],
        rows,
    )
    print("Ideal for the 50 µs env on 2 cores: 40k SPS (2 x 20k).")
