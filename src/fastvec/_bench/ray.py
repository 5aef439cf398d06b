"""RayVectorEnv: what one shard's round trip costs, and how shards scale (needs Ray).

Two tables, measured in this run on a local Ray (``ray.init`` with as many logical CPUs
as shards; the shards are processes of this machine, so "nodes" here share its cores):

1. **Overhead.** CartPole stepped by a local FastVectorEnv (1 worker, as in a shard
   holding one CPU) against the same envs in one RayVectorEnv shard, next to Ray's own
   no-op actor round trip. The goal: the shard's extra cost per step (Ray minus local) at
   most 2x the no-op round trip.
2. **Scaling.** An env whose step sleeps 2 ms (like a simulator that waits on something),
   4 envs per shard, 1/2/4 shards: env steps per second, synchronous ``step`` and
   ``send``/``recv`` (one shard per ``recv``); the goal for 4 shards: >= 3.5x one shard with
   send/recv, >= 3x synchronously. Tianshou's RayVectorEnv (one actor per env, one call
   per env per step) on the same envs where Tianshou is installed.

Skipped (by ``python -m fastvec.bench``) where Ray is not installed.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import ray

from fastvec._bench import send_recv as _async_bench  # the async section's loops
from fastvec.bench import fmt_rate, fmt_time, interleaved_rates, print_table
from fastvec.ray import RayVectorEnv
from fastvec.vector.fast_vector_env import FastVectorEnv


class SleepEnv(gym.Env):
    """Sleeps ``step_s`` per step (2 ms by default): a step that waits, not one that computes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, step_s: float = 0.002):
        self.step_s = step_s
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        time.sleep(self.step_s)
        return self._obs, 1.0, False, False, {}


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


@ray.remote(num_cpus=0)
class _NoOp:
    def noop(self, payload=None):
        return None


def _step_time(envs, steps: int) -> callable:
    actions = np.zeros(envs.num_envs, np.int64)

    def run() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            envs.step(actions)
        return (time.perf_counter() - start) / steps

    return run


def _noop_time(actor, steps: int) -> callable:
    def run() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            ray.get(actor.noop.remote())
        return (time.perf_counter() - start) / steps

    return run


def overhead(quick: bool) -> dict[str, float]:
    """Median seconds per step: local FastVectorEnv, one Ray shard, Ray's no-op round trip."""
    steps, rounds = (100, 5) if quick else (300, 9)
    num_envs = 8
    fns = [make_cartpole for _ in range(num_envs)]
    local = FastVectorEnv(fns, num_workers=1)
    shard = RayVectorEnv(fns, num_shards=1)
    noop = _NoOp.remote()
    try:
        local.reset(seed=0)
        shard.reset(seed=0)
        ray.get(noop.noop.remote())
        runners = {"local": _step_time(local, steps), "ray": _step_time(shard, steps), "noop": _noop_time(noop, steps)}
        for run in runners.values():
            run()  # warm up
        return interleaved_rates(runners, rounds)
    finally:
        local.close()
        shard.close()
        ray.kill(noop)


def _tianshou_sps(num_envs: int, steps: int) -> float | None:
    try:
        from tianshou.env import RayVectorEnv as TianshouRayVectorEnv
    except Exception:  # not installed (or an incompatible version)
        return None
    envs = TianshouRayVectorEnv([SleepEnv for _ in range(num_envs)])
    try:
        envs.reset(seed=0)
        actions = np.zeros(num_envs, np.int64)
        for _ in range(3):
            envs.step(actions)
        start = time.perf_counter()
        for _ in range(steps):
            envs.step(actions)
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        envs.close()


def scaling(quick: bool, per_shard: int = 4) -> list[dict]:
    """Env steps per second on SleepEnv for 1, 2 and 4 shards (median of interleaved runs)."""
    steps, rounds = (30, 3) if quick else (100, 5)
    rows = []
    for shards in (1, 2, 4):
        num_envs = per_shard * shards
        fns = [SleepEnv for _ in range(num_envs)]
        sync = RayVectorEnv(fns, num_shards=shards)
        async_ = RayVectorEnv(fns, num_shards=shards, batch_size=per_shard)
        try:
            rates = interleaved_rates({"sync": lambda: _async_bench.sync_sps(sync, steps),
                                       "async": lambda: _async_bench.async_sps(async_, steps * num_envs)}, rounds)
        finally:
            sync.close()
            async_.close()
        rates["tianshou"] = _tianshou_sps(num_envs, steps)
        rows.append({"shards": shards, "num_envs": num_envs, **rates})
    return rows


def run(quick: bool = False) -> None:
    started = not ray.is_initialized()
    if started:
        # "local": a new Ray of its own, even where another Ray (or a stale
        # /tmp/ray/ray_current_cluster left by a killed one) would otherwise be joined.
        ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        times = overhead(quick)
        extra = times["ray"] - times["local"]
        print_table(
            "One RayVectorEnv shard vs local FastVectorEnv, 8 CartPoles (1 worker), per step",
            ["local FastVectorEnv", "RayVectorEnv, 1 shard", "shard overhead", "Ray no-op round trip",
             "overhead / no-op", "goal"],
            [[fmt_time(times["local"]), fmt_time(times["ray"]), fmt_time(extra), fmt_time(times["noop"]),
              f"{extra / times['noop']:.2f}x", "<= 2x"]],
        )
        rows = scaling(quick)
        base_sync, base_async = rows[0]["sync"], rows[0]["async"]
        table = []
        for row in rows:
            tianshou = row["tianshou"]
            table.append([row["shards"], row["num_envs"], fmt_rate(row["sync"]), f"{row['sync'] / base_sync:.2f}x",
                          fmt_rate(row["async"]), f"{row['async'] / base_async:.2f}x",
                          "not installed" if tianshou is None else fmt_rate(tianshou)])
        print_table(
            "RayVectorEnv scaling, env steps/s: a 2 ms sleeping step, 4 envs per shard",
            ["shards", "num_envs", "step()", "vs 1 shard", "send/recv (1 shard per recv)", "vs 1 shard",
             "Tianshou RayVectorEnv"],
            table,
        )
        print("goals for 4 shards: >= 3x one shard with step(), >= 3.5x with send/recv. The shards share this "
              "machine's cores; the envs sleep, so they do not compete for them.")
    finally:
        if started:
            ray.shutdown()
