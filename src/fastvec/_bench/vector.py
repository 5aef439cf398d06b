"""Multiprocess FastVectorEnv against SyncVectorEnv and AsyncVectorEnv on Python envs.

SPS = env transitions per second, random actions drawn before timing. The
backends run the same steps in this one process, taking turns round by round.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fastvec._bench.envs import BusyEnv
from fastvec.bench import fmt_rate, interleaved_rates, print_table
from fastvec.vector.fast_vector_env import FastVectorEnv


def step_rate(step, actions: np.ndarray):
    """A runner for :func:`interleaved_rates`: SPS of ``step(a)`` over the rows of ``actions``.

    ``actions`` is ``(steps, num_envs, ...)``, drawn before timing; SPS counts env
    transitions, ``steps * num_envs``.
    """
    transitions = len(actions) * actions.shape[1]

    def run() -> float:
        start = time.perf_counter()
        for a in actions:
            step(a)
        return transitions / (time.perf_counter() - start)

    return run


def interleaved_sps(envs: dict, actions: np.ndarray, rounds: int, slow: dict | None = None) -> dict:
    """Median SPS per vector env, the envs taking turns round after round (:func:`interleaved_rates`).

    Each env is reset with seed 0 and stepped 10 times first. ``slow`` maps a backend
    to a smaller number of steps per round (AsyncVectorEnv).
    """
    slow = slow or {}
    for env in envs.values():
        env.reset(seed=0)
        for a in actions[:10]:
            env.step(a)
    runners = {name: step_rate(env.step, actions[: slow.get(name, len(actions))]) for name, env in envs.items()}
    return interleaved_rates(runners, rounds)


def _case(label: str, make_fn, num_envs: int, steps: int, num_workers: int, rounds: int) -> list:
    fns = [make_fn for _ in range(num_envs)]
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, num_envs))
    envs = {
        "sync": gym.vector.SyncVectorEnv(fns),
        "async": gym.vector.AsyncVectorEnv(fns),
        "fastvec": FastVectorEnv(fns, num_workers=num_workers),
        "in caller": FastVectorEnv(fns, num_workers=num_workers, step_in_caller=True),
    }
    try:
        results = interleaved_sps(envs, actions, rounds, slow={"async": max(steps // 8, 20)})
    finally:
        for env in envs.values():
            env.close()
    fast, sync = results["fastvec"], results["sync"]
    return [label, num_envs, num_workers, fmt_rate(sync), fmt_rate(results["async"]), fmt_rate(fast),
            fmt_rate(results["in caller"]), f"{fast / sync:.2f}x", f"{fast / results['async']:.1f}x",
            f"{results['in caller'] / fast:.2f}x"]


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
        ["env", "num_envs", "workers", "SyncVectorEnv", "AsyncVectorEnv", "FastVectorEnv",
         "step_in_caller=True", "vs Sync", "vs Async", "in caller vs default"],
        rows,
    )
    print("FastVectorEnv: the default (no env in the calling process); step_in_caller=True: the opt-in mode "
          "where the caller steps one worker's share itself.")
    print("Ideal for the 50 µs env on 2 cores: 40k SPS (2 x 20k).")
