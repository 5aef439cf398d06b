"""Real workloads: MuJoCo and Atari (Pong, Breakout, MsPacman, SpaceInvaders) on every vector backend, against the limit of the cores.

Each workload runs at 8 and 16 envs on SyncVectorEnv, AsyncVectorEnv, SB3's
SubprocVecEnv (when installed) and FastVectorEnv in both stepping modes. Next to
them, measured in the same rounds:

- **the limit**: N processes (N = the usable cores), each stepping one env of the
  workload in a plain Python loop, their SPS summed: the same envs with no vector
  env around them, no data moved and no waiting. A backend that steps these
  Python envs can come near it but not, beyond noise, past it: "% of limit" says
  how much of the machine it delivers;
- **references**, not like-for-like peers: ale-py's ``AtariVectorEnv`` (Pong,
  preprocessing in C++ threads) and EnvPool (its own C++ envs and bindings), each
  configured to match the workload and fed actions in its own dtypes;
- **the emulator only** (Atari): the limit's processes stepping the bare emulator
  (:class:`~fastvec._bench.envs.EmulatorOnly`: ``ale.act`` 4 times a step, no screen,
  no preprocessing): the ceiling of any Atari backend on these cores, preprocessing in
  C++ or not.

SPS = env transitions per second; actions are drawn from the action space with
seed 0 before timing; every backend and the limit take turns round by round
(:func:`fastvec.bench.interleaved_rates`) and each figure is the median of the rounds.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import multiprocessing
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Sequence

try:  # the `real` extra; without it bench.py skips the section and prints this message
    import ale_py  # noqa: F401
    import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    import mujoco  # noqa: F401
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"{exc.name} is not installed; the real section needs the `real` extra: pip install \"fastvec[real]\"",
        name=exc.name,
    ) from exc

import gymnasium as gym
import numpy as np

from fastvec._bench.envs import BusyEnv, make_atari, make_emulator, make_mujoco
from fastvec._bench.vector import step_rate
from fastvec.bench import fmt_rate, interleaved_rates, print_table
from fastvec.host import usable_cpus
from fastvec.vector.fast_vector_env import FastVectorEnv

SIZES = (8, 16)


@dataclass(frozen=True)
class Workload:
    label: str
    make: Callable[[], gym.Env]  # importable: rebuilt by reference in worker processes
    transitions: int  # env transitions per backend and round in --quick (4x in full mode)
    envpool_id: str
    envpool_kwargs: dict = field(default_factory=dict)
    ale_game: str | None = None  # ale-py's AtariVectorEnv reference, configured like make_atari
    emulator: Callable[[], gym.Env] | None = None  # the bare emulator of an Atari workload (the ceiling)


# make_atari's settings in EnvPool's names (its defaults differ in use_fire_reset).
_ATARI_ENVPOOL = dict(frame_skip=4, noop_max=30, img_height=84, img_width=84, gray_scale=True, stack_num=4,
                      episodic_life=False, reward_clip=False, use_fire_reset=False, repeat_action_probability=0.0,
                      max_episode_steps=27000)

WORKLOADS = (
    Workload("HalfCheetah-v5", functools.partial(make_mujoco, "HalfCheetah-v5"), 4000, "HalfCheetah-v5"),
    # Hopper: about 2.5x HalfCheetah's step time here, and an episode ends every ~25 random steps (autoreset).
    Workload("Hopper-v5", functools.partial(make_mujoco, "Hopper-v5"), 2000, "Hopper-v5"),
    # (the game's name in Gymnasium and EnvPool, and its ROM's in ale-py's AtariVectorEnv)
    *(Workload(f"{game}NoFrameskip-v4, preprocessed", functools.partial(make_atari, game), 400, f"{game}-v5",
               _ATARI_ENVPOOL, ale_game=rom, emulator=functools.partial(make_emulator, game))
      for game, rom in (("Pong", "pong"), ("Breakout", "breakout"), ("MsPacman", "ms_pacman"),
                        ("SpaceInvaders", "space_invaders"))),
)


# --- The limit: N processes, one env each, a plain Python loop -----------------------------
def _limit_worker(make: Callable[[], gym.Env], seed: int, conn) -> None:
    """Builds one env, then steps it for as long as each request on ``conn`` says.

    Counts every call, step or reset, as a transition, as a vector env in NEXT_STEP
    autoreset mode does (the call after an episode's end is its reset). Ignores Ctrl-C,
    like fastvec's workers: the bench process ends it through ``conn``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        env = make()
        env.action_space.seed(seed)
        actions = [env.action_space.sample() for _ in range(1000)]
        env.reset(seed=seed)
        for a in actions[:10]:
            env.step(a)
        env.reset(seed=seed)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", None))
    k, n, needs_reset = 0, len(actions), False
    while True:
        seconds = conn.recv()
        if seconds is None:
            break
        steps = 0
        start = time.perf_counter()
        end = start + seconds
        while True:
            if needs_reset:
                env.reset()
                needs_reset = False
            else:
                _, _, terminated, truncated, _ = env.step(actions[k])
                k = k + 1 if k + 1 < n else 0
                needs_reset = terminated or truncated
            steps += 1
            if steps % 8 == 0 and time.perf_counter() >= end:
                break
        conn.send((steps, time.perf_counter() - start))
    env.close()


class CoreLimit:
    """``processes`` processes, each stepping one env from ``make`` in a plain Python loop.

    :meth:`rate` runs them all at once for ``seconds`` and returns their summed SPS:
    what that many cores give with no vector env at all. ``context`` is the
    multiprocessing start method (default: Python's); ``make`` must be importable.
    """

    def __init__(self, make: Callable[[], gym.Env], processes: int | None = None, context: str | None = None):
        ctx = multiprocessing.get_context(context)
        self.processes = processes or len(usable_cpus())
        self._conns, self._procs = [], []
        try:
            for k in range(self.processes):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_limit_worker, args=(make, k, child), name=f"limit-{k}", daemon=True)
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            for conn in self._conns:
                status, detail = conn.recv()
                if status != "ready":
                    raise RuntimeError(f"a limit process could not build its env:\n{detail}")
        except BaseException:
            self.close()
            raise

    def rate(self, seconds: float) -> float:
        for conn in self._conns:
            conn.send(seconds)
        return sum(steps / elapsed for steps, elapsed in (conn.recv() for conn in self._conns))

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

    def __enter__(self) -> CoreLimit:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- Backends ------------------------------------------------------------------------------
