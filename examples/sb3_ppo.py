"""Stable-Baselines3 PPO on a fastvec vector env: the one-word (or one-line) change.

An SB3 script builds its vectorised env with ``make_vec_env`` (a ``DummyVecEnv``, or a
``SubprocVecEnv`` for envs in processes):

    env = make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=SubprocVecEnv)

With fastvec, the one-word move takes ``SubprocVecEnv``'s slot
(``from fastvec.integrations.sb3 import FastVecEnv``):

    env = make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=FastVecEnv)

or build a Gymnasium vector env that autoresets in the same step and wrap it:

    env = to_sb3(gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="fastvec",
                              vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}))

Everything else (``PPO("MlpPolicy", env, ...)``, ``model.learn``, ``evaluate_policy``, the
logger's ``ep_rew_mean``) stays as it was. This script trains PPO with the rl-zoo CartPole
hyper-parameters until the last 20 episodes average ``--target`` (475):

    python examples/sb3_ppo.py                       # to_sb3 over fastvec's make_vec (the default)
    python examples/sb3_ppo.py --backend FastVecEnv  # make_vec_env(..., vec_env_cls=FastVecEnv)
    python examples/sb3_ppo.py --backend subproc     # SB3's SubprocVecEnv, for comparison
    python examples/sb3_ppo.py --backend sync        # gymnasium SyncVectorEnv through the adapter
    python examples/sb3_ppo.py --backend dummy       # SB3's own DummyVecEnv, for comparison
    python examples/sb3_ppo.py --overhead            # per-step cost: adapter vs DummyVecEnv vs raw
"""
from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np


BACKENDS = ("fastvec", "FastVecEnv", "sync", "dummy", "subproc")


def make_env(backend: str, env_id: str, num_envs: int):
    """The SB3 VecEnv for ``backend``: ``fastvec`` / ``sync`` through the adapter; ``FastVecEnv``,
    ``dummy`` or ``subproc`` (SubprocVecEnv) from SB3's ``make_vec_env``."""
    if backend in ("FastVecEnv", "dummy", "subproc"):
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        from fastvec.integrations.sb3 import FastVecEnv

        vec_env_cls = {"FastVecEnv": FastVecEnv, "dummy": DummyVecEnv, "subproc": SubprocVecEnv}[backend]
        return make_vec_env(env_id, n_envs=num_envs, vec_env_cls=vec_env_cls)
    from fastvec.integrations.sb3 import to_sb3

    if backend == "fastvec":
        import fastvec  # noqa: F401  (registers vectorization_mode="fastvec")
    elif backend != "sync":
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return to_sb3(gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=backend,
                               vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}))


def train(backend: str, seed: int, target: float, budget: int, threads: int = 0) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAtTarget(BaseCallback):
        def _on_step(self) -> bool:
            returns = [ep["r"] for ep in self.model.ep_info_buffer][-20:]
            return not (len(returns) == 20 and np.mean(returns) >= target)

    if threads > 0:  # 0: torch's default, as SB3's users run it
        torch.set_num_threads(threads)
    env = make_env(backend, "CartPole-v1", 8)
    # rl-zoo hyper-parameters for CartPole-v1
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=lambda f: f * 1e-3, clip_range=lambda f: f * 0.2,
                seed=seed, device="cpu")
    start = time.perf_counter()
    model.learn(budget, callback=StopAtTarget())
    seconds = time.perf_counter() - start
    mean = float(np.mean([ep["r"] for ep in model.ep_info_buffer][-20:]))
    env.close()
    return {"backend": backend, "steps": model.num_timesteps, "seconds": seconds, "mean_return": mean,
            "sps": model.num_timesteps / seconds}


