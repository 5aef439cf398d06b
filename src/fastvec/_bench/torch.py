"""Bench section ``torch``: TorchCartPole (plain torch ops) and examples/ppo.py.

Table 1, env only: steps per second of ``TorchCartPole`` on the CPU (float32 exact and
fast, float64) and of gymnasium's ``CartPoleVectorEnv`` (NumPy,
``vectorization_mode="vector_entry_point"``) at the same N, with the same random actions,
measured back to back in this run, one thread each. With a GPU, a second table gives the
same env on CUDA, and the fast step replayed from a CUDA graph of the timed steps; every
CUDA timing synchronises (``torch.cuda.synchronize``) before its clock starts and before it
stops, so that it counts the kernels' execution, not their queuing. Without a GPU the CUDA
rows are skipped with the reason printed.

Table 2 (not with ``--quick``), end to end: ``examples/ppo.py`` (torch backend, its default
hyper-parameters; on CUDA also with ``--cuda-graphs``) against Stable-Baselines3 PPO with
the rl-zoo CartPole hyper-parameters, seeds 1..3: time and steps until the mean return of
the last 100 episodes reaches 475, beside the steady-state SPS (one iteration's steps over
the median iteration time). ppo.py's warm-up runs before its clock starts (and is undone).

Table 3 (not with ``--quick``): end-to-end training throughput of ``examples/ppo.py``,
everything included, overall and steady-state SPS; CUDA rows where there is a GPU.
"""
from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from fastvec.bench import fmt_rate, fmt_time, median_time, print_table
from fastvec.torch import TorchCartPole

TARGET = 475.0


def cuda_skip_reason() -> str | None:
    """Why the CUDA rows are skipped, or None where there is a GPU."""
    if torch.cuda.is_available():
        return None
    return f"torch.cuda.is_available() is False (torch {torch.__version__})"


def _load_avg() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _env_sps(step, n: int, steps: int, repeats: int, sync=None) -> float:
    return n * steps / median_time(lambda: [step() for _ in range(steps)], repeats=repeats, warmup=1, sync=sync)


ENV_VARIANTS = [("f32", torch.float32, True), ("f32 fast", torch.float32, False), ("f64", torch.float64, True)]


def env_table(quick: bool) -> None:
    sizes = [1024, 16384]
    steps, repeats = (20, 3) if quick else (100, 7)
    rows = []
    threads = torch.get_num_threads()
    # One thread: gymnasium's NumPy env uses one, and torch's OpenMP pool on a busy 2-core
    # machine loses more to waiting than it gains (16384 envs ran ~15x slower with 2 threads).
    torch.set_num_threads(1)
    for n in sizes:
        rng = np.random.default_rng(0)
        actions_np = rng.integers(0, 2, n).astype(np.int64)
        ref = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
        ref.reset(seed=0)
        ref_sps = _env_sps(lambda: ref.step(actions_np), n, steps, repeats)
        ref.close()
        row = [n, fmt_rate(ref_sps)]
        for _, dtype, exact in ENV_VARIANTS:
            env = TorchCartPole(n, dtype=dtype, seed=0, copy=False, exact=exact)
            env.reset(seed=0)
            actions = torch.from_numpy(actions_np)
            sps = _env_sps(lambda: env.step(actions), n, steps, repeats)
            row += [fmt_rate(sps), f"{sps / ref_sps:.2f}x"]
        rows.append(row)
    torch.set_num_threads(threads)
    header = ["num_envs", "gymnasium CartPoleVectorEnv"]
    for name, _, _ in ENV_VARIANTS:
        header += [f"TorchCartPole {name}", "ratio"]
    print_table("TorchCartPole on the CPU vs gymnasium CartPoleVectorEnv (env steps/s, one thread each)",
                header, rows)


