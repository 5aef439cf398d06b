"""What FastVectorEnv's statistics cost: CartPole-v1 x64 stepped with ``stats=False``, with
``stats=True`` (the default), and with ``stats=True`` while ``python -m fastvec.monitor``
reads the job from another process (at its default interval, 1 s), attached for the round.

Two vector envs (off and on), built once; the cases take turns round by round (each round
steps every case for the same number of steps, pre-drawn random actions). Each ratio is a
round's, paired against the row above in the same round; the table gives their median and
range.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np

from fastvec.bench import fmt_rate, print_table

NUM_ENVS = 64
ENV_ID = "CartPole-v1"
MONITOR_INTERVAL_S = 1.0  # (the monitor's default)


def _rate(envs, actions: np.ndarray) -> float:
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    return len(actions) * envs.num_envs / (time.perf_counter() - start)


def _monitored_rate(envs, actions: np.ndarray) -> float:
    """``_rate`` with ``python -m fastvec.monitor`` attached to this process: started, its
    first reading out (so it has attached), the steps timed, and the monitor gone again."""
    monitor = subprocess.Popen([sys.executable, "-m", "fastvec.monitor", str(os.getpid()),
                                "--interval", str(MONITOR_INTERVAL_S), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if not monitor.stdout.readline():
            raise RuntimeError("python -m fastvec.monitor did not attach to this process")
        return _rate(envs, actions)
    finally:
        monitor.kill()
        monitor.wait()
        monitor.stdout.close()


def run(quick: bool = False) -> None:
    from fastvec import FastVectorEnv

    rounds, steps = (3, 300) if quick else (15, 4000)
    actions = np.random.default_rng(0).integers(0, 2, (steps, NUM_ENVS))
    fns = [lambda: gym.make(ENV_ID)] * NUM_ENVS
    off = FastVectorEnv(fns, stats=False)
    on = FastVectorEnv(fns)
    monitored = f"stats=True, monitor attached (reading every {MONITOR_INTERVAL_S:g} s)"
    runners = {"stats=False": lambda: _rate(off, actions),
               "stats=True (default)": lambda: _rate(on, actions),
               monitored: lambda: _monitored_rate(on, actions)}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    try:
        for envs in (off, on):
            envs.reset(seed=0)
            _rate(envs, actions[:100])
        for _ in range(rounds):  # (the cases take turns: a drift of the machine hits all alike)
            for name, runner in runners.items():
                samples[name].append(runner())
    finally:
        for envs in (off, on):
            envs.close()
    # Each round's ratio (paired: the same minute of the machine), then their median and range.
    ratios = {
        "stats=False": None,
        "stats=True (default)": [b / a for a, b in zip(samples["stats=False"], samples["stats=True (default)"])],
        monitored: [b / a for a, b in zip(samples["stats=True (default)"], samples[monitored])],
    }
    rows = []
    for name, rates in samples.items():
        r = ratios[name]
        rows.append([name, fmt_rate(statistics.median(rates)),
                     "-" if r is None else f"{statistics.median(r):.3f}x",
                     "-" if r is None else f"{min(r):.3f}x .. {max(r):.3f}x"])
    print_table(f"Statistics' cost: {ENV_ID} x{NUM_ENVS}, env-only SPS, FastVectorEnv defaults otherwise",
                ["case", "SPS (median)", "vs the row above, median of rounds", "rounds' range"], rows)
    print(f"\nMedians of {rounds} rounds of {steps} steps each, the cases taking turns; each ratio is a "
          "round's against the row above in the same round (stats=True against stats=False; the "
          "monitor attached against not, on the same vector env). The monitor case starts "
          "python -m fastvec.monitor on this process, waits for its first reading, times the "
          "steps, and stops it: attaching and detaching every round.")
