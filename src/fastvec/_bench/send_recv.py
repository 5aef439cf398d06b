"""send/recv with surplus envs against synchronous stepping, on uneven step times.

The env busy-waits 50 µs per step, and 10 % of its steps take 10x longer. In
synchronous stepping every step waits for the slowest worker; with
``batch_size = num_envs / 2`` the caller takes whichever half is ready first and
the other half keeps simulating.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fastvec._bench.envs import BusyEnv
from fastvec.bench import fmt_rate, print_table
from fastvec.vector.fast_vector_env import FastVectorEnv


def _fns(num_envs: int):
    return [lambda k=k: BusyEnv(50.0, slow_prob=0.1, slow_factor=10.0, seed=k) for k in range(num_envs)]


def sync_sps(env, steps: int) -> float:
    env.reset(seed=0)
    actions = np.zeros(env.num_envs, np.int64)
    for _ in range(10):
        env.step(actions)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(actions)
    return steps * env.num_envs / (time.perf_counter() - start)


def async_sps(env: FastVectorEnv, transitions: int) -> float:
    env.async_reset(seed=0)
    done = 0
    warm = True
    while True:
        obs, rew, term, trunc, infos = env.recv()
        ids = infos["env_id"]
        if warm and done >= 10 * env.batch_size:
            warm, done, start = False, 0, time.perf_counter()
        done += len(ids)
        if not warm and done >= transitions:
            elapsed = time.perf_counter() - start
            env.send(np.zeros(len(ids), np.int64), ids)
            break
        env.send(np.zeros(len(ids), np.int64), ids)
    env.reset()  # waits out what is in flight
    return done / elapsed


def sync_ceiling(num_envs: int, workers: int, cores: int = 2, slow_prob: float = 0.1, slow_factor: float = 10.0,
                 samples: int = 20000) -> float:
    """The most send/recv can gain over synchronous stepping for this step-time distribution.

    A synchronous step ends when the last worker is done (workers beyond the
    cores share them, greedily); a perfect async scheduler keeps every core busy.
    Their ratio, E[step time] / E[work / cores], bounds async/sync for any
    implementation, simulated with the bench env's own distribution.
    """
    rng = np.random.default_rng(0)
    per_worker = num_envs // workers
    times = np.where(rng.random((samples, workers, per_worker)) < slow_prob, slow_factor, 1.0).sum(axis=2)
    load = np.zeros((samples, min(cores, workers)))
    for w in range(workers):
        k = load.argmin(axis=1)
        load[np.arange(samples), k] += times[:, w]
    return float(load.max(axis=1).mean() / (times.sum(axis=1) / cores).mean())


def run(quick: bool = False) -> None:
    steps = 100 if quick else 400
    rows = []
    for num_envs, workers in [(16, 2), (16, 4), (16, 8)]:
        fns = _fns(num_envs)
        ref = gym.vector.SyncVectorEnv(fns)
        sps_ref = sync_sps(ref, steps // 2)
        ref.close()
        env = FastVectorEnv(fns, num_workers=workers)
        sps_sync = sync_sps(env, steps)
        env.close()
        env = FastVectorEnv(fns, num_workers=workers, batch_size=num_envs // 2)
        sps_async = async_sps(env, steps * num_envs)
        env.close()
        rows.append([num_envs, workers, num_envs // 2, fmt_rate(sps_ref), fmt_rate(sps_sync), fmt_rate(sps_async),
                     f"{sps_async / sps_sync:.2f}x", f"{sync_ceiling(num_envs, workers):.2f}x",
                     f"{sps_async / sps_ref:.2f}x"])
    print_table(
        "Uneven step times (50 µs, 10 % of steps 10x longer), SPS",
        ["num_envs", "workers", "batch_size", "SyncVectorEnv", "fastvec step()", "fastvec send/recv",
         "async vs fastvec sync", "(ceiling on 2 cores)", "async vs SyncVectorEnv"],
        rows,
    )
    print("ceiling: the most any async scheduler can gain over a synchronous step of the same workers on "
          "2 cores, for this step-time distribution (simulated; see sync_ceiling).")
