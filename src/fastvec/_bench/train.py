"""Training loops users run, on each vector backend, with torch at its default threads and at 1.

Stepping envs alone is not what users run: a policy's forward pass comes between steps
and an update between rollouts, and torch uses every core by default. Each loop here is
timed as a user would run it, on each backend in turn (round after round, so that a drift
in the machine's speed does not land on one backend only):

- **CleanRL PPO, HalfCheetah-v5 x8**: CleanRL's ``ppo_continuous_action.py`` loop (its
  wrapper stack, SAME_STEP autoreset, a 64x64 actor and critic, 10 epochs of 32
  mini-batches per rollout), 256 steps per rollout instead of 2048 (the same work per
  sample, a shorter measurement);
- **CleanRL PPO, CartPole-v1 x8**: CleanRL's ``ppo.py`` loop (128 steps, 4 epochs of 4
  mini-batches);
- **SB3 PPO, HalfCheetah-v5 x8 / CartPole-v1 x8**: ``PPO("MlpPolicy", make_vec_env(id, 8,
  vec_env_cls=...))`` with DummyVecEnv, SubprocVecEnv and fastvec's FastVecEnv;
- **Pong x8 + Nature CNN**: Pong with the standard preprocessing (``_bench.envs.make_pong``)
  and the Nature-CNN policy's forward pass before every step, as a PPO or DQN rollout does.

The HalfCheetah and Pong loops also run on ``FastVectorEnv, halves``: ``send``/``recv`` with
``batch_size = num_envs // 2``, the policy acting on one half while the other half steps
(:func:`fastvec._bench.train_agents.overlapped_rollout`), to measure what overlap gains over lockstep (left out of
``--quick``).

Columns: SPS (env transitions per second of the whole loop), the share of the wall time
spent in the vector env's ``step``, in the rest of the rollout (the policy, the buffers) and
in the update, and the **env-free bound**: the same loop with the vector env replaced by one
that replays recorded outputs and costs (almost) nothing. No vector env can make the loop
faster than that bound.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import multiprocessing
import subprocess
import sys
import time
from typing import Any, Callable, Sequence

try:  # the `torch` extra; without it bench.py skips the section and prints this message
    import torch
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"{exc.name} is not installed; the train section needs torch: pip install torch==2.13.0", name=exc.name
    ) from exc

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from fastvec._bench.train_agents import AtariRollout, CleanRLPPO, PPOConfig
from fastvec.bench import fmt_rate, interleaved_rates, paired_ratio, print_table
from fastvec.vector.fast_vector_env import FastVectorEnv

#: torch's own choice of intra-op threads in this process, before anything changed it
DEFAULT_THREADS = torch.get_num_threads()
GYM_BACKENDS = ("SyncVectorEnv", "AsyncVectorEnv", "FastVectorEnv")
#: FastVectorEnv stepping half the envs while the policy acts on the other half (send/recv,
#: ``batch_size = num_envs // 2``): the overlap a lockstep loop gives up
HALVES = "FastVectorEnv, halves"
#: FastVectorEnv(env_failure="restart") with no failure: what keeping a run alive costs
RESTART = "FastVectorEnv, restart"
#: FastVectorEnv(wait="release") (FastVecEnv in the SB3 loops): steps never parked in the caller's
#: OpenMP region, its idle threads handed back before every step instead: what parking buys.
#: Not in the default table; name it in the backends of ``python -m fastvec._bench.train``.
RELEASE_ONLY = "FastVectorEnv, release only"
#: FastVectorEnv(stats=False): what the statistics counters cost inside a training loop (against
#: the default, stats=True). Not in the default table; name it in the backends.
NO_STATS = "FastVectorEnv, stats=False"
SB3_BACKENDS = ("DummyVecEnv", "SubprocVecEnv", "FastVecEnv")
BOUND = "env-free bound"


# --- envs ----------------------------------------------------------------------------------
def make_cleanrl_mujoco(env_id: str = "HalfCheetah-v5", gamma: float = 0.99) -> gym.Env:
    """One env with CleanRL's ``ppo_continuous_action.py`` wrapper stack."""
    from fastvec._bench.envs import make_mujoco

    env = gym.wrappers.FlattenObservation(make_mujoco(env_id))
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, _clip10, env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=gamma)
    return gym.wrappers.TransformReward(env, _clip10)