PEERS = ("SyncVectorEnv", "AsyncVectorEnv", "SB3 SubprocVecEnv", "fastvec default",
         "fastvec step_in_caller=True", "fastvec step_in_caller=False")
REFERENCES = ("ale-py AtariVectorEnv", "EnvPool")
SLOW = ("AsyncVectorEnv", "SB3 SubprocVecEnv")
EMULATOR = "emulator only"  # the Atari ceiling's column  # one process per env: 1/4 of the steps per round


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module blocked in sys.modules
        return False


def missing_columns() -> dict[str, str]:
    """Optional columns whose package is missing -> why they are skipped."""
    missing = {}
    if not _installed("stable_baselines3"):
        missing["SB3 SubprocVecEnv"] = "stable-baselines3 is not installed (pip install \"fastvec[sb3]\")"
    if not _installed("envpool"):
        missing["EnvPool"] = "envpool is not installed (pip install envpool)"
    if not _installed("ale_py.vector_env"):
        missing["ale-py AtariVectorEnv"] = "this ale-py has no ale_py.vector_env (it came in ale-py 0.11)"
    return missing


def workload_actions(workload: Workload, num_envs: int, steps: int) -> np.ndarray:
    """``(steps, num_envs, ...)`` actions from one env's action space, seed 0, drawn before timing."""
    env = workload.make()
    batched = gym.vector.utils.batch_space(env.action_space, num_envs)
    env.close()
    batched.seed(0)
    return np.stack([batched.sample() for _ in range(steps)])