def overhead(num_envs: int = 8, steps: int = 500, repeats: int = 21) -> None:
    """Median time per vector step of CartPole-v1, the paths timed round-robin (load drifts).

    Rows: raw SyncVectorEnv, the adapter over it, SB3's DummyVecEnv and SubprocVecEnv (up to
    16 envs: it starts a process per env); and, where fastvec's ``vectorization_mode="fastvec"``
    is registered, the raw fastvec env, the adapter over it and ``FastVecEnv`` over the same env
    functions (SubprocVecEnv's slot).
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from fastvec.integrations.sb3 import FastVecEnv, to_sb3

    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, num_envs))
    fns = [lambda: gym.make("CartPole-v1") for _ in range(num_envs)]
    envs = {
        "SyncVectorEnv.step (raw, SAME_STEP)": gym.vector.SyncVectorEnv(fns, **same_step),
        "to_sb3(SyncVectorEnv).step": to_sb3(gym.vector.SyncVectorEnv(fns, **same_step)),
        "SB3 DummyVecEnv.step": DummyVecEnv(fns),
    }
    if num_envs <= 16:  # (one process per env)
        envs["SB3 SubprocVecEnv.step"] = SubprocVecEnv(fns)
    try:
        import fastvec  # noqa: F401

        make = lambda: gym.make_vec("CartPole-v1", num_envs, vectorization_mode="fastvec", vector_kwargs=same_step)
        envs["fastvec make_vec .step (raw, SAME_STEP)"] = make()
        envs["to_sb3(fastvec).step"] = to_sb3(make())
        envs["FastVecEnv(env_fns).step"] = FastVecEnv(fns)
    except Exception as e:  # fastvec's backends not available
        print(f"(fastvec rows left out: {type(e).__name__}: {e})")
    for env in envs.values():
        env.reset()

    times: dict[str, list[float]] = {name: [] for name in envs}
    for _ in range(repeats):
        for name, env in envs.items():
            step = env.step
            t0 = time.perf_counter()
            for a in actions:
                step(a)
            times[name].append((time.perf_counter() - t0) / steps)
    base = float(np.median(times["SB3 DummyVecEnv.step"]))
    print(f"\nCartPole-v1, {num_envs} envs, {steps} steps x {repeats} round-robin repeats "
          f"(median per vector step)\n")
    print("| path | per step | SPS | vs DummyVecEnv |\n|---|---|---|---|")
    for name, ts in times.items():
        t = float(np.median(ts))
        print(f"| {name} | {t * 1e6:.1f} µs | {num_envs / t / 1e3:.0f}k | {base / t:.2f}x |")
    for env in envs.values():
        env.close()


class ConstantVectorEnv(gym.vector.VectorEnv):
    """A SAME_STEP vector env of near-zero cost (preset arrays; env 0 ends an episode every
    ``done_every`` steps): what is left through the adapter is the adapter's own cost."""

    def __init__(self, num_envs: int, done_every: int = 20) -> None:
        self.num_envs, self.render_mode, self.done_every, self.t = num_envs, None, done_every, 0
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.single_observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._obs, self._rew = np.zeros((num_envs, 4), np.float32), np.ones(num_envs)
        self._false = np.zeros(num_envs, dtype=bool)

    def get_attr(self, name):
        return tuple(getattr(self, name) for _ in range(self.num_envs))

    def reset(self, *, seed=None, options=None):
        return self._obs.copy(), {}

    def step(self, actions):
        self.t += 1
        if self.t % self.done_every:
            return self._obs.copy(), self._rew.copy(), self._false.copy(), self._false.copy(), {}
        done = self._false.copy()
        done[0] = True
        final_obs = np.full(self.num_envs, None, dtype=object)
        final_obs[0] = self._obs[0].copy()
        infos = {"final_obs": final_obs, "_final_obs": done, "final_info": {}, "_final_info": done.copy()}
        return self._obs.copy(), self._rew.copy(), done, self._false.copy(), infos


def adapter_cost(num_envs: int, steps: int = 2000, repeats: int = 21) -> None:
    """Per-step cost of the adapter alone: to_sb3(ConstantVectorEnv) minus ConstantVectorEnv."""
    from fastvec.integrations.sb3 import to_sb3

    raw, adapted = ConstantVectorEnv(num_envs), to_sb3(ConstantVectorEnv(num_envs))
    raw.reset(), adapted.reset()
    action = np.zeros(num_envs, dtype=np.int64)
    times: dict[str, list[float]] = {"raw": [], "adapter": []}
    for _ in range(repeats):
        for name, step in (("raw", raw.step), ("adapter", adapted.step)):
            t0 = time.perf_counter()
            for _ in range(steps):
                step(action)
            times[name].append((time.perf_counter() - t0) / steps)
    raw_t, ad_t = float(np.median(times["raw"])), float(np.median(times["adapter"]))
    print(f"| {num_envs} | {raw_t * 1e6:.1f} µs | {ad_t * 1e6:.1f} µs | {(ad_t - raw_t) * 1e6:.1f} µs |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=BACKENDS, default="fastvec")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--budget", type=int, default=100_000, help="rl-zoo's n_timesteps")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 keeps torch's default")
    parser.add_argument("--overhead", action="store_true", help="measure per-step overhead instead of training")
    cli = parser.parse_args()
    if cli.overhead:
        for n in (8, 64):
            overhead(num_envs=n, steps=4000 // n)
        print("\nThe adapter alone (over a near-zero-cost SAME_STEP vector env, one episode end "
              "every 20 steps)\n\n| num_envs | vector env step | through to_sb3 | adapter cost |\n|---|---|---|---|")
        for n in (8, 64, 256):
            adapter_cost(n)
    else:
        r = train(cli.backend, cli.seed, cli.target, cli.budget, cli.threads)
        print(f"{r['backend']}: mean return {r['mean_return']:.1f} after {r['steps']} steps, "
              f"{r['seconds']:.1f} s ({r['sps']:.0f} SPS)")