def _clip10(x):
    return np.clip(x, -10, 10)


def make_cartpole() -> gym.Env:
    """CartPole-v1 with episode statistics, as CleanRL's ``ppo.py`` builds it."""
    return gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))


def make_pong() -> gym.Env:
    from fastvec._bench.envs import make_pong as make

    return make()


def gym_backend(name: str, make: Callable[[], gym.Env], num_envs: int):
    """A Gymnasium vector env of ``num_envs`` envs for the column ``name`` (SAME_STEP autoreset, as CleanRL)."""
    fns = [make] * num_envs
    mode = AutoresetMode.SAME_STEP
    if name == "SyncVectorEnv":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    if name == "AsyncVectorEnv":
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
    if name == "FastVectorEnv":
        return FastVectorEnv(fns, autoreset_mode=mode)
    if name == HALVES:
        return FastVectorEnv(fns, autoreset_mode=mode, num_workers=2, batch_size=num_envs // 2)
    if name == RESTART:
        return FastVectorEnv(fns, autoreset_mode=mode, env_failure="restart")
    if name == RELEASE_ONLY:
        return FastVectorEnv(fns, autoreset_mode=mode, wait="release")
    if name == NO_STATS:
        return FastVectorEnv(fns, autoreset_mode=mode, stats=False)
    raise ValueError(f"unknown backend {name!r}; expected one of "
                     f"{GYM_BACKENDS + (HALVES, RESTART, RELEASE_ONLY, NO_STATS)}")


class ReplayVectorEnv(gym.vector.VectorEnv):
    """Returns the recorded outputs of another vector env's steps, in turn, whatever the actions:
    the env-free bound of a loop (the loop's own work, with envs that cost nothing)."""

    def __init__(self, source, steps: int):
        self.num_envs = source.num_envs
        self.single_observation_space = source.single_observation_space
        self.single_action_space = source.single_action_space
        self.observation_space = source.observation_space
        self.action_space = source.action_space
        self.metadata = dict(source.metadata)
        self._reset = source.reset(seed=0)
        source.action_space.seed(0)
        self._steps = [source.step(source.action_space.sample()) for _ in range(steps)]
        self._k = 0

    def reset(self, *, seed=None, options=None):
        return self._reset

    def step(self, actions):
        out = self._steps[self._k]
        self._k = (self._k + 1) % len(self._steps)
        return out


# --- CleanRL-style PPO ----------------------------------------------------------------------
def sb3_vec_env(name: str, env_id: str, num_envs: int):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from fastvec._bench.envs import make_mujoco
    from fastvec.integrations.sb3 import FastVecEnv

    classes = {"DummyVecEnv": DummyVecEnv, "SubprocVecEnv": SubprocVecEnv, "FastVecEnv": FastVecEnv,
               RELEASE_ONLY: FastVecEnv}
    if name not in classes:
        raise ValueError(f"unknown backend {name!r}; expected one of {SB3_BACKENDS + (RELEASE_ONLY,)}")
    kwargs = {}
    if name == "SubprocVecEnv" and "fork" in multiprocessing.get_all_start_methods():
        kwargs = {"start_method": "fork"}  # (SB3's default, forkserver, re-imports torch in each)
    if name == RELEASE_ONLY:
        kwargs = {"wait": "release"}
    make = functools.partial(make_mujoco, env_id) if env_id.startswith("HalfCheetah") else env_id
    venv = make_vec_env(make, num_envs, seed=0, vec_env_cls=classes[name], vec_env_kwargs=kwargs)
    return venv


def _sb3_loop(venv, env_id: str, n_steps: int):
    """SB3's PPO on ``venv`` (rl-zoo-like settings), its ``train`` and its env steps timed."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnvWrapper

    class TimedVecEnv(VecEnvWrapper):
        def __init__(self, venv):
            super().__init__(venv)
            self.step_s = 0.0

        def reset(self):
            return self.venv.reset()

        def step_wait(self):
            start = time.perf_counter()
            out = self.venv.step_wait()
            self.step_s += time.perf_counter() - start
            return out

        def step_async(self, actions):
            start = time.perf_counter()
            self.venv.step_async(actions)
            self.step_s += time.perf_counter() - start

    class TimedPPO(PPO):
        update_s = 0.0

        def train(self) -> None:
            start = time.perf_counter()
            super().train()
            self.update_s += time.perf_counter() - start

    timed = TimedVecEnv(venv)
    settings = dict(n_steps=n_steps, batch_size=64, n_epochs=10) if "Cheetah" in env_id else \
        dict(n_steps=n_steps, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98, ent_coef=0.0)
    model = TimedPPO("MlpPolicy", timed, seed=0, device="cpu", verbose=0, **settings)

    class Loop:
        envs = timed

        @property
        def update_s(self):
            return model.update_s

        def iteration(self) -> int:
            model.learn(n_steps * venv.num_envs, reset_num_timesteps=False)
            return n_steps * venv.num_envs

        def close(self):
            venv.close()

    return Loop()


class ReplayVecEnv:
    """SB3 ``VecEnv`` twin of :class:`ReplayVectorEnv` (recorded from a DummyVecEnv)."""

    def __new__(cls, source, steps: int):
        from stable_baselines3.common.vec_env.base_vec_env import VecEnv

        class _Replay(VecEnv):
            def __init__(self):
                super().__init__(source.num_envs, source.observation_space, source.action_space)
                self._reset = source.reset()
                source.action_space.seed(0)
                self._steps = []
                for _ in range(steps):
                    source.step_async(np.stack([source.action_space.sample() for _ in range(source.num_envs)]))
                    self._steps.append(source.step_wait())
                self._k = 0

            def reset(self):
                return self._reset

            def step_async(self, actions):
                pass

            def step_wait(self):
                out = self._steps[self._k]
                self._k = (self._k + 1) % len(self._steps)
                return out

            def close(self):
                pass

            def get_attr(self, name, indices=None):
                return [None] * self.num_envs

            def set_attr(self, name, value, indices=None):
                pass

            def env_method(self, name, *args, indices=None, **kwargs):
                return [None] * self.num_envs

            def env_is_wrapped(self, wrapper_class, indices=None):
                return [False] * self.num_envs

            def seed(self, seed=None):
                return [None] * self.num_envs

        return _Replay()


# --- the loops --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Loop:
    label: str
    backends: tuple[str, ...]
    build: Callable[[str, bool], Any]  # (backend or BOUND, quick) -> an object with iteration(), envs, update_s
    reference: str  # the column the "vs" ratio divides by: the usual choice
    needs: tuple[str, ...] = ()  # modules of optional extras the loop needs

    def missing(self) -> str | None:
        """Why the loop cannot run here (an extra is not installed), or None."""
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"needs {module} (pip install \"fastvec[{_EXTRAS.get(module, module)}]\")"
        return None


_EXTRAS = {"mujoco": "real", "ale_py": "real", "cv2": "real", "stable_baselines3": "sb3"}


def _env_or_replay(backend: str, build: Callable[[str], Any], reference: str, replay: Callable[[Any, int], Any]):
    """``build(backend)``; for the env-free bound, ``replay`` of 64 recorded steps of the reference's."""
    if backend != BOUND:
        return build(backend)
    source = build(reference)
    try:
        return replay(source, 64)
    finally:
        source.close()


def _gym_loop(make, num_envs: int, algo: Callable[[Any, bool], Any], backend: str, quick: bool):
    envs = _env_or_replay(backend, lambda name: gym_backend(name, make, num_envs), "SyncVectorEnv",
                          ReplayVectorEnv)
    return algo(envs, quick)


def _cleanrl_halfcheetah(envs, quick):
    # Mini-batches of 512 samples: a lighter update than CleanRL's script, whose 2048 steps / 32
    # make mini-batches of 64 (examples/cleanrl_ppo_continuous.py runs CleanRL's settings), so
    # stepping weighs more in this loop than in the script
    num_steps = 64 if quick else 256
    return CleanRLPPO(envs, PPOConfig(num_steps=num_steps, update_epochs=10,
                                      num_minibatches=max(num_steps * envs.num_envs // 512, 1)))


def _cleanrl_cartpole(envs, quick):
    return CleanRLPPO(envs, PPOConfig(num_steps=128, update_epochs=4, num_minibatches=4, lr=2.5e-4))


def _atari(envs, quick):
    return AtariRollout(envs, num_steps=16 if quick else 128)


def _sb3(env_id: str, num_envs: int, backend: str, quick: bool):
    n_steps = 64 if "Cheetah" in env_id and quick else (256 if "Cheetah" in env_id else 32)
    venv = _env_or_replay(backend, lambda name: sb3_vec_env(name, env_id, num_envs), "DummyVecEnv", ReplayVecEnv)
    return _sb3_loop(venv, env_id, n_steps)


LOOPS = (
    Loop("CleanRL PPO, HalfCheetah-v5 x8", GYM_BACKENDS + (HALVES, RESTART),
         lambda b, q: _gym_loop(make_cleanrl_mujoco, 8, _cleanrl_halfcheetah, b, q), "SyncVectorEnv", ("mujoco",)),
    Loop("CleanRL PPO, CartPole-v1 x8", GYM_BACKENDS,
         lambda b, q: _gym_loop(make_cartpole, 8, _cleanrl_cartpole, b, q), "SyncVectorEnv"),
    Loop("SB3 PPO, HalfCheetah-v5 x8", SB3_BACKENDS, functools.partial(_sb3, "HalfCheetah-v5", 8), "DummyVecEnv",
         ("stable_baselines3", "mujoco")),
    Loop("SB3 PPO, CartPole-v1 x8", SB3_BACKENDS, functools.partial(_sb3, "CartPole-v1", 8), "DummyVecEnv",
         ("stable_baselines3",)),
    Loop("Pong x8 + Nature-CNN forward", GYM_BACKENDS + (HALVES,),
         lambda b, q: _gym_loop(make_pong, 8, _atari, b, q), "SyncVectorEnv", ("ale_py", "cv2")),
)


@dataclasses.dataclass
class Sample:
    sps: float
    step: float  # shares of the wall time
    update: float
    # the median of the rounds' ratios of sps to the loop's reference backend in the same
    # round (None: one round's sample, or no reference among the backends)
    vs_reference: float | None = None


def measure_once(loop: Loop, backend: str, quick: bool, iterations: int) -> Sample:
    """Build ``loop`` on ``backend``, run one iteration to warm up, then time ``iterations``."""
    runner = loop.build(backend, quick)
    try:
        runner.iteration()
        runner.envs.step_s = 0.0
        update0 = runner.update_s
        start = time.perf_counter()
        transitions = sum(runner.iteration() for _ in range(iterations))
        wall = time.perf_counter() - start
        return Sample(transitions / wall, runner.envs.step_s / wall, (runner.update_s - update0) / wall)
    finally:
        close = getattr(runner, "close", None) or runner.envs.close
        close()


def measure(loop: Loop, threads: int, quick: bool, rounds: int, iterations: int,
            backends: Sequence[str] | None = None) -> dict[str, Sample]:
    """Median sample per backend (and the env-free bound), the backends taking turns round by round,
    with torch at ``threads`` intra-op threads."""
    names = list(backends or loop.backends) + [BOUND]
    samples: dict[str, list[Sample]] = {n: [] for n in names}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        def runner(name):
            def run():
                sample = measure_once(loop, name, quick, iterations)
                samples[name].append(sample)
                return sample.sps
            return run

        rates = interleaved_rates({n: runner(n) for n in names}, rounds)
    finally:
        torch.set_num_threads(previous)
    out = {}
    reference = [s.sps for s in samples.get(loop.reference, [])]
    for name in names:
        near = min(samples[name], key=lambda s: abs(s.sps - rates[name]))  # the median round's shares
        ratio = paired_ratio([s.sps for s in samples[name]], reference) if reference else None
        out[name] = Sample(rates[name], near.step, near.update, ratio)
    return out


def measure_in_subprocess(loop_index: int, threads: int, quick: bool, rounds: int, iterations: int,
                          backends: Sequence[str]) -> dict[str, Sample]:
    """:func:`measure` in a fresh interpreter, as a user's training script runs: nothing that
    an earlier loop imported, started or left behind (OpenMP pools, SB3's modules, child
    processes) is there, and torch's thread count is set before the loop starts."""
    command = [sys.executable, "-m", "fastvec._bench.train", str(loop_index), str(threads), str(int(quick)),
               str(rounds), str(iterations), json.dumps(list(backends))]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{LOOPS[loop_index].label} at {threads} torch threads failed:\n{done.stderr[-3000:]}")
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: Sample(**sample) for name, sample in results.items()}


def run(quick: bool = False, *, loops: Sequence[Loop] = LOOPS, threads: Sequence[int] | None = None,
        rounds: int | None = None, iterations: int | None = None) -> None:
    """Print the training-loop table (each loop and thread count measured in a fresh interpreter
    when it is one of :data:`LOOPS`)."""
    rounds = rounds or (1 if quick else 3)
    iterations = iterations or (1 if quick else 2)
    threads = list(threads or dict.fromkeys((DEFAULT_THREADS, 1)))
    rows = []
    skipped = []
    for loop in loops:
        why = loop.missing()
        if why is not None:
            skipped.append(f"{loop.label}: skipped, {why}.")
            continue
        backends = [b for b in loop.backends if not (quick and b in ("AsyncVectorEnv", HALVES, RESTART))]
        for n in threads:
            if loop in LOOPS:
                results = measure_in_subprocess(LOOPS.index(loop), n, quick, rounds, iterations, backends)
            else:
                results = measure(loop, n, quick, rounds, iterations, backends)
            ref = results[loop.reference].sps
            for name, s in results.items():
                ratio = s.vs_reference if s.vs_reference is not None else s.sps / ref
                rows.append([loop.label, n, name, fmt_rate(s.sps), f"{ratio:.2f}x",
                             f"{100 * s.step:.0f} %", f"{100 * (1 - s.step - s.update):.0f} %",
                             f"{100 * s.update:.0f} %"])
    print_table(f"Training loops, SPS (env transitions/s of the whole loop), torch at its default "
                f"{DEFAULT_THREADS} threads and at 1",
                ["loop", "torch threads", "backend", "SPS", "vs first", "step", "policy + rest", "update"], rows)
    print(f"\n'vs first': against the loop's first backend (SyncVectorEnv / DummyVecEnv), the median of the "
          f"rounds' ratios (each backend against the reference of its own round). {BOUND}: the same loop "
          "on recorded env outputs (a vector env that costs nothing). Shares: of the loop's wall time. "
          "FastVectorEnv / FastVecEnv with default arguments. Each loop and thread count runs in a fresh "
          "interpreter, its backends taking turns round by round; SPS and shares: medians of the rounds.")
    for line in skipped:
        print(line)


def _main(argv: Sequence[str]) -> None:
    """``python -m fastvec._bench.train LOOP THREADS QUICK ROUNDS ITERATIONS BACKENDS`` (BACKENDS:
    a JSON list, since names hold commas): one :func:`measure`, printed as a JSON line (what
    :func:`measure_in_subprocess` reads)."""
    loop_index, threads, quick, rounds, iterations = (int(a) for a in argv[:5])
    results = measure(LOOPS[loop_index], threads, bool(quick), rounds, iterations, json.loads(argv[5]))
    print(json.dumps({name: dataclasses.asdict(sample) for name, sample in results.items()}))


if __name__ == "__main__":
    _main(sys.argv[1:])