def make_backend(name: str, workload: Workload, num_envs: int):
    """A vector env of ``num_envs`` copies of ``workload`` for a column of the table (a name in
    PEERS or REFERENCES); SB3's is a ``VecEnv``. A reference that does not apply raises ValueError."""
    fns = [workload.make] * num_envs
    threads = min(len(usable_cpus()), num_envs)  # the references' C++ threads: one per usable core
    if name == "SyncVectorEnv":
        return gym.vector.SyncVectorEnv(fns)
    if name == "AsyncVectorEnv":
        return gym.vector.AsyncVectorEnv(fns)
    if name == "SB3 SubprocVecEnv":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        # fork where there is one: the start method only changes how long the 8-16 processes
        # take to start (with SB3's default, forkserver, each re-imports the env's modules).
        env = SubprocVecEnv(fns, start_method="fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        env.seed(0)
        return env
    if name == "fastvec default":
        return FastVectorEnv(fns)
    if name.startswith("fastvec step_in_caller="):
        return FastVectorEnv(fns, step_in_caller=name.endswith("True"))
    if name == "ale-py AtariVectorEnv":
        if workload.ale_game is None:
            raise ValueError(f"{name} runs Atari games only, not {workload.label}")
        from ale_py.vector_env import AtariVectorEnv

        # make_atari's settings in ale-py's names (its defaults differ in reward_clipping and use_fire_reset).
        return AtariVectorEnv(workload.ale_game, num_envs, num_threads=threads, frameskip=4, img_height=84,
                              img_width=84, grayscale=True, stack_num=4, maxpool=True, noop_max=30,
                              episodic_life=False, reward_clipping=False, use_fire_reset=False,
                              repeat_action_probability=0.0, max_num_frames_per_episode=108000)
    if name == "EnvPool":
        import envpool

        return envpool.make_gymnasium(workload.envpool_id, num_envs=num_envs, num_threads=threads, seed=0,
                                      **workload.envpool_kwargs)
    raise ValueError(f"unknown backend {name!r}; expected one of {PEERS + REFERENCES}")


def own_actions(name: str, env, actions: np.ndarray) -> np.ndarray:
    """``actions`` in the dtype a backend takes: EnvPool wants int32 for Discrete, else its Box dtype."""
    if name != "EnvPool":
        return actions
    space = env.action_space  # one env's
    return actions.astype(np.int32 if isinstance(space, gym.spaces.Discrete) else space.dtype)


def warm_up(name: str, env, actions: np.ndarray) -> None:
    """Reset (seed 0 where the backend takes it at reset) and step 10 times, before timing."""
    if name in ("SB3 SubprocVecEnv", "EnvPool"):  # seeded at construction
        env.reset()
    else:
        env.reset(seed=0)
    for a in actions[:10]:
        env.step(a)


def measure(workload: Workload, num_envs: int, names: Sequence[str], *, transitions: int, rounds: int,
            limit_s: float, notes: dict) -> dict[str, float]:
    """SPS of the backends ``names`` and of the limit for one workload and size, taking turns.

    A reference that does not build (EnvPool without this env id, say) is left out,
    its reason kept in ``notes``.
    """
    steps = max(transitions // num_envs, 12)
    actions = workload_actions(workload, num_envs, steps)
    envs: dict = {}
    limit = ceiling = None
    runners = {}
    try:
        for name in names:
            try:
                env = envs[name] = make_backend(name, workload, num_envs)
            except Exception as exc:
                if name not in REFERENCES:
                    raise
                notes.setdefault(name, f"could not make {workload.label}: {exc}")
                continue
            own = own_actions(name, env, actions)
            warm_up(name, env, own)
            runners[name] = step_rate(env.step, own[: max(steps // 4, 4)] if name in SLOW else own)
        limit = CoreLimit(workload.make)
        notes["limit"] = f"{limit.processes} processes"
        runners["limit"] = functools.partial(limit.rate, limit_s)
        if workload.emulator is not None:
            ceiling = CoreLimit(workload.emulator)
            runners[EMULATOR] = functools.partial(ceiling.rate, limit_s)
        # The limit (and the emulator's) run between the peers and the references, in every round.
        order = [n for n in runners if n in PEERS] + [n for n in ("limit", EMULATOR) if n in runners] + \
            [n for n in runners if n in REFERENCES]
        rates = interleaved_rates({n: runners[n] for n in order}, rounds)
    except BaseException:
        # Ctrl-C reaches the one-process-per-env backends' children too, and their close()
        # then fails on a broken pipe: close what can be closed, and raise what stopped us.
        for closeable in (limit, ceiling, *envs.values()):
            if closeable is not None:
                with contextlib.suppress(Exception):
                    closeable.close()
        raise
    for closeable in (limit, ceiling, *envs.values()):
        if closeable is not None:
            closeable.close()
    return rates


def atari_screen_conversion() -> str:
    """Who converts a compiled Atari env's grayscale screens here: the kernel differs by CPU."""
    from fastvec.atari import _palette

    if _palette.faster_than_ale():
        return f"from a palette learned off ALE ({_palette.isa()} kernel)"
    return "ALE's own conversion (no vector kernel for the learned palette on this CPU or build)"


def _pct(x: float | None, of: float) -> str:
    # One decimal, so that a share read against a whole-percent target cannot round across it
    # (89.6 % would print as "90 %").
    return "–" if x is None else f"{100 * x / of:.1f} %"


def run(quick: bool = False, *, sizes: Sequence[int] = SIZES, workloads: Sequence[Workload] = WORKLOADS,
        scale: float = 1.0, rounds: int | None = None, limit_s: float | None = None) -> None:
    """Print the real-workload tables. ``scale``/``rounds``/``limit_s`` shrink it further (tests)."""
    rounds = rounds or (3 if quick else 7)
    limit_s = limit_s or (0.2 if quick else 0.5)
    missing = missing_columns()
    cores = len(usable_cpus())
    # What FastVectorEnv's default means at these sizes, and the other stepping mode beside it.
    probe = FastVectorEnv([BusyEnv] * max(sizes))
    default_desc = f"num_workers={probe.num_workers}, step_in_caller={probe.step_in_caller}"
    other = f"fastvec step_in_caller={not probe.step_in_caller}"
    probe.close()
    peers = [n for n in ("SyncVectorEnv", "AsyncVectorEnv", "SB3 SubprocVecEnv", "fastvec default", other)
             if n not in missing]
    refs = [n for n in REFERENCES if n not in missing]
    notes: dict = {}
    results = []
    for workload in workloads:
        names = peers + [n for n in refs if n != "ale-py AtariVectorEnv" or workload.ale_game]
        for num_envs in sizes:
            transitions = max(int(workload.transitions * scale * (1 if quick else 4)), 1)
            results.append((workload, num_envs, measure(workload, num_envs, names, transitions=transitions,
                                                        rounds=rounds, limit_s=limit_s, notes=notes)))

    rows = [[w.label, n, *(fmt_rate(r[p]) for p in peers), fmt_rate(r["limit"]),
             f"{r['fastvec default'] / r['SyncVectorEnv']:.2f}x",
             _pct(r["fastvec default"], r["limit"]), _pct(r[other], r["limit"])]
            for w, n, r in results]
    print_table(
        f"Real workloads, SPS (env transitions/s), vector backends against the limit of {cores} cores",
        ["env", "num_envs", *peers, f"limit ({notes['limit']})", "default vs Sync", "default % of limit",
         f"{other.removeprefix('fastvec ')} % of limit"],
        rows,
    )
    print(f"\nfastvec default: FastVectorEnv(env_fns), here {default_desc}.")
    print(f"limit: {cores} processes (the usable cores), each stepping one env of the workload in a plain Python "
          "loop (env.step, reset when an episode ends), their SPS summed, measured in the same rounds.")
    if "SB3 SubprocVecEnv" in missing:
        print(f"SB3 SubprocVecEnv: skipped, {missing['SB3 SubprocVecEnv']}.")

    measured = [n for n in refs if any(n in r for _, _, r in results)]
    if measured:
        rows = [[w.label, n, *(c for name in measured for c in (fmt_rate(r[name]) if name in r else "–",
                                                                 _pct(r.get(name), r["limit"]))),
                 fmt_rate(r["fastvec default"]), fmt_rate(r["limit"])]
                for w, n, r in results]
        print_table(
            "References, not like-for-like (C++ preprocessing / their own env bindings), same rounds, SPS",
            ["env", "num_envs", *(h for name in measured for h in (name, "% of limit")), "fastvec default",
             "limit"],
            rows,
        )
        print("\nale-py AtariVectorEnv: Atari only, set up like the Python pipeline (frameskip 4 with max-pool, "
              "84x84 grayscale, stack 4, noop_max 30, no reward clipping, no fire reset), one C++ thread per "
              "usable core. EnvPool: the same settings for Pong, its own ports of the MuJoCo v5 envs, int32 / "
              "float64 actions, one C++ thread per usable core.")
    atari = [(w, n, r) for w, n, r in results if EMULATOR in r]
    if atari:
        shown = ["fastvec default", *measured]
        rows = [[w.label, n, fmt_rate(r[EMULATOR]),
                 *(c for name in shown for c in (fmt_rate(r[name]) if name in r else "–",
                                                 _pct(r.get(name), r[EMULATOR])))]
                for w, n, r in atari]
        print_table(
            f"Atari: the emulator's ceiling ({cores} processes stepping the bare emulator), same rounds, SPS",
            ["env", "num_envs", EMULATOR, *(h for name in shown for h in (name, "% of emulator"))],
            rows,
        )
        print(f"\n{EMULATOR}: {cores} processes, each driving one game's emulator as the preprocessing does "
              "(ale.act 4 times a step, 1-30 no-ops on reset) with no screen read, no preprocessing and no "
              "vector env, their SPS summed: what no Atari backend can pass on these cores.")
        print(f"fastvec default's Atari screens, on this CPU: {atari_screen_conversion()}.")
    for name in REFERENCES:
        if name in missing:
            print(f"{name}: skipped, {missing[name]}.")
        elif name in notes:
            print(f"{name}: {notes[name]}.")
