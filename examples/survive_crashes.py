"""A long run that survives its envs: ``FastVectorEnv(env_failure="restart")`` under fire.

8 HalfCheetah-v5 envs over 2 workers take ``--steps`` vector steps (10,000). Every ``--every``
steps (500) one env fails, in turn by each of the ways simulators fail:

- ``raise``: its ``step`` raises (rebuilt alone, in its worker);
- ``segv``: it reads address 0 (a segfault: the worker process dies and is started again);
- ``kill``: its worker is sent SIGKILL from outside (the OOM killer's way).

The run goes on. Each failure must come back in the step it happened in (the step it was
ordered in, or the next one for an env that was resetting), as a truncation of
the rebuilt envs with ``infos["env_restarted"]`` and ``infos["env_error"]``; the script
prints each one, how long that step took (the envs' rebuild included), and checks that every
injected failure was reported. ``--no-faults`` runs the same loop without them (to compare
throughput with ``--env-failure raise``).

    python examples/survive_crashes.py                     # needs the `real` extra (MuJoCo)
    python examples/survive_crashes.py --no-faults --env-failure raise
"""
from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time

import gymnasium as gym
import numpy as np

from fastvec import FastVectorEnv

KINDS = ("raise", "segv", "kill")


class InjectedFault(gym.Wrapper):
    """Fails its env's next step when the file ``order`` names it ("raise 3": env 3 raises,
    "segv 3": env 3 segfaults), then deletes the order (the rebuilt env does not fail again)."""

    def __init__(self, env: gym.Env, index: int, order: str):
        super().__init__(env)
        self.index = index
        self.order = order

    def step(self, action):
        try:
            with open(self.order) as f:
                how, target = f.read().split()
        except FileNotFoundError:  # no order, or its target (in another worker) has just taken it
            how, target = None, -1
        if int(target) == self.index:
            os.remove(self.order)
            if how == "raise":
                raise RuntimeError("an injected failure")
            import ctypes

            ctypes.string_at(0)  # a segfault
        return self.env.step(action)


def run(env_id: str, num_envs: int, steps: int, every: int, env_failure: str, faults: bool, seed: int) -> dict:
    order = os.path.join(tempfile.mkdtemp(prefix="fastvec-faults-"), "order")
    envs = FastVectorEnv([lambda k=k: InjectedFault(gym.make(env_id), k, order) for k in range(num_envs)],
                         num_workers=2, env_failure=env_failure)
    rng = np.random.default_rng(seed)
    injected, reported = [], []
    try:
        envs.reset(seed=seed)
        envs.action_space.seed(seed)
        start = time.perf_counter()
        for t in range(1, steps + 1):
            if faults and t % every == 0:
                kind, target = KINDS[(t // every - 1) % len(KINDS)], int(rng.integers(num_envs))
                if kind == "kill":
                    worker = 0 if target < num_envs // 2 else 1
                    os.kill(envs.processes[worker].pid, signal.SIGKILL)
                else:  # (written whole, then renamed: an env never reads half an order)
                    with open(order + ".new", "w") as f:
                        f.write(f"{kind} {target}")
                    os.replace(order + ".new", order)
                injected.append((t, kind, target))
            actions = envs.action_space.sample()
            step_start = time.perf_counter()
            obs, rewards, terminations, truncations, infos = envs.step(actions)
            if "env_restarted" in infos:
                rows = np.flatnonzero(infos["env_restarted"]).tolist()
                assert truncations[rows].all() and not terminations[rows].any()
                reported.append((t, rows, infos["env_error"][rows[0]], time.perf_counter() - step_start))
        seconds = time.perf_counter() - start
        restarts = envs.restarts.tolist()
    finally:
        envs.close()
    return {"seconds": seconds, "sps": steps * num_envs / seconds, "injected": injected, "reported": reported,
            "restarts": restarts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--env-failure", default="restart", choices=("restart", "raise"))
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    cli = parser.parse_args()
    r = run(cli.env_id, cli.num_envs, cli.steps, cli.every, cli.env_failure, not cli.no_faults, cli.seed)
    for (t, kind, target), (t_seen, rows, error, took) in zip(r["injected"], r["reported"]):
        print(f"step {t:6d}: {kind:5s} in env {target} -> reported at step {t_seen}, envs {rows} rebuilt, "
              f"that step took {took:.3f} s: {error}")
    print(f"{len(r['injected'])} failures injected, {len(r['reported'])} reported; restarts per env "
          f"{r['restarts']}; {r['sps']:.0f} SPS over {r['seconds']:.1f} s")
    # (an order for an env that is in its autoreset step is carried out at its next step)
    if len(r["injected"]) != len(r["reported"]) or any(
            seen - t not in (0, 1) for (t, *_), (seen, *_) in zip(r["injected"], r["reported"])):
        raise SystemExit("some failure was not reported in the step it happened in")


if __name__ == "__main__":
    main()
