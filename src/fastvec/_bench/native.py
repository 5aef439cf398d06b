"""Bench section ``native``: Cython-native classic control vs gymnasium's vector envs.

Env-only steps per second with pre-drawn random actions (no policy), for
``NativeVectorEnv`` (exact and fast modes, 1 and 2 threads), gymnasium's NumPy
``CartPoleVectorEnv`` (``vectorization_mode="vector_entry_point"``) and
``SyncVectorEnv`` of the Python env; and the native-env kit's example env
(``examples/native_env``, installed as ``fastvec.native.examples.gridworld``)
against its plain-Python reference in ``SyncVectorEnv``. The backends take turns
inside every repeat (so load on a shared machine hits them alike) and each figure
is the median over the repeats; the ratio columns compare figures from this run.

    python -m fastvec.bench native [--quick]
"""
from __future__ import annotations

import statistics
import time
import warnings
from typing import Callable

import gymnasium as gym
import numpy as np

from fastvec import NativeVectorEnv
from fastvec.bench import fmt_rate, print_table
from fastvec.native import native_ids

warnings.filterwarnings("ignore", message=".*is out of date.*")


def _actions(env: gym.vector.VectorEnv, steps: int, seed: int = 0) -> list[np.ndarray]:
    space = env.action_space
    space.seed(seed)
    return [space.sample() for _ in range(steps)]


def _runner(env: gym.vector.VectorEnv, actions: list[np.ndarray]) -> Callable[[], None]:
    env.reset(seed=0)
    step = env.step

    def run() -> None:
        for a in actions:
            step(a)

    run()  # warm-up
    return run


_CPU_RATES: dict[str, float] = {}


def _race(runners: dict[str, tuple[Callable[[], None], int]], repeats: int) -> dict[str, float]:
    """SPS per name: runners take turns each repeat; median of the per-repeat rates.

    Also records, in _CPU_RATES, transitions per second of this process's CPU time
    (meaningful for single-threaded runs only: it discounts the time other jobs on a
    shared machine take from us).
    """
    rates: dict[str, list[float]] = {k: [] for k in runners}
    cpu: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(repeats):
        for name, (fn, transitions) in runners.items():
            c0 = time.process_time()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            c1 = time.process_time()
            rates[name].append(transitions / (t1 - t0))
            cpu[name].append(transitions / max(c1 - c0, 1e-9))
    _CPU_RATES.clear()
    _CPU_RATES.update({k: statistics.median(v) for k, v in cpu.items()})
    return {k: statistics.median(v) for k, v in rates.items()}