def _graphed(env: TorchCartPole, actions: torch.Tensor, steps: int):
    """A CUDA graph of `steps` env steps (warmed up on a side stream); returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            env.step(actions)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(env.generator)
    with torch.cuda.graph(graph):
        for _ in range(steps):
            env.step(actions)
    return graph.replay


def cuda_env_table(quick: bool) -> None:
    reason = cuda_skip_reason()
    if reason:
        print(f"\n(TorchCartPole CUDA rows skipped: {reason})")
        return
    sizes = [4096, 65536] if quick else [4096, 65536, 1048576]
    steps, repeats = (20, 3) if quick else (100, 5)
    sync = torch.cuda.synchronize
    rows = []
    for n in sizes:
        actions = torch.randint(0, 2, (n,), device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
        row = [n]
        for _, dtype, exact in ENV_VARIANTS:
            env = TorchCartPole(n, device="cuda", dtype=dtype, seed=0, copy=False, exact=exact)
            env.reset(seed=0)
            row.append(fmt_rate(_env_sps(lambda: env.step(actions), n, steps, repeats, sync=sync)))
        env = TorchCartPole(n, device="cuda", seed=0, copy=False, exact=False)
        env.reset(seed=0)
        replay = _graphed(env, actions, steps)
        row.append(fmt_rate(n * steps / median_time(replay, repeats=repeats, warmup=1, sync=sync)))
        rows.append(row)
    print_table(f"TorchCartPole on {torch.cuda.get_device_name()} (env steps/s, synchronised timings)",
                ["num_envs"] + [f"TorchCartPole {name}" for name, _, _ in ENV_VARIANTS]
                + ["f32 fast, CUDA graph of the steps"], rows)


PPO_EXAMPLE_MISSING = ("\n(examples/ppo.py not found: it is not installed with the package; run the bench from "
                       "the repository root for the end-to-end tables)")


def _load_ppo_example():
    """examples/ppo.py of a source checkout (it is not installed with the package), or None.

    Looked for under the current directory (the repository root, where the README runs the
    bench) and beside the package (an editable or in-place build of src/fastvec).
    """
    candidates = [Path.cwd() / "examples" / "ppo.py",
                  Path(__file__).resolve().parents[3] / "examples" / "ppo.py"]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location("fastvec_example_ppo", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _sb3_time_to_target(seed: int, max_steps: int = 100_000):
    """SB3 PPO, rl-zoo CartPole-v1 hyper-parameters: (seconds, steps, SPS, CPU seconds) to TARGET.

    rl-zoo trains for 1e5 steps, over which its learning rate and clip range decay linearly.
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    class StopAtTarget(BaseCallback):
        def __init__(self):
            super().__init__()
            self.solved = None

        def _on_step(self) -> bool:
            buf = self.model.ep_info_buffer
            if len(buf) == buf.maxlen and np.mean([e["r"] for e in buf]) >= TARGET:
                self.solved = (time.perf_counter() - self.start, self.num_timesteps,
                               time.process_time() - self.start_cpu)
                return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu",
                verbose=0)
    callback = StopAtTarget()
    callback.start, callback.start_cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=max_steps, callback=callback)
    wall = time.perf_counter() - callback.start
    env.close()
    if callback.solved is None:
        return None, None, model.num_timesteps / wall, None, None
    t, steps, cpu = callback.solved
    return t, steps, steps / t, None, cpu


def training_rows() -> list[tuple[str, list[str]]]:
    """(name, extra ppo.py arguments) of the time-to-475 table: the CPU defaults, then CUDA."""
    rows = [("fastvec examples/ppo.py, torch backend (CPU), defaults", [])]
    if cuda_skip_reason() is None:
        rows += [("same, --device cuda", ["--device", "cuda"]),
                 ("same, --device cuda --cuda-graphs", ["--device", "cuda", "--cuda-graphs"])]
    return rows


