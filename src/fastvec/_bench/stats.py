"""What FastVectorEnv's statistics cost: CartPole-v1 x64 stepped with ``stats=True`` (the
default), with ``stats=False``, and with ``stats=True`` while ``python -m fastvec.monitor``
reads the job from another process (at its default interval, 1 s).

One vector env per case, built once; the cases take turns round by round (each round steps
every case for the same number of steps, pre-drawn random actions), medians of the rounds.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np

from fastvec.bench import fmt_rate, interleaved_rates, print_table

NUM_ENVS = 64
ENV_ID = "CartPole-v1"
MONITOR_INTERVAL_S = 1.0  # (the monitor's default)


def _rate(envs, actions: np.ndarray) -> float:
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    return len(actions) * envs.num_envs / (time.perf_counter() - start)


def run(quick: bool = False) -> None:
    from fastvec import FastVectorEnv

    rounds, steps = (3, 300) if quick else (9, 2000)
    actions = np.random.default_rng(0).integers(0, 2, (steps, NUM_ENVS))
    fns = [lambda: gym.make(ENV_ID)] * NUM_ENVS
    off = FastVectorEnv(fns, stats=False)
    on = FastVectorEnv(fns)
    monitored = FastVectorEnv(fns)
    monitor = None
    try:
        for envs in (off, on, monitored):
            envs.reset(seed=0)
            _rate(envs, actions[:100])
        # (it finds every block of this process; it reads each at every interval)
        monitor = subprocess.Popen([sys.executable, "-m", "fastvec.monitor", str(os.getpid()),
                                    "--interval", str(MONITOR_INTERVAL_S), "--json"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # (its start: importing fastvec)
        rates = interleaved_rates({"stats=False": lambda: _rate(off, actions),
                                   "stats=True (default)": lambda: _rate(on, actions),
                                   f"stats=True, monitor reading every {MONITOR_INTERVAL_S:g} s":
                                       lambda: _rate(monitored, actions)}, rounds)
    finally:
        if monitor is not None:
            monitor.kill()
            monitor.wait()
        for envs in (off, on, monitored):
            envs.close()
    ref = rates["stats=False"]
    rows = [[name, fmt_rate(rate), f"{rate / ref:.3f}x"] for name, rate in rates.items()]
    print_table(f"Statistics' cost: {ENV_ID} x{NUM_ENVS}, env-only SPS, FastVectorEnv defaults otherwise",
                ["case", "SPS", "vs stats=False"], rows)
    print(f"\nMedians of {rounds} rounds of {steps} steps each, the cases taking turns. The monitor "
          "case: python -m fastvec.monitor attached to this process throughout.")