def _steps_for(n: int, budget: int) -> int:
    return max(3, budget // n)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def run(quick: bool = False) -> None:
    sizes = [8, 256, 4096]
    repeats = 3 if quick else 7
    budget = 40_000 if quick else 200_000  # env transitions per timed run

    # -------------------------------------------------------- CartPole-v1
    header = ["backend", "threads"] + [f"n={n}" for n in sizes]
    results: dict[tuple[str, int], dict[int, float]] = {}
    cpu_results: dict[str, dict[int, float]] = {}
    for n in sizes:
        steps = _steps_for(n, budget)
        probe = NativeVectorEnv("CartPole-v1", n)
        acts = [a.astype(np.int64) for a in _actions(probe, steps)]
        runners = {}
        for threads in (1, 2):
            runners[f"native exact, copy=False|{threads}"] = (
                _runner(NativeVectorEnv("CartPole-v1", n, num_threads=threads, copy=False), acts), n * steps)
        runners["native exact, copy=True|1"] = (
            _runner(NativeVectorEnv("CartPole-v1", n, num_threads=1), acts), n * steps)
        runners["gymnasium CartPoleVectorEnv|1"] = (
            _runner(gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point"), acts), n * steps)
        sync_steps = max(2, min(steps, 20_000 // n if quick else 60_000 // n))
        runners["gymnasium SyncVectorEnv|1"] = (
            _runner(gym.make_vec("CartPole-v1", n, vectorization_mode="sync"), acts[:sync_steps]),
            n * sync_steps)
        for key, sps in _race(runners, repeats).items():
            name, threads = key.split("|")
            results.setdefault((name, int(threads)), {})[n] = sps
            if threads == "1":
                cpu_results.setdefault(name, {})[n] = _CPU_RATES[key]
    rows = [[name, threads] + [fmt_rate(r[n]) for n in sizes] for (name, threads), r in results.items()]
    best = {n: max(results[("native exact, copy=False", 1)][n], results[("native exact, copy=False", 2)][n])
            for n in sizes}
    cpve = results[("gymnasium CartPoleVectorEnv", 1)]
    sync = results[("gymnasium SyncVectorEnv", 1)]
    rows.append(["ratio native exact (1 thread, copy=False) / CartPoleVectorEnv", ""] +
                [_ratio(results[("native exact, copy=False", 1)][n], cpve[n]) for n in sizes])
    rows.append(["ratio native exact (best of 1-2 threads, copy=False) / CartPoleVectorEnv", ""] +
                [_ratio(best[n], cpve[n]) for n in sizes])
    rows.append(["ratio native exact (1 thread, copy=True) / CartPoleVectorEnv", ""] +
                [_ratio(results[("native exact, copy=True", 1)][n], cpve[n]) for n in sizes])
    rows.append(["ratio native exact (1 thread, copy=False) / SyncVectorEnv", ""] +
                [_ratio(results[("native exact, copy=False", 1)][n], sync[n]) for n in sizes])
    print_table("CartPole-v1, env-only SPS, pre-drawn random actions (median)", header, rows)
    rows = [[name, "1"] + [fmt_rate(r[n]) for n in sizes] for name, r in cpu_results.items()]
    c_cpve = cpu_results["gymnasium CartPoleVectorEnv"]
    rows.append(["ratio native exact (copy=False) / CartPoleVectorEnv", ""] +
                [_ratio(cpu_results["native exact, copy=False"][n], c_cpve[n]) for n in sizes])
    print_table("CartPole-v1, same runs, transitions per CPU-second of this process "
                "(single-threaded rows; discounts time taken by other jobs)", header, rows)

    # -------------------------------------------------------- fast mode
    n = 4096 if quick else 16384
    steps = _steps_for(n, budget * 4)
    probe = NativeVectorEnv("CartPole-v1", n)
    acts = [a.astype(np.int64) for a in _actions(probe, steps)]
    runners = {
        "native exact=False, 2 threads": (_runner(NativeVectorEnv(
            "CartPole-v1", n, exact=False, num_threads=2, copy=False), acts), n * steps),
        "native exact=False, 1 thread": (_runner(NativeVectorEnv(
            "CartPole-v1", n, exact=False, num_threads=1, copy=False), acts), n * steps),
        "native exact, 2 threads": (_runner(NativeVectorEnv(
            "CartPole-v1", n, num_threads=2, copy=False), acts), n * steps),
        "gymnasium CartPoleVectorEnv": (_runner(gym.make_vec(
            "CartPole-v1", n, vectorization_mode="vector_entry_point"), acts), n * steps),
    }
    fast = _race(runners, repeats)
    ref = fast["gymnasium CartPoleVectorEnv"]
    rows = [[name, fmt_rate(sps), _ratio(sps, ref), _ratio(sps, fast["native exact, 2 threads"])]
            for name, sps in fast.items()]
    print_table(f"CartPole-v1 fast mode (exact=False), n={n}, copy=False",
                ["backend", "SPS", "vs CartPoleVectorEnv", "vs native exact 2 threads"], rows)

    # -------------------------------------------------------- every native env, the kit's example
    from fastvec.native.examples import gridworld

    env_sizes = [8, 256] if quick else sizes
    race = (budget // 4, 4_000 if quick else 12_000, max(3, repeats // 2))
    rows = _vs_sync_rows([i for i in native_ids() if i != gridworld.ENV_ID], env_sizes, *race)
    print_table("Every native env, exact, copy=False: SPS vs SyncVectorEnv (median)",
                ["env", "num_envs", "native 1 thread", "native 2 threads", "SyncVectorEnv",
                 "native (best) / Sync"], rows)
    rows = _vs_sync_rows([gridworld.ENV_ID], env_sizes, *race)
    print_table("Native-env kit example (examples/native_env: a grid world written on the kit), "
                "copy=False: SPS vs its plain-Python reference in SyncVectorEnv (median)",
                ["env", "num_envs", "native 1 thread", "native 2 threads", "Python reference, SyncVectorEnv",
                 "native (best) / Sync"], rows)


def _vs_sync_rows(env_ids: list[str], sizes: list[int], budget: int, sync_budget: int,
                  repeats: int) -> list[list]:
    """Per id and size: NativeVectorEnv on 1 and 2 threads vs SyncVectorEnv of the Python env."""
    rows = []
    for env_id in env_ids:
        for n in sizes:
            steps = _steps_for(n, budget)
            probe = NativeVectorEnv(env_id, n)
            acts = _actions(probe, steps)
            runners = {
                "1": (_runner(NativeVectorEnv(env_id, n, num_threads=1, copy=False), acts), n * steps),
                "2": (_runner(NativeVectorEnv(env_id, n, num_threads=2, copy=False), acts), n * steps),
            }
            sync_steps = max(2, min(steps, sync_budget // n))
            runners["sync"] = (_runner(gym.make_vec(env_id, n, vectorization_mode="sync"),
                                       acts[:sync_steps]), n * sync_steps)
            r = _race(runners, repeats)
            rows.append([env_id, n, fmt_rate(r["1"]), fmt_rate(r["2"]), fmt_rate(r["sync"]),
                         _ratio(max(r["1"], r["2"]), r["sync"])])
    return rows


if __name__ == "__main__":
    run(quick=False)