def training_table(seeds=(1, 2, 3)) -> None:
    ppo = _load_ppo_example()
    if ppo is None:
        print(PPO_EXAMPLE_MISSING)
        return
    results = {}
    threads = torch.get_num_threads()
    load_start = _load_avg()
    for name, extra in training_rows():
        for seed in seeds:
            args = ppo.parse_args(extra + ["--seed", str(seed), "--target-return", str(TARGET), "--no-save",
                                           "--quiet", "--total-timesteps", "3000000"])
            s = ppo.main(args)
            results.setdefault(name, []).append(
                (s["time_to_target_s"], s["steps_to_target"], s["sps"], s["steady_sps"],
                 s["cpu_s"] if s["time_to_target_s"] else None))
    torch.set_num_threads(threads)
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print("\n(stable-baselines3 not installed: its reference row is skipped)")
    else:
        torch.set_num_threads(1)  # as examples/ppo.py (--threads 1); 2 threads are slower on 2 busy cores
        for seed in seeds:
            results.setdefault("SB3 PPO, rl-zoo hyper-parameters (8 envs x 32 steps)", []).append(
                _sb3_time_to_target(seed))
        torch.set_num_threads(threads)
    reason = cuda_skip_reason()
    if reason:
        print(f"\n(CUDA rows of the time-to-{TARGET:g} table skipped: {reason})")

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    ref_time = None
    rows = []
    for name, runs in results.items():
        t = med([r[0] for r in runs])
        if name.startswith("SB3"):
            ref_time = t
        steady = med([r[3] for r in runs])
        rows.append([name, fmt_time(t) if t else "not reached",
                     " / ".join(f"{r[0]:.2f}" if r[0] else "-" for r in runs),
                     f"{med([r[1] for r in runs]):,.0f}" if med([r[1] for r in runs]) else "-",
                     fmt_rate(med([r[2] for r in runs])), fmt_rate(steady) if steady else "-",
                     fmt_time(med([r[4] for r in runs])) if med([r[4] for r in runs]) else "-"])
    for row, (name, runs) in zip(rows, results.items()):
        t = med([r[0] for r in runs])
        row.append(f"{ref_time / t:.1f}x" if ref_time and t else "")
    print_table(f"PPO on CartPole-v1 to mean return {TARGET:g} (last 100 episodes), seeds {list(seeds)}, "
                f"1-min load average {load_start:.1f} at start, {_load_avg():.1f} at end",
                ["implementation", "median time to target", "per seed (s)", "median steps", "median SPS",
                 "median steady-state SPS", "median CPU time", "speed-up vs SB3 (wall)"], rows)


THROUGHPUT_ARGS = ["--num-envs", "1024", "--num-steps", "16", "--update-epochs", "2", "--num-minibatches", "2",
                   "--hidden", "32", "--total-timesteps", str(1024 * 16 * 64)]
CUDA_THROUGHPUT_ARGS = ["--device", "cuda", "--num-envs", "8192", "--num-steps", "16", "--update-epochs", "2",
                        "--num-minibatches", "2", "--hidden", "32", "--total-timesteps", str(8192 * 16 * 64)]


def throughput_rows() -> list[tuple[str, list[str]]]:
    rows = [("defaults (CPU)", ["--total-timesteps", "786432"]),
            ("throughput (CPU: 1024 envs x 16 steps, 2 epochs, hidden 32)", THROUGHPUT_ARGS)]
    if cuda_skip_reason() is None:
        rows += [("CUDA, 8192 envs x 16 steps, 2 epochs, hidden 32", CUDA_THROUGHPUT_ARGS),
                 ("same, --cuda-graphs", CUDA_THROUGHPUT_ARGS + ["--cuda-graphs"])]
    return rows


def throughput_table() -> None:
    """End-to-end training SPS (env steps per second, everything included) of examples/ppo.py."""
    ppo = _load_ppo_example()
    if ppo is None:
        print(PPO_EXAMPLE_MISSING)
        return
    threads = torch.get_num_threads()
    rows = []
    for name, extra in throughput_rows():
        s = ppo.main(ppo.parse_args(extra + ["--seed", "1", "--no-save", "--quiet"]))
        rows.append([name, f"{s['global_step']:,}", fmt_rate(s["sps"]), fmt_rate(s["steady_sps"]),
                     fmt_rate(s["global_step"] / s["cpu_s"]), f"{s['warmup_s']:.2f} s",
                     f"{s['final_mean_return']:.0f}"])
    torch.set_num_threads(threads)
    reason = cuda_skip_reason()
    if reason:
        print(f"\n(CUDA rows of the throughput table skipped: {reason})")
    print_table(f"examples/ppo.py end-to-end throughput, torch backend, one CPU thread, 1-min load {_load_avg():.1f}",
                ["configuration", "steps", "SPS (wall)", "steady-state SPS", "SPS (CPU time)",
                 "warm-up (before the clock)", "mean return at end"], rows)


def run(quick: bool) -> None:
    env_table(quick)
    cuda_env_table(quick)
    if not quick:
        training_table()
        throughput_table()
